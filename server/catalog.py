"""The model catalog the launcher serves (`--catalog FILE`), read by the
catalog package (catalog/embedding_catalog/catalog.py), which the gateway
reads it with too; its names are importable from here as well.
`models.toml` at the repository root is the default catalog."""

from __future__ import annotations

from embedding_catalog.catalog import (
    ENGINE_STAGE_SUFFIXES,
    ENGINES,
    KEYS,
    MODEL_TYPE_FILE,
    NAME_PATTERN,
    PACKAGED_ENGINES,
    PACKAGED_STAGES,
    SERIALIZER,
    SERIALIZERS,
    SPARSE_SERIALIZER,
    TASK_ENGINES,
    TASKS,
    TASKS_BY_MODEL_TYPE,
    TOKENIZER_SUFFIX,
    TOKENS_SUFFIX,
    Catalog,
    CatalogModel,
    FolderKind,
    folder_kind,
    read_catalog,
)

from server.paths import REPO_ROOT

DEFAULT_CATALOG = REPO_ROOT / "models.toml"

__all__ = [
    "DEFAULT_CATALOG",
    "ENGINES",
    "ENGINE_STAGE_SUFFIXES",
    "KEYS",
    "MODEL_TYPE_FILE",
    "NAME_PATTERN",
    "PACKAGED_ENGINES",
    "PACKAGED_STAGES",
    "SERIALIZER",
    "SERIALIZERS",
    "SPARSE_SERIALIZER",
    "TASKS",
    "TASKS_BY_MODEL_TYPE",
    "TASK_ENGINES",
    "TOKENIZER_SUFFIX",
    "TOKENS_SUFFIX",
    "Catalog",
    "CatalogModel",
    "FolderKind",
    "folder_kind",
    "read_catalog",
]
