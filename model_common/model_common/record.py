"""export.json, the record export/ writes into each model's version folder:
what a served model needs to know about the exported one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ExportRecord:
    embedding_dim: int
    max_seq_length: int
    vocab_size: int
    fields: dict[str, object]  # the whole record, for model-specific keys

    @classmethod
    def read(cls, version_dir: Path) -> ExportRecord:
        path = version_dir / "export.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing; write it with export/export_onnx.py")
        fields = json.loads(path.read_text())
        missing = {"embedding_dim", "max_seq_length", "vocab_size"} - fields.keys()
        if missing:
            raise ValueError(
                f"{path} lacks {sorted(missing)}; write it again with export/export_onnx.py"
            )
        return cls(
            int(fields["embedding_dim"]),
            int(fields["max_seq_length"]),
            int(fields["vocab_size"]),
            fields,
        )
