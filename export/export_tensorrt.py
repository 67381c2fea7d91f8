"""Build the FP16 TensorRT engine of the embedder from its ONNX export.

    python export/export_tensorrt.py [--repository model_repository]

Reads   <repository>/onnx_cpu/embedder/1/model.onnx and export.json (written by
        export/export_onnx.py) and export/tensorrt_profiles.json;
writes  <repository>/tensorrt_gpu/embedder_engine/1/model.plan and, beside it,
        engine.json: TensorRT version, GPU name and compute capability,
        profiles, the ONNX file's SHA-256, and the export record's limits
        (vocab_size, embedding_dim, max_seq_length), which the Python model
        tensorrt_gpu/embedder checks every request against before the engine
        sees it.

An engine runs only on the GPU architecture and TensorRT version it was built
with, so it is built where it is served: in the `export` service of
docker-compose.yml, whose NGC TensorRT image carries the same TensorRT as the
Triton image. A second run with the same ONNX file, profiles, GPU and TensorRT
keeps the engine it finds. Without TensorRT (`import tensorrt` fails) the
script stops and says so.

The engine's tensors take the names the shared ensembles use (INPUT_IDS,
ATTENTION_MASK -> EMBEDDING, NORM), renamed from the ONNX graph's; inputs are
int64 [rows, tokens], outputs float32; layer norms and reductions stay float32.
"""

from __future__ import annotations

import argparse
import ctypes
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
PROFILES_FILE = Path(__file__).resolve().parent / "tensorrt_profiles.json"

# ONNX graph names (export/export_onnx.py) -> the names the ensembles use.
TENSOR_NAMES = {
    "input_ids": "INPUT_IDS",
    "attention_mask": "ATTENTION_MASK",
    "embedding": "EMBEDDING",
    "norm": "NORM",
}
WORKSPACE_BYTES = 4 << 30
# The export record's fields that engine.json carries for tensorrt_gpu/embedder.
RECORD_LIMITS = ("vocab_size", "embedding_dim", "max_seq_length")

NO_TENSORRT = (
    "TensorRT is not installed here (import tensorrt failed). The engine is built "
    "on the GPU that serves it, in the compose `export` service: "
    "`docker compose run --rm export` (or `docker compose --profile gpu up`, which runs it first)."
)

# CUdevice_attribute values from the CUDA driver API (cuda.h).
_CC_MAJOR = 75
_CC_MINOR = 76


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--repository",
        type=Path,
        default=REPO_ROOT / "model_repository",
        help="model repository root holding onnx_cpu/ and tensorrt_gpu/ (default: %(default)s)",
    )
    return parser.parse_args(argv)


def import_tensorrt() -> ModuleType:
    """Imports tensorrt, or stops with where this script runs."""
    try:
        import tensorrt
    except ModuleNotFoundError:
        raise SystemExit(NO_TENSORRT) from None
    return tensorrt


def read_profiles(max_seq_length: int) -> dict[str, Any]:
    """Reads tensorrt_profiles.json and checks that it covers every length up
    to the model's max_seq_length and every batch up to max_batch_size."""
    declared: dict[str, Any] = json.loads(PROFILES_FILE.read_text())
    profiles = declared["profiles"]
    for profile in profiles:
        if not all(
            profile["min"][axis] <= profile["opt"][axis] <= profile["max"][axis] for axis in (0, 1)
        ):
            raise SystemExit(f"{PROFILES_FILE}: profile {profile['name']} needs min <= opt <= max")
        if profile["min"][0] != 1 or profile["max"][0] != declared["max_batch_size"]:
            raise SystemExit(
                f"{PROFILES_FILE}: profile {profile['name']} must take 1..max_batch_size rows"
            )
    lengths = sorted((profile["min"][1], profile["max"][1]) for profile in profiles)
    covered = 0
    for low, high in lengths:
        if low > covered + 1:
            break
        covered = max(covered, high)
    if covered != max_seq_length:
        raise SystemExit(
            f"{PROFILES_FILE}: the profiles cover token lengths 1..{covered} without a gap, "
            f"the model takes 1..{max_seq_length}"
        )
    return declared


def gpu_identity() -> dict[str, str]:
    """Name and compute capability of GPU 0, from the CUDA driver."""
    cuda = ctypes.CDLL("libcuda.so.1")

    def check(result: int, call: str) -> None:
        if result != 0:
            raise SystemExit(f"CUDA driver call {call} failed with error {result}")

    check(cuda.cuInit(0), "cuInit")
    device = ctypes.c_int()
    check(cuda.cuDeviceGet(ctypes.byref(device), 0), "cuDeviceGet")
    name = ctypes.create_string_buffer(256)
    check(cuda.cuDeviceGetName(name, len(name), device), "cuDeviceGetName")
    major, minor = ctypes.c_int(), ctypes.c_int()
    check(cuda.cuDeviceGetAttribute(ctypes.byref(major), _CC_MAJOR, device), "cuDeviceGetAttribute")
    check(cuda.cuDeviceGetAttribute(ctypes.byref(minor), _CC_MINOR, device), "cuDeviceGetAttribute")
    return {"gpu_name": name.value.decode(), "compute_capability": f"{major.value}.{minor.value}"}


