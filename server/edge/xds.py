"""The files Envoy watches (filesystem xDS), rendered for a tenants file:
the clusters (server/edge/clusters.py) and the routes
(server/edge/routes.py), each with a version of its own."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from server.edge.clusters import clusters
from server.edge.config import CLUSTERS_FILE, ROUTES_FILE, EdgePorts
from server.edge.routes import routes
from server.tenants import Tenants


def discovery_response(
    resources: list[dict[str, Any]], version: str, type_url: str
) -> dict[str, Any]:
    return {"version_info": version, "type_url": type_url, "resources": resources}


CLUSTER_TYPE = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
ROUTE_TYPE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"


def dynamic_files(
    tenants: Tenants, ports: EdgePorts, traced_by_workers: int | None = None
) -> dict[str, tuple[str, str]]:
    """File name -> (version, content) of every file Envoy watches, for
    these tenants; `traced_by_workers`: Envoy's workers where the edge
    traces, None where it does not. Each version is its own resources'
    digest: Envoy keeps a version only where the resources changed, so the
    edge can tell which version Envoy serves."""
    traced = traced_by_workers is not None
    resources = {
        CLUSTERS_FILE: (clusters(tenants, ports, traced_by_workers), CLUSTER_TYPE),
        ROUTES_FILE: ([routes(tenants, traced)], ROUTE_TYPE),
    }
    files = {}
    for name, (items, type_url) in resources.items():
        version = hashlib.sha256(json.dumps(items, sort_keys=True).encode()).hexdigest()[:16]
        content = json.dumps(discovery_response(items, version, type_url), indent=1)
        files[name] = (version, content)
    return files
