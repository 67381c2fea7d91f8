"""What the sync and asyncio clients share: their arguments, the transport
picked by protocol, the planner and the max batch sizes already read."""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Generic, Self, TypeVar

from embedding_client.plan import planner
from embedding_client.retry import DEFAULT_RETRY, RetryPolicy
from embedding_client.tokenization import ClientTokenizer
from embedding_client.transport import PROTOCOLS, Connection, Protocol, unknown_protocol

TransportT = TypeVar("TransportT")
DEFAULT_MODEL = "embed"
AUTHORIZATION = "authorization"
# The W3C trace context headers (traceparent, tracestate) a caller's
# requests carry to Triton, whose spans then join the caller's trace.
TRACE_HEADERS = ("traceparent", "tracestate")


def _authorization(api_key: str | None) -> dict[str, str] | None:
    return {AUTHORIZATION: f"Bearer {api_key}"} if api_key else None


def _replaced(
    headers: dict[str, str] | None, names: Sequence[str], new: dict[str, str] | None
) -> dict[str, str] | None:
    """`headers` without `names`, plus `new`; None where nothing is left."""
    kept = {name: value for name, value in (headers or {}).items() if name not in names}
    return {**kept, **(new or {})} or None


class ClientBase(ABC, Generic[TransportT]):
    """url is host:port without a scheme (gRPC 8001 or HTTP 8000 by default).
    `model` is the Triton model texts go to; token ids go to `{model}_tokens`
    (`embed` and `embed_tokens` by default). With `tokenizer` (that model's
    tokenizer.json), texts are tokenized here and sent as ids, unless a call
    sets a text option (prompt_name, input_type, truncate,
    truncation_direction), which only the server applies. `priority` is
    Triton's request priority level (0: the model's default), `max_in_flight`
    the requests kept in flight at once, `timeout_s` the most one request may
    take. `retry` says which refusals of an overloaded or unreachable server
    are sent again and when (embedding_client.retry; NO_RETRIES: none)."""

    def __init__(
        self,
        url: str,
        protocol: Protocol = "grpc",
        *,
        tokenizer: str | Path | ClientTokenizer | None = None,
        model: str = DEFAULT_MODEL,
        max_in_flight: int = 4,
        priority: int = 0,
        timeout_s: float = 60.0,
        api_key: str | None = None,
        retry: RetryPolicy = DEFAULT_RETRY,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise unknown_protocol(protocol)
        if not isinstance(retry, RetryPolicy):
            raise ValueError(f"retry must be a RetryPolicy, got {retry!r}")
        connection = Connection(url, max_in_flight, priority, timeout_s, retry)
        self._transport = self._open(protocol, connection)
        self._planner = planner(model, tokenizer)
        self._limits: dict[str, int] = {}
        self._headers = _authorization(api_key)

    @abstractmethod
    def _open(self, protocol: Protocol, connection: Connection) -> TransportT:
        """The transport for a valid protocol."""

    @property
    def model(self) -> str:
        """The Triton model texts go to."""
        return self._planner.text_model

    def with_api_key(self, api_key: str | None) -> Self:
        """This client with another API key (None: none), sharing its
        connection as with_model does."""
        other = copy.copy(self)
        other._headers = _replaced(self._headers, (AUTHORIZATION,), _authorization(api_key))
        return other

    def with_trace_context(self, context: Mapping[str, str] | None) -> Self:
        """This client sending a caller's W3C trace context (its traceparent
        and tracestate headers; None: none) with each request, sharing its
        connection as with_model does."""
        other = copy.copy(self)
        other._headers = _replaced(self._headers, TRACE_HEADERS, dict(context or {}))
        return other

    def with_model(self, model: str, tokenizer: str | Path | ClientTokenizer | None = None) -> Self:
        """A client of another model of the same server, sharing this one's
        connection, in-flight bound and max batch sizes read: close only one
        of them, once, when done with all."""
        other = copy.copy(self)
        other._planner = planner(model, tokenizer)
        return other
