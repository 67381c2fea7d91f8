"""Tiny random-weight sentence-transformers folders, one per model family the export serves
(BERT, XLM-RoBERTa, MPNet, ModernBERT, a Qwen3 decoder), so the export can be tested on each
without a model hub. Each folder has a tokenizer of the family's kind, made here with the
tokenizers library from a small built-in corpus, and the sentence-transformers modules and
prompts that family's published models use.

    .venv-export/bin/python -m harness.family_models OUT_DIR

Needs the export environment (torch, transformers, sentence-transformers, tokenizers). The
build is seeded: the same versions write the same weights and vocabularies.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from tokenizers import (
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    processors,
    trainers,
)

from harness.model_builds import ModelBuilds

MAX_SEQ_LENGTH = 128
HIDDEN = 64
SEED = 20240611
# Random layers at the usual 0.02 initializer map every text to nearly the same vector (mean
# pooling averages the noise away); a wider one keeps different texts clearly apart.
INITIALIZER_RANGE = 0.3
# Every family's encoder: tiny, so that export and check take seconds.
ENCODER_SIZES: dict[str, Any] = {
    "hidden_size": HIDDEN,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "intermediate_size": 2 * HIDDEN,
    "initializer_range": INITIALIZER_RANGE,
}

QUERY_DOCUMENT_PROMPTS = {"query": "query: ", "document": "passage: "}
QWEN3_PROMPTS = {"query": "Instruct: Given a web search query, retrieve relevant passages\nQuery: "}

# Enough text for a few hundred subwords, in several scripts, so the check texts tokenize into
# more than unknown tokens.
CORPUS = (
    "The quick brown fox jumps over the lazy dog.",
    "A man is playing a guitar on stage while the crowd sings along.",
    "How do I reset my password if I forgot my email address?",
    "Triton Inference Server batches requests dynamically across model instances.",
    "Sentence embeddings map texts of any length to vectors of one fixed width.",
    "Tokenizers split words into subword units drawn from a learned vocabulary.",
    "The weather today is sunny with a light breeze from the west.",
    "She reads a book about the history of mathematics every evening.",
    "Inference servers answer requests from many clients at once.",
    "Search engines retrieve relevant passages for a web search query.",
    "Given a question, find the document that answers it best.",
    "Query: what is the capital of France? Passage: Paris is the capital of France.",
    "Instruct: Given a web search query, retrieve relevant passages",
    "Embeddings, tokenizers and inference servers make semantic search work.",
    "Sentence number one talks about embeddings and vectors.",
    "The children played football in the park until the sun went down.",
    "Fresh bread and coffee are sold at the corner bakery every morning.",
    "The train to the airport leaves every twenty minutes from platform four.",
    "Machine learning models learn patterns from large amounts of data.",
    "Please send the quarterly report to the finance team by Friday.",
    "Café naïve façade: résumé of the jalapeño crème brûlée.",
    "Le chat dort sur le canapé pendant que la pluie tombe dehors.",
    "Der schnelle braune Fuchs springt über den faulen Hund.",
    "El perro corre por la playa con su pelota favorita.",
    "東京は日本の首都です。大阪は食べ物で有名です。",
    "我喜欢在周末读书和喝茶。北京是中国的首都。",
    "안녕하세요, 만나서 반갑습니다. 오늘 날씨가 좋네요.",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "Привет, как дела? Сегодня хорошая погода.",
    "🎉🚀 Launch day! 😀👍🏽 Thanks to everyone who helped.",
    "Numbers like 42, 3.14 and 2024 appear in many texts.",
)


@dataclass(frozen=True)
class Family:
    """How one family's folder is built: its encoder, tokenizer and sentence-transformers
    modules."""

    name: str
    tokenizer: Callable[[], Tokenizer]
    special_tokens: dict[str, str]  # transformers' names (cls_token, ...) -> token
    config: Callable[[Tokenizer], Any]  # tokenizer -> transformers config
    # Mean pooling and normalized rows, as most published sentence-transformers folders.
    pooling: str = "mean"
    normalize: bool = True
    dense_out: int | None = None
    prompts: dict[str, str] = field(default_factory=dict)
    default_prompt_name: str | None = None
    padding_side: str = "right"
    # Pooling config in the legacy boolean-key form, as older published folders have it.
    legacy_pooling_config: bool = False


def _corpus() -> list[str]:
    # Repeated, so that the trainers' minimum frequencies keep the corpus' words.
    return list(CORPUS) * 3


def _template(single: str, pair: str, tokenizer: Tokenizer, specials: Sequence[str]) -> None:
    tokenizer.post_processor = processors.TemplateProcessing(
        single=single,
        pair=pair,
        special_tokens=[(token, _token_id(tokenizer, token)) for token in specials],
    )


def _token_id(tokenizer: Tokenizer, token: str) -> int:
    token_id = tokenizer.token_to_id(token)
    if token_id is None:
        raise ValueError(f"token {token!r} is not in the trained vocabulary")
    return int(token_id)


def wordpiece_tokenizer(cls: str, sep: str, pad: str, unk: str, mask: str) -> Tokenizer:
    """BERT's pipeline: lowercasing normalizer, WordPiece, `CLS $A SEP`. The vocabulary is the
    corpus' characters, alone and as continuations, and its words: built rather than trained,
    because the library's WordPiece trainer breaks ties in hash-map order, so its vocabulary
    changes from run to run."""
    normalizer = normalizers.BertNormalizer(lowercase=True)
    pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    words = {
        word
        for text in CORPUS
        for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(text))
    }
    chars = sorted({char for word in words for char in word})
    vocab = [
        *(pad, unk, cls, sep, mask),
        *chars,
        *(f"##{char}" for char in chars),
        *sorted(word for word in words if len(word) > 1),
    ]
    tokenizer = Tokenizer(
        models.WordPiece({token: index for index, token in enumerate(vocab)}, unk_token=unk)
    )
    tokenizer.normalizer = normalizer
    tokenizer.pre_tokenizer = pre_tokenizer
    tokenizer.decoder = decoders.WordPiece()
    _template(f"{cls} $A {sep}", f"{cls} $A {sep} $B:1 {sep}:1", tokenizer, [cls, sep])
    return tokenizer


def unigram_tokenizer() -> Tokenizer:
    """XLM-RoBERTa's pipeline: SentencePiece-style Unigram over Metaspace, `<s> $A </s>`, with
    <s>, <pad>, </s>, <unk> at ids 0-3 as in the published vocabulary."""
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]
    trained = Tokenizer(models.Unigram())
    trained.normalizer = normalizers.NFKC()
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trainer = trainers.UnigramTrainer(
        vocab_size=800, special_tokens=specials, unk_token="<unk>", show_progress=False
    )
    trained.train_from_iterator(_corpus(), trainer)
    # The trainer picks the same pieces every run, but orders the single characters it adds
    # last (a hair apart in score) in hash-map order: rounded scores and a sorted vocabulary
    # make the result the same every run.
    pieces = json.loads(trained.to_str())["model"]["vocab"]
    learned = sorted(
        ((piece, round(score, 2)) for piece, score in pieces if piece not in specials),
        key=lambda item: (-item[1], item[0]),
    )
    tokenizer = Tokenizer(models.Unigram([(token, 0.0) for token in specials] + learned, unk_id=3))
    tokenizer.normalizer = normalizers.NFKC()
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    _template("<s> $A </s>", "<s> $A </s> </s> $B </s>", tokenizer, ["<s>", "</s>"])
    return tokenizer


def byte_level_tokenizer(
    specials: Sequence[str], single: str, pair: str, template_tokens: Sequence[str]
) -> Tokenizer:
    """GPT-2-style byte-level BPE (Qwen's and ModernBERT's kind): every text tokenizes, no
    unknown token."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=1200,
        special_tokens=list(specials),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_corpus(), trainer)
    _template(single, pair, tokenizer, template_tokens)
    return tokenizer


