"""What the gateway serves for a catalog (`embedding-gateway --catalog
FILE`): every name of every entry, by task, and each embedding model's
tokenizer.json from the export the launcher made of it, so that a user never
names a path inside build/. Standard library only, like the launcher."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from server.catalog import read_catalog
from server.catalog_exports import export_root
from server.paths import MODEL_REPOSITORY, TOKENIZER_JSON


@dataclass(frozen=True)
class GatewayCatalog:
    # (Triton name, its tokenizer.json) of each embedding entry point.
    models: tuple[tuple[str, Path], ...]
    rerankers: tuple[str, ...]
    sparse: tuple[str, ...]


def gateway_catalog(path: Path) -> GatewayCatalog | str:
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
        tokenizer = export_root(model) / TOKENIZER_JSON.relative_to(MODEL_REPOSITORY)
        if not tokenizer.is_file():
            return (
                f"catalog {path}: entry {model.name!r} is not exported yet ({tokenizer} is "
                f"missing): start the server with this catalog first, which exports it"
            )
        models.extend((name, tokenizer) for name in model.names)
    return GatewayCatalog(tuple(models), tuple(names["rerank"]), tuple(names["sparse"]))
