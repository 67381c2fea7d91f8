"""What the gateway serves for the service's catalog (`--catalog FILE`),
read as the launcher reads it (embedding_catalog): every name of every
entry, by task, and each embedding model's tokenizer.json from its export,
so that a user never names a path inside one. The packaged model's export
is in the service's model repository (`--model-repository DIR`), each
other model's in the folder the launcher exports it to (`--exports DIR`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from embedding_catalog.catalog import CatalogModel, read_catalog
from embedding_catalog.exports import TOKENIZER_JSON, export_root


@dataclass(frozen=True)
class GatewayCatalog:
    # (Triton name, its tokenizer.json) of each embedding entry point.
    models: tuple[tuple[str, Path], ...]
    rerankers: tuple[str, ...]
    sparse: tuple[str, ...]


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


def gateway_catalog(path: Path, folders: ExportFolders) -> GatewayCatalog | str:
    """The catalog's models for the gateway, or why they cannot be served."""
    catalog = read_catalog(path)
    if isinstance(catalog, str):
        return catalog
    models: list[tuple[str, Path]] = []
    names: dict[str, list[str]] = {"rerank": [], "sparse": []}
    for model in catalog.models:
        if model.task != "embed":
            names[model.task].extend(model.names)
            continue
        tokenizer = folders.tokenizer(model)
        if isinstance(tokenizer, str):
            return f"catalog {path}: {tokenizer}"
        if not tokenizer.is_file():
            return (
                f"catalog {path}: entry {model.name!r} is not exported yet ({tokenizer} is "
                f"missing): start the server with this catalog first, which exports it"
            )
        models.extend((name, tokenizer) for name in model.names)
    return GatewayCatalog(tuple(models), tuple(names["rerank"]), tuple(names["sparse"]))
