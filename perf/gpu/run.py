"""The GPU run (`scripts/gpu_kit.sh run` on the GPU machine, from the
unpacked kit, with that machine's python3): builds the random-weight models,
measures the encoder in process, serves each setup on a real tritonserver
and sweeps it, and writes into --out: results.json (rewritten after every
step, so a run cut short keeps what it measured), report.md, and logs.tar.gz
(server logs, perf_analyzer logs and CSVs).

    python3 -m perf.gpu.run --out DIR [--in-process] [--serve SPEC ...]

Without --in-process or --serve it runs everything, which takes longer than
one 10-minute call: pass a part per call and merge the results.json files
with perf.gpu.report. `--device cpu` serves on CPU instances (the test suite
runs the kit that way, with --serve and no workloads).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tarfile
import tempfile
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from perf.gpu.models import MAX_POSITIONS, SHAPES, write_random_bert
from perf.gpu.pack import KIT_RECORD
from perf.gpu.report import headline, render
from perf.gpu.served import Device, ServerSetup, serve_and_measure
from server.paths import REPO_ROOT, TOKENIZER_JSON

# Around the shipped GPU setup (4 embedder instances, 8 tokenizer
# instances, 256 rows): what perf/results/h100/README.md leaves to measure.
DEFAULT_SETUPS = (
    "bert-base:e4:t8:r256:short,long",
    "bert-base:e2:t8:r256:short,long",
    "bert-base:e1:t8:r256:short,long",
    "bert-base:e4:t4:r256:short",
    "bert-base:e4:t2:r256:short",
    "minilm:e4:t8:r256:short,long",
)
SEED = 0


def environment(device: Device) -> dict[str, Any]:
    import torch

    record: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpu_cores": os.cpu_count(),
        "device": device,
        "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"),
    }
    kit = REPO_ROOT / KIT_RECORD
    if kit.is_file():
        record["kit"] = json.loads(kit.read_text())["commit"]
    if device == "cuda":
        record["gpu"] = torch.cuda.get_device_name()
        record["cuda"] = torch.version.cuda
        record["nvidia_smi"] = subprocess.run(
            [
                "nvidia-smi",
                "--query-gpu=name,driver_version,memory.total,clocks.max.sm,power.limit",
                "--format=csv,noheader",
            ],
            capture_output=True,
            text=True,
            check=False,
        ).stdout.strip()
    return record


class Results:
    """results.json, report.md and logs.tar.gz in `out`, rewritten as the
    run goes."""

    def __init__(self, out: Path, workdir: Path, device: Device) -> None:
        self.out = out
        self.workdir = workdir
        self.data: dict[str, Any] = {
            "environment": environment(device),
            "served": [],
            "errors": [],
        }

    @contextmanager
    def step(self, name: str) -> Iterator[None]:
        """Runs one step; a failure is recorded and the run goes on to the
        next step (a GPU lease is too short to lose the rest to one error).
        Saves after every step."""
        print(name, flush=True)
        started = time.monotonic()
        try:
            yield
        except Exception:
            self.data["errors"].append({"step": name, "error": traceback.format_exc()[-4000:]})
            print(f"  failed:\n{traceback.format_exc()}", flush=True)
        finally:
            print(f"  {time.monotonic() - started:.0f} s", flush=True)
            self.save()

    def save(self) -> None:
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "results.json").write_text(json.dumps(self.data, indent=1))
        (self.out / "report.md").write_text(render([("this run", self.data)]))
        with tarfile.open(self.out / "logs.tar.gz", "w:gz") as logs:
            for path in sorted(self.workdir.glob("served/*/**/*")):
                if path.is_file() and path.suffix in {".log", ".csv"}:
                    logs.add(path, arcname=str(path.relative_to(self.workdir)))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument("--in-process", action="store_true", help="measure the encoder alone")
    parser.add_argument(
        "--serve",
        action="append",
        type=ServerSetup.parse,
        help="SHAPE:eN:tN:rN[:short,long] (embedder instances, tokenizer instances, "
        "rows per execute, workloads); repeat for several",
    )
    parser.add_argument(
        "--stub-python",
        type=Path,
        help="a python whose environment the Python-backend stubs use (default: this one)",
    )
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder")
    args = parser.parse_args(argv)
    everything = not args.in_process and not args.serve
    setups: list[ServerSetup] = args.serve or (
        [ServerSetup.parse(spec) for spec in DEFAULT_SETUPS] if everything else []
    )
    if args.device == "cpu" and (args.in_process or everything):
        parser.error("--in-process needs --device cuda")
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpu_run_"))
    results = Results(args.out.resolve(), workdir, args.device)

    model_dirs = {}
    for shape in sorted(
        {setup.shape for setup in setups}
        | (set(SHAPES) if everything or args.in_process else set())
    ):
        model_dirs[shape] = write_random_bert(
            SHAPES[shape], workdir / "models" / shape, TOKENIZER_JSON, SEED
        )
    if args.in_process or everything:
        with results.step("in-process"):
            from perf.gpu.inprocess import measure

            results.data["in_process"] = measure(SHAPES, model_dirs, MAX_POSITIONS)
    for setup in setups:
        with results.step(f"served {setup.name} {','.join(setup.workloads)}"):
            started = time.monotonic()
            served = serve_and_measure(
                setup,
                model_dirs[setup.shape],
                MAX_POSITIONS,
                args.device,
                workdir / "served" / setup.name,
                args.stub_python,
            )
            served["seconds"] = round(time.monotonic() - started, 1)
            results.data["served"].append(served)
            print(f"  min cosine {served['check']['min_cosine']:.6f}", flush=True)
    results.save()
    sys.stdout.write(headline([("this run", results.data)]))
    if results.data["errors"]:
        sys.exit(f"{len(results.data['errors'])} step(s) failed: see errors in results.json")


if __name__ == "__main__":
    main()
