"""Faster variants of the exported embedding graph, with ONNX Runtime's own tools:

- `fused`: the transformer fusions of `onnxruntime.transformers.optimizer` (model type
  "bert"), float32, numerically the plain graph's computation;
- `int8`: the fused graph with its MatMul weights (and attention's) quantized to int8,
  activations quantized per call (dynamic quantization); opt-in, it changes the embeddings.

The attention fusion matches the eager attention pattern only, so a graph meant for fusing
is exported with the encoder's eager attention (onnx_graph.py does that).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

import onnx
from onnxruntime.quantization import QuantType, quantize_dynamic
from onnxruntime.transformers.fusion_options import FusionOptions
from onnxruntime.transformers.optimizer import optimize_model

GraphKind = Literal["plain", "fused", "int8"]
GRAPH_KINDS: tuple[GraphKind, ...] = ("plain", "fused", "int8")

# Fusions left out on purpose, with the FusionOptions switches that turn them off. On this
# project's CPU (ONNX Runtime 1.31, one intra-op thread), the graph with SkipLayerNormalization
# and EmbedLayerNormalization took 78.6 ms of CPU per 8 x 40-token batch, the same graph with
# LayerNormalization and Add in their place 72.2 ms: their CPU kernels are the slower ones.
DISABLED_FUSIONS: MappingProxyType[str, tuple[str, ...]] = MappingProxyType(
    {
        "SkipLayerNormalization": ("enable_skip_layer_norm", "enable_bias_skip_layer_norm"),
        "EmbedLayerNormalization": ("enable_embed_layer_norm",),
    }
)

# Dynamic int8 settings that hold on every x86-64 processor, so one graph serves anywhere.
# Signed int8 weights ran about 1.8x faster than unsigned ones on AVX512-VNNI (the u8 x s8
# VNNI kernels), and per-channel scales kept the cosine at 0.987 where a per-tensor scale fell
# to 0.91. Without VNNI (AVX2, AVX-512 before VNNI) ONNX Runtime multiplies u8 x s8 with
# pairwise 16-bit sums that saturate: Korean text fell to 0.951 there. 7-bit weights
# (reduce_range) keep those sums in range on every processor; per text class on an AVX2-only
# processor in perf/results/debian12-2core-zen3-avx2/int8.md.
INT8_WEIGHT_TYPE = QuantType.QInt8
INT8_PER_CHANNEL = True
INT8_REDUCE_RANGE = True


@dataclass(frozen=True)
class AttentionShape:
    """What the fusions need to know about the encoder."""

    num_heads: int
    hidden_size: int


def attention_shape(model_dir: Path) -> AttentionShape:
    """Reads the number of attention heads and the hidden size from the HF config.json."""
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    try:
        return AttentionShape(int(config["num_attention_heads"]), int(config["hidden_size"]))
    except KeyError as error:
        raise SystemExit(
            f"{config_path}: no {error.args[0]}; only BERT-style encoders can be fused"
        ) from None


def fusion_options() -> FusionOptions:
    """BERT fusions, except those that measured slower here (DISABLED_FUSIONS)."""
    options = FusionOptions("bert")
    for switches in DISABLED_FUSIONS.values():
        for switch in switches:
            setattr(options, switch, False)
    return options


def fuse(plain_path: Path, fused_path: Path, shape: AttentionShape) -> dict[str, int]:
    """Writes the fused graph and returns the fused operators it holds, with their counts.

    Fails if attention was not fused: without it the graph is not worth serving.
    """
    optimized = optimize_model(
        str(plain_path),
        model_type="bert",
        num_heads=shape.num_heads,
        hidden_size=shape.hidden_size,
        optimization_options=fusion_options(),
    )
    fusions = {
        operator: count
        for operator, count in optimized.get_fused_operator_statistics().items()
        if count > 0
    }
    if "Attention" not in fusions:
        raise SystemExit(
            f"{plain_path}: ONNX Runtime's optimizer fused no Attention (fused: {fusions}); "
            "was the encoder exported with eager attention?"
        )
    optimized.save_model_to_file(str(fused_path))
    return fusions


def quantize_int8(fused_path: Path, int8_path: Path) -> dict[str, str | bool]:
    """Writes the dynamically quantized graph and returns the settings used."""
    quantize_dynamic(
        fused_path,
        int8_path,
        per_channel=INT8_PER_CHANNEL,
        reduce_range=INT8_REDUCE_RANGE,
        weight_type=INT8_WEIGHT_TYPE,
        # The fused operators are outside ONNX's shape inference; their outputs are float32.
        extra_options={"DefaultTensorType": onnx.TensorProto.FLOAT},
    )
    return {
        "method": "dynamic",
        "weight_type": INT8_WEIGHT_TYPE.name,
        "per_channel": INT8_PER_CHANNEL,
        "reduce_range": INT8_REDUCE_RANGE,
    }
