"""The gateway's OpenAPI 3.1 document, served at GET /openapi.json: every
route (routes.py) with the JSON Schemas of its request and response bodies
and its API's error body, all written from the schemas the gateway
validates with; each request's `model` names the models this gateway
serves for its task."""

from __future__ import annotations

from collections.abc import Mapping
from importlib.metadata import version
from typing import Any

from embedding_catalog.tasks import TASKS
from pydantic import TypeAdapter

from embedding_gateway.errors import ERROR_BODIES
from embedding_gateway.routes import ROUTES, Route

REF = "#/components/schemas/{model}"
JSON = "application/json"
SECURITY_SCHEME = "bearer"


def openapi_document(tasks: Mapping[str, str], keyed: bool) -> dict[str, Any]:
    """tasks: every model served, by name, with its task; keyed: requests
    need `Authorization: Bearer <key>` (checked here or by the edge)."""
    keys, components = _schemas()
    for route in ROUTES:
        if route.request is not None and route.task is not None:
            names = [name for name, task in tasks.items() if TASKS[task].serves(route.task)]
            _name_models(components[route.request.__name__], names)
    paths: dict[str, dict[str, Any]] = {}
    for route in ROUTES:
        operation = _operation(route, keys)
        if keyed and not route.open:
            operation["security"] = [{SECURITY_SCHEME: []}]
        paths.setdefault(route.path, {})[route.method.lower()] = operation
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "Triton embedding service gateway",
            "version": version("triton-embedding-gateway"),
        },
        "paths": paths,
        "components": {"schemas": components},
    }
    if keyed:
        document["components"]["securitySchemes"] = {
            SECURITY_SCHEME: {"type": "http", "scheme": "bearer"}
        }
    return document


Keys = dict[tuple[str, str], Any]


def _schemas() -> tuple[Keys, dict[str, Any]]:
    """Each route's request and response schemas (a $ref, or inline), each
    API's error body's, and the components they refer to."""
    inputs: list[tuple[str, Any, TypeAdapter[Any]]] = []
    for route in ROUTES:
        if route.request is not None:
            inputs.append((f"request {route.path}", "validation", TypeAdapter(route.request)))
        inputs.append((f"response {route.path}", "serialization", TypeAdapter(route.response)))
    for api, body in ERROR_BODIES.items():
        inputs.append((f"error {api}", "serialization", TypeAdapter(body)))
    keys, definitions = TypeAdapter.json_schemas(inputs, ref_template=REF)
    return {key: schema for (key, _), schema in keys.items()}, definitions.get("$defs", {})


def _name_models(schema: dict[str, Any], names: list[str]) -> None:
    """The request's `model`: one of `names`; where it may be left out, it
    must be given when there are several."""
    if not names:
        return
    optional = "model" not in schema.get("required", [])
    if optional and len(names) > 1:
        schema["required"] = [*schema.get("required", []), "model"]
    allowed = [*names, None] if optional and len(names) == 1 else names
    schema["properties"]["model"] = {"enum": allowed, "description": "a model this gateway serves"}


def _operation(route: Route, keys: Keys) -> dict[str, Any]:
    path = route.path
    error = {
        "description": "refused or failed",
        "content": {JSON: {"schema": keys[f"error {route.api}"]}},
    }
    operation: dict[str, Any] = {
        "summary": route.summary,
        "responses": {
            "200": {"description": "done", "content": {JSON: {"schema": keys[f"response {path}"]}}},
            "4XX": error,
            "5XX": error,
        },
    }
    if route.request is not None:
        schema = keys[f"request {path}"]
        operation["requestBody"] = {"required": True, "content": {JSON: {"schema": schema}}}
    parameters = [part[1:-1] for part in path.split("/") if part.startswith("{")]
    if parameters:
        operation["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string"}}
            for name in parameters
        ]
    return operation
