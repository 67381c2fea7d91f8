"""TOML for the catalog and the tenants file, as the catalog package reads it
(catalog/embedding_catalog/toml.py: tomllib, or tomli on the GPU image's
Python 3.10)."""

from embedding_catalog.toml import TOMLDecodeError, loads

__all__ = ["TOMLDecodeError", "loads"]
