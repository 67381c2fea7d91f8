"""Every Python stage checks, when it loads, the tensors its code reads and
writes against its config.pbtxt and, where it runs a graph, against the
graph's own (model_common.stage, model_common.stage_io): a renamed tensor, a
wrong data type or dims, or a graph that is not the stage's refuses the load
with a message naming the model, the tensor and both sides.

Each stage kind is loaded for real, from a copy of its folder whose config
renames one output, through Triton's repository API (explicit model
control) on a server started with an empty repository: the copies are
added after the start, so the launcher's watchdog leaves them alone. The
check is the first thing a stage does, so the copies need no export. The
graph checks load the scorer's code on the embedder's graph, under each
engine, as a wrong export would. The message grammar is checked without a
server on the shipped configs."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import onnxruntime as ort
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import json_format, text_format
from model_common.graph_tensors import onnxruntime_tensors
from model_common.stage_io import config_mismatch, graph_mismatch
from model_common.tensors import (
    ATTENTION_MASK,
    EMBEDDER_IO,
    INPUT_IDS,
    NORM,
    SCORE,
    TOKEN_TYPE_IDS,
    StageIO,
)
from tritonclient.grpc import model_config_pb2
from tritonclient.utils import InferenceServerException

from harness.repository import ConfigEdit, chained, edited, read_config, set_parameter
from harness.server import RunningServer, running_server
from server.paths import (
    EXPORT_PYTHON,
    MODEL_REPOSITORY,
    ONNX_MODEL_DIR,
    OPENVINO_MODEL_DIR,
)
from tests.test_torch_embedder import _on_cpu_in_the_export_env

# Each stage kind: its folder, and the output a copy's config renames.
STAGE_OUTPUTS = {
    "shared/tokenizer": "ATTENTION_MASK",
    "reranker/pair_tokenizer": "TOKEN_TYPE_IDS",
    "onnx_cpu/embedder": "NORM",
    "openvino_cpu/embedder": "EMBEDDING",
    "reranker/scorer": "SCORE",
    "sparse/encoder": "ACTIVATIONS",
    "multivector/tokenizer": "VECTOR_MASK",
    "multivector/pair_tokenizer": "QUERY_VECTOR_MASK",
    "multivector/encoder": "TOKEN_VECTORS",
    "multivector/maxsim": "SCORE",
    "multivector/muvera": "MUVERA_VECTORS",
    "m3/encoder": "SERVED_MASK",
    "tensorrt_gpu/embedder": "NORM",
    "torch_gpu/embedder": "EMBEDDING",
}
RENAMED = "_RENAMED"
SCORER = MODEL_REPOSITORY / "reranker" / "scorer"


def _config_json(config: model_config_pb2.ModelConfig) -> dict[str, object]:
    """The config as Triton passes it to initialize (enum names, int64s as strings)."""
    return json_format.MessageToDict(config, preserving_proto_field_name=True)


def _declaration(tensor: model_config_pb2.ModelOutput) -> str:
    return f"{model_config_pb2.DataType.Name(tensor.data_type)} {list(tensor.dims)}"


def renamed_message(model: str, config: model_config_pb2.ModelConfig, old: str) -> str:
    """What a stage must say when its config (the shipped one, `config`)
    names output `old` `old + RENAMED` instead: both sides of both names."""
    shipped = [tensor.name for tensor in config.output]
    declared = [name + RENAMED if name == old else name for name in shipped]
    (tensor,) = [tensor for tensor in config.output if tensor.name == old]
    new = old + RENAMED
    return (
        f"model '{model}': config.pbtxt does not match the stage's code: "
        f"output '{old}': the code writes {_declaration(tensor)}; config.pbtxt declares no "
        f"such output (its outputs: {', '.join(declared)}); "
        f"output '{new}': config.pbtxt declares {_declaration(tensor)}; "
        f"the code writes no such output (it writes {', '.join(shipped)})"
    )


def _rename_output(old: str) -> ConfigEdit:
    def edit(config: model_config_pb2.ModelConfig) -> None:
        (tensor,) = [tensor for tensor in config.output if tensor.name == old]
        tensor.name = old + RENAMED

    return edit


def _link_files(source: Path, target: Path) -> None:
    """`source`'s files linked into `target`, folders made real."""
    shutil.copytree(
        source,
        target,
        copy_function=lambda src, dst: Path(dst).symlink_to(Path(src).resolve()),
        ignore=shutil.ignore_patterns("__pycache__", "config.pbtxt"),
    )


def _add_model(repository: Path, name: str, source: Path, edit: ConfigEdit) -> None:
    """A copy of the model folder `source` as model `name`, its config
    through `edit`."""
    _link_files(source, repository / name)
    config = edited(source / "config.pbtxt", edit)
    (repository / name / "config.pbtxt").write_text(text_format.MessageToString(config))


