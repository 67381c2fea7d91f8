"""Typed errors: each carries the server's message and status, so callers can
tell a bad request from an overloaded or unreachable server."""

from __future__ import annotations

import http.client
import re
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from tritonclient.utils import InferenceServerException

from embedding_client.declaration import DECLARATION

# gRPC status codes as tritonclient spells them, and HTTP status codes.
# Triton rejects a request its full queue or its queue deadline turns away
# with UNAVAILABLE (503); DEADLINE_EXCEEDED is this client's own timeout.
_INVALID = {"StatusCode.INVALID_ARGUMENT", "400"}
# The edge of a server with tenants refuses a missing or wrong key, and a
# model the key's tenant may not call (docs/operations.md, "Tenants").
_REFUSED = {"StatusCode.UNAUTHENTICATED", "401", "StatusCode.PERMISSION_DENIED", "403"}
_UNAVAILABLE = {
    "StatusCode.UNAVAILABLE",
    "StatusCode.RESOURCE_EXHAUSTED",
    "StatusCode.DEADLINE_EXCEEDED",
    "429",
    "503",
    "504",
}


# The service's stable error kinds, the models' and the edge's refusals'
# (the declaration's error_kinds; docs/contract.md, "Errors: stable kinds"):
# an error message names its kind first and, for a bad request parameter,
# the parameter, as in "invalid_parameter 'dimensions': 999 is outside
# 1..384". Triton may put its own words in front, so the kind is searched
# for, not matched at 0.
ERROR_KINDS: tuple[str, ...] = tuple(kind["name"] for kind in DECLARATION["error_kinds"])
_KIND = re.compile(rf"\b({'|'.join(ERROR_KINDS)})(?: '(\w+)')?: ")


class EmbeddingError(Exception):
    """Base class. `status` is the server's gRPC or HTTP status (for example
    "StatusCode.INVALID_ARGUMENT" or "400"), or None when this library
    rejected the call before sending anything. `kind` is the error's stable
    kind (one of ERROR_KINDS) and `parameter` the request parameter it names,
    where the message carries them."""

    def __init__(self, message: str, status: str | None = None) -> None:
        super().__init__(message if status is None else f"[{status}] {message}")
        self.message = message
        self.status = status
        named = _KIND.search(message)
        self.kind: str | None = named.group(1) if named else None
        self.parameter: str | None = named.group(2) if named else None


class InvalidInputError(EmbeddingError):
    """The request was malformed: an unknown option, an empty input, ..."""


class UnavailableError(EmbeddingError):
    """The server is unreachable, overloaded, too slow or rejecting work;
    retry later. `retry_after_s`: when the server said to come back, where
    it said so (None: it did not, or not readably)."""

    def __init__(
        self, message: str, status: str | None = None, retry_after_s: float | None = None
    ) -> None:
        super().__init__(message, status)
        self.retry_after_s = retry_after_s


class AccessError(EmbeddingError):
    """The server's edge refused the API key (UNAUTHENTICATED, 401) or the
    model for that key (PERMISSION_DENIED, 403)."""

    @property
    def unauthenticated(self) -> bool:
        return self.status in ("StatusCode.UNAUTHENTICATED", "401")


class ServerError(EmbeddingError):
    """The server failed for another reason."""


# Where a refusal says when to come back: over gRPC in its trailing
# metadata, gRPC's pushback (milliseconds) or HTTP's Retry-After (whole
# seconds); over HTTP in its Retry-After header. The edge sets them on its
# own refusals and on Triton's, the gateway on its 429s and 503s.
PUSHBACK_MS = "grpc-retry-pushback-ms"
RETRY_AFTER = "retry-after"
# The HTTP refusals whose Retry-After is read, as tritonclient spells them.
_HTTP_REFUSALS = frozenset({"429", "503"})
# The hint of the last HTTP answer in this context: tritonclient.http builds
# its error from the body alone, so the HTTP transports note each answer's
# Retry-After here (note_http_answer) as it arrives, and the error built from
# that answer, raised in the same greenlet or asyncio task, reads it back.
_http_hint: ContextVar[float | None] = ContextVar("embedding_client_http_hint", default=None)


def _whole(value: object) -> float | None:
    """A whole non-negative number in decimal digits, or None: the only form
    of a hint read (one too long for a float is inf, past any deadline).
    Retry-After's other form, an HTTP-date, is no hint: the edge and the
    gateway send seconds, and a date leans on both machines' clocks."""
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return float(value)
    return None


def note_http_answer(status: int, retry_after: str | None) -> None:
    """Notes an HTTP answer's status and Retry-After header (None: none) for
    the error tritonclient may build from it next in this context."""
    _http_hint.set(_whole(retry_after) if str(status) in _HTTP_REFUSALS else None)


def server_hint_s(error: InferenceServerException) -> float | None:
    """The wait a refusal asks for, or None. Over gRPC, tritonclient raises
    its error while handling grpc's, which it keeps as __context__; over
    HTTP, the transport noted the answer's header (note_http_answer)."""
    if error.status() in _HTTP_REFUSALS:
        return _http_hint.get()
    # A grpc.Call (its sync and asyncio errors alike), by what it has.
    trailing = getattr(error.__context__, "trailing_metadata", None)
    if not callable(trailing):
        return None
    metadata = dict(trailing() or ())
    for key, scale in ((PUSHBACK_MS, 1e-3), (RETRY_AFTER, 1.0)):
        whole = _whole(metadata.get(key))
        if whole is not None:
            return whole * scale
    return None


def from_triton(error: InferenceServerException) -> EmbeddingError:
    status = error.status()
    message = error.message()
    if status in _INVALID:
        return InvalidInputError(message, status)
    if status in _UNAVAILABLE:
        return UnavailableError(message, status, server_hint_s(error))
    if status in _REFUSED:
        return AccessError(message, status)
    return ServerError(message, status)


# A connection refused, reset, or closed before its answer: the network's
# own errors, and how the sync HTTP client under tritonclient names a
# connection the server closed (geventhttpclient's HTTPConnectionClosed is an
# http.client.HTTPException). The asyncio HTTP client adds aiohttp's
# (embedding_client.aio): this module imports neither, as the GPU kit carries
# no aiohttp.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (OSError, http.client.HTTPException)


def from_connection(error: Exception) -> UnavailableError:
    return UnavailableError(f"cannot reach the server ({type(error).__name__}: {error})")


@contextmanager
def triton_errors(connection_errors: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turns tritonclient's and the network's exceptions into typed ones;
    `connection_errors`: a transport's own for a lost connection."""
    try:
        yield
    except InferenceServerException as error:
        raise from_triton(error) from error
    except (*CONNECTION_ERRORS, *connection_errors) as error:
        raise from_connection(error) from error
