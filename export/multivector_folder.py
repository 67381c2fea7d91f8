"""Reading a sentence-transformers MultiVectorEncoder folder (ColBERT-style late interaction) into
the MultiVectorSpec its export works from: what every folder has (model_folder.py), then
modules.json (a Transformer, then Dense, MultiVectorMask and Normalize modules, and last at most one
HierarchicalTokenPooling), the Transformer's multi-vector settings (query_length, document_length,
query_expansion), the projections' configs, MultiVectorMask's skip-list, the token pooling's
settings and the similarity function, refusing what the export cannot serve."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from model_common.multivector import EXPANSION_STRATEGIES, ROLES
from model_families import MULTIVECTOR_MODEL_TYPES
from model_folder import (
    FEATURE_EXTRACTION,
    ST_CONFIG,
    FolderSpec,
    module_class_name,
    read_folder_spec,
    read_json,
)

TOKEN_EMBEDDINGS = "token_embeddings"
MASK_MODULE = "MultiVectorMask"
# The modules after the Transformer the graph computes (Dense, Normalize) or the rows encode
# (MultiVectorMask), in any order.
HEAD_MODULES = frozenset({"Dense", "Normalize", MASK_MODULE})
# The one token pooling served (model_common.token_pooling pools as it does, after the graph):
# sentence-transformers' own, last in the pipeline, where the library places it.
POOLING_MODULE = "HierarchicalTokenPooling"
POOLING_PACKAGE = "sentence_transformers."
# HierarchicalTokenPooling's settings as a saved folder lacking them loads them: its load_config
# fills normalize_embeddings with False (older saves did not normalize), __init__ the rest.
POOLING_DEFAULTS: dict[str, Any] = {
    "pool_factor": 1.0,
    "num_protected_tokens": 1,
    "normalize_embeddings": False,
    "tasks": ["document"],
}
# The one scorer served: MaxSim, the sum over query vectors of the best document match.
SIMILARITY = "maxsim"
# What MultiVectorEncoder scores with when the folder names nothing.
DEFAULT_SIMILARITY = SIMILARITY
EXPANSION_KEYS = frozenset({"strategy", "length", "attend", "token"})
MASK_KEYS = frozenset({"skiplist_words", "skiplist_tasks", "keep_only_token_ids"})
# config_sentence_transformers.json keys of PyLate's and Stanford-NLP's saves, which
# MultiVectorEncoder turns into prefix tokens and settings of its own at load.
LEGACY_KEYS = (
    "query_prefix",
    "document_prefix",
    "do_query_expansion",
    "attend_to_expansion_tokens",
    "attend_to_mask_tokens",
    "skiplist_words",
    "query_length",
    "document_length",
    "query_expansion",
)


@dataclass(frozen=True)
class MultiVectorSpec(FolderSpec):
    """What the multi-vector export needs to know beyond what every folder has: the settings as
    the folder names them (the tokenizer resolves the expansion token and the skip-list words to
    ids once the model is loaded: multivector_rows.py)."""

    embedding_dim: int  # each token vector's width: the last projection's, else the hidden size
    normalized: bool  # the token vectors leave through Normalize
    query_length: int | None
    document_length: int | None
    # strategy, length, attend and token (None: the mask token, else the end-of-sequence one).
    query_expansion: dict[str, Any] | None
    skiplist_words: tuple[str, ...]
    skiplist_tasks: tuple[str, ...]  # the roles the skip-list applies to, of ROLES
    similarity_fn_name: str
    # The export record's token_pooling (model_common.token_pooling.ModelPooling reads it):
    # pool_factor, num_protected_tokens, normalize_embeddings and the roles pooled (tasks), or
    # None for a folder without a pooling module.
    token_pooling: dict[str, Any] | None


def is_pooling(module: dict[str, Any]) -> bool:
    """Whether a modules.json entry pools tokens: one from sentence-transformers' token_pooling
    module (LambdaTokenPooling too) or any module named as a token pooling."""
    kind = str(module["type"])
    return "token_pooling" in kind or module_class_name(module).endswith("TokenPooling")


def check_pooling(modules_path: Path, modules: list[dict[str, Any]], names: list[str]) -> None:
    """Refuses every token pooling but one HierarchicalTokenPooling of sentence-transformers
    last in the pipeline: another's clustering (a Python callable's, LambdaTokenPooling's, which
    no folder can even hold) is not served, and one before the head would pool vectors the
    graph has yet to project or normalize, while the served pooling runs after the graph."""
    pooling = [index for index, module in enumerate(modules) if is_pooling(module)]
    for index in pooling:
        module = modules[index]
        if names[index] != POOLING_MODULE or not str(module["type"]).startswith(POOLING_PACKAGE):
            raise SystemExit(
                f"{modules_path}: modules {names} pool tokens with {module['type']!r}; only "
                f"sentence-transformers' {POOLING_MODULE} is served"
            )
    if len(pooling) > 1 or (pooling and pooling[0] != len(modules) - 1):
        raise SystemExit(
            f"{modules_path}: modules {names}: a {POOLING_MODULE} is served only once and last "
            "in the pipeline, after the Dense, MultiVectorMask and Normalize modules"
        )


def read_multivector_modules(model_dir: Path) -> list[dict[str, Any]]:
    """Reads modules.json, refusing anything but a Transformer then Dense, Normalize and at most
    one MultiVectorMask, and a HierarchicalTokenPooling last where there is a pooling."""
    modules_path = model_dir / "modules.json"
    modules: list[dict[str, Any]] = read_json(modules_path)
    names = [module_class_name(module) for module in modules]
    check_pooling(modules_path, modules, names)
    head = names[1:-1] if names[-1:] == [POOLING_MODULE] else names[1:]
    if not names or names[0] != "Transformer" or not set(head) <= HEAD_MODULES:
        raise SystemExit(
            f"{modules_path}: model_type 'MultiVectorEncoder' with modules {names}; only a "
            f"Transformer then {', '.join(sorted(HEAD_MODULES))} modules, and last a "
            f"{POOLING_MODULE}, can be exported"
        )
    if names.count(MASK_MODULE) > 1:
        raise SystemExit(f"{modules_path}: modules {names} hold more than one {MASK_MODULE}")
    return modules


def module_config(model_dir: Path, module: dict[str, Any]) -> tuple[Path, dict[str, Any]]:
    """A head module's config.json, and where it is ({} where it has none)."""
    path = model_dir / str(module.get("path", "")) / "config.json"
    config: dict[str, Any] = read_json(path) if path.exists() else {}
    return path, config


