"""The service's one declaration of its row formats and request options,
row_formats.json: a byte-for-byte copy of the server's
(model_common/model_common/row_formats.json; a test keeps the two the same),
shipped as package data so that the client installs without the server's
packages. decode.py reads the row formats from it, options.py the options."""

from __future__ import annotations

import json
from importlib.resources import files
from typing import Any

DECLARATION: dict[str, Any] = json.loads(
    files("embedding_client").joinpath("row_formats.json").read_text(encoding="utf-8")
)
