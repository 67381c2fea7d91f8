"""What the tests of rerankers and sparse encoders share: a catalog of the
packaged MiniLM (aliased `embed`) beside test models, prepared for a server,
and a JSON request to the gateway."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness.gateway import RunningGateway
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


def post_json(
    gateway: RunningGateway,
    route: str,
    payload: dict[str, Any],
    parse_float: Callable[[str], Any] = float,
) -> tuple[int, Any]:
    """The status and JSON body of a POST of `payload` to the gateway's route,
    its numbers with a fraction read by `parse_float`."""
    request = urllib.request.Request(
        gateway.url + route,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read(), parse_float=parse_float)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
