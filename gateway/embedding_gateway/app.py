"""The gateway as an aiohttp application: its routes (routes.py), each
error answered in the shape of the route's API, and the OpenAPI document."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from functools import partial

import orjson
from aiohttp import web
from embedding_client.aio import AsyncEmbeddingClient
from embedding_client.tokenization import ClientTokenizer

from embedding_gateway.catalog import GatewayModel
from embedding_gateway.errors import Api, ApiError
from embedding_gateway.logs import HEALTH_PREFIX, failure_fields
from embedding_gateway.openapi import openapi_document
from embedding_gateway.otlp import SpanExporter
from embedding_gateway.pooling_api import OCTET_STREAM
from embedding_gateway.routes import COHERE_VERSIONS, OPENAPI_PATH, PATH_APIS, ROUTES, Health
from embedding_gateway.service import Body, Caller, EmbeddingsService
from embedding_gateway.trace_context import TRACE_ID_HEADER, read_trace_context
from embedding_gateway.tracing import (
    METHOD_ATTRIBUTE,
    PATH_ATTRIBUTE,
    REQUEST_TRACE,
    ROUTE_ATTRIBUTE,
    SERVICE_NAME,
    RequestTrace,
    Tracer,
    TraceSettings,
)

# OpenAI accepts up to 2048 inputs of 8192 tokens each; this bounds the body.
MAX_BODY_BYTES = 64 * 1024 * 1024
JSON = "application/json"
SERVICE = web.AppKey("service", EmbeddingsService)
TRACER = web.AppKey("tracer", Tracer)
# The OpenAPI document, written once the served models are known.
DOCUMENT = web.AppKey("document", bytes)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# A failure's headers a client needs beside its body: the methods a path takes.
_KEPT_HEADERS = ("Allow",)

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class GatewaySettings:
    triton_url: str
    # Every model it serves, of every task.
    models: tuple[GatewayModel, ...]
    api_key: str | None = None
    max_in_flight: int = 64
    priority: int = 0
    # Pass each client's own key on to a server with tenants, whose edge
    # checks it, instead of checking one key here.
    forward_api_key: bool = False
    # The gateway's own spans (tracing.py); None: none.
    tracing: TraceSettings | None = None


def create_app(settings: GatewaySettings) -> web.Application:
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[_traced, _errors])
    app.cleanup_ctx.append(partial(_tracer, settings.tracing))
    app.cleanup_ctx.append(partial(_service, settings))
    handlers: dict[str, Handler] = {
        "/v1/embeddings": _create_embeddings,
        "/v1/models": _list_models,
        "/v1/models/{model}": _retrieve_model,
        **{f"/v{version}/rerank": partial(_rerank, version) for version in COHERE_VERSIONS},
        "/rerank": partial(_rerank, ""),
        "/embed": partial(_tei, EmbeddingsService.tei_embed),
        "/": partial(_tei, EmbeddingsService.tei_embed),
        "/embed_sparse": partial(_tei, EmbeddingsService.embed_sparse),
        "/pooling": _pooling,
        "/health/live": _live,
        "/health/ready": _ready,
        OPENAPI_PATH: _openapi,
    }
    app.add_routes([web.route(route.method, route.path, handlers[route.path]) for route in ROUTES])
    return app


async def _tracer(tracing: TraceSettings | None, app: web.Application) -> AsyncIterator[None]:
    """The exporter's thread lives as long as the app; cleaned up after
    _service, once the requests in flight have ended."""
    if tracing is None:
        app[TRACER] = Tracer(None)
        yield
        return
    exporter = SpanExporter(tracing.url, SERVICE_NAME)
    app[TRACER] = Tracer(exporter.submit, tracing.ratio)
    yield
    # The flush blocks for up to its bound: off the event loop.
    await asyncio.to_thread(exporter.close)


async def _service(settings: GatewaySettings, app: web.Application) -> AsyncIterator[None]:
    """The gRPC client belongs to the running event loop, so it is made here;
    the models share its connection and its bound on requests in flight."""
    tokenizers = {
        model.name: ClientTokenizer.from_file(model.tokenizer)
        for model in settings.models
        if model.tokenizer is not None
    }
    client = AsyncEmbeddingClient(
        settings.triton_url,
        "grpc",
        max_in_flight=settings.max_in_flight,
        priority=settings.priority,
    )
    app[SERVICE] = EmbeddingsService(
        client,
        {model.name: model.task for model in settings.models},
        tokenizers,
        settings.api_key,
        int(time.time()),
        forward_api_key=settings.forward_api_key,
    )
    keyed = bool(settings.api_key or settings.forward_api_key)
    app[DOCUMENT] = orjson.dumps(openapi_document(app[SERVICE].served.tasks, keyed))
    yield
    await client.close()


def _json(body: bytes, status: int = 200, headers: dict[str, str] | None = None) -> web.Response:
    return web.Response(body=body, status=status, content_type=JSON, headers=headers)


def _start_trace(request: web.Request) -> RequestTrace:
    """The request's trace, its route span named as OpenTelemetry's HTTP
    conventions name it (METHOD ROUTE). Health probes, every few seconds
    from each kubelet and balancer, are not traced."""
    caller = read_trace_context(request.headers)
    if request.path.startswith(HEALTH_PREFIX):
        return RequestTrace(caller)
    attributes: dict[str, str | int] = {
        METHOD_ATTRIBUTE: request.method,
        PATH_ATTRIBUTE: request.path,
    }
    name = request.method
    # None where no route matched (a 404).
    resource = request.match_info.route.resource
    if resource is not None:
        attributes[ROUTE_ATTRIBUTE] = resource.canonical
        name = f"{request.method} {resource.canonical}"
    return request.app[TRACER].start(caller, name, attributes)


@web.middleware
async def _traced(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Each request's trace, which its handler's spans and log lines use; a
    traced request, or one that carries a context, is answered with its
    trace id, under which its spans are found (errors included)."""
    trace = _start_trace(request)
    request[REQUEST_TRACE] = trace
    try:
        response = await handler(request)
    except BaseException as error:
        # _openai_errors answers every error: what comes here went unanswered
        # (a cancelled request).
        trace.abandoned(error)
        raise
    trace.answered(response.status)
    if trace.trace_id is not None:
        response.headers[TRACE_ID_HEADER] = trace.trace_id
    return response


