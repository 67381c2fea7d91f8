"""What the sync and asyncio transports share: a call's request sent with
tritonclient (tritonclient.grpc and tritonclient.http, and their asyncio
clients, spell it alike)."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, Literal

from embedding_client.batching import Request
from embedding_client.call import Call
from embedding_client.retry import RetryPolicy

OUTPUT = "EMBEDDING"
Protocol = Literal["grpc", "http"]
PROTOCOLS: tuple[Protocol, ...] = ("grpc", "http")
# Triton's own ports on this machine, the commands' default servers.
DEFAULT_URLS: dict[Protocol, str] = {"grpc": "127.0.0.1:8001", "http": "127.0.0.1:8000"}
# Sent with each request (the API key of a server with tenants), or none.
Headers = dict[str, str] | None


@dataclass(frozen=True)
class Connection:
    """url: host:port, no scheme. priority: Triton's request priority level,
    0 for the model's default. max_in_flight: requests this client keeps in
    flight at once. retry: what is sent again, when (embedding_client.retry)."""

    url: str
    max_in_flight: int
    priority: int
    timeout_s: float
    retry: RetryPolicy


def grpc_call_options(connection: Connection) -> dict[str, Any]:
    """Keyword arguments of tritonclient's gRPC infer, sync and asyncio alike."""
    return {"priority": connection.priority, "client_timeout": connection.timeout_s}


def infer_inputs(module: ModuleType, request: Request) -> list[Any]:
    inputs = []
    for tensor in request:
        item = module.InferInput(tensor.name, list(tensor.data.shape), tensor.datatype)
        item.set_data_from_numpy(tensor.data)
        inputs.append(item)
    return inputs


def infer(
    client: Any,
    module: ModuleType,
    call: Call[Any],
    request: Request,
    headers: Headers,
    options: dict[str, Any],
) -> Any:
    """One request of `call` sent with tritonclient's `client` (`module`:
    the tritonclient module whose inputs it takes; `options`: the client's
    own keyword arguments): its result, or the asyncio client's awaitable."""
    return client.infer(
        call.model,
        infer_inputs(module, request),
        outputs=[module.InferRequestedOutput(name) for name in call.outputs],
        parameters=call.parameters,
        headers=headers,
        **options,
    )


def unknown_protocol(protocol: str) -> ValueError:
    return ValueError(f"protocol must be one of {', '.join(PROTOCOLS)}, got {protocol!r}")
