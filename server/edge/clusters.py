"""The clusters to Triton (CDS, a file Envoy watches): one per tenant and
protocol, its circuit breaker bounding the tenant's requests at Triton, and
one per protocol for what needs no key (health)."""

from __future__ import annotations

from typing import Any

from server.edge.config import EdgePorts, address
from server.edge.tracing import upstream_filters
from server.tenants import Tenant, Tenants


def cluster_name(tenant: Tenant, protocol: str) -> str:
    return f"tenant-{tenant.name}-{protocol}"


def clusters(
    tenants: Tenants, ports: EdgePorts, traced_by_workers: int | None = None
) -> list[dict[str, Any]]:
    """One cluster per tenant and protocol, all to the same Triton; when the
    edge traces (with `traced_by_workers` Envoy workers), each with the
    upstream filter of server/edge/tracing.py."""
    result = []
    for protocol in ("http", "grpc"):
        result.append(_cluster(f"open-{protocol}", protocol, ports, None, traced_by_workers))
        for tenant in tenants.tenants:
            result.append(
                _cluster(
                    cluster_name(tenant, protocol),
                    protocol,
                    ports,
                    tenant.max_in_flight,
                    traced_by_workers,
                )
            )
    return result


def _cluster(
    name: str,
    protocol: str,
    ports: EdgePorts,
    in_flight: int | None,
    traced_by_workers: int | None,
) -> dict[str, Any]:
    port = ports.triton_http if protocol == "http" else ports.triton_grpc
    cluster: dict[str, Any] = {
        "@type": "type.googleapis.com/envoy.config.cluster.v3.Cluster",
        "name": name,
        "type": "STATIC",
        "connect_timeout": "2s",
        "load_assignment": {
            "cluster_name": name,
            "endpoints": [
                {"lb_endpoints": [{"endpoint": {"address": address(ports.triton_host, port)}}]}
            ],
        },
    }
    options: dict[str, Any] = {}
    if protocol == "grpc":
        options["explicit_http_config"] = {"http2_protocol_options": {}}
    if traced_by_workers is not None:
        options.setdefault("explicit_http_config", {"http_protocol_options": {}})
        options["http_filters"] = upstream_filters(traced_by_workers)
    if options:
        cluster["typed_extension_protocol_options"] = {
            "envoy.extensions.upstreams.http.v3.HttpProtocolOptions": {
                "@type": "type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions",
                **options,
            }
        }
    if in_flight is not None:
        # Beyond max_in_flight requests at Triton, the next is refused at
        # once (503 / UNAVAILABLE, x-envoy-overloaded) instead of queueing
        # in Envoy; over HTTP/1.1 each request needs its own connection.
        cluster["circuit_breakers"] = {
            "thresholds": [
                {
                    "max_requests": in_flight,
                    "max_connections": in_flight,
                    "max_pending_requests": in_flight,
                    "max_retries": 0,
                }
            ]
        }
    return cluster
