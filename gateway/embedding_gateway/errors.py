"""The gateway's errors: each API's error body (OpenAI's error object,
Cohere's message, TEI's error and error_type), declared once here for
the answers and the OpenAPI document, and how Triton's failures map onto
them."""

from __future__ import annotations

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
# The service's error kinds (embedding_client.errors.ERROR_KINDS) as
# OpenAI error codes.
_CODES = {
    "invalid_parameter": "invalid_value",
    "invalid_input": "invalid_value",
    "input_too_large": "context_length_exceeded",
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
    if isinstance(error, AccessError):
        # The edge of a server with tenants refused the forwarded key or the
        # model for it.
        if error.unauthenticated:
            return ApiError(401, error.message, code="invalid_api_key")
        return ApiError(403, error.message, param="model", code="model_not_permitted")
    if isinstance(error, InvalidInputError):
        return bad_request(
            error.message, error.parameter, _CODES.get(error.kind or "", "invalid_value")
        )
    if isinstance(error, UnavailableError):
        if error.status in _RATE_LIMITED:
            return ApiError(
                429,
                f"Triton is overloaded, retry later: {error.message}",
                type="rate_limit_error",
                code="rate_limit_exceeded",
            )
        return ApiError(
            503,
            f"Triton is unavailable or overloaded, retry later: {error.message}",
            type="server_error",
            code="service_unavailable",
        )
    return ApiError(
        502, f"Triton failed: {error.message}", type="server_error", code="upstream_error"
    )
