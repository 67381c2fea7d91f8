"""export.json, the record export/ writes into each model's version folder:
what a served model needs to know about the exported one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

# What every record holds, whatever the model's task.
REQUIRED = ("max_seq_length", "vocab_size")


def read_fields(path: Path, required: tuple[str, ...], written_by: str) -> dict[str, object]:
    """A JSON record's fields, refusing a missing record or field with a message naming the
    file and the tool that writes it."""
    if not path.exists():
        raise FileNotFoundError(f"{path} is missing; write it with {written_by}")
    fields: dict[str, object] = json.loads(path.read_text())
    missing = sorted(set(required) - fields.keys())
    if missing:
        raise ValueError(f"{path} lacks {missing}; write it again with {written_by}")
    return fields


@dataclass(frozen=True)
class ExportRecord:
    max_seq_length: int
    vocab_size: int
    fields: dict[str, object]  # the whole record, for task- and model-specific keys

    @classmethod
    def read(cls, version_dir: Path) -> ExportRecord:
        fields = read_fields(version_dir / "export.json", REQUIRED, "export/export_onnx.py")
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