def check_token_level(path: Path, name: str, config: dict[str, Any]) -> None:
    """Refuses a Dense or Normalize that reads or writes anything but the token vectors. A
    MultiVectorEncoder loads a Dense naming no input as reading them (older PyLate saves); a
    Normalize naming none would normalize the absent sentence embedding, that is nothing."""
    default_input = TOKEN_EMBEDDINGS if name == "Dense" else "sentence_embedding"
    read = config.get("module_input_name", default_input)
    written = config.get("module_output_name") or read
    if (read, written) != (TOKEN_EMBEDDINGS, TOKEN_EMBEDDINGS):
        raise SystemExit(
            f"{path}: {name} reads {read!r} and writes {written!r}; only a {name} of the "
            f"{TOKEN_EMBEDDINGS} can be exported"
        )
    activation = config.get("activation_function")
    if activation is not None and not str(activation).startswith("torch."):
        raise SystemExit(
            f"{path}: Dense activation {activation!r} is not a torch module; "
            "sentence-transformers would replace it with Tanh without trust_remote_code"
        )


def read_head(
    model_dir: Path, modules: list[dict[str, Any]], hidden_size: int
) -> tuple[int, bool, dict[str, Any] | None]:
    """The token vectors' width and whether they leave normalized, from the Dense and Normalize
    configs, and MultiVectorMask's config (None where there is no such module)."""
    width, normalized, mask = hidden_size, False, None
    for module in modules[1:]:
        name = module_class_name(module)
        path, config = module_config(model_dir, module)
        if name == POOLING_MODULE:
            # Outside the graph and after it (read_pooling).
            continue
        if name == MASK_MODULE:
            mask = read_mask(path, config)
            continue
        check_token_level(path, name, config)
        if name == "Dense":
            if not isinstance(config.get("out_features"), int):
                raise SystemExit(f"{path}: Dense without an integer out_features")
            width, normalized = int(config["out_features"]), False
        else:
            normalized = True
    return width, normalized, mask


