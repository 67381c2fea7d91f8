"""Which served model a request names: the OpenAI model of /v1/embeddings,
which must be one of the gateway's embedding models, or Cohere's and TEI's
optional `model`, without which the gateway's only model of the route's
task serves. A name the gateway serves for another task is refused naming
that task (and, for the OpenAI model, the route of its task); a name it
does not serve at all is a 404. What a model of each task is called comes
from the service's declaration of its tasks (embedding_catalog.tasks)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from embedding_catalog.tasks import EMBED, TASKS

from embedding_gateway.errors import ApiError, bad_request


def a_kind(task: str) -> str:
    """What a model of the task is called, after its article: 'a reranker'."""
    kind = TASKS[task].kind
    return f"{'an' if kind[0] in 'aeiou' else 'a'} {kind}"


def model_not_found(model: str, served: Sequence[str]) -> ApiError:
    names = ", ".join(f"'{name}'" for name in served)
    return ApiError(
        404,
        f"The model '{model}' does not exist; this gateway serves {names}",
        param="model",
        code="model_not_found",
    )


@dataclass(frozen=True)
class ServedModels:
    """Every model the gateway serves, by name, with its task; `routes`:
    the route that serves each task, for a message naming it."""

    tasks: Mapping[str, str]
    routes: Mapping[str, str]

    def names(self, task: str) -> list[str]:
        """The gateway's models that answer `task`'s requests: its own, and those of a
        task that answers them too (a multi-vector encoder reranks)."""
        return [name for name, each in self.tasks.items() if TASKS[each].serves(task)]

    def entry_point(self, model: str, task: str) -> str:
        """The Triton model that answers `task`'s requests for the served `model`."""
        return model + TASKS[self.tasks[model]].entry_point(task)

    def embedding_model(self, model: str) -> str:
        """The OpenAI model of an embeddings request."""
        if model in self.names(EMBED.name):
            return model
        task = self.tasks.get(model)
        if task is not None:
            raise bad_request(
                f"The model '{model}' does not embed (its task is '{task}'): call "
                f"its task's route ({self.routes[task]})",
                "model",
            )
        raise model_not_found(model, self.names(EMBED.name))

    def pick(self, value: str | None, task: str) -> str:
        """The model a request names among the gateway's models of `task`,
        or without a name the only one."""
        names = self.names(task)
        kind = TASKS[task].kind
        if value is None:
            if len(names) == 1:
                return names[0]
            if not names:
                raise ApiError(404, f"This gateway serves no {kind}", param="model")
            listed = ", ".join(f"'{name}'" for name in names)
            raise bad_request(
                f"'model' is required: this gateway serves several ({listed})", "model"
            )
        if value in names:
            return value
        if value in self.tasks:
            raise bad_request(
                f"The model '{value}' is not {a_kind(task)} (its task is '{self.tasks[value]}')",
                "model",
            )
        listed = ", ".join(f"'{name}'" for name in names) or "none"
        raise ApiError(
            404,
            f"The model '{value}' does not exist; this gateway's {kind}s: {listed}",
            param="model",
            code="model_not_found",
        )
