"""Which instances of a model are executing now, shared by the instances'
processes through flags in the folder the launcher gives a server run
(model_common.backlog's): one memory-mapped flag per instance, written only
by its own process.

An OpenVINO embedder splits an execute's rows across its streams to use the
cores another instance leaves idle; when every other instance is executing,
a split only adds threads on busy cores and runs smaller groups, which cost
more per text (perf/results/debian12-2core/served_path.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from types import TracebackType

from model_common.backlog import BACKLOG_DIR_VARIABLE, Count

# Beside the backlog counts' folders, which are named by models.
FOLDER = ".executing"


class Executing:
    """This instance's flag, set while an execute runs (a `with` block), and
    the flags of the model's other instances."""

    def __init__(self, model: str, instance: str) -> None:
        base = os.environ.get(BACKLOG_DIR_VARIABLE)
        if not base:
            raise ValueError(
                f"{BACKLOG_DIR_VARIABLE} is not set: start the server with server/launch.py, "
                "which gives its stages a folder there"
            )
        self._folder = Path(base) / FOLDER / model
        self._path = self._folder / instance
        self._own = Count(self._path)
        # A restarted stub's flag may be left set by the one it replaces.
        self._own.set(0)
        self._others: dict[Path, Count] = {}

    @classmethod
    def from_args(cls, args: Mapping[str, str]) -> Executing:
        """The flag of the instance Triton's initialize `args` name."""
        return cls(args["model_name"], args["model_instance_name"])

    def __enter__(self) -> Executing:
        self._own.set(1)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self._own.set(0)

    def every_other_busy(self) -> bool:
        """Whether the model has other instances and all of them are
        executing now. Instances load one after another, so the folder is
        read again for flags that appeared since."""
        for path in self._folder.iterdir():
            if path != self._path and path not in self._others:
                self._others[path] = Count(path)
        return bool(self._others) and all(flag.value != 0 for flag in self._others.values())
