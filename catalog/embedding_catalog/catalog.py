"""The model catalog: one TOML file naming every model one server serves.

    [[models]]
    name = "all-MiniLM-L6-v2"        # what clients call it: the Triton model, the OpenAI model
    aliases = ["embed"]              # more names for the same model
    # path = "models/e5-small"       # a sentence-transformers folder; absent: the packaged MiniLM
    # hub = "intfloat/e5-small-v2"   # or a Hub model id, downloaded at start (embedding_catalog.hub)
    # revision = "main"              # with hub: a branch, tag or commit (default main)
    # trust_pickle = false           # with hub: accept .bin/.pt weights (default: safetensors only)
    # task = "embed"                 # embed | rerank | sparse | multivector; absent: what the folder says it is
    engine = "auto"                  # auto | onnxruntime | openvino | tensorrt
    instances = 2                    # embedder instances; absent: its config.pbtxt's count

A catalog that cannot be served is refused here, before any export or
start, with a message naming the entry. The launcher (server/catalog.py
names its default, `models.toml` at the repository root) and the gateway
read it here. Standard library only, like the launcher.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from embedding_catalog import toml
from embedding_catalog.hub import HubSource, cached_snapshot, hub_source, not_cached
from embedding_catalog.tasks import EMBED, SERIALIZER, TASKS, TASKS_BY_MODEL_TYPE, Task, folder_task

# auto: on a server with the packaged model's TensorRT engine (built on its
# GPU by export/export_tensorrt.py), that engine; otherwise OpenVINO where
# its export measured it faster than ONNX Runtime on this machine at the
# cosine bar, ONNX Runtime otherwise (the launcher's server/catalog_exports.py).
# Each task's own are its declaration's (embedding_catalog.tasks).
ENGINES = ("auto", *dict.fromkeys(e for task in TASKS.values() for e in task.engine_stages))
KEYS = frozenset(
    {"name", "path", "hub", "revision", "trust_pickle", "aliases", "engine", "instances", "task"}
)
HUB_KEYS = frozenset({"revision", "trust_pickle"})
# What a sentence-transformers folder is for: config_sentence_transformers.json's
# model_type names its class. A folder without one is a bi-encoder, as
# sentence-transformers saved them before it had other classes.
MODEL_TYPE_FILE = "config_sentence_transformers.json"
DEFAULT_MODEL_TYPE = EMBED.model_type
# Triton names a model by its folder: letters, digits, '_', '-' and '.',
# not starting with '.', and short enough for a metric label.
NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
# The Triton models each catalog name becomes (server/served_repository.py):
# the text entry point is the name itself.
TOKENIZER_SUFFIX = ".tokenizer"
# The packaged model's stages keep model_repository's names (the GPU
# embedders and perf/ address them so).
PACKAGED_STAGES = ("tokenizer", "embedder", "embedder_engine")


@dataclass(frozen=True)
class CatalogModel:
    name: str
    path: Path | None  # None: the packaged all-MiniLM-L6-v2
    aliases: tuple[str, ...] = ()
    engine: str = "auto"
    instances: int | None = None
    task: str = "embed"
    # Where `path` came from when the entry names a Hub id: `path` is then
    # the snapshot of the revision's commit in the Hugging Face cache.
    hub: HubSource | None = None
    # Set by the launcher, never by the file: where its load probe found the
    # engine dies in the export's OpenVINO setting on this machine
    # (server/engine_probe.py), the setting served instead (precision,
    # threads per stream), and the line that says why.
    openvino_setting: tuple[str, int] | None = None
    probe_note: str | None = None

    @property
    def task_declaration(self) -> Task:
        return TASKS[self.task]

    @property
    def names(self) -> tuple[str, ...]:
        """Every name clients may call it by."""
        return (self.name, *self.aliases)

    @property
    def tokenizer(self) -> str:
        return PACKAGED_STAGES[0] if self.path is None else self.name + TOKENIZER_SUFFIX

    @property
    def engine_stage(self) -> str:
        """The stage that runs the exported model: the embedder, a
        reranker's scorer or a sparse encoder's encoder."""
        if self.path is None:
            return PACKAGED_STAGES[1]
        return self.name + self.task_declaration.stage_suffix

    @property
    def entry_suffixes(self) -> tuple[str, ...]:
        """The entry points per name: texts in, and for a bi-encoder token
        ids in (NAME_tokens)."""
        return tuple(self.task_declaration.entry_points)

    @property
    def own_stages(self) -> tuple[str, ...]:
        """The stages this entry adds to a server (the shared serializers
        aside); the packaged model's include its TensorRT engine's."""
        if self.path is None:
            return PACKAGED_STAGES
        more = tuple(self.name + suffix for suffix in self.task_declaration.more_stages)
        return (self.tokenizer, self.engine_stage, *more)

    @property
    def serializers(self) -> tuple[str, ...]:
        """The shared serializers its entry points end in."""
        return self.task_declaration.serializers

    @property
    def stages(self) -> tuple[str, ...]:
        """Every model its entry points' ensembles call: its own stages and
        its serializers."""
        return (*self.own_stages, *self.serializers)

    def triton_models(self) -> tuple[str, ...]:
        """The Triton models this entry adds to a server."""
        entries = tuple(name + suffix for name in self.names for suffix in self.entry_suffixes)
        return (*entries, *self.own_stages)


@dataclass(frozen=True)
class Catalog:
    path: Path
    models: tuple[CatalogModel, ...]

    def model(self, name: str) -> CatalogModel | None:
        return next((model for model in self.models if name in model.names), None)

    def stages(self) -> dict[str, tuple[str, ...]]:
        """Each name clients may call a model of this catalog by, with the
        stages its entry points call (an alias's are its model's)."""
        return {name: model.stages for model in self.models for name in model.names}


# Finds an entry's Hub model on this machine: its snapshot folder, or why not.
HubFolder = Callable[[HubSource], Path | str]


def _cached(source: HubSource) -> Path | str:
    return cached_snapshot(source) or not_cached(source)


def read_catalog(path: Path, hub_folder: HubFolder = _cached) -> Catalog | str:
    """The catalog at `path`, or the message that refuses it. An entry
    naming a Hub id is served from the folder `hub_folder` gives it: the
    launcher's downloads it, everyone else's looks in the cache."""
    try:
        document = toml.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        return f"catalog {path}: cannot read it ({error.strerror})"
    except toml.TOMLDecodeError as error:
        return f"catalog {path}: not valid TOML ({error})"
    tables = document.get("models")
    if not isinstance(tables, list) or not tables:
        return f"catalog {path}: no [[models]] entry"
    models: list[CatalogModel] = []
    for index, table in enumerate(tables):
        model = _entry(table, path.parent, hub_folder)
        if isinstance(model, str):
            label = table.get("name") if isinstance(table.get("name"), str) else f"#{index + 1}"
            return f"catalog {path}: entry {label!r}: {model}"
        models.append(model)
    clash = _name_clash(models)
    return f"catalog {path}: {clash}" if clash else Catalog(path, tuple(models))


def _entry(table: dict[str, object], base: Path, hub_folder: HubFolder) -> CatalogModel | str:
    unknown = sorted(table.keys() - KEYS)
    if unknown:
        return f"unknown keys {unknown} (known: {sorted(KEYS)})"
    name = table.get("name")
    if not isinstance(name, str):
        return "'name' is required and must be a string"
    aliases = table.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(alias, str) for alias in aliases):
        return "'aliases' must be a list of strings"
    for each in (name, *aliases):
        if not NAME_PATTERN.fullmatch(each):
            return (
                f"{each!r} is not a name Triton can serve: letters, digits, '_', '-' and '.', "
                "starting with a letter or digit, at most 64 characters"
            )
    engine = table.get("engine", "auto")
    if engine not in ENGINES:
        return f"'engine' is {engine!r}; expected one of {list(ENGINES)}"
    instances = table.get("instances")
    if instances is not None and (
        isinstance(instances, bool) or not isinstance(instances, int) or instances < 1
    ):
        return "'instances' must be a positive integer"
    task = table.get("task")
    if task is not None and task not in TASKS:
        return f"'task' is {task!r}; expected one of {list(TASKS)}"
    folder = table.get("path")
    source: HubSource | None = None
    if "hub" in table:
        if folder is not None:
            return "'path' and 'hub' name two sources; give one"
        source = hub_source(table)
        if isinstance(source, str):
            return source
    elif table.keys() & HUB_KEYS:
        return f"{sorted(table.keys() & HUB_KEYS)} apply to a 'hub' entry only"
    if folder is None and source is None:
        if task not in (None, "embed"):
            return (
                f"'task' is {task!r}, but the packaged model (no 'path') is a bi-encoder: 'embed'"
            )
        return CatalogModel(name, None, tuple(aliases), str(engine), instances)
    if engine in EMBED.packaged_engines:
        return f"the {engine} engine serves the packaged model only (an entry without 'path')"
    if source is not None:
        snapshot = hub_folder(source)
        if isinstance(snapshot, str):
            return snapshot
        resolved = snapshot
        if not (resolved / "modules.json").is_file():
            return (
                f"hub {source.describe()} is not a sentence-transformers model (no modules.json): "
                "name a repository saved by sentence-transformers"
            )
    elif not isinstance(folder, str):
        return "'path' must be a string"
    else:
        resolved = (base / folder).resolve()
        if not (resolved / "modules.json").is_file():
            return f"'path' {resolved} is not a sentence-transformers folder (no modules.json)"
    kind = folder_kind(resolved)
    if isinstance(kind, str):
        return kind if source is None else f"hub {source.describe()}: {kind}"
    if task is not None and task != kind.task:
        return f"'task' is {task!r}, but {resolved} holds a {kind.model_type}: {kind.task!r}"
    engines = TASKS[kind.task].engines
    served_by = [each for each in engines if each != "auto"]
    if engine not in engines:
        return (
            f"'engine' is {engine!r}, but a {kind.model_type} is served by "
            f"{' or '.join(served_by)} only, so far"
        )
    return CatalogModel(
        name, resolved, tuple(aliases), str(engine), instances, kind.task, hub=source
    )


@dataclass(frozen=True)
class FolderKind:
    model_type: str  # the sentence-transformers class the folder was saved from
    task: str


def folder_kind(folder: Path) -> FolderKind | str:
    """What the sentence-transformers folder holds, or the message that
    refuses it."""
    path = folder / MODEL_TYPE_FILE
    model_type = DEFAULT_MODEL_TYPE
    if path.is_file():
        try:
            document = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            return f"{path}: cannot read it as JSON ({error})"
        if not isinstance(document, dict):
            return f"{path}: not a JSON object"
        model_type = document.get("model_type", model_type)
    task = folder_task(model_type, lambda name: (folder / name).is_file())
    if task is None:
        return (
            f"{path}: model_type {model_type!r} is no model this server knows "
            f"(known: {', '.join(TASKS_BY_MODEL_TYPE)})"
        )
    return FolderKind(task.model_type, task.name)


def _name_clash(models: list[CatalogModel]) -> str | None:
    """The first Triton model name two entries would both add, if any."""
    owners: dict[str, str] = {SERIALIZER: "the shared serializer"}
    for model in models:
        for triton_name in model.triton_models():
            owner = owners.get(triton_name)
            if owner is not None:
                return (
                    f"entry {model.name!r} needs the Triton model {triton_name!r}, "
                    f"which {owner} has already"
                )
            owners[triton_name] = f"entry {model.name!r}"
    return None
