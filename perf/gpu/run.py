"""The GPU run (`scripts/gpu_kit.sh run` on the GPU machine, from the
unpacked kit, with that machine's python3): builds the random-weight models,
measures the encoder in process, serves each setup on a real tritonserver
and sweeps it, and writes into --out: results.json (rewritten after every
step, so a run cut short keeps what it measured), report.md, and logs.tar.gz
(server logs, perf_analyzer logs and CSVs).

    python3 -m perf.gpu.run --out DIR [--in-process] [--serve SPEC ...] [--default-setups]

Without any of those it runs everything, which takes longer than one
10-minute call: a lease runs `--in-process` in one call and
`--default-setups` in the next (docs/gpu.md), and perf.gpu.report merges
their results.json files. `--device cpu` runs on CPU at a small scale (the
test suite runs the kit that way): CPU instances, no compiling or capture.
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
from perf.gpu.variants import VARIANTS
from server.paths import REPO_ROOT, TOKENIZER_JSON

# The served part of a lease, most important first (a call stopped at its
# limit keeps the setups it finished): the shipped setup (CUDA graphs)
# through both entry points, then without graphs, then 2 instances, then
# MPS, then MiniLM.
DEFAULT_SETUPS = (
    "bert-base:e4:t8:r256:short,long:tokens",
    "bert-base:e4:t8:r256:short,long:eager",
    "bert-base:e2:t8:r256:short,long",
    "bert-base:e4:t8:r256:short:mps",
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
        "--variants",
        default=",".join(VARIANTS),
        help=f"in-process encoder variants, comma-separated, from {', '.join(VARIANTS)}",
    )
    parser.add_argument(
        "--shapes",
        default="bert-base",
        help=f"in-process model shapes, comma-separated, from {', '.join(SHAPES)}",
    )
    parser.add_argument(
        "--serve",
        action="append",
        type=ServerSetup.parse,
        help="SHAPE:eN:tN:rN[:WORKLOADS[:OPTIONS]] (embedder instances, tokenizer instances, "
        "rows per execute, short/long, eager/tokens/mps); repeat for several",
    )
    parser.add_argument(
        "--default-setups",
        action="store_true",
        help="serve DEFAULT_SETUPS (the served part of a lease) after any --serve",
    )
    parser.add_argument(
        "--stub-python",
        type=Path,
        help="a python whose environment the Python-backend stubs use (default: this one)",
    )
    parser.add_argument("--workdir", type=Path, help="default: a new temporary folder")
    args = parser.parse_args(argv)
    variants, shapes = args.variants.split(","), args.shapes.split(",")
    for names, known in ((variants, VARIANTS), (shapes, SHAPES)):
        unknown = sorted(set(names) - set(known))
        if unknown:
            parser.error(f"unknown {unknown}: known are {', '.join(known)}")
    everything = not (args.in_process or args.serve or args.default_setups)
    setups: list[ServerSetup] = (args.serve or []) + (
        [ServerSetup.parse(spec) for spec in DEFAULT_SETUPS]
        if everything or args.default_setups
        else []
    )
    if args.device == "cpu" and everything:
        parser.error("--device cpu runs only what --in-process or --serve names")
    in_process = args.in_process or everything
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="gpu_run_"))
    results = Results(args.out.resolve(), workdir, args.device)

    model_dirs = {}
    for shape in sorted({setup.shape for setup in setups} | (set(shapes) if in_process else set())):
        model_dirs[shape] = write_random_bert(
            SHAPES[shape], workdir / "models" / shape, TOKENIZER_JSON, SEED
        )
    if in_process:
        measure_in_process(results, args.device, shapes, variants, model_dirs)
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


def measure_in_process(
    results: Results,
    device: Device,
    shapes: list[str],
    variants: list[str],
    model_dirs: dict[str, Path],
) -> None:
    """Each shape's variants, one step each, with its token budgets and, on
    a GPU, the padding comparison right after the first variant (the
    shipped one, by default): the later variants' compiles, max-autotune's
    above all, may run a call to its limit. results.data["in_process"]
    grows as the steps end."""
    import torch

    from perf.gpu.inprocess import InProcess

    measured = None
    with results.step("in-process set-up"):
        measured = InProcess(torch.device(device))
        results.data["in_process"] = measured.result
    if measured is None:
        return
    for shape in shapes:
        for index, variant in enumerate(variants):
            with results.step(f"in-process {shape} {variant}"):
                record = measured.variant(variant, SHAPES[shape], model_dirs[shape], MAX_POSITIONS)
                print(f"  min cosine {record['min_cosine']:.6f}", flush=True)
            if index > 0:
                continue
            with results.step(f"in-process {shape} token budgets"):
                measured.budgets(SHAPES[shape], model_dirs[shape], MAX_POSITIONS)
            if device == "cuda":
                with results.step(f"in-process {shape} padding"):
                    measured.padding(SHAPES[shape], model_dirs[shape], MAX_POSITIONS)


if __name__ == "__main__":
    main()