@pytest.fixture(scope="module")
def repository(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("stage_contract") / "repository"


@pytest.fixture(scope="module")
def server(repository: Path) -> Iterator[RunningServer]:
    repository.mkdir()
    with running_server(repository.parent / "tritonserver.log", [repository]) as running:
        yield running


@pytest.fixture
def client(server: RunningServer) -> Iterator[grpcclient.InferenceServerClient]:
    with grpcclient.InferenceServerClient(server.grpc_url) as client:
        yield client


def _refused(client: grpcclient.InferenceServerClient, name: str) -> str:
    """The load error of model `name`, which must not be ready after it."""
    with pytest.raises(InferenceServerException) as caught:
        client.load_model(name)
    assert not client.is_model_ready(name)
    return caught.value.message()


@pytest.mark.parametrize("stage", list(STAGE_OUTPUTS))
def test_a_renamed_output_fails_the_load_naming_both_sides(
    client: grpcclient.InferenceServerClient, repository: Path, stage: str
) -> None:
    name = stage.replace("/", "_")
    old = STAGE_OUTPUTS[stage]
    edits: list[ConfigEdit] = [_rename_output(old)]
    if stage.startswith("torch_gpu"):
        if not EXPORT_PYTHON.exists():
            pytest.fail(f"{EXPORT_PYTHON} is missing; run scripts/setup.sh")
        edits.append(_on_cpu_in_the_export_env)
    source = MODEL_REPOSITORY / stage
    _add_model(repository, name, source, chained(*edits))
    message = _refused(client, name)
    assert renamed_message(name, read_config(source / "config.pbtxt"), old) in message, message


def _scorer_on_the_embedders_graph(
    repository: Path, name: str, graph_dir: Path, graph_files: tuple[str, ...], engine: str
) -> None:
    """The scorer's code and config on the embedder's graph and record (plus
    the inputs a scorer's record names), as an export that wrote the wrong
    graph would leave it."""
    _add_model(repository, name, SCORER, set_parameter("engine", engine))
    target = repository / name / "1"
    for file in graph_files:
        (target / file).symlink_to((graph_dir / file).resolve())
    record = json.loads((graph_dir / "export.json").read_text())
    record["inputs"] = [INPUT_IDS.graph_name, ATTENTION_MASK.graph_name]
    (target / "export.json").write_text(json.dumps(record))


@pytest.mark.parametrize(
    ("engine", "graph_dir", "graph_files"),
    [
        ("onnxruntime", ONNX_MODEL_DIR, ("model.onnx",)),
        ("openvino", OPENVINO_MODEL_DIR, ("model.xml", "model.bin")),
    ],
    ids=["onnxruntime", "openvino"],
)
def test_a_graph_without_the_stages_output_fails_the_load(
    client: grpcclient.InferenceServerClient,
    repository: Path,
    engine: str,
    graph_dir: Path,
    graph_files: tuple[str, ...],
) -> None:
    name = f"scorer_on_embedder_graph_{engine}"
    _scorer_on_the_embedders_graph(repository, name, graph_dir, graph_files, engine)
    message = _refused(client, name)
    graph_file = graph_files[0]
    expected = (
        f"model '{name}': {graph_file} does not match the stage: output '{SCORE.graph_name}': the "
        f"stage reads {SCORE.numpy_type}; {graph_file} gives no such output (its outputs: "
        "embedding, norm)"
    )
    assert expected in message, message


def _shipped(folder: str) -> dict[str, object]:
    return _config_json(read_config(MODEL_REPOSITORY / folder / "config.pbtxt"))


@pytest.mark.parametrize(
    "folder",
    ["onnx_cpu/embedder", "openvino_cpu/embedder", "tensorrt_gpu/embedder", "torch_gpu/embedder"],
)
def test_every_shipped_embedder_config_declares_the_embedders_tensors(folder: str) -> None:
    assert config_mismatch("embedder", _shipped(folder), EMBEDDER_IO) is None


def _int32_ids(config: model_config_pb2.ModelConfig) -> None:
    (tensor,) = [tensor for tensor in config.input if tensor.name == INPUT_IDS.name]
    tensor.data_type = model_config_pb2.TYPE_INT32


def _two_wide_norm(config: model_config_pb2.ModelConfig) -> None:
    (tensor,) = [tensor for tensor in config.output if tensor.name == NORM.name]
    tensor.dims[:] = [2]


def _unbatched(config: model_config_pb2.ModelConfig) -> None:
    config.max_batch_size = 0


@pytest.mark.parametrize(
    ("edit", "problem"),
    [
        (
            _int32_ids,
            "input 'INPUT_IDS': config.pbtxt declares TYPE_INT32 [-1]; the code reads "
            "TYPE_INT64 [-1]",
        ),
        (
            _two_wide_norm,
            "output 'NORM': config.pbtxt declares TYPE_FP32 [2]; the code writes TYPE_FP32 [1]",
        ),
        (
            _unbatched,
            "config.pbtxt declares max_batch_size 0; the code reads and writes rows of a batch "
            "(max_batch_size > 0)",
        ),
    ],
    ids=["data-type", "dims", "unbatched"],
)
def test_a_wrong_declaration_names_the_tensor_and_both_sides(
    edit: ConfigEdit, problem: str
) -> None:
    config = edited(MODEL_REPOSITORY / "onnx_cpu" / "embedder" / "config.pbtxt", edit)
    assert config_mismatch("embedder", _config_json(config), EMBEDDER_IO) == (
        f"model 'embedder': config.pbtxt does not match the stage's code: {problem}"
    )


def test_a_graph_that_takes_fewer_inputs_than_fed_names_each() -> None:
    """The embedder's graph under a stage that feeds it a pair's three inputs
    and reads a norm: it takes no token type ids."""
    session = ort.InferenceSession(
        str(ONNX_MODEL_DIR / "model.onnx"), providers=["CPUExecutionProvider"]
    )
    pair = StageIO(inputs=(INPUT_IDS, ATTENTION_MASK, TOKEN_TYPE_IDS), outputs=(NORM,))
    assert graph_mismatch(
        "scorer", "model.onnx", onnxruntime_tensors(session), pair.inputs, pair.outputs
    ) == (
        "model 'scorer': model.onnx does not match the stage: input 'token_type_ids': the stage "
        "feeds int64; model.onnx takes no such input (its inputs: input_ids, attention_mask)"
    )