def _bert_config(tokenizer: Tokenizer) -> Any:
    from transformers import BertConfig

    return BertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        **ENCODER_SIZES,
        max_position_embeddings=512,
        pad_token_id=_token_id(tokenizer, "[PAD]"),
    )


def _xlmr_config(tokenizer: Tokenizer) -> Any:
    from transformers import XLMRobertaConfig

    return XLMRobertaConfig(
        vocab_size=tokenizer.get_vocab_size(),
        **ENCODER_SIZES,
        # Positions start after the padding id, as in the published model (514 = 512 + 2).
        max_position_embeddings=MAX_SEQ_LENGTH + 2 + 64,
        type_vocab_size=1,
        bos_token_id=0,
        pad_token_id=1,
        eos_token_id=2,
    )


def _mpnet_config(tokenizer: Tokenizer) -> Any:
    from transformers import MPNetConfig

    return MPNetConfig(
        vocab_size=tokenizer.get_vocab_size(),
        **ENCODER_SIZES,
        max_position_embeddings=MAX_SEQ_LENGTH + 2 + 64,
        pad_token_id=_token_id(tokenizer, "<pad>"),
        bos_token_id=_token_id(tokenizer, "<s>"),
        eos_token_id=_token_id(tokenizer, "</s>"),
    )


