"""One served configuration of the GPU run: a real tritonserver with the
shared ensembles and the torch_gpu embedder on a random-weight BERT
(perf/gpu/models.py), its embeddings checked against sentence-transformers
on the same weights, then perf_analyzer sweeps of `embed` (and with the
`tokens` option `embed_tokens`) over gRPC (raw bytes out) at Triton's bulk
priority. Options also serve without the shipped CUDA graphs (`eager`) or
under NVIDIA MPS (`mps`); the embedder's load-time lines are read from the
server log.
"""

from __future__ import annotations

import json
import re
import shutil
from contextlib import ExitStack
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
import tritonclient.grpc as grpcclient
from tokenizers import Tokenizer
from tritonclient.grpc import model_config_pb2

from harness.priority import BULK
from harness.repository import (
    ConfigEdit,
    edited,
    read_config,
    repository_variant,
    set_parameter,
)
from harness.requests import text_inputs
from harness.server import RunningServer, running_server
from perf.gpu.embedder_code import packed_graphs
from perf.gpu.models import reference_embeddings
from perf.gpu.mps import mps_daemon
from perf.perf_analyzer import PerfAnalyzerError, run_perf_analyzer
from perf.process_cpu import cpu_per_request
from perf.workloads import Kind, workload, write_text_input_data, write_token_input_data
from server.paths import MODEL_REPOSITORY, SHARED_REPOSITORY

Device = Literal["cuda", "cpu"]
Option = Literal["eager", "tokens", "mps"]
EntryPoint = Literal["embed", "embed_tokens"]
OPTIONS: tuple[Option, ...] = ("eager", "tokens", "mps")
TORCH_EMBEDDER = MODEL_REPOSITORY / "torch_gpu" / "embedder"
SERVED_TOKENIZER_JSON = Path("tokenizer", "1", "tokenizer.json")  # in the served repository
# Texts per request: short texts in large requests, as indexing clients send
# them; long ones fewer, within the embedder's max_tokens_per_request.
TEXTS_PER_REQUEST: dict[Kind, int] = {"short": 32, "long": 8}
REQUESTS_PER_WORKLOAD = 64
CONCURRENCY = (4, 64, 15)  # perf_analyzer levels 4, 19, 34, 49, 64
MEASUREMENT_MS = 1500
# Edge cases beside plain prose: multilingual text, emoji, an empty and a
# whitespace-only text, and one far past the max length (truncated).
CHECK_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "Triton Inference Server batches requests dynamically.",
    "Café naïve façade: résumé of the jalapeño crème brûlée.",
    "東京は日本の首都です。",
    "🎉🚀 Launch day! 😀👍🏽",
    "",
    "   ",
    "How do I reset my password?",
    " ".join(f"Sentence {index} is about attention and padding." for index in range(120)),
)
# What the embedder logs at load (model_repository/torch_gpu/embedder/1/model.py),
# matched in the message part of Triton's log lines.
CAPTURE_LINE = re.compile(
    r"embedder: CUDA graphs for \(([\d, ]+)\) tokens captured in ([\d.]+) s, (\d+) MiB"
)
WARM_UP_LINE = re.compile(r"embedder: warm-up forward on (\S+) in ([\d.]+) s")


@dataclass(frozen=True)
class ServerSetup:
    shape: str
    embedder_instances: int
    tokenizer_instances: int
    rows: int  # the embedder's max_batch_size: rows per execution
    workloads: tuple[Kind, ...]
    options: tuple[Option, ...] = ()  # in OPTIONS' order

    @property
    def name(self) -> str:
        suffixes = "".join(f"-{option}" for option in self.options)
        return (
            f"{self.shape}-e{self.embedder_instances}-t{self.tokenizer_instances}-r{self.rows}"
            f"{suffixes}"
        )

    @property
    def entry_points(self) -> tuple[EntryPoint, ...]:
        return ("embed", "embed_tokens") if "tokens" in self.options else ("embed",)

    @classmethod
    def parse(cls, spec: str) -> ServerSetup:
        """`SHAPE:eN:tN:rN[:WORKLOADS[:OPTIONS]]`, e.g.
        `bert-base:e4:t8:r64:short,long:eager,tokens` (WORKLOADS may be empty)."""
        match = re.fullmatch(r"([\w-]+):e(\d+):t(\d+):r(\d+)(?::([\w,]*)(?::([\w,]+))?)?", spec)
        if match is None:
            raise ValueError(f"bad setup {spec!r}: want SHAPE:eN:tN:rN[:WORKLOADS[:OPTIONS]]")
        kinds = tuple(kind for kind in (match[5] or "").split(",") if kind)
        unknown = set(kinds) - set(TEXTS_PER_REQUEST)
        if unknown:
            raise ValueError(f"bad setup {spec!r}: unknown workloads {sorted(unknown)}")
        options = set((match[6] or "").split(",")) - {""}
        unknown = options - set(OPTIONS)
        if unknown:
            raise ValueError(
                f"bad setup {spec!r}: unknown options {sorted(unknown)}; "
                f"known: {', '.join(OPTIONS)}"
            )
        return cls(
            match[1],
            int(match[2]),
            int(match[3]),
            int(match[4]),
            kinds,  # type: ignore[arg-type]
            tuple(option for option in OPTIONS if option in options),
        )


