"""export.json, the record export/ writes into each model's version folder:
what a served model needs to know about the exported one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# What every record holds, whatever the model's task.
REQUIRED = ("max_seq_length", "vocab_size")


@dataclass(frozen=True)
class ExportRecord:
    max_seq_length: int
    vocab_size: int
    fields: dict[str, object]  # the whole record, for task- and model-specific keys

    @classmethod
    def read(cls, version_dir: Path) -> ExportRecord:
        path = version_dir / "export.json"
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing; write it with export/export_onnx.py")
        fields = json.loads(path.read_text())
        missing = sorted(set(REQUIRED) - fields.keys())
        if missing:
            raise ValueError(f"{path} lacks {missing}; write it again with export/export_onnx.py")
        return cls(int(fields["max_seq_length"]), int(fields["vocab_size"]), fields)

    @property
    def embedding_dim(self) -> int:
        """The embedding width; an embedding model's record alone has one."""
        value = self.fields.get("embedding_dim")
        if value is None:
            raise ValueError(
                f"the export record (task {self.fields.get('task', 'embed')!r}) has no "
                "embedding_dim: it is not an embedding model's"
            )
        return int(str(value))