def _modernbert_config(tokenizer: Tokenizer) -> Any:
    from transformers import ModernBertConfig

    return ModernBertConfig(
        vocab_size=tokenizer.get_vocab_size(),
        **{**ENCODER_SIZES, "num_hidden_layers": 3},
        max_position_embeddings=512,
        # A window shorter than max_seq_length, so the local layers' sliding mask is exercised
        # (the published models: 128 of 8192).
        local_attention=32,
        global_attn_every_n_layers=2,
        pad_token_id=_token_id(tokenizer, "[PAD]"),
        bos_token_id=_token_id(tokenizer, "[CLS]"),
        cls_token_id=_token_id(tokenizer, "[CLS]"),
        eos_token_id=_token_id(tokenizer, "[SEP]"),
        sep_token_id=_token_id(tokenizer, "[SEP]"),
    )


def _qwen3_config(tokenizer: Tokenizer) -> Any:
    from transformers import Qwen3Config

    eos = _token_id(tokenizer, "<|endoftext|>")
    return Qwen3Config(
        vocab_size=tokenizer.get_vocab_size(),
        **ENCODER_SIZES,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        tie_word_embeddings=False,
        bos_token_id=eos,
        eos_token_id=eos,
        # No padding id, as published: the embedding row of a padding id starts at zero, and
        # here it would be the EOS row that last-token pooling reads.
        pad_token_id=None,
    )


BERT_SPECIALS = {
    "cls_token": "[CLS]",
    "sep_token": "[SEP]",
    "pad_token": "[PAD]",
    "unk_token": "[UNK]",
    "mask_token": "[MASK]",
}


def _roberta_specials(unk: str) -> dict[str, str]:
    """RoBERTa's naming, shared by XLM-R and MPNet: <s> opens, </s> closes."""
    return {
        "bos_token": "<s>",
        "cls_token": "<s>",
        "eos_token": "</s>",
        "sep_token": "</s>",
        "pad_token": "<pad>",
        "unk_token": unk,
        "mask_token": "<mask>",
    }


