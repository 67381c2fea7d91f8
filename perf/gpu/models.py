"""The models the GPU run serves: BERT encoders of the shapes it compares,
built with random weights (no model hub is reachable from the GPU machine,
and throughput does not depend on weight values), written as HuggingFace
checkpoints that both the torch_gpu embedder and sentence-transformers load,
so the served embeddings are checked against sentence-transformers on the
same weights.

Runs where torch, transformers and sentence-transformers are (the GPU
machine's python3; .venv-export here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt

# The serving tokenizer's vocabulary (bert-base-uncased's), which both
# shapes use, as the anchors' model does.
VOCAB_SIZE = 30522
MAX_POSITIONS = 512
# Dense (no sparsity) float16/bfloat16 tensor-core peaks from NVIDIA's data
# sheets, most specific name first: the denominator of MFU.
DENSE_FP16_PEAK_FLOPS = (
    ("H100 PCIe", 756e12),
    ("H100 NVL", 835e12),
    ("H100", 989e12),
    ("H200", 989e12),
)


def dense_peak_flops(device_name: str) -> float:
    for name, flops in DENSE_FP16_PEAK_FLOPS:
        if name in device_name:
            return flops
    raise ValueError(f"no dense fp16 peak recorded for {device_name!r}")


@dataclass(frozen=True)
class BertShape:
    name: str
    layers: int
    hidden: int
    heads: int
    intermediate: int

    def flops_per_token(self, sequence_length: float) -> float:
        """Forward FLOPs per token at this sequence length: the layers'
        matrix products (QKV, attention output, feed-forward: 2 FLOPs per
        multiply-add) plus attention's scores and weighted sum."""
        dense = 2 * (4 * self.hidden**2 + 2 * self.hidden * self.intermediate)
        attention = 4 * sequence_length * self.hidden
        return self.layers * (dense + attention)


SHAPES = {
    # all-MiniLM-L6-v2, the model this service ships.
    "minilm": BertShape("minilm", layers=6, hidden=384, heads=12, intermediate=1536),
    # snowflake-arctic-embed-m-v1.5, the anchors' model: BERT-base.
    "bert-base": BertShape("bert-base", layers=12, hidden=768, heads=12, intermediate=3072),
}


def write_random_bert(shape: BertShape, directory: Path, tokenizer_json: Path, seed: int) -> Path:
    """A BertModel of `shape` with transformers' own random initialization,
    saved (config.json, model.safetensors) with the serving tokenizer."""
    import torch
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    config = BertConfig(
        vocab_size=VOCAB_SIZE,
        hidden_size=shape.hidden,
        num_hidden_layers=shape.layers,
        num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate,
        max_position_embeddings=MAX_POSITIONS,
    )
    torch.manual_seed(seed)
    BertModel(config).save_pretrained(directory)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_file=str(tokenizer_json),
        model_max_length=MAX_POSITIONS,
        unk_token="[UNK]",
        sep_token="[SEP]",
        pad_token="[PAD]",
        cls_token="[CLS]",
        mask_token="[MASK]",
    )
    tokenizer.save_pretrained(directory)
    return directory


def reference_embeddings(
    model_dir: Path, texts: list[str], max_length: int, device: str
) -> npt.NDArray[np.float32]:
    """sentence-transformers in float32: transformer, mean pooling, L2
    normalization, as all-MiniLM-L6-v2 and arctic-embed are assembled."""
    from sentence_transformers import SentenceTransformer, models

    transformer = models.Transformer(str(model_dir), max_seq_length=max_length)
    pooling = models.Pooling(transformer.get_word_embedding_dimension(), "mean")
    model = SentenceTransformer(modules=[transformer, pooling, models.Normalize()], device=device)
    embeddings = model.encode(texts, batch_size=16, convert_to_numpy=True)
    return np.asarray(embeddings, dtype=np.float32)
