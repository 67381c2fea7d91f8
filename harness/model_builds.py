"""What every builder of random-weight test and benchmark models shares
(harness/family_models.py, cross_encoder_models.py, sparse_encoder_models.py,
rerank_bench_models.py): building the named ones offline, running that in the
export environment for callers without torch, and the module's command line

    .venv-export/bin/python -m harness.<builder> OUT_DIR [--model NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.export_environment import run_in_export_environment

# Writes one model's folder under the output folder and returns it.
Build = Callable[[Path], Path]


@dataclass(frozen=True)
class ModelBuilds:
    module: str  # the builder's module, as `python -m` runs it
    kind: str  # what the models are, for messages ("families", ...)
    builds: dict[str, Build]  # by name, in the order they are built
    option: str = "--model"  # the command line's name for one of them

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self.builds)

    def build(self, out_dir: Path, names: Sequence[str] | None = None) -> dict[str, Path]:
        """Builds the named models' folders under out_dir (all by default);
        returns name -> folder. Needs the export environment."""
        wanted = self.names if names is None else tuple(names)
        # Offline: nothing here needs the hub, and a lookup would only stall.
        os.environ["HF_HUB_OFFLINE"] = "1"
        from transformers.utils import logging as transformers_logging

        # The progress bars of loading would only fill the log.
        transformers_logging.disable_progress_bar()
        unknown = sorted(set(wanted) - set(self.names))
        if unknown:
            raise ValueError(f"unknown {self.kind} {unknown}; known: {list(self.names)}")
        out_dir.mkdir(parents=True, exist_ok=True)
        return {name: build(out_dir) for name, build in self.builds.items() if name in wanted}

    def build_in_export_environment(
        self, out_dir: Path, names: Sequence[str] | None = None
    ) -> dict[str, Path]:
        """`build` for callers without torch (the tests, perf/): run in the
        export environment, where it is."""
        wanted = self.names if names is None else tuple(names)
        arguments = [argument for name in wanted for argument in (self.option, name)]
        run_in_export_environment(["-m", self.module, str(out_dir), *arguments])
        return {name: out_dir / name for name in wanted}

    def main(self, description: str, argv: Sequence[str] | None = None) -> None:
        parser = argparse.ArgumentParser(description=description)
        parser.add_argument(
            "out_dir", type=Path, help="folder to write one subfolder per model into"
        )
        parser.add_argument(
            self.option, action="append", dest="names", choices=self.names, help="only these"
        )
        args = parser.parse_args(argv)
        folders = self.build(args.out_dir, args.names)
        print(json.dumps({name: str(path) for name, path in folders.items()}, indent=2))
