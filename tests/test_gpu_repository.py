"""The GPU model repositories (model_repository/tensorrt_gpu, torch_gpu) and
the tokenizer's GPU config, read with Triton's own config schema: their
`embedder` must fit the shared ensembles exactly as the ONNX embedder does,
the TensorRT engine behind tensorrt_gpu's `embedder` must take every request
that one admits, and its config must agree with the engine's declared
optimization profiles. Also the TensorRT export's answer where TensorRT is
absent, and, on a GPU, the engine itself. tests/test_tensorrt_wrapper.py
serves tensorrt_gpu's `embedder` for real, on CPU."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from server.paths import MODEL_REPOSITORY, ONNX_MODEL_DIR, REPO_ROOT, SHARED_REPOSITORY

TENSORRT_EMBEDDER = MODEL_REPOSITORY / "tensorrt_gpu" / "embedder"
TENSORRT_ENGINE = MODEL_REPOSITORY / "tensorrt_gpu" / "embedder_engine"
TORCH_EMBEDDER = MODEL_REPOSITORY / "torch_gpu" / "embedder"
ONNX_EMBEDDER = ONNX_MODEL_DIR.parent
EXPORT_TENSORRT = REPO_ROOT / "export" / "export_tensorrt.py"
ENSEMBLES = ("embed", "embed_tokens")
PROFILES = json.loads((REPO_ROOT / "export" / "tensorrt_profiles.json").read_text())


def _config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _io(config: model_config_pb2.ModelConfig) -> list[tuple[str, int, list[int]]]:
    """(name, data type, dims) of each input and output, in order."""
    tensors = [*config.input, *config.output]
    return [(tensor.name, tensor.data_type, list(tensor.dims)) for tensor in tensors]


def _embedder_tensor_names() -> set[str]:
    """The embedder tensors the shared ensembles map."""
    names: set[str] = set()
    for ensemble in ENSEMBLES:
        config = _config(SHARED_REPOSITORY / ensemble / "config.pbtxt")
        for step in config.ensemble_scheduling.step:
            if step.model_name == "embedder":
                names |= set(step.input_map) | set(step.output_map)
    return names


def _max_ensemble_batch() -> int:
    ensembles = [_config(SHARED_REPOSITORY / name / "config.pbtxt") for name in ENSEMBLES]
    return max(ensemble.max_batch_size for ensemble in ensembles)


@pytest.mark.parametrize("embedder", [TENSORRT_EMBEDDER, TORCH_EMBEDDER], ids=["tensorrt", "torch"])
def test_gpu_embedder_has_the_onnx_embedders_tensors(embedder: Path) -> None:
    config, onnx = _config(embedder / "config.pbtxt"), _config(ONNX_EMBEDDER / "config.pbtxt")
    assert _io(config) == _io(onnx)
    # A request as large as the ensembles take fits one execution.
    assert config.max_batch_size >= _max_ensemble_batch()
    assert {name for name, _, _ in _io(config)} == _embedder_tensor_names()
    assert len(config.instance_group) == 1 and config.instance_group[0].count >= 1
    # Same request queues and deadlines as the ONNX embedder: the first
    # stage of embed_tokens is where requests are admitted.
    assert config.dynamic_batching.priority_levels == onnx.dynamic_batching.priority_levels
    assert dict(config.dynamic_batching.priority_queue_policy) == dict(
        onnx.dynamic_batching.priority_queue_policy
    )
    # Same limit on tokens per request, checked in the embedder's model.py.
    key = "max_tokens_per_request"
    assert config.parameters[key].string_value == onnx.parameters[key].string_value
    assert config.backend == "python"
    assert all(tensor.allow_ragged_batch for tensor in config.input)


def test_torch_embedder_runs_on_gpu_instances() -> None:
    config = _config(TORCH_EMBEDDER / "config.pbtxt")
    assert [group.kind for group in config.instance_group] == [
        model_config_pb2.ModelInstanceGroup.KIND_GPU
    ]
    assert int(config.parameters["tokens_per_forward"].string_value) >= 1


def test_tensorrt_embedder_checks_on_cpu_in_front_of_the_engine() -> None:
    config = _config(TENSORRT_EMBEDDER / "config.pbtxt")
    # Host work only: the GPU belongs to the engine.
    assert [group.kind for group in config.instance_group] == [
        model_config_pb2.ModelInstanceGroup.KIND_CPU
    ]
    # Its model.py; the engine has its own folder beside it, where
    # export/export_tensorrt.py writes it.
    assert (TENSORRT_EMBEDDER / "1" / "model.py").is_file()
    assert not list((TENSORRT_EMBEDDER / "1").glob("*.plan"))


def test_tensorrt_engine_takes_every_request_the_embedder_admits() -> None:
    engine, embedder = (
        _config(TENSORRT_ENGINE / "config.pbtxt"),
        _config(TENSORRT_EMBEDDER / "config.pbtxt"),
    )
    # The embedder forwards each request on its own, unchanged.
    assert _io(engine) == _io(embedder)
    assert engine.max_batch_size >= embedder.max_batch_size >= _max_ensemble_batch()
    # Admission happened in the embedder's queue: a bound or deadline here
    # would fail admitted requests.
    batching = engine.dynamic_batching
    assert batching.priority_levels == 0 and not batching.priority_queue_policy
    assert not batching.HasField("default_queue_policy")


def test_tensorrt_engine_serves_the_plan_with_all_its_profiles() -> None:
    config = _config(TENSORRT_ENGINE / "config.pbtxt")
    assert config.platform == "tensorrt_plan" and not config.backend
    assert config.max_batch_size == PROFILES["max_batch_size"]
    assert [group.kind for group in config.instance_group] == [
        model_config_pb2.ModelInstanceGroup.KIND_GPU
    ]
    # Without the list Triton gives each instance profile 0 only.
    profile_ids = [str(index) for index in range(len(PROFILES["profiles"]))]
    assert list(config.instance_group[0].profile) == profile_ids
    # TensorRT runs dense tensors: no ragged batching.
    assert not any(tensor.allow_ragged_batch for tensor in config.input)


def test_tensorrt_preferred_batch_sizes_are_the_profiles_optimal_rows() -> None:
    config = _config(TENSORRT_ENGINE / "config.pbtxt")
    optimal_rows = sorted({profile["opt"][0] for profile in PROFILES["profiles"]})
    assert list(config.dynamic_batching.preferred_batch_size) == optimal_rows


def test_tensorrt_profiles_cover_every_batch_and_length_once() -> None:
    max_length = json.loads((ONNX_MODEL_DIR / "export.json").read_text())["max_seq_length"]
    lengths = []
    for profile in PROFILES["profiles"]:
        assert profile["min"][0] == 1 and profile["max"][0] == PROFILES["max_batch_size"]
        for axis in (0, 1):
            assert profile["min"][axis] <= profile["opt"][axis] <= profile["max"][axis]
        lengths.extend(range(profile["min"][1], profile["max"][1] + 1))
    assert sorted(lengths) == list(range(1, max_length + 1))


def test_tensorrt_export_without_tensorrt_says_where_it_runs() -> None:
    if importlib.util.find_spec("tensorrt") is not None:
        pytest.skip("TensorRT is installed here: the missing-TensorRT message cannot be seen")
    result = subprocess.run(
        [sys.executable, str(EXPORT_TENSORRT)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "TensorRT is not installed" in result.stderr
    assert "compose `export` service" in result.stderr


def _export_tensorrt(repository: Path, record: dict[str, object]) -> subprocess.CompletedProcess:
    """export_tensorrt.py on the exported ONNX file with `record` as its export.json."""
    onnx_dir = repository / "onnx_cpu" / "embedder" / "1"
    onnx_dir.mkdir(parents=True)
    (onnx_dir / "model.onnx").symlink_to(ONNX_MODEL_DIR / "model.onnx")
    (onnx_dir / "export.json").write_text(json.dumps(record))
    return subprocess.run(
        [sys.executable, str(EXPORT_TENSORRT), "--repository", str(repository)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_tensorrt_export_refuses_a_fused_graph(tmp_path: Path) -> None:
    result = _export_tensorrt(tmp_path, {"graph": "fused", "max_seq_length": 256})
    assert result.returncode != 0
    assert "'fused' graph" in result.stderr and "--graph plain" in result.stderr


def test_tensorrt_export_needs_the_limits_the_embedder_checks(tmp_path: Path) -> None:
    # An export.json from before vocab_size was recorded.
    result = _export_tensorrt(
        tmp_path, {"graph": "plain", "max_seq_length": 256, "embedding_dim": 384}
    )
    assert result.returncode != 0
    assert "lacks ['vocab_size']" in result.stderr and "export_onnx.py" in result.stderr


def _engine_record() -> dict[str, Any]:
    record = TENSORRT_ENGINE / "1" / "engine.json"
    if importlib.util.find_spec("tensorrt") is None or not record.exists():
        pytest.skip("needs TensorRT and a built engine (docker compose run --rm export)")
    return json.loads(record.read_text())


@pytest.mark.gpu
def test_built_engine_has_the_declared_profiles_and_tensors() -> None:
    record = _engine_record()
    import tensorrt

    assert record["tensorrt_version"] == tensorrt.__version__
    assert record["profiles"] == PROFILES["profiles"]
    # The limits tensorrt_gpu/embedder checks requests against are the export's.
    export = json.loads((ONNX_MODEL_DIR / "export.json").read_text())
    for key in ("vocab_size", "embedding_dim", "max_seq_length"):
        assert record[key] == export[key], key
    runtime = tensorrt.Runtime(tensorrt.Logger(tensorrt.Logger.WARNING))
    engine = runtime.deserialize_cuda_engine((TENSORRT_ENGINE / "1" / "model.plan").read_bytes())
    assert engine is not None, "the engine does not load on this GPU / TensorRT"
    assert engine.num_optimization_profiles == len(PROFILES["profiles"])
    names = {engine.get_tensor_name(index) for index in range(engine.num_io_tensors)}
    assert names == _embedder_tensor_names()
