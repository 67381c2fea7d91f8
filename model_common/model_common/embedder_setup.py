"""What every stage reads when Triton initializes it: its config's
parameters, its version folder, the export record there (or the record the
stage names) and, for those fed token ids, the token limits derived from
both. Pure Python: the stages' `initialize` builds it from Triton's `args`."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from model_common.record import ExportRecord
from model_common.tokens import TokenLimits

# The config parameter bounding real tokens per request, which every
# stage fed token ids declares.
MAX_TOKENS_PARAMETER = "max_tokens_per_request"


def version_dir(args: Mapping[str, str]) -> Path:
    """The model's version folder, from the `args` Triton passes initialize."""
    return Path(args["model_repository"]) / args["model_version"]


@dataclass(frozen=True)
class EmbedderSetup:
    parameters: Mapping[str, str]  # the config's parameters, by key, as their string values
    version_dir: Path
    record: ExportRecord
    max_batch_size: int  # the config's: rows per execution

    @classmethod
    def from_args(cls, args: Mapping[str, str], record: ExportRecord) -> EmbedderSetup:
        """From the `args` Triton passes a Python model's initialize, and
        the export record the stage runs by."""
        config = json.loads(args["model_config"])
        parameters = {
            key: str(value["string_value"]) for key, value in config["parameters"].items()
        }
        return cls(parameters, version_dir(args), record, int(config.get("max_batch_size", 0)))

    def text(self, key: str) -> str:
        """A parameter's value; a missing one fails the load with a message
        naming it."""
        value = self.parameters.get(key)
        if value is None:
            raise ValueError(f"the config declares no parameter {key!r}")
        return value

    def integer(self, key: str) -> int:
        """An integer parameter; a missing or malformed one fails the load
        with a message naming it."""
        value = self.text(key)
        try:
            return int(value)
        except ValueError:
            raise ValueError(f"parameter {key!r} is {value!r}, not an integer") from None

    def seconds(self, key: str) -> float:
        """A positive number of seconds; a missing or malformed one fails
        the load with a message naming it."""
        value = self.text(key)
        try:
            seconds = float(value)
        except ValueError:
            seconds = 0.0
        if not seconds > 0:
            raise ValueError(f"parameter {key!r} is {value!r}, not a positive number of seconds")
        return seconds

    @property
    def dims(self) -> int:
        return self.record.embedding_dim

    @property
    def limits(self) -> TokenLimits:
        return TokenLimits(
            max_length=self.record.max_seq_length,
            max_tokens=self.integer(MAX_TOKENS_PARAMETER),
            vocab_size=self.record.vocab_size,
        )
