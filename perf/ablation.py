"""The ablation: from a naive embedding server to the shipped ensemble, one
change per step, each served by a real tritonserver and measured with
perf_analyzer on the same texts, one step after the other in one run.

  (a) naive: one Python model tokenizes, runs ONNX Runtime on all cores and
      answers JSON float lists; clients over HTTP
  (b) + raw little-endian bytes from the C++ serializer, over gRPC
  (c) + the tokenizer as its own ensemble stage (embedder: 1 instance, all cores)
  (d) + 2 embedder instances with one intra-op thread each (shipped `embed`)
  (e) + client-side tokenization (`embed_tokens`)

Steps (b)-(e) are sent at Triton's bulk priority level, whose queues wait
instead of shedding after 1-2 s; the naive model of (a) and (b) has one
queue without a deadline, the same.
"""

from __future__ import annotations

import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tritonclient.grpc import model_config_pb2

from harness.priority import BULK
from harness.repository import ConfigEdit, chained, repository_variant, set_parameter
from harness.server import running_server
from perf.perf_analyzer import Measurement, PerfAnalyzerError, run_perf_analyzer
from perf.sweep import Windows
from perf.workloads import Workload, write_text_input_data, write_token_input_data
from server.paths import (
    ONNX_MODEL_DIR,
    ONNX_RUNTIME_REPOSITORIES,
    SHARED_REPOSITORY,
    TOKENIZER_JSON,
)

ABLATION_REPOSITORY = Path(__file__).resolve().parent / "ablation_repository"
NAIVE_MODELS = ("naive_json", "naive_float", "naive_bytes")


@dataclass(frozen=True)
class Step:
    key: str
    change: str
    repository: str  # which server: "naive", "one_instance" or "shipped"
    model: str
    protocol: Literal["grpc", "http"]
    client_tokenizes: bool


STEPS = (
    Step(
        "a",
        "naive: one Python model (tokenize, ONNX Runtime on all cores, JSON float lists), HTTP",
        "naive",
        "naive_json",
        "http",
        False,
    ),
    Step(
        "b",
        "+ raw little-endian bytes (C++ serializer), gRPC",
        "naive",
        "naive_bytes",
        "grpc",
        False,
    ),
    Step(
        "c",
        "+ tokenizer as its own stage (embedder: 1 instance, all cores)",
        "one_instance",
        "embed",
        "grpc",
        False,
    ),
    Step(
        "d",
        "+ 2 embedder instances x 1 intra-op thread (shipped `embed`)",
        "shipped",
        "embed",
        "grpc",
        False,
    ),
    Step(
        "e",
        "+ client-side tokenization (`embed_tokens`)",
        "shipped",
        "embed_tokens",
        "grpc",
        True,
    ),
)


@dataclass(frozen=True)
class AblationRow:
    step: Step
    workload: Workload
    measurement: Measurement | None  # None: perf_analyzer failed, see `error`
    error: str = ""


def naive_repository(target: Path) -> Path:
    """The naive models and the serializer, with the exported graph and
    tokenizer linked beside the naive model's code."""
    for source in (
        SHARED_REPOSITORY / "serializer",
        *(ABLATION_REPOSITORY / m for m in NAIVE_MODELS),
    ):
        shutil.copytree(source, target / source.name, symlinks=True)
    for model in ("naive_json", "naive_float"):
        for exported in (ONNX_MODEL_DIR / "model.onnx", TOKENIZER_JSON):
            (target / model / "1" / exported.name).symlink_to(exported.resolve())
    return target


def _one_instance(config: model_config_pb2.ModelConfig) -> None:
    """Step (c) is step (d), the shipped 2 CPU instances, on one instance."""
    groups = [(group.kind, group.count) for group in config.instance_group]
    if groups != [(model_config_pb2.ModelInstanceGroup.KIND_CPU, 2)]:
        raise ValueError(f"the embedder config no longer declares 2 CPU instances: {groups}")
    config.instance_group[0].count = 1


def one_instance_all_cores(cores: int) -> ConfigEdit:
    return chained(_one_instance, set_parameter("intra_op_num_threads", str(cores)))


def step_repositories(workdir: Path, cores: int) -> dict[str, Sequence[Path]]:
    return {
        "naive": [naive_repository(workdir / "naive")],
        "one_instance": [
            repository_variant(
                workdir / "one_instance",
                {"embedder": one_instance_all_cores(cores)},
                ONNX_RUNTIME_REPOSITORIES,
            )
        ],
        "shipped": ONNX_RUNTIME_REPOSITORIES,
    }


def run_ablation(
    workdir: Path,
    results: Path,
    workloads: Sequence[Workload],
    concurrency: Mapping[str, int],
    cores: int,
    windows: Mapping[str, Windows],
) -> list[AblationRow]:
    """Every step on every workload; `concurrency` and measurement `windows`
    per workload kind. Writes perf_analyzer's CSV of each cell under `results`."""
    repositories = step_repositories(workdir, cores)
    rows = []
    for name, paths in repositories.items():
        steps = [step for step in STEPS if step.repository == name]
        with running_server(workdir / f"{name}.log", paths) as server:
            for step in steps:
                for workload in workloads:
                    tag = f"{step.key}_{workload.kind}_{workload.texts_per_request}"
                    input_data = workdir / f"{tag}.json"
                    if step.client_tokenizes:
                        write_token_input_data(workload, input_data)
                    else:
                        write_text_input_data(workload, input_data)
                    level = concurrency[workload.kind]
                    window = windows[workload.kind]
                    try:
                        (measurement,) = run_perf_analyzer(
                            step.model,
                            server.http_url if step.protocol == "http" else server.grpc_url,
                            step.protocol,
                            input_data,
                            results / f"ablation_{tag}.csv",
                            batch_size=workload.texts_per_request,
                            concurrency=(level, level, 1),
                            measurement_ms=window.measurement_ms,
                            measurement_requests=window.measurement_requests,
                            stability_percentage=window.stability_percentage,
                            max_trials=window.max_trials,
                            priority=BULK if step.protocol == "grpc" else None,
                        )
                    except PerfAnalyzerError as error:
                        # One failed cell is reported, not allowed to void the run.
                        rows.append(AblationRow(step, workload, None, str(error)))
                        continue
                    rows.append(AblationRow(step, workload, measurement))
    order = {step.key: index for index, step in enumerate(STEPS)}
    return sorted(rows, key=lambda row: (row.workload.kind, order[row.step.key]))


def ablation_table(rows: Sequence[AblationRow]) -> str:
    lines = [
        "| input | step | sentences/s | tokens/s | p50 ms | p99 ms | vs (a) |",
        "|---|---|---|---|---|---|---|",
    ]
    baseline: dict[str, float] = {}
    for row in rows:
        kind = row.workload.kind
        cell = f"| {kind} ({row.workload.texts_per_request} texts/request) | ({row.step.key}) "
        cell += f"{row.step.change} |"
        m = row.measurement
        if m is None:
            lines.append(f"{cell} failed: {row.error.splitlines()[0]} | | | | |")
            continue
        if row.step.key == "a":
            baseline[kind] = m.sentences_per_sec
        # Without a measured step (a) there is nothing to compare with.
        ratio = f"{m.sentences_per_sec / baseline[kind]:.2f}x" if kind in baseline else ""
        lines.append(
            f"{cell} {m.sentences_per_sec:.1f} | {m.tokens_per_sec(row.workload.mean_tokens):.0f}"
            f" | {m.p50_ms:.0f} | {m.p99_ms:.0f} | {ratio} |"
        )
    return "\n".join(lines) + "\n"
