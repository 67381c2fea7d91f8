"""The model repository one server serves for a catalog, written by the
launcher at each start (server/launch.py --catalog):

    <out>/serializer                 the C++ serializer, shared by every model
    <out>/sparse_serializer          the same backend writing sparse rows, where the
                                     catalog holds a sparse encoder
    <out>/<name>, <name>_tokens      the entry points (ensembles), per name and alias
                                     (a reranker's: <name> alone)
    <out>/<name>.tokenizer           the model's tokenizer stage (a reranker's: of pairs)
    <out>/<name>.embedder            the model's embedder, on its engine
    <out>/<name>.scorer              a reranker's scorer, in place of the embedder
    <out>/<name>.encoder             a sparse encoder's, likewise

Why written, not kept: what differs per model is only the stage names an
ensemble calls, the embedder whose backlog the tokenizer reads, and the
instance counts; the rest of each config is model_repository's, and each
model's numbers (width, max length, vocabulary, prompts) are in its export
record, which the stages read. So model_repository holds one config per
stage, and each served config is that config with those fields set, written
in full with a header naming its source: a model's whole contract is in its
served folders' config.pbtxt files. Version folders are links to the stage's
code and the model's export.
"""

from __future__ import annotations

import shutil
from dataclasses import replace as replaced
from pathlib import Path

from model_common.openvino_setting import PRECISION_PARAMETER, THREADS_PER_STREAM_PARAMETER

from server.catalog import (
    PACKAGED_STAGES,
    SERIALIZER,
    SPARSE_SERIALIZER,
    TOKENS_SUFFIX,
    Catalog,
    CatalogModel,
    read_catalog,
)
from server.catalog_exports import engine_folder, engine_of, ensure_exported, export_root
from server.config_text import Edit, parameter, replace
from server.engine_probe import probed
from server.paths import (
    MODEL_REPOSITORY,
    REPO_ROOT,
    RERANKER_REPOSITORY,
    SHARED_REPOSITORY,
    SPARSE_REPOSITORY,
)

# The stage names the shipped ensembles call, which each served ensemble
# renames to its model's stages, and the ensembles, by task.
TOKENIZER_STAGE = "tokenizer"
EMBEDDER_STAGE = "embedder"
TENSORRT_ENGINE_STAGE = PACKAGED_STAGES[2]
# Each entry point's shipped ensemble (a model_repository folder), by task
# and name suffix.
ENSEMBLES = {
    "embed": {"": SHARED_REPOSITORY / "embed", TOKENS_SUFFIX: SHARED_REPOSITORY / "embed_tokens"},
    "rerank": {"": RERANKER_REPOSITORY / "rerank"},
    "sparse": {"": SPARSE_REPOSITORY / "embed_sparse"},
}
# The tokenizer parameter naming the embedder whose backlog it admits by.
EMBEDDER_MODEL_PARAMETER = "embedder_model"
# The scorer parameter naming the engine that runs its graph.
ENGINE_PARAMETER = "engine"


def _stage_name(stage: str, name: str) -> Edit:
    return lambda text: replace(
        text, rf'(model_name:\s*")({stage})(")', name, f"ensemble step {stage!r}"
    )


def _instances(count: int) -> Edit:
    return lambda text: replace(
        text, r"(instance_group\s*\[[^]]*?count:\s*)(\d+)()", str(count), "instance_group count"
    )


def _write(folder: Path, source: Path, edits: list[Edit], entry: str) -> None:
    text = source.read_text()
    try:
        for edit in edits:
            text = edit(text)
    except ValueError as error:
        raise ValueError(f"{source}: {error}") from None
    folder.mkdir(parents=True)
    header = (
        f"# Written by server/served_repository.py for catalog entry {entry!r} from\n"
        f"# {source.relative_to(REPO_ROOT)}: edit that file or the catalog, not this one.\n"
    )
    (folder / "config.pbtxt").write_text(header + text)


def _link_version(target: Path, code: Path, export: Path) -> None:
    """Links the stage's code (the Python files of its model_repository
    version folder) and every file the export wrote for it into `target`."""
    target.mkdir(parents=True)
    files = [*code.glob("*.py"), *(path for path in export.iterdir() if path.is_file())]
    for path in files:
        link = target / path.name
        if not link.exists():
            link.symlink_to(path.resolve())


