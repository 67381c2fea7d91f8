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
    <out>/<name>.encoder             a sparse encoder's, likewise, and a multi-vector
                                     encoder's
    <out>/<name><suffix>             a task's further stages (a multi-vector encoder's
                                     pair tokenizer and MaxSim scorer)

Which stages, entry points and serializer a model has is its task's
declaration (catalog/embedding_catalog/tasks.py). Why written, not kept:
what differs per model is only the stage names an ensemble calls, the embedder whose backlog the tokenizer reads, and the
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

from embedding_catalog.catalog import PACKAGED_STAGES
from embedding_catalog.tasks import SERIALIZER, SERIALIZER_FOLDERS
from model_common.openvino_setting import PRECISION_PARAMETER, THREADS_PER_STREAM_PARAMETER

from server.catalog import Catalog, CatalogModel, read_catalog
from server.catalog_exports import engine_of, ensure_exported, export_root
from server.config_text import Edit, parameter, replace
from server.engine_probe import probed
from server.hub_fetch import fetch
from server.paths import MODEL_REPOSITORY, REPO_ROOT

TENSORRT_ENGINE_STAGE = PACKAGED_STAGES[2]
# The tokenizer parameter naming the embedder whose backlog it admits by.
EMBEDDER_MODEL_PARAMETER = "embedder_model"
# The parameter of a stage several engines run, naming the one that runs it.
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
    stage that runs it on its engine; the ensembles call each by its folder's
    name."""
    task = model.task_declaration
    return (
        MODEL_REPOSITORY / task.tokenizer_stage,
        MODEL_REPOSITORY / task.engine_stage(engine_of(model)),
    )


def _entry_points(out: Path, model: CatalogModel) -> None:
    tokenizer, engine = (source.name for source in _stage_sources(model))
    task = model.task_declaration
    for suffix, ensemble in task.entry_points.items():
        source = MODEL_REPOSITORY / ensemble / "config.pbtxt"
        edits = [_stage_name(engine, model.engine_stage)]
        text = source.read_text()
        # A token ids entry point has no tokenizer step.
        if f'"{tokenizer}"' in text:
            edits.append(_stage_name(tokenizer, model.tokenizer))
        # A task's further stages, where the ensemble calls them.
        for stage_suffix, folder in task.more_stages.items():
            if f'"{Path(folder).name}"' in text:
                edits.append(_stage_name(Path(folder).name, model.name + stage_suffix))
        for name in model.names:
            _write(out / (name + suffix), source, edits, model.name)
            (out / (name + suffix) / "1").mkdir()


def _engine_edits(model: CatalogModel) -> list[Edit]:
    """What differs in the model's engine stage: its instances, which engine runs a stage
    several engines share, and the OpenVINO setting where the load probe moved it."""
    edits = [] if model.instances is None else [_instances(model.instances)]
    engine = engine_of(model)
    if model.task_declaration.shares_engine_stage(engine):
        edits.append(parameter(ENGINE_PARAMETER, engine))
    if model.openvino_setting is not None:
        precision, threads_per_stream = model.openvino_setting
        edits.append(parameter(PRECISION_PARAMETER, precision))
        edits.append(parameter(THREADS_PER_STREAM_PARAMETER, str(threads_per_stream)))
    return edits


def write_served_repository(
    catalog: Catalog, out: Path, tokenizer_instances: int | None = None
) -> None:
    """Writes the repository for `catalog` into `out`, replacing it; with
    `tokenizer_instances`, every model's tokenizer gets that many (a GPU
    server's embedder outruns one tokenizer: the deployments set 8)."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    serializers = {SERIALIZER} | {name for model in catalog.models for name in model.serializers}
    for serializer in sorted(serializers):
        (out / serializer).symlink_to(MODEL_REPOSITORY / SERIALIZER_FOLDERS[serializer])
    for model in catalog.models:
        tokenizer_source, engine_source = _stage_sources(model)
        tokenizer = [parameter(EMBEDDER_MODEL_PARAMETER, model.engine_stage)]
        if tokenizer_instances is not None:
            tokenizer.append(_instances(tokenizer_instances))
        _stage(out, model, model.tokenizer, tokenizer_source, tokenizer)
        _stage(out, model, model.engine_stage, engine_source, _engine_edits(model))
        for suffix, folder in model.task_declaration.more_stages.items():
            # A further stage that tokenizes is admitted by the engine's backlog too.
            edits = tokenizer if suffix in model.task_declaration.more_tokenizer_stages else []
            _stage(out, model, model.name + suffix, MODEL_REPOSITORY / folder, edits)
        # The TensorRT embedder runs its engine, a model of its own.
        engine = engine_source.parent
        if (engine / TENSORRT_ENGINE_STAGE).is_dir():
            _stage(out, model, TENSORRT_ENGINE_STAGE, engine / TENSORRT_ENGINE_STAGE, [])
        _entry_points(out, model)


def exported(catalog_path: Path) -> Catalog | str:
    """Reads the catalog, downloading its Hub models, and exports what is missing or stale;
    the refusal when any of it cannot be done."""
    catalog = read_catalog(catalog_path, fetch)
    if isinstance(catalog, str):
        return catalog
    for model in catalog.models:
        refusal = ensure_exported(model)
        if refusal:
            return f"catalog {catalog_path}: {refusal}"
    return catalog


def prepare(catalog_path: Path, out: Path, tokenizer_instances: int | None = None) -> Catalog | str:
    """Reads the catalog, exports what is missing or stale, probes what OpenVINO will load,
    writes the repository; the refusal when any of it cannot be done."""
    catalog = exported(catalog_path)
    if isinstance(catalog, str):
        return catalog
    models = []
    for model in catalog.models:
        served = probed(model)
        if isinstance(served, str):
            return f"catalog {catalog_path}: {served}"
        models.append(served)
    catalog = replaced(catalog, models=tuple(models))
    try:
        write_served_repository(catalog, out, tokenizer_instances)
    except ValueError as error:
        return f"catalog {catalog_path}: cannot write the served repository: {error}"
    return catalog
