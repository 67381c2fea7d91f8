"""Which served model a request names: the OpenAI model of /v1/embeddings,
which must be one of the gateway's embedding models, or Cohere's and TEI's
optional `model`, without which the gateway's only model of the route's
task serves. A name the gateway serves for another task is refused naming
that task; a name it does not serve at all is a 404."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from embedding_gateway.errors import ApiError, bad_request

# The kind of model each task's routes serve, for messages.
KINDS = {"embed": "embedding model", "rerank": "reranker", "sparse": "sparse encoder"}
# Where each task is served, for a message naming the route to call instead.
TASK_ROUTES = {"embed": "/v1/embeddings", "rerank": "/v1/rerank", "sparse": "/embed_sparse"}


def model_not_found(model: str, served: Sequence[str]) -> ApiError:
    names = ", ".join(f"'{name}'" for name in served)
    return ApiError(
        404,
        f"The model '{model}' does not exist; this gateway serves {names}",
        param="model",
        code="model_not_found",
    )


def embedding_model(model: str, names: Sequence[str], tasks: Mapping[str, str]) -> str:
    """The OpenAI model of an embeddings request, among `names`, the
    gateway's embedding models; tasks: every model it serves, by name."""
    if model in names:
        return model
    if model in tasks:
        raise bad_request(
            f"The model '{model}' does not embed (its task is '{tasks[model]}'): call "
            f"its task's route ({TASK_ROUTES[tasks[model]]})",
            "model",
        )
    raise model_not_found(model, names)


def pick_model(value: str | None, names: Sequence[str], tasks: Mapping[str, str], task: str) -> str:
    """The model a request names among `names`, the gateway's models of
    `task`, or without a name the only one; tasks: every model the gateway
    serves, by name, for a message naming the task of a model of another."""
    kind = KINDS[task]
    if value is None:
        if len(names) == 1:
            return names[0]
        if not names:
            raise ApiError(404, f"This gateway serves no {kind}", param="model")
        listed = ", ".join(f"'{name}'" for name in names)
        raise bad_request(f"'model' is required: this gateway serves several ({listed})", "model")
    if value in names:
        return value
    if value in tasks:
        article = "an" if kind[0] in "aeiou" else "a"
        raise bad_request(
            f"The model '{value}' is not {article} {kind} (its task is '{tasks[value]}')", "model"
        )
    listed = ", ".join(f"'{name}'" for name in names) or "none"
    raise ApiError(
        404,
        f"The model '{value}' does not exist; this gateway's {kind}s: {listed}",
        param="model",
        code="model_not_found",
    )
