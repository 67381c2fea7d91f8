"""The models the gateway serves, each by its name and task, and what it
serves them from the service's catalog (`--catalog FILE`), read as the
launcher reads it (embedding_catalog): every name of every entry, with its
task, and the tokenizer.json of each model whose texts the gateway
tokenizes, from its export, so that a user never names a path inside one.
The packaged model's export is in the service's model repository
(`--model-repository DIR`), each other model's in the folder the launcher
exports it to (`--exports DIR`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embedding_catalog.catalog import CatalogModel, read_catalog
from embedding_catalog.exports import TOKENIZER_JSON, export_root
from embedding_catalog.tasks import EMBED, TASKS, TOKENS_SUFFIX


def tokenizes(task: str) -> bool:
    """Whether the gateway tokenizes the texts of a model of `task`: where
    the task has a token-id entry point, which its texts go to as ids, so
    that usage counts their tokens and Triton does not tokenize them again."""
    return TOKENS_SUFFIX in TASKS[task].entry_points


@dataclass(frozen=True)
class GatewayModel:
    """A model the gateway serves: `name` is both its OpenAI model and its
    Triton model; `tokenizer` is its tokenizer.json, given exactly where
    the gateway tokenizes its task's texts (`tokenizes`)."""

    name: str
    tokenizer: Path | None = None
    task: str = EMBED.name

    def __post_init__(self) -> None:
        if (self.tokenizer is not None) != tokenizes(self.task):
            needs = "needs a" if tokenizes(self.task) else "takes no"
            raise ValueError(f"{self.name}: a model of task {self.task!r} {needs} tokenizer.json")


@dataclass(frozen=True)
class ExportFolders:
    """Where the launcher's exports are; None: not given."""

    model_repository: Path | None
    exports: Path | None

    def tokenizer(self, model: CatalogModel) -> Path | str:
        """The tokenizer.json of the model's export, or which folder to give."""
        root = export_root(model, self.model_repository, self.exports)
        if root is None:
            needed = "--model-repository" if model.path is None else "--exports"
            return f"entry {model.name!r}: give {needed} DIR to find its tokenizer.json"
        return root / TOKENIZER_JSON


def gateway_catalog(path: Path, folders: ExportFolders) -> tuple[GatewayModel, ...] | str:
    """The catalog's models for the gateway, or why they cannot be served."""
    catalog = read_catalog(path)
    if isinstance(catalog, str):
        return catalog
    models: list[GatewayModel] = []
    for model in catalog.models:
        tokenizer = None
        if tokenizes(model.task):
            tokenizer = folders.tokenizer(model)
            if isinstance(tokenizer, str):
                return f"catalog {path}: {tokenizer}"
            if not tokenizer.is_file():
                return (
                    f"catalog {path}: entry {model.name!r} is not exported yet ({tokenizer} is "
                    f"missing): start the server with this catalog first, which exports it"
                )
        models.extend(GatewayModel(name, tokenizer, model.task) for name in model.names)
    return tuple(models)