FAMILIES: tuple[Family, ...] = (
    Family(
        name="bert",
        tokenizer=lambda: wordpiece_tokenizer("[CLS]", "[SEP]", "[PAD]", "[UNK]", "[MASK]"),
        special_tokens=BERT_SPECIALS,
        config=_bert_config,
        pooling="cls",
        normalize=False,
        dense_out=48,
        prompts=QUERY_DOCUMENT_PROMPTS,
        legacy_pooling_config=True,
    ),
    Family(
        name="xlmr",
        tokenizer=unigram_tokenizer,
        special_tokens=_roberta_specials("<unk>"),
        config=_xlmr_config,
        prompts=QUERY_DOCUMENT_PROMPTS,
    ),
    Family(
        name="mpnet",
        tokenizer=lambda: wordpiece_tokenizer("<s>", "</s>", "<pad>", "[UNK]", "<mask>"),
        special_tokens=_roberta_specials("[UNK]"),
        config=_mpnet_config,
    ),
    Family(
        name="modernbert",
        tokenizer=lambda: byte_level_tokenizer(
            ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"],
            "[CLS] $A [SEP]",
            "[CLS] $A [SEP] $B:1 [SEP]:1",
            ["[CLS]", "[SEP]"],
        ),
        special_tokens=BERT_SPECIALS,
        config=_modernbert_config,
    ),
    Family(
        name="qwen3",
        # Qwen3-Embedding's tokenizer appends <|endoftext|> to every text, and its last-token
        # pooling reads the hidden state there.
        tokenizer=lambda: byte_level_tokenizer(
            ["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
            "$A <|endoftext|>",
            "$A <|endoftext|> $B:1 <|endoftext|>:1",
            ["<|endoftext|>"],
        ),
        # As published: the padding token is the end-of-text token, so only the attention mask
        # tells padding from the appended EOS.
        special_tokens={"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"},
        config=_qwen3_config,
        pooling="lasttoken",
        prompts=QWEN3_PROMPTS,
        default_prompt_name="query",
        padding_side="left",
        legacy_pooling_config=True,
    ),
)
FAMILY_NAMES = tuple(family.name for family in FAMILIES)


def _write_json(path: Path, content: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(content, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def _legacy_pooling(mode: str, dimension: int) -> dict[str, Any]:
    keys = {
        "cls": "pooling_mode_cls_token",
        "mean": "pooling_mode_mean_tokens",
        "lasttoken": "pooling_mode_lasttoken",
    }
    return {
        "word_embedding_dimension": dimension,
        "pooling_mode_cls_token": False,
        "pooling_mode_mean_tokens": False,
        "pooling_mode_max_tokens": False,
        "pooling_mode_mean_sqrt_len_tokens": False,
        "pooling_mode_weightedmean_tokens": False,
        "pooling_mode_lasttoken": False,
        "include_prompt": True,
    } | {keys[mode]: True}


def build_family(family: Family, out_dir: Path) -> Path:
    """Writes one family's sentence-transformers folder to out_dir / family.name."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.base.modules import Dense, Normalize, Transformer
    from sentence_transformers.sentence_transformer.modules import Pooling
    from transformers import AutoModel, PreTrainedTokenizerFast

    target = out_dir / family.name
    # A folder from an earlier build could keep modules this one does not write.
    shutil.rmtree(target, ignore_errors=True)
    tokenizer = family.tokenizer()
    config = family.config(tokenizer)
    # Seeded per family, so one family's weights do not depend on which were built before.
    torch.manual_seed(SEED)
    encoder = AutoModel.from_config(config).eval()
    with torch.no_grad():
        # GELU's output is positive on average, so each feed-forward output layer adds about
        # the same vector (its weights' row sums) to every token, and mean pooling makes every
        # text alike. Rows summing to zero take that shared vector out.
        for module in encoder.modules():
            if (
                isinstance(module, torch.nn.Linear)
                and module.in_features == config.intermediate_size
                and module.out_features == HIDDEN
            ):
                module.weight -= module.weight.mean(dim=1, keepdim=True)
    with tempfile.TemporaryDirectory(prefix=f"family_{family.name}_") as workdir:
        # The encoder and tokenizer go through save_pretrained, then the Transformer module
        # loads them as it would a downloaded checkpoint.
        encoder.save_pretrained(workdir)
        PreTrainedTokenizerFast(
            tokenizer_object=tokenizer,
            model_max_length=MAX_SEQ_LENGTH,
            padding_side=family.padding_side,
            **family.special_tokens,
        ).save_pretrained(workdir)
        transformer = Transformer(workdir, max_seq_length=MAX_SEQ_LENGTH)
        modules: list[torch.nn.Module] = [transformer, Pooling(HIDDEN, pooling_mode=family.pooling)]
        if family.dense_out is not None:
            modules.append(Dense(HIDDEN, family.dense_out, activation_function=torch.nn.Tanh()))
        if family.normalize:
            modules.append(Normalize())
        model = SentenceTransformer(
            modules=modules,
            device="cpu",
            prompts=dict(family.prompts),
            default_prompt_name=family.default_prompt_name,
        )
        model.save(str(target))
    # As published folders have it, max_seq_length in the Transformer's own config (the library
    # saves it only as the tokenizer's model_max_length).
    transformer_config_path = target / "sentence_bert_config.json"
    transformer_config = json.loads(transformer_config_path.read_text(encoding="utf-8"))
    transformer_config["max_seq_length"] = MAX_SEQ_LENGTH
    _write_json(transformer_config_path, transformer_config)
    # What the folder says is what the export reads: the prompts exactly as given (the
    # library would add empty query/document entries of its own).
    st_config_path = target / "config_sentence_transformers.json"
    st_config = json.loads(st_config_path.read_text(encoding="utf-8"))
    st_config["prompts"] = dict(family.prompts)
    st_config["default_prompt_name"] = family.default_prompt_name
    _write_json(st_config_path, st_config)
    if family.legacy_pooling_config:
        pooling_dir = next(
            target / module["path"]
            for module in json.loads((target / "modules.json").read_text(encoding="utf-8"))
            if module["type"].endswith(".Pooling")
        )
        _write_json(pooling_dir / "config.json", _legacy_pooling(family.pooling, HIDDEN))
    return target


BUILDS = ModelBuilds(
    "harness.family_models",
    "families",
    {family.name: partial(build_family, family) for family in FAMILIES},
    option="--family",
)
build_in_export_environment = BUILDS.build_in_export_environment


if __name__ == "__main__":
    BUILDS.main(__doc__.splitlines()[0])