def read_mask(path: Path, config: dict[str, Any]) -> dict[str, Any]:
    """MultiVectorMask's skip-list and the roles it applies to, refusing an allowlist (ColPali's
    image-patch documents) and settings it does not know."""
    unknown = sorted(set(config) - MASK_KEYS)
    if unknown:
        raise SystemExit(
            f"{path}: unsupported MultiVectorMask settings {unknown}; only {sorted(MASK_KEYS)}"
        )
    if config.get("keep_only_token_ids"):
        raise SystemExit(
            f"{path}: MultiVectorMask keep_only_token_ids {config['keep_only_token_ids']} scores "
            "only those tokens of documents; an allowlist of scored tokens cannot be exported"
        )
    words = config.get("skiplist_words") or []
    tasks = config.get("skiplist_tasks", ["document"])
    tasks = [tasks] if isinstance(tasks, str) else tasks
    if not all(isinstance(word, str) for word in words) or not isinstance(tasks, list):
        raise SystemExit(f"{path}: skiplist_words and skiplist_tasks must be lists of strings")
    # encode_query and encode_document run the query and document tasks only: a skip-list for
    # another task name applies to neither.
    return {"words": tuple(words), "tasks": tuple(role for role in ROLES if role in tasks)}


def read_pooling(model_dir: Path, modules: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The last module's HierarchicalTokenPooling settings, as it loads them, in the shape of the
    record's token_pooling (None where the folder pools nothing), refusing settings it does not
    know and values its constructor would refuse."""
    if module_class_name(modules[-1]) != POOLING_MODULE:
        return None
    path, config = module_config(model_dir, modules[-1])
    unknown = sorted(set(config) - set(POOLING_DEFAULTS))
    if unknown:
        raise SystemExit(
            f"{path}: unsupported {POOLING_MODULE} settings {unknown}; only "
            f"{sorted(POOLING_DEFAULTS)}"
        )
    settings = {**POOLING_DEFAULTS, **config}
    factor, protected = settings["pool_factor"], settings["num_protected_tokens"]
    # As BaseTokenPooling takes them: null for its default, one string for a one-task list.
    tasks = POOLING_DEFAULTS["tasks"] if settings["tasks"] is None else settings["tasks"]
    tasks = [tasks] if isinstance(tasks, str) else tasks
    valid = (
        isinstance(factor, int | float)
        and not isinstance(factor, bool)
        and factor >= 1
        and isinstance(protected, int)
        and not isinstance(protected, bool)
        and protected >= 0
        and isinstance(settings["normalize_embeddings"], bool)
        and isinstance(tasks, list)
        and all(isinstance(task, str) for task in tasks)
    )
    if not valid:
        raise SystemExit(
            f"{path}: {POOLING_MODULE} {config}: pool_factor is a number of at least 1, "
            "num_protected_tokens an integer of at least 0, normalize_embeddings a bool and "
            "tasks a list of strings"
        )
    # encode_query and encode_document run the query and document tasks only: a pooling for
    # another task name applies to neither.
    return {
        "pool_factor": float(factor),
        "num_protected_tokens": protected,
        "normalize_embeddings": settings["normalize_embeddings"],
        "tasks": [role for role in ROLES if role in tasks],
    }


def positive_length(path: Path, name: str, value: object) -> int | None:
    """A length setting: None or a positive integer."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise SystemExit(f"{path}: {name} must be a positive integer or null, found {value!r}")
    return value


def read_expansion(
    path: Path, value: object, query_length: int | None, max_seq_length: int
) -> dict[str, Any] | None:
    """The Transformer's query_expansion with its defaults filled as the library fills them,
    refusing what it refuses at load (here, with a message) and an expansion longer than the
    max length, where the served query rows would be cut otherwise than encode_query cuts them."""
    if value is None:
        return None
    if not isinstance(value, dict) or not set(value) <= EXPANSION_KEYS:
        raise SystemExit(
            f"{path}: query_expansion {value!r}; only {sorted(EXPANSION_KEYS)} can be exported"
        )
    expansion = {
        "strategy": value.get("strategy"),
        "length": positive_length(path, "query_expansion length", value.get("length")),
        "attend": value.get("attend", False),
        "token": value.get("token"),
    }
    if expansion["strategy"] not in EXPANSION_STRATEGIES or expansion["length"] is None:
        raise SystemExit(
            f"{path}: query_expansion {value!r} needs a strategy of "
            f"{' or '.join(EXPANSION_STRATEGIES)} and a length"
        )
    if not isinstance(expansion["attend"], bool) or not isinstance(expansion["token"], str | None):
        raise SystemExit(f"{path}: query_expansion {value!r}: attend is a bool, token a string")
    length = int(expansion["length"])
    if query_length is not None and query_length < length:
        raise SystemExit(
            f"{path}: query_length {query_length} is below the query_expansion length {length}"
        )
    if length > max_seq_length:
        raise SystemExit(
            f"{path}: the query_expansion length {length} exceeds max_seq_length "
            f"{max_seq_length}; it cannot be exported"
        )
    return expansion


def read_similarity(model_dir: Path) -> str:
    """config_sentence_transformers.json's similarity function, refusing all but MaxSim, and the
    settings of PyLate's and Stanford-NLP's saves, which the served tokenizer would not apply."""
    path = model_dir / ST_CONFIG
    config = read_json(path)
    legacy = [key for key in LEGACY_KEYS if key in config]
    if legacy:
        raise SystemExit(
            f"{path}: legacy PyLate / Stanford-NLP settings {legacy}; re-save the model with "
            "sentence-transformers' MultiVectorEncoder.save to export it"
        )
    name = config.get("similarity_fn_name") or DEFAULT_SIMILARITY
    if name != SIMILARITY:
        raise SystemExit(
            f"{path}: similarity_fn_name {name!r}; only {SIMILARITY!r} can be exported, the "
            "served scorer computes MaxSim only (meanmaxsim, MaxSim over the query's length, is "
            "not served yet)"
        )
    return str(name)


def read_multivector_spec(model_dir: Path) -> MultiVectorSpec:
    """Collects architecture, max length, prompts, the multi-vector settings and the head from
    the MultiVectorEncoder folder's configs, refusing what the export cannot serve."""
    modules = read_multivector_modules(model_dir)
    folder = read_folder_spec(model_dir, modules, MULTIVECTOR_MODEL_TYPES, FEATURE_EXTRACTION)
    similarity = read_similarity(model_dir)
    transformer_path = folder.transformer_dir / "sentence_bert_config.json"
    transformer: dict[str, Any] = read_json(transformer_path) if transformer_path.exists() else {}
    if transformer.get("processing_kwargs"):
        raise SystemExit(
            f"{transformer_path}: processing_kwargs {transformer['processing_kwargs']!r} change "
            "how texts are tokenized; they cannot be exported"
        )
    query_length = positive_length(
        transformer_path, "query_length", transformer.get("query_length")
    )
    document_length = positive_length(
        transformer_path, "document_length", transformer.get("document_length")
    )
    expansion = read_expansion(
        transformer_path, transformer.get("query_expansion"), query_length, folder.max_seq_length
    )
    hidden_size = int(read_json(folder.transformer_dir / "config.json")["hidden_size"])
    width, normalized, mask = read_head(model_dir, modules, hidden_size)
    if expansion is not None and mask is None:
        raise SystemExit(
            f"{model_dir / 'modules.json'}: query_expansion without a {MASK_MODULE}, which is what "
            "scores the expansion positions; it cannot be exported"
        )
    return MultiVectorSpec(
        **folder.shared(),
        embedding_dim=width,
        normalized=normalized,
        query_length=query_length,
        document_length=document_length,
        query_expansion=expansion,
        skiplist_words=() if mask is None else mask["words"],
        skiplist_tasks=() if mask is None else mask["tasks"],
        similarity_fn_name=similarity,
        token_pooling=read_pooling(model_dir, modules),
    )
