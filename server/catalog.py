"""The model catalog the launcher serves (`--catalog FILE`), read by the
catalog package (catalog/embedding_catalog/catalog.py), which the gateway
reads it with too; its reader and models are importable from here as well.
`models.toml` at the repository root is the default catalog."""

from __future__ import annotations

from embedding_catalog.catalog import Catalog, CatalogModel, read_catalog

from server.paths import REPO_ROOT

DEFAULT_CATALOG = REPO_ROOT / "models.toml"

__all__ = ["DEFAULT_CATALOG", "Catalog", "CatalogModel", "read_catalog"]