def _embedder_config(setup: ServerSetup, device: Device) -> ConfigEdit:
    def edit(config: model_config_pb2.ModelConfig) -> None:
        (group,) = config.instance_group
        group.kind = (
            model_config_pb2.ModelInstanceGroup.KIND_GPU
            if device == "cuda"
            else model_config_pb2.ModelInstanceGroup.KIND_CPU
        )
        group.count = setup.embedder_instances
        config.max_batch_size = setup.rows
        if "eager" in setup.options:
            # The product's parameter name, imported here: packed_graphs imports
            # torch, which only the run's python has. set_parameter refuses a
            # config that does not declare it.
            set_parameter(packed_graphs().GRAPH_TOKENS_PARAMETER, "")(config)

    return edit


def _tokenizer_config(setup: ServerSetup) -> ConfigEdit:
    """The tokenizer config with `setup`'s instance count (the GPU
    deployments' --tokenizer-instances)."""

    def instances(config: model_config_pb2.ModelConfig) -> None:
        (group,) = config.instance_group
        group.count = setup.tokenizer_instances

    return instances


def _config_edits(setup: ServerSetup, device: Device) -> dict[str, ConfigEdit]:
    """The embedder's and the tokenizer's edits, each where it changes the
    shipped config: one that changes nothing (the shipped GPU setup itself)
    repository_variant refuses."""
    edits = {
        "embedder": (TORCH_EMBEDDER / "config.pbtxt", _embedder_config(setup, device)),
        "tokenizer": (SHARED_REPOSITORY / "tokenizer" / "config.pbtxt", _tokenizer_config(setup)),
    }
    return {
        model: edit
        for model, (shipped, edit) in edits.items()
        if edited(shipped, edit) != read_config(shipped)
    }


def _replace_link(path: Path, content: str) -> None:
    """Writes a file of the variant's own in place of a link to the source
    repository's (absent where the export never ran, as on a GPU machine)."""
    path.unlink(missing_ok=True)
    path.write_text(content)


def serving_repository(
    setup: ServerSetup, model_dir: Path, max_length: int, device: Device, workdir: Path
) -> Path:
    """The shared ensembles with the torch_gpu embedder as `setup` sets
    them, serving `model_dir` at `max_length` tokens, in `workdir`."""
    repository = repository_variant(
        workdir / "repository",
        _config_edits(setup, device),
        (SHARED_REPOSITORY, TORCH_EMBEDDER.parent),
    )
    tokenizer_json = repository / SERVED_TOKENIZER_JSON
    tokenizer = json.loads(tokenizer_json.read_text())
    tokenizer["truncation"]["max_length"] = max_length
    _replace_link(tokenizer_json, json.dumps(tokenizer))
    # The export record both models read (model_common.record), for this
    # model instead of the exported default.
    config = json.loads((model_dir / "config.json").read_text())
    record = json.dumps(
        {
            "model_dir": str(model_dir),
            "pooling": "mean",
            "embedding_dim": config["hidden_size"],
            "max_seq_length": max_length,
            "vocab_size": config["vocab_size"],
        }
    )
    for model in ("embedder", "tokenizer"):
        _replace_link(repository / model / "1" / "export.json", record)
    return repository


def served_embeddings(grpc_url: str, texts: list[str]) -> np.ndarray:
    client = grpcclient.InferenceServerClient(grpc_url)
    rows = client.infer("embed", text_inputs(grpcclient, texts)).as_numpy("EMBEDDING")
    return np.frombuffer(rows.tobytes(), "<f4").reshape(len(texts), -1)


def check(
    server: RunningServer, model_dir: Path, max_length: int, device: Device
) -> dict[str, Any]:
    """Cosine of each served embedding to sentence-transformers' float32 one."""
    texts = list(CHECK_TEXTS)
    served = served_embeddings(server.grpc_url, texts)
    reference = reference_embeddings(model_dir, texts, max_length, device)
    cosines = np.sum(served * reference, axis=1) / (
        np.linalg.norm(served, axis=1) * np.linalg.norm(reference, axis=1)
    )
    return {"texts": len(texts), "min_cosine": float(cosines.min()), "cosines": cosines.tolist()}


