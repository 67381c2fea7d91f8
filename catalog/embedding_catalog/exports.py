"""Where each catalog model's export is: the packaged model's in the
service's model repository (scripts/setup.sh exports it there), every other
model's in a folder of its own under the exports folder (the launcher
exports it there at start), each laid out as export/ lays out the model
repository."""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from embedding_catalog.catalog import CatalogModel

# The tokenizer.json of an export, which the tokenizer stage and the gateway read.
TOKENIZER_JSON = PurePosixPath("shared", "tokenizer", "1", "tokenizer.json")


def export_root(
    model: CatalogModel, model_repository: Path | None, exports: Path | None
) -> Path | None:
    """The model's export folder; None where the folder that holds it is not given."""
    if model.path is None:
        return model_repository
    return None if exports is None else exports / model.name