def _stage(out: Path, model: CatalogModel, folder: str, source: Path, edits: list[Edit]) -> None:
    """A stage of `model`: the config of `source` (a model_repository
    folder) with `edits`, its code, and the export's files for it."""
    _write(out / folder, source / "config.pbtxt", edits, model.name)
    relative = source.relative_to(MODEL_REPOSITORY) / "1"
    _link_version(out / folder / "1", MODEL_REPOSITORY / relative, export_root(model) / relative)


def _stage_sources(model: CatalogModel) -> tuple[Path, Path]:
    """The model_repository folders of the model's tokenizer and of the
    stage that runs it; the ensembles call each by its folder's name."""
    if model.task == "rerank":
        return RERANKER_REPOSITORY / "pair_tokenizer", RERANKER_REPOSITORY / "scorer"
    if model.task == "sparse":
        return SHARED_REPOSITORY / TOKENIZER_STAGE, SPARSE_REPOSITORY / "encoder"
    engine = MODEL_REPOSITORY / engine_folder(model) / EMBEDDER_STAGE
    return SHARED_REPOSITORY / TOKENIZER_STAGE, engine


def _entry_points(out: Path, model: CatalogModel) -> None:
    tokenizer, engine = (source.name for source in _stage_sources(model))
    for suffix in model.entry_suffixes:
        source = ENSEMBLES[model.task][suffix] / "config.pbtxt"
        edits = [_stage_name(engine, model.engine_stage)]
        # The shipped ensembles call `serializer`, the sparse one too.
        serializer = model.serializer
        if serializer is not None and serializer != SERIALIZER:
            edits.append(_stage_name(SERIALIZER, serializer))
        # The token entry point has no tokenizer step.
        if suffix != TOKENS_SUFFIX:
            edits.append(_stage_name(tokenizer, model.tokenizer))
        for name in model.names:
            _write(out / (name + suffix), source, edits, model.name)
            (out / (name + suffix) / "1").mkdir()


def write_served_repository(
    catalog: Catalog, out: Path, tokenizer_instances: int | None = None
) -> None:
    """Writes the repository for `catalog` into `out`, replacing it; with
    `tokenizer_instances`, every model's tokenizer gets that many (a GPU
    server's embedder outruns one tokenizer: the deployments set 8)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / SERIALIZER).symlink_to(SHARED_REPOSITORY / SERIALIZER)
    if any(model.task == "sparse" for model in catalog.models):
        (out / SPARSE_SERIALIZER).symlink_to(SPARSE_REPOSITORY / SERIALIZER)
    for model in catalog.models:
        tokenizer_source, engine_source = _stage_sources(model)
        tokenizer = [parameter(EMBEDDER_MODEL_PARAMETER, model.engine_stage)]
        if tokenizer_instances is not None:
            tokenizer.append(_instances(tokenizer_instances))
        embedder = [] if model.instances is None else [_instances(model.instances)]
        if model.task == "rerank":
            # One scorer runs either engine's file of the export.
            embedder.append(parameter(ENGINE_PARAMETER, engine_of(model)))
        if model.openvino_setting is not None:
            precision, threads_per_stream = model.openvino_setting
            embedder.append(parameter(PRECISION_PARAMETER, precision))
            embedder.append(parameter(THREADS_PER_STREAM_PARAMETER, str(threads_per_stream)))
        _stage(out, model, model.tokenizer, tokenizer_source, tokenizer)
        _stage(out, model, model.engine_stage, engine_source, embedder)
        # The TensorRT embedder runs its engine, a model of its own.
        engine = engine_source.parent
        if (engine / TENSORRT_ENGINE_STAGE).is_dir():
            _stage(out, model, TENSORRT_ENGINE_STAGE, engine / TENSORRT_ENGINE_STAGE, [])
        _entry_points(out, model)


def prepare(catalog_path: Path, out: Path, tokenizer_instances: int | None = None) -> Catalog | str:
    """Reads the catalog, exports what is missing or stale, probes what OpenVINO will load,
    writes the repository; the refusal when any of it cannot be done."""
    catalog = read_catalog(catalog_path)
    if isinstance(catalog, str):
        return catalog
    models = []
    for model in catalog.models:
        served = ensure_exported(model) or probed(model)
        if isinstance(served, str):
            return f"catalog {catalog_path}: {served}"
        models.append(served)
    catalog = replaced(catalog, models=tuple(models))
    try:
        write_served_repository(catalog, out, tokenizer_instances)
    except ValueError as error:
        return f"catalog {catalog_path}: cannot write the served repository: {error}"
    return catalog
