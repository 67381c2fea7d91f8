"""A BERT sentence encoder in plain PyTorch: token ids -> unit-length
embedding and the pooled vector's norm, the same two outputs as the exported
ONNX graph (export/export_onnx.py).

It loads a HuggingFace BERT checkpoint (config.json + model.safetensors) and
runs it with query, key and value fused into one matmul and attention through
torch's scaled_dot_product_attention, in float16 on a GPU or float32 on CPU.
No Triton import: model.py serves it, the tests run it on CPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional

Pooling = Literal["mean", "cls"]

# Added to the attention scores of padded keys. A finite value, unlike -inf,
# keeps a row without any attended token free of NaN (its pooled vector is
# then 0, as in the ONNX graph), and stays finite in float16.
_MASKED_SCORE = -10000.0


@dataclass(frozen=True)
class BertShape:
    """The parts of a BERT config.json this encoder needs."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    intermediate_size: int
    max_positions: int
    layer_norm_eps: float

    @classmethod
    def from_config(cls, config: dict[str, object]) -> BertShape:
        """Reads a HuggingFace BertConfig dict, rejecting variants this encoder
        would compute differently."""
        unsupported = {
            key: config.get(key)
            for key, expected in (
                ("hidden_act", "gelu"),
                ("position_embedding_type", "absolute"),
            )
            if config.get(key, expected) != expected
        }
        if unsupported:
            raise ValueError(f"unsupported BERT config values {unsupported}")
        return cls(
            vocab_size=int(config["vocab_size"]),
            hidden_size=int(config["hidden_size"]),
            num_layers=int(config["num_hidden_layers"]),
            num_heads=int(config["num_attention_heads"]),
            intermediate_size=int(config["intermediate_size"]),
            max_positions=int(config["max_position_embeddings"]),
            layer_norm_eps=float(config["layer_norm_eps"]),
        )


class EncoderLayer(nn.Module):
    """One post-norm BERT layer: self-attention, then the feed-forward block."""

    def __init__(self, shape: BertShape) -> None:
        super().__init__()
        self.num_heads = shape.num_heads
        self.qkv = nn.Linear(shape.hidden_size, 3 * shape.hidden_size)
        self.attention_out = nn.Linear(shape.hidden_size, shape.hidden_size)
        self.attention_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)
        self.ffn_in = nn.Linear(shape.hidden_size, shape.intermediate_size)
        self.ffn_out = nn.Linear(shape.intermediate_size, shape.hidden_size)
        self.ffn_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, score_bias: torch.Tensor) -> torch.Tensor:
        rows, length, width = hidden.shape
        # [rows, length, 3, heads, head_dim] -> three [rows, heads, length, head_dim]
        qkv = self.qkv(hidden).view(rows, length, 3, self.num_heads, width // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = functional.scaled_dot_product_attention(query, key, value, attn_mask=score_bias)
        context = context.transpose(1, 2).reshape(rows, length, width)
        hidden = self.attention_norm(hidden + self.attention_out(context))
        feed_forward = self.ffn_out(functional.gelu(self.ffn_in(hidden)))
        return self.ffn_norm(hidden + feed_forward)


class SentenceEncoder(nn.Module):
    """BERT encoder + pooling + L2 normalization."""

    def __init__(self, shape: BertShape, pooling: Pooling) -> None:
        super().__init__()
        self.pooling = pooling
        self.word_embeddings = nn.Embedding(shape.vocab_size, shape.hidden_size)
        # Position embedding plus the token-type-0 embedding, folded into one
        # table: every input here is a single segment.
        self.position_embeddings = nn.Embedding(shape.max_positions, shape.hidden_size)
        self.embedding_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)
        self.layers = nn.ModuleList(EncoderLayer(shape) for _ in range(shape.num_layers))

    def forward(
        self, input_ids: torch.Tensor, attention_mask: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """[rows, length] int64 ids and mask -> float32 embedding [rows, D]
        (unit length) and norm [rows, 1]."""
        length = input_ids.shape[1]
        hidden = self.word_embeddings(input_ids) + self.position_embeddings.weight[:length]
        hidden = self.embedding_norm(hidden)
        attended = attention_mask != 0
        # [rows, 1, 1, length], broadcast over heads and query positions.
        score_bias = torch.zeros(attended.shape, dtype=hidden.dtype, device=hidden.device)
        score_bias = score_bias.masked_fill(~attended, _MASKED_SCORE)[:, None, None, :]
        for layer in self.layers:
            hidden = layer(hidden, score_bias)
        pooled = self._pool(hidden.float(), attended)
        norm = pooled.norm(p=2, dim=1, keepdim=True)
        return pooled / norm.clamp_min(1e-12), norm

    def _pool(self, hidden: torch.Tensor, attended: torch.Tensor) -> torch.Tensor:
        if self.pooling == "cls":
            return hidden[:, 0]
        mask = attended.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1e-9)


