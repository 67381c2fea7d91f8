"""The gateway's errors: each API's error body (OpenAI's error object,
Cohere's message, TEI's error and error_type), declared once here for
the answers and the OpenAPI document, and how Triton's failures map onto
them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import orjson
from embedding_client.errors import (
    AccessError,
    EmbeddingError,
    InvalidInputError,
    UnavailableError,
)
from typing_extensions import TypedDict

# The APIs the gateway speaks, each with its own error body.
Api = Literal["openai", "cohere", "tei"]

_RATE_LIMITED = {"StatusCode.RESOURCE_EXHAUSTED", "429"}
# What a 429 or 503 tells a client to wait (the Retry-After header), once the
# gateway's own retries of Triton (embedding_client.retry) gave up: long
# enough for a refused burst to drain, short against any client's deadline.
RETRY_AFTER_S = 1
# Triton knows no model of that name: one this gateway serves is missing from
# Triton's catalog, or the server is stopping (it unloads its models first).
_UNKNOWN_MODEL = "StatusCode.NOT_FOUND"


@dataclass(frozen=True)
class _Answer:
    """How the gateway answers an error of one kind: its status, OpenAI's
    type and code, the words before the service's message, and the field
    it names where the message names none."""

    status: int
    code: str
    type: str = "invalid_request_error"
    lead: str = ""
    param: str | None = None


# Each of the service's error kinds (embedding_client.errors.ERROR_KINDS):
# the models' as the request's mistakes, the edge's as it refused the key
# forwarded (--forward-api-key), the model for that key, its quota, or
# failed; an error without a kind answered as the kind its status is.
ANSWERS = {
    "invalid_parameter": _Answer(400, "invalid_value"),
    "invalid_input": _Answer(400, "invalid_value"),
    "input_too_large": _Answer(400, "context_length_exceeded"),
    "unauthenticated": _Answer(401, "invalid_api_key"),
    "permission_denied": _Answer(403, "model_not_permitted", param="model"),
    "quota_exceeded": _Answer(
        429, "rate_limit_exceeded", "rate_limit_error", "Triton is overloaded, retry later: "
    ),
    "unavailable": _Answer(
        503,
        "service_unavailable",
        "server_error",
        "Triton is unavailable or overloaded, retry later: ",
    ),
    # The edge failed, or Triton: the gateway's upstream.
    "internal": _Answer(502, "upstream_error", "server_error", "Triton failed: "),
}


class OpenAIErrorObject(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


class OpenAIError(TypedDict):
    error: OpenAIErrorObject


class CohereError(TypedDict):
    message: str


class TeiError(TypedDict):
    error: str
    # A refused request is the caller's ("Validation"), a failure the service's.
    error_type: Literal["Validation", "Backend"]


ERROR_BODIES: dict[Api, type] = {"openai": OpenAIError, "cohere": CohereError, "tei": TeiError}


class ApiError(Exception):
    def __init__(
        self,
        status: int,
        message: str,
        *,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type
        self.param = param
        self.code = code

    @property
    def headers(self) -> dict[str, str]:
        """A 429 or 503 says when to come back."""
        return {"Retry-After": str(RETRY_AFTER_S)} if self.status in (429, 503) else {}

    def body(self, api: Api = "openai") -> bytes:
        """The error in the API's own shape."""
        if api == "cohere":
            return orjson.dumps(CohereError(message=self.message))
        if api == "tei":
            kind: Literal["Validation", "Backend"] = (
                "Validation" if self.status < 500 else "Backend"
            )
            return orjson.dumps(TeiError(error=self.message, error_type=kind))
        error = OpenAIErrorObject(
            message=self.message, type=self.type, param=self.param, code=self.code
        )
        return orjson.dumps(OpenAIError(error=error))


def bad_request(message: str, param: str | None, code: str = "invalid_value") -> ApiError:
    return ApiError(400, message, param=param, code=code)


def from_embedding_error(error: EmbeddingError, model: str | None = None) -> ApiError:
    """model: the OpenAI model of the request, which names Triton's."""
    if error.status == _UNKNOWN_MODEL:
        # 503, not 404: /v1/models lists it, and a stopping server's refusal
        # is over once the balancer or a retry reaches another one.
        return ApiError(
            503,
            f"Triton does not serve the model '{model}' now (it is not in the server's "
            f"catalog, or the server is stopping): {error.message}",
            type="server_error",
            param="model",
            code="model_not_available",
        )
    answer = ANSWERS[error.kind or _status_kind(error)]
    return ApiError(
        answer.status,
        answer.lead + error.message,
        type=answer.type,
        param=error.parameter or answer.param,
        code=answer.code,
    )


def _status_kind(error: EmbeddingError) -> str:
    """The kind of an error whose message names none (Triton's own, the
    network's), by its status."""
    if isinstance(error, InvalidInputError):
        return "invalid_input"
    if isinstance(error, AccessError):
        return "unauthenticated" if error.unauthenticated else "permission_denied"
    if isinstance(error, UnavailableError):
        return "quota_exceeded" if error.status in _RATE_LIMITED else "unavailable"
    return "internal"
