"""A sentence encoder over packed rows: the tokens of several texts back to
back, [tokens, hidden], with no padding anywhere, bounded by cumulative
sequence lengths (packed_attention.py), then pooled, passed through the
model's Dense modules and L2-normalized: the same two outputs as the
exported ONNX graph (export/export_onnx.py), embedding and norm.

It loads the HuggingFace checkpoint (config.json, model.safetensors) and
runs its own forward over that model's weights: embeddings, then per layer
query, key and value fused into one matrix product, attention, output
dense + residual + LayerNorm, intermediate + GELU, output dense + residual
+ LayerNorm. It serves the post-norm BERT-style families, BERT and
XLM-RoBERTa, and refuses other architectures at load. Without
transformers: the weights are all it needs, and the Triton stub's Python
need not import that library's dependencies.

On CUDA the two blocks around attention run through torch.compile; on CPU
everything runs eagerly, in float32, which is how the tests run it. No
Triton import: model.py serves it, the tests and the GPU kit run it alone.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch
from packed_attention import Attention, PackedRows, select_attention
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional

Pooling = Literal["mean", "cls", "lasttoken"]
# torch.compile's mode for the blocks on CUDA as the embedder serves them.
SERVED_COMPILE_MODE = "default"

FAMILIES = ("bert", "xlm-roberta")
# The config's hidden_act -> functional.gelu's approximation.
_GELU = {"gelu": "none", "gelu_new": "tanh", "gelu_pytorch_tanh": "tanh"}


def _add_norm(
    hidden: torch.Tensor, update: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float
) -> torch.Tensor:
    return functional.layer_norm(hidden + update, weight.shape, weight, bias, eps)


def attention_output(
    hidden: torch.Tensor,
    context: torch.Tensor,
    weights: tuple[torch.Tensor, ...],
    eps: float,
) -> torch.Tensor:
    """Output dense, residual, LayerNorm; weights: dense weight and bias,
    norm weight and bias."""
    dense_weight, dense_bias, norm_weight, norm_bias = weights
    return _add_norm(
        hidden, functional.linear(context, dense_weight, dense_bias), norm_weight, norm_bias, eps
    )


def feed_forward(
    hidden: torch.Tensor, weights: tuple[torch.Tensor, ...], eps: float, approximate: str
) -> torch.Tensor:
    """Intermediate dense, GELU, output dense, residual, LayerNorm; weights:
    the two denses' weights and biases, then the norm's."""
    inner_weight, inner_bias, outer_weight, outer_bias, norm_weight, norm_bias = weights
    activated = functional.gelu(
        functional.linear(hidden, inner_weight, inner_bias), approximate=approximate
    )
    update = functional.linear(activated, outer_weight, outer_bias)
    return _add_norm(hidden, update, norm_weight, norm_bias, eps)


@dataclass(frozen=True)
class Blocks:
    """The work around attention, eager or compiled. One pair of functions
    serves every layer (the layers' weights are arguments), so torch.compile
    builds one graph each, not one per layer."""

    attention_output: Callable[..., torch.Tensor]
    feed_forward: Callable[..., torch.Tensor]

    @classmethod
    def for_device(cls, device: torch.device, compile_mode: str | None) -> Blocks:
        """Compiled in torch.compile's `compile_mode` on CUDA, where fusing
        each block's bias, GELU, residual add and LayerNorm saves kernels;
        eager on CPU and where compile_mode is None."""
        if device.type != "cuda" or compile_mode is None:
            return cls(attention_output, feed_forward)
        # Dynamic shapes: the packed token count changes with every forward.
        return cls(
            torch.compile(attention_output, dynamic=True, mode=compile_mode),
            torch.compile(feed_forward, dynamic=True, mode=compile_mode),
        )


@dataclass(frozen=True)
class EncoderShape:
    """The parts of a BERT or XLM-RoBERTa config.json the encoder needs."""

    model_type: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    layer_norm_eps: float
    approximate: str  # functional.gelu's approximation for hidden_act
    # XLM-RoBERTa numbers positions from padding_id + 1; BERT from 0 (None).
    padding_id: int | None

    @classmethod
    def read(cls, config_path: Path) -> EncoderShape:
        """Reads config.json, refusing architectures and variants this
        encoder would compute differently, with a message naming them."""
        config = _read_json(config_path)
        model_type = config.get("model_type")
        if model_type not in FAMILIES:
            architectures = ", ".join(config.get("architectures") or ["no architectures"])
            raise ValueError(
                f"{config_path}: the packed encoder does not serve architecture "
                f"{model_type!r} ({architectures}); it serves {', '.join(FAMILIES)}"
            )
        unsupported = {
            key: config.get(key)
            for key, allowed in (
                ("hidden_act", tuple(_GELU)),
                ("position_embedding_type", ("absolute",)),
                ("is_decoder", (False,)),
            )
            if config.get(key, allowed[0]) not in allowed
        }
        if unsupported:
            raise ValueError(f"{config_path}: unsupported {model_type} config values {unsupported}")
        return cls(
            model_type=model_type,
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=int(config["num_attention_heads"]),
            intermediate_size=int(config["intermediate_size"]),
            max_positions=int(config["max_position_embeddings"]),
            layer_norm_eps=float(config["layer_norm_eps"]),
            approximate=_GELU[config.get("hidden_act", "gelu")],
            padding_id=int(config["pad_token_id"]) if model_type == "xlm-roberta" else None,
        )


def _weights_and_biases(*modules: nn.Module) -> tuple[torch.Tensor, ...]:
    """Each module's weight then bias, in order: the blocks' arguments."""
    return tuple(tensor for module in modules for tensor in (module.weight, module.bias))


class PackedLayer(nn.Module):
    """One post-norm encoder layer over packed tokens."""

    def __init__(self, shape: EncoderShape) -> None:
        super().__init__()
        width, inner = shape.hidden_size, shape.intermediate_size
        self.num_heads = shape.num_heads
        self.qkv = nn.Linear(width, 3 * width)
        self.attention_dense = nn.Linear(width, width)
        self.attention_norm = nn.LayerNorm(width, eps=shape.layer_norm_eps)
        self.inner = nn.Linear(width, inner)
        self.outer = nn.Linear(inner, width)
        self.output_norm = nn.LayerNorm(width, eps=shape.layer_norm_eps)
        self.approximate = shape.approximate

    def _attention_weights(self) -> tuple[torch.Tensor, ...]:
        return _weights_and_biases(self.attention_dense, self.attention_norm)

    def _feed_forward_weights(self) -> tuple[torch.Tensor, ...]:
        return _weights_and_biases(self.inner, self.outer, self.output_norm)

    def forward(
        self, hidden: torch.Tensor, rows: PackedRows, attention: Attention, blocks: Blocks
    ) -> torch.Tensor:
        tokens, width = hidden.shape
        # [T, 3, heads, head_dim] -> three [T, heads, head_dim]
        qkv = self.qkv(hidden).view(tokens, 3, self.num_heads, width // self.num_heads)
        query, key, value = qkv.unbind(1)
        context = attention(query, key, value, rows)
        hidden = blocks.attention_output(
            hidden,
            context.reshape(tokens, width),
            self._attention_weights(),
            self.attention_norm.eps,
        )
        return blocks.feed_forward(
            hidden, self._feed_forward_weights(), self.output_norm.eps, self.approximate
        )


class PackedEncoder(nn.Module):
    """Packed rows -> pooled vectors; pooled vectors -> embedding and norm."""

    def __init__(self, shape: EncoderShape, pooling: Pooling, head: list[nn.Module]) -> None:
        super().__init__()
        self.pooling = pooling
        self.padding_id = shape.padding_id
        self.hidden_size = shape.hidden_size
        self.max_positions = shape.max_positions
        self.word_embeddings = nn.Embedding(shape.vocab_size, shape.hidden_size)
        # Position embedding plus the token-type-0 embedding, folded into one
        # table: every input here is a single segment.
        self.position_embeddings = nn.Embedding(shape.max_positions, shape.hidden_size)
        self.embedding_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)
        self.layers = nn.ModuleList(PackedLayer(shape) for _ in range(shape.num_layers))
        self.head = nn.ModuleList(head)
        self.attention_name = "sdpa_per_sequence"
        self._attention: Attention | None = None
        self._blocks = Blocks.for_device(torch.device("cpu"), None)

    def place(
        self,
        device: torch.device,
        dtype: torch.dtype,
        compile_mode: str | None = SERVED_COMPILE_MODE,
    ) -> PackedEncoder:
        """Moves the encoder to device in dtype (the Dense head stays float32,
        as the pooled vectors are) and picks its attention and blocks
        (Blocks.for_device: compile_mode None runs them eagerly)."""
        self.to(device=device, dtype=dtype)
        self.head.float()
        head_dim = self.hidden_size // self.layers[0].num_heads
        self.attention_name, self._attention = select_attention(device, dtype, head_dim)
        self._blocks = Blocks.for_device(device, compile_mode)
        return self.eval()

    @property
    def device(self) -> torch.device:
        return self.word_embeddings.weight.device

    def position_ids(self, input_ids: torch.Tensor) -> torch.Tensor:
        """Each token's position id in [rows, length] padded rows, as the
        HuggingFace model numbers them."""
        if self.padding_id is None:
            return torch.arange(input_ids.shape[1]).expand_as(input_ids)
        # RoBERTa-style: count the non-padding tokens, after padding_id.
        real = (input_ids != self.padding_id).long()
        return torch.cumsum(real, dim=1) * real + self.padding_id

    def forward(self, rows: PackedRows) -> torch.Tensor:
        """Pooled float32 [rows, hidden] of the packed rows."""
        assert self._attention is not None, "place() the encoder first"
        hidden = self.word_embeddings(rows.tokens[0]) + self.position_embeddings(rows.tokens[1])
        hidden = self.embedding_norm(hidden)
        for layer in self.layers:
            hidden = layer(hidden, rows, self._attention, self._blocks)
        return self._pool(hidden, rows)

    def _pool(self, hidden: torch.Tensor, rows: PackedRows) -> torch.Tensor:
        """[rows, hidden] float32, one vector per row of cu_seqlens (a
        padded pack's spare rows get vectors of no meaning)."""
        if self.pooling == "cls":
            # A spare row starts at the real token count, which may be the end.
            starts = rows.cu_seqlens[:-1].long().clamp_max(hidden.shape[0] - 1)
            return hidden[starts].float()
        if self.pooling == "lasttoken":
            return hidden[rows.cu_seqlens[1:].long() - 1].float()
        count = rows.cu_seqlens.shape[0] - 1
        # One more row than the pack has: where spare tokens are summed.
        sums = torch.zeros((count + 1, hidden.shape[1]), device=hidden.device)
        sums.index_add_(0, rows.row_of_token, hidden.float())
        lengths = rows.cu_seqlens.diff().clamp_min(1)
        return sums[:count] / lengths[:, None]

    def finish(self, pooled: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Pooled [rows, hidden] -> embedding [rows, D] (unit length, or 0
        where the vector is) and norm [rows, 1], float32."""
        for module in self.head:
            pooled = module(pooled)
        norm = pooled.norm(p=2, dim=1, keepdim=True)
        return pooled / norm.clamp_min(1e-12), norm


class Normalize(nn.Module):
    """sentence-transformers' Normalize, where a Dense module follows it."""

    def forward(self, vectors: torch.Tensor) -> torch.Tensor:
        return functional.normalize(vectors, p=2, dim=1)


def _read_json(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def _dense(folder: Path) -> nn.Module:
    """A sentence-transformers Dense module folder as Linear + activation."""
    config = _read_json(folder / "config.json")
    linear = nn.Linear(
        int(config["in_features"]), int(config["out_features"]), bias=bool(config["bias"])
    )
    linear.load_state_dict(
        {
            name.removeprefix("linear."): tensor
            for name, tensor in load_file(str(folder / "model.safetensors")).items()
        }
    )
    # The export refuses activations outside torch (export/model_folder.py's check_head_modules).
    module_path, _, class_name = str(config["activation_function"]).rpartition(".")
    activation = getattr(importlib.import_module(module_path), class_name)()
    return nn.Sequential(linear, activation)


def _modules(model_dir: Path) -> tuple[Path, list[nn.Module]]:
    """The Transformer module's folder and the modules after Pooling, from
    modules.json; a folder without one is a bare HuggingFace checkpoint."""
    modules_path = model_dir / "modules.json"
    if not modules_path.exists():
        return model_dir, []
    modules = _read_json(modules_path)
    head: list[nn.Module] = []
    for module in modules[2:]:
        kind = str(module["type"]).rsplit(".", 1)[-1]
        head.append(_dense(model_dir / module["path"]) if kind == "Dense" else Normalize())
    # A trailing Normalize is the final normalization, which finish() does.
    while head and isinstance(head[-1], Normalize):
        head.pop()
    return model_dir / str(modules[0].get("path", "")), head


# The checkpoint's names (after any "bert." or "roberta." prefix of a
# *For* model) -> the encoder's, per layer.
_LAYER_NAMES = {
    "attention.output.dense": "attention_dense",
    "attention.output.LayerNorm": "attention_norm",
    "intermediate.dense": "inner",
    "output.dense": "outer",
    "output.LayerNorm": "output_norm",
}


def fused_state_dict(
    checkpoint: dict[str, torch.Tensor], num_layers: int
) -> dict[str, torch.Tensor]:
    """A HuggingFace BERT or XLM-RoBERTa checkpoint renamed to the encoder's
    parameters, query/key/value fused and token type 0 folded into the
    position table."""
    weights = {
        name.removeprefix("bert.").removeprefix("roberta."): tensor
        for name, tensor in checkpoint.items()
    }
    state = {
        "word_embeddings.weight": weights["embeddings.word_embeddings.weight"],
        "position_embeddings.weight": weights["embeddings.position_embeddings.weight"]
        + weights["embeddings.token_type_embeddings.weight"][0],
        "embedding_norm.weight": weights["embeddings.LayerNorm.weight"],
        "embedding_norm.bias": weights["embeddings.LayerNorm.bias"],
    }
    for index in range(num_layers):
        source, target = f"encoder.layer.{index}.", f"layers.{index}."
        for kind in ("weight", "bias"):
            state[f"{target}qkv.{kind}"] = torch.cat(
                [
                    weights[f"{source}attention.self.{part}.{kind}"]
                    for part in ("query", "key", "value")
                ]
            )
            for theirs, ours in _LAYER_NAMES.items():
                state[f"{target}{ours}.{kind}"] = weights[f"{source}{theirs}.{kind}"]
    return state


def load_encoder(
    model_dir: Path,
    pooling: Pooling,
    device: torch.device,
    dtype: torch.dtype,
    compile_mode: str | None = SERVED_COMPILE_MODE,
) -> PackedEncoder:
    """Loads the sentence-transformers folder (or bare HuggingFace
    checkpoint) in model_dir for inference on device in dtype, its blocks
    compiled in compile_mode (PackedEncoder.place); pooled vectors and
    outputs stay float32."""
    transformer_dir, head = _modules(model_dir)
    shape = EncoderShape.read(transformer_dir / "config.json")
    encoder = PackedEncoder(shape, pooling, head)
    weights_path = transformer_dir / "model.safetensors"
    try:
        state = fused_state_dict(load_file(str(weights_path)), shape.num_layers)
    except KeyError as missing:
        raise ValueError(f"{weights_path}: no weight {missing} in the checkpoint") from None
    # Not strict about the Dense head, which came loaded from its own folder;
    # any other parameter left unloaded would run on random weights.
    unloaded = [
        name
        for name in encoder.load_state_dict(state, strict=False).missing_keys
        if not name.startswith("head.")
    ]
    if unloaded:
        raise ValueError(f"{weights_path}: the checkpoint sets no {', '.join(unloaded)}")
    return encoder.place(device, dtype, compile_mode)