def _fused_state_dict(
    checkpoint: dict[str, torch.Tensor], num_layers: int
) -> dict[str, torch.Tensor]:
    """Renames a HuggingFace BertModel checkpoint to SentenceEncoder's
    parameters, fusing query/key/value and folding token type 0 into the
    position table."""
    # Checkpoints saved from BertFor* models prefix every name with "bert.".
    weights = {name.removeprefix("bert."): tensor for name, tensor in checkpoint.items()}
    state = {
        "word_embeddings.weight": weights["embeddings.word_embeddings.weight"],
        "position_embeddings.weight": weights["embeddings.position_embeddings.weight"]
        + weights["embeddings.token_type_embeddings.weight"][0],
        "embedding_norm.weight": weights["embeddings.LayerNorm.weight"],
        "embedding_norm.bias": weights["embeddings.LayerNorm.bias"],
    }
    renamed = {
        "attention_out": "attention.output.dense",
        "attention_norm": "attention.output.LayerNorm",
        "ffn_in": "intermediate.dense",
        "ffn_out": "output.dense",
        "ffn_norm": "output.LayerNorm",
    }
    for index in range(num_layers):
        source = f"encoder.layer.{index}."
        target = f"layers.{index}."
        for kind in ("weight", "bias"):
            state[f"{target}qkv.{kind}"] = torch.cat(
                [
                    weights[f"{source}attention.self.{part}.{kind}"]
                    for part in ("query", "key", "value")
                ]
            )
            for ours, theirs in renamed.items():
                state[f"{target}{ours}.{kind}"] = weights[f"{source}{theirs}.{kind}"]
    return state


def load_encoder(
    model_dir: Path, pooling: Pooling, device: torch.device, dtype: torch.dtype
) -> SentenceEncoder:
    """Loads the BERT checkpoint in model_dir (config.json, model.safetensors)
    for inference on device in dtype; the outputs stay float32."""
    shape = BertShape.from_config(json.loads((model_dir / "config.json").read_text()))
    checkpoint = load_file(str(model_dir / "model.safetensors"))
    encoder = SentenceEncoder(shape, pooling)
    encoder.load_state_dict(_fused_state_dict(checkpoint, shape.num_layers))
    return encoder.to(device=device, dtype=dtype).eval()


def real_lengths(attention_mask: torch.Tensor) -> torch.Tensor:
    """Position of each row's last attended token, plus one (1 for a row with
    none): the columns a row needs."""
    attended = attention_mask != 0
    positions = torch.arange(1, attended.shape[1] + 1, device=attended.device)
    return (attended * positions).amax(dim=1).clamp(min=1)


@torch.inference_mode()
def embed_in_groups(
    encoder: SentenceEncoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    rows_per_run: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Embeds [rows, length] host tensors in groups of at most rows_per_run
    rows of similar real length, each group cut to its own longest row, and
    returns float32 host tensors in the input's row order."""
    device = next(encoder.parameters()).device
    lengths = real_lengths(attention_mask)
    order = torch.argsort(lengths, stable=True)
    embedding = torch.empty((len(order), encoder.word_embeddings.embedding_dim))
    norm = torch.empty((len(order), 1))
    for start in range(0, len(order), rows_per_run):
        group = order[start : start + rows_per_run]
        length = int(lengths[group].max())
        group_embedding, group_norm = encoder(
            input_ids[group, :length].to(device), attention_mask[group, :length].to(device)
        )
        embedding[group] = group_embedding.cpu()
        norm[group] = group_norm.cpu()
    return embedding, norm
