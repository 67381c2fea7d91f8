"""The shipped GPU embedder's code (model_repository/torch_gpu), imported by
the kit as the Triton stub imports it: its version folder on the path."""

from __future__ import annotations

import importlib
import sys
from functools import cache
from types import ModuleType

from server.paths import MODEL_REPOSITORY

ENCODER_DIR = MODEL_REPOSITORY / "torch_gpu" / "embedder" / "1"


@cache
def packed_modules() -> tuple[ModuleType, ModuleType]:
    """packed_encoder and packed_rows from the embedder's version folder."""
    sys.path.insert(0, str(ENCODER_DIR))
    return importlib.import_module("packed_encoder"), importlib.import_module("packed_rows")


@cache
def packed_graphs() -> ModuleType:
    """packed_graphs from the same folder; it imports torch, so only a run
    that has torch calls this."""
    if str(ENCODER_DIR) not in sys.path:
        sys.path.insert(0, str(ENCODER_DIR))
    return importlib.import_module("packed_graphs")