def _api(request: web.Request) -> Api:
    """The API of the route the request reached, whose error body it gets;
    OpenAI's where it reached none."""
    resource = request.match_info.route.resource
    return PATH_APIS.get(resource.canonical if resource is not None else request.path, "openai")


@web.middleware
async def _errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Every error answered in the error body of the route's API."""
    try:
        return await handler(request)
    except ApiError as error:
        return _json(error.body(_api(request)), error.status, error.headers)
    except web.HTTPException as error:
        if error.status < 400:
            raise
        failure = ApiError(error.status, f"{error.reason}: {request.method} {request.path}")
        kept = {name: error.headers[name] for name in _KEPT_HEADERS if name in error.headers}
        return _json(failure.body(_api(request)), error.status, kept | failure.headers)
    except Exception:
        logger.exception(
            "unexpected failure on %s %s",
            request.method,
            request.path,
            extra=failure_fields(request),
        )
        failure = ApiError(500, "The gateway failed unexpectedly", type="server_error")
        return _json(failure.body(_api(request)), failure.status)


def _caller(request: web.Request) -> Caller:
    return Caller(request.headers.get("Authorization"), request[REQUEST_TRACE])


def _authorized(request: web.Request) -> EmbeddingsService:
    service = request.app[SERVICE]
    service.authorize(request.headers.get("Authorization"))
    return service


async def _rerank(version: str, request: web.Request) -> web.Response:
    """Cohere's rerank (its API version), or TEI's (none)."""
    answer = await _authorized(request).rerank(request.read, version, _caller(request))
    return _json(answer)


async def _tei(
    route: Callable[[EmbeddingsService, Body, Caller], Awaitable[bytes]],
    request: web.Request,
) -> web.Response:
    """One of TEI's embedding routes."""
    return _json(await route(_authorized(request), request.read, _caller(request)))


async def _pooling(request: web.Request) -> web.Response:
    """vLLM's pooling: JSON, or raw bytes where the request accepts only those."""
    raw = request.headers.get("Accept", "").strip() == OCTET_STREAM
    service = _authorized(request)
    body, headers = await service.pooling(request.read, _caller(request), raw)
    if raw:
        return web.Response(body=body, content_type=OCTET_STREAM, headers=headers)
    return _json(body)


async def _create_embeddings(request: web.Request) -> web.Response:
    service = _authorized(request)
    return _json(await service.create_embeddings(request.read, _caller(request)))


async def _list_models(request: web.Request) -> web.Response:
    return _json(_authorized(request).list_models())


async def _retrieve_model(request: web.Request) -> web.Response:
    return _json(_authorized(request).retrieve_model(request.match_info["model"]))


async def _openapi(request: web.Request) -> web.Response:
    _authorized(request)
    return _json(request.app[DOCUMENT])


async def _live(request: web.Request) -> web.Response:
    return _json(orjson.dumps(Health(status="live")))


async def _ready(request: web.Request) -> web.Response:
    if await request.app[SERVICE].triton_ready():
        return _json(orjson.dumps(Health(status="ready")))
    raise ApiError(503, "Triton is not ready", type="server_error", code="service_unavailable")
