"""Catalogs written for the tests and perf: the packaged MiniLM (aliased
`embed`) beside test models, exported and prepared for a server, as the
launcher prepares a catalog."""

from __future__ import annotations

from pathlib import Path

from server.catalog import Catalog
from server.served_repository import prepare


def catalog_beside_minilm(
    served_dir: Path, folders: dict[str, Path], engines: dict[str, str] | None = None
) -> Catalog:
    """served_dir/models.toml with MiniLM and each folder by its name (one
    instance each, on 2 cores, on its engine in `engines`, else auto),
    exported and written to served_dir/served."""
    engines = engines or {}
    entries = ['[[models]]\nname = "all-MiniLM-L6-v2"\naliases = ["embed"]\n']
    entries += [
        f'[[models]]\nname = "{name}"\npath = "{folder}"\ninstances = 1\n'
        f'engine = "{engines.get(name, "auto")}"\n'
        for name, folder in folders.items()
    ]
    catalog_path = served_dir / "models.toml"
    catalog_path.write_text("\n".join(entries))
    catalog = prepare(catalog_path, served_dir / "served")
    assert isinstance(catalog, Catalog), catalog
    return catalog