def served_tokenizer(tokenizer_json: Path) -> Tokenizer:
    """The served tokenizer (it truncates at the run's max length, where the
    packaged one would cut the long texts at MiniLM's 256), unpadded."""
    tokenizer = Tokenizer.from_file(str(tokenizer_json))
    tokenizer.no_padding()
    return tokenizer


def sweep(
    server: RunningServer, kind: Kind, model: EntryPoint, tokenizer_json: Path, folder: Path
) -> dict[str, Any]:
    """perf_analyzer at each concurrency level for one workload through one
    entry point (texts in, or ids by `tokenizer_json` in), one run per
    level: a level that fails (no stable measurement, request errors) is
    recorded with its message and the other levels still count."""
    load = workload(kind, TEXTS_PER_REQUEST[kind], REQUESTS_PER_WORKLOAD)
    folder.mkdir(parents=True, exist_ok=True)
    input_data = (
        write_text_input_data(load, folder / f"{load.name}-text.json")
        if model == "embed"
        else write_token_input_data(
            load, folder / f"{load.name}-tokens.json", served_tokenizer(tokenizer_json)
        )
    )
    result: dict[str, Any] = {
        "model": model,
        "workload": load.name,
        "texts_per_request": load.texts_per_request,
        # The run's max length (512) truncates none of these texts.
        "mean_tokens": load.mean_untruncated_tokens,
        "measurements": [],
        "errors": [],
    }
    start, end, step = CONCURRENCY
    for level in range(start, end + 1, step):
        try:
            with cpu_per_request(server, model) as cpu:
                (measurement,) = run_perf_analyzer(
                    model,
                    server.grpc_url,
                    "grpc",
                    input_data,
                    folder / f"{model}-{load.name}-c{level}.csv",
                    batch_size=load.texts_per_request,
                    concurrency=(level, level, 1),
                    measurement_ms=MEASUREMENT_MS,
                    max_trials=6,
                    metrics_url=f"http://{server.endpoints.metrics_address}/metrics",
                    priority=BULK,
                )
        except PerfAnalyzerError as error:
            result["errors"].append({"concurrency": level, "error": str(error)[-1500:]})
            continue
        # What each process spends per request there: where the host's
        # CPU goes around the GPU (tritonserver, the stages' stubs, the client).
        result["measurements"].append(
            {**asdict(measurement), "cpu_us_per_request": cpu[0].microseconds()}
        )
    return result


def loading_lines(log: str) -> dict[str, list[dict[str, Any]]]:
    """The embedder instances' load-time lines in a server log, one entry
    per instance each, in log order: the warm-up forward (every instance)
    and the CUDA-graph capture (GPU instances with graphs, as shipped); none: empty."""
    return {
        "warm_up": [
            {"device": match[1], "seconds": float(match[2])} for match in WARM_UP_LINE.finditer(log)
        ],
        "capture": [
            {
                "buckets": [int(bucket) for bucket in re.findall(r"\d+", match[1])],
                "seconds": float(match[2]),
                "mib": int(match[3]),
            }
            for match in CAPTURE_LINE.finditer(log)
        ],
    }


def serve_and_measure(
    setup: ServerSetup,
    model_dir: Path,
    max_length: int,
    device: Device,
    workdir: Path,
    stub_python: Path | None = None,
) -> dict[str, Any]:
    """Starts the server for `setup` (its Python-backend stubs in the
    environment of `stub_python`, default this one; under MPS with the
    `mps` option), checks it, sweeps its workloads through its entry
    points, then reads the embedder's load-time lines from its log."""
    if workdir.exists():
        shutil.rmtree(workdir)
    workdir.mkdir(parents=True)
    repository = serving_repository(setup, model_dir, max_length, device, workdir)
    result: dict[str, Any] = {"setup": asdict(setup), "name": setup.name, "device": device}
    log = workdir / "tritonserver.log"
    with ExitStack() as stack:
        if "mps" in setup.options:
            stack.enter_context(mps_daemon(workdir / "mps"))
            result["mps"] = True
        server = stack.enter_context(running_server(log, [repository], python=stub_python))
        result["check"] = check(server, model_dir, max_length, device)
        result["sweeps"] = [
            sweep(
                server, kind, model, repository / SERVED_TOKENIZER_JSON, workdir / "perf_analyzer"
            )
            for kind in setup.workloads
            for model in setup.entry_points
        ]
    result["loading"] = loading_lines(log.read_text())
    return result