def parse_onnx(trt: ModuleType, builder: Any, onnx_path: Path) -> Any:
    """Parses the ONNX file into a network whose I/O tensors carry the ensemble's names."""
    network = builder.create_network(0)
    parser = trt.OnnxParser(network, trt.Logger(trt.Logger.WARNING))
    if not parser.parse_from_file(str(onnx_path)):
        errors = [str(parser.get_error(index)) for index in range(parser.num_errors)]
        raise SystemExit(f"TensorRT could not parse {onnx_path}: {errors}")
    tensors = [network.get_input(i) for i in range(network.num_inputs)] + [
        network.get_output(i) for i in range(network.num_outputs)
    ]
    found = sorted(tensor.name for tensor in tensors)
    if found != sorted(TENSOR_NAMES):
        raise SystemExit(f"{onnx_path}: expected tensors {sorted(TENSOR_NAMES)}, found {found}")
    for tensor in tensors:
        tensor.name = TENSOR_NAMES[tensor.name]
    # FP16 everywhere except where its range or precision hurts: the layer
    # norms (variance of 384-768 values) and the reductions of the pooling and
    # the final norm.
    for index in range(network.num_layers):
        layer = network.get_layer(index)
        if layer.type in (trt.LayerType.NORMALIZATION, trt.LayerType.REDUCE):
            layer.precision = trt.float32
    return network


def builder_config(trt: ModuleType, builder: Any, profiles: list[dict[str, Any]]) -> Any:
    """FP16 with float32 where the network asks for it, one optimization
    profile per declared range, the same shapes for both inputs."""
    config = builder.create_builder_config()
    config.set_flag(trt.BuilderFlag.FP16)
    config.set_flag(trt.BuilderFlag.PREFER_PRECISION_CONSTRAINTS)
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, WORKSPACE_BYTES)
    for declared in profiles:
        profile = builder.create_optimization_profile()
        for name in ("INPUT_IDS", "ATTENTION_MASK"):
            profile.set_shape(name, declared["min"], declared["opt"], declared["max"])
        config.add_optimization_profile(profile)
    return config


def write_atomically(target: Path, data: bytes) -> None:
    """Writes target through a temporary file in its directory and os.replace."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.")
    try:
        with os.fdopen(handle, "wb") as temp:
            temp.write(data)
        # mkstemp creates the file 0600; the server may run as another user.
        os.chmod(temp_name, 0o644)
        os.replace(temp_name, target)
    except BaseException:
        Path(temp_name).unlink(missing_ok=True)
        raise


def main(argv: Sequence[str] | None = None) -> None:
    """Builds the engine unless an up-to-date one is already there."""
    args = parse_args(argv)
    repository = args.repository.resolve()
    onnx_dir = repository / "onnx_cpu" / "embedder" / "1"
    onnx_path = onnx_dir / "model.onnx"
    if not onnx_path.exists():
        raise SystemExit(f"{onnx_path} is missing; export the model first (export/export_onnx.py)")
    export_info = json.loads((onnx_dir / "export.json").read_text())
    # Fused and int8 graphs hold ONNX Runtime's own com.microsoft operators, which
    # TensorRT's ONNX parser does not know. Exports made before `--graph` are plain.
    graph = export_info.get("graph", "plain")
    if graph != "plain":
        raise SystemExit(
            f"{onnx_path} is the {graph!r} graph; TensorRT builds from the plain one: "
            "run export/export_onnx.py --graph plain first"
        )
    missing = [key for key in RECORD_LIMITS if key not in export_info]
    if missing:
        raise SystemExit(
            f"{onnx_dir / 'export.json'} lacks {missing}; export the model again "
            "(export/export_onnx.py)"
        )
    trt = import_tensorrt()
    declared = read_profiles(export_info["max_seq_length"])

    record = {
        "tensorrt_version": trt.__version__,
        **gpu_identity(),
        "precision": "fp16",
        "onnx_sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
        "max_batch_size": declared["max_batch_size"],
        "profiles": declared["profiles"],
        "inputs": ["INPUT_IDS", "ATTENTION_MASK"],
        "outputs": ["EMBEDDING", "NORM"],
        **{key: export_info[key] for key in RECORD_LIMITS},
    }
    engine_dir = repository / "tensorrt_gpu" / "embedder_engine" / "1"
    plan_path, record_path = engine_dir / "model.plan", engine_dir / "engine.json"
    if plan_path.exists() and record_path.exists():
        if json.loads(record_path.read_text()) == record:
            print(f"{plan_path} is up to date ({record['gpu_name']}, TensorRT {trt.__version__})")
            return

    builder = trt.Builder(trt.Logger(trt.Logger.WARNING))
    network = parse_onnx(trt, builder, onnx_path)
    engine = builder.build_serialized_network(
        network, builder_config(trt, builder, declared["profiles"])
    )
    if engine is None:
        raise SystemExit("TensorRT failed to build the engine; its log above says why")
    write_atomically(plan_path, bytes(engine))
    write_atomically(record_path, (json.dumps(record, indent=2) + "\n").encode())
    print(
        f"built {plan_path} for {record['gpu_name']} (compute capability "
        f"{record['compute_capability']}, TensorRT {trt.__version__}), "
        f"profiles {[profile['name'] for profile in declared['profiles']]}"
    )


if __name__ == "__main__":
    main()
