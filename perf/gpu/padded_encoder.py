"""The torch_gpu embedder's encoder before packing, kept as the GPU kit's
in-process baseline (perf/gpu/inprocess.py): a BERT sentence encoder in
plain PyTorch that runs rows padded in length-sorted groups, query, key and
value fused into one matmul, attention through scaled_dot_product_attention
with a padding mask. Token ids -> unit-length embedding and the pooled
vector's norm, from a HuggingFace BERT checkpoint (config.json +
model.safetensors).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import torch
from safetensors.torch import load_file
from torch import nn
from torch.nn import functional

from perf.gpu.embedder_code import packed_modules

Pooling = Literal["mean", "cls"]

# Added to the attention scores of padded keys. A finite value, unlike -inf,
# keeps a row without any attended token free of NaN (its pooled vector is
# then 0, as in the ONNX graph), and stays finite in float16.
_MASKED_SCORE = -10000.0


class EncoderLayer(nn.Module):
    """One post-norm BERT layer: self-attention, then the feed-forward block."""

    def __init__(self, shape: Any) -> None:  # packed_encoder.EncoderShape
        super().__init__()
        self.num_heads = shape.num_heads
        self.qkv = nn.Linear(shape.hidden_size, 3 * shape.hidden_size)
        self.attention_dense = nn.Linear(shape.hidden_size, shape.hidden_size)
        self.attention_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)
        self.inner = nn.Linear(shape.hidden_size, shape.intermediate_size)
        self.outer = nn.Linear(shape.intermediate_size, shape.hidden_size)
        self.output_norm = nn.LayerNorm(shape.hidden_size, eps=shape.layer_norm_eps)

    def forward(self, hidden: torch.Tensor, score_bias: torch.Tensor) -> torch.Tensor:
        rows, length, width = hidden.shape
        # [rows, length, 3, heads, head_dim] -> three [rows, heads, length, head_dim]
        qkv = self.qkv(hidden).view(rows, length, 3, self.num_heads, width // self.num_heads)
        query, key, value = qkv.permute(2, 0, 3, 1, 4).unbind(0)
        context = functional.scaled_dot_product_attention(query, key, value, attn_mask=score_bias)
        context = context.transpose(1, 2).reshape(rows, length, width)
        hidden = self.attention_norm(hidden + self.attention_dense(context))
        feed_forward = self.outer(functional.gelu(self.inner(hidden)))
        return self.output_norm(hidden + feed_forward)


class SentenceEncoder(nn.Module):
    """BERT encoder + pooling + L2 normalization."""

    def __init__(self, shape: Any, pooling: Pooling) -> None:  # packed_encoder.EncoderShape
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


def load_encoder(
    model_dir: Path, pooling: Pooling, device: torch.device, dtype: torch.dtype
) -> SentenceEncoder:
    """Loads the BERT checkpoint in model_dir (config.json, model.safetensors)
    for inference on device in dtype; the outputs stay float32."""
    packed_encoder, _ = packed_modules()
    shape = packed_encoder.EncoderShape.read(model_dir / "config.json")
    checkpoint = load_file(str(model_dir / "model.safetensors"))
    encoder = SentenceEncoder(shape, pooling)
    # The shipped encoder's parameter names, so its renaming of the checkpoint serves both.
    encoder.load_state_dict(packed_encoder.fused_state_dict(checkpoint, shape.num_layers))
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
