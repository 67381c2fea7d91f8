"""The model repository one server serves for a catalog, written at each
start (scripts/serve.sh):

    <out>/serializer                 the C++ serializer, shared by every model
    <out>/<name>, <name>_tokens      the entry points (ensembles), per name and alias
    <out>/<name>.tokenizer           the model's tokenizer stage
    <out>/<name>.embedder            the model's embedder, on its engine

Why written, not kept: what differs per model is only the stage names an
ensemble calls, the embedder whose backlog the tokenizer reads, and the
instance count; the rest of each config is model_repository's, and each
model's numbers (width, max length, vocabulary, prompts) are in its export
record, which the stages read. So model_repository holds one config per
stage, and each served config is that config with those fields set, written
in full with a header naming its source: a model's whole contract is in its
served folders' config.pbtxt files. Version folders are links to the stage's
code and the model's export.
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from server.catalog import (
    DEFAULT_CATALOG,
    SERIALIZER,
    TOKENS_SUFFIX,
    Catalog,
    CatalogModel,
    read_catalog,
)
from server.catalog_exports import engine_folder, ensure_exported, export_root
from server.paths import MODEL_REPOSITORY, REPO_ROOT, SERVED_REPOSITORY, SHARED_REPOSITORY

# The stage names the shipped ensembles call, which each served ensemble
# renames to its model's stages.
TOKENIZER_STAGE = "tokenizer"
EMBEDDER_STAGE = "embedder"
# The tokenizer parameter naming the embedder whose backlog it admits by.
EMBEDDER_MODEL_PARAMETER = "embedder_model"


def _read(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def _write(folder: Path, config: model_config_pb2.ModelConfig, source: Path, entry: str) -> None:
    folder.mkdir(parents=True)
    header = (
        f"# Written by server/served_repository.py for catalog entry {entry!r} from\n"
        f"# {source.relative_to(REPO_ROOT)}: edit that file or the catalog, not this one.\n"
    )
    (folder / "config.pbtxt").write_text(header + text_format.MessageToString(config))


def _link_version(target: Path, code: Path, export: Path) -> None:
    """Links the stage's code (the Python files of its model_repository
    version folder) and every file the export wrote for it into `target`."""
    target.mkdir(parents=True)
    files = [*code.glob("*.py"), *(path for path in export.iterdir() if path.is_file())]
    for path in files:
        link = target / path.name
        if not link.exists():
            link.symlink_to(path.resolve())


def _stage(
    out: Path, model: CatalogModel, stage: str, source: Path
) -> model_config_pb2.ModelConfig:
    """A stage of `model`: the config of `source` (a model_repository
    folder), its code, and the export's files for that folder."""
    config = _read(source / "config.pbtxt")
    folder = out / (model.tokenizer if stage == TOKENIZER_STAGE else model.embedder)
    relative = source.relative_to(MODEL_REPOSITORY) / "1"
    if stage == TOKENIZER_STAGE:
        config.parameters[EMBEDDER_MODEL_PARAMETER].string_value = model.embedder
    elif model.instances is not None:
        for group in config.instance_group:
            group.count = model.instances
    _write(folder, config, source / "config.pbtxt", model.name)
    _link_version(folder / "1", MODEL_REPOSITORY / relative, export_root(model) / relative)
    return config


def _entry_points(out: Path, model: CatalogModel) -> None:
    stages = {TOKENIZER_STAGE: model.tokenizer, EMBEDDER_STAGE: model.embedder}
    for ensemble, suffix in (("embed", ""), ("embed_tokens", TOKENS_SUFFIX)):
        source = SHARED_REPOSITORY / ensemble / "config.pbtxt"
        config = _read(source)
        for step in config.ensemble_scheduling.step:
            step.model_name = stages.get(step.model_name, step.model_name)
        for name in model.names:
            folder = out / (name + suffix)
            _write(folder, config, source, model.name)
            (folder / "1").mkdir()


def write_served_repository(catalog: Catalog, out: Path) -> None:
    """Writes the repository for `catalog` into `out`, replacing it."""
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    (out / SERIALIZER).symlink_to(SHARED_REPOSITORY / SERIALIZER)
    for model in catalog.models:
        _stage(out, model, TOKENIZER_STAGE, SHARED_REPOSITORY / TOKENIZER_STAGE)
        _stage(out, model, EMBEDDER_STAGE, MODEL_REPOSITORY / engine_folder(model) / EMBEDDER_STAGE)
        _entry_points(out, model)


def prepare(catalog_path: Path, out: Path) -> Catalog | str:
    """Reads the catalog, exports what is missing or stale, writes the
    repository; the refusal when any of it cannot be done."""
    catalog = read_catalog(catalog_path)
    if isinstance(catalog, str):
        return catalog
    log: list[str] = []
    for model in catalog.models:
        refusal = ensure_exported(model, log)
        for line in log:
            print(f"catalog: {line}", file=sys.stderr, flush=True)
        log.clear()
        if refusal:
            return f"catalog {catalog_path}: {refusal}"
    write_served_repository(catalog, out)
    return catalog


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Export a catalog's models and write its repository."
    )
    parser.add_argument("--catalog", type=Path, default=DEFAULT_CATALOG)
    parser.add_argument("--out", type=Path, default=SERVED_REPOSITORY)
    args = parser.parse_args(argv)
    catalog = prepare(args.catalog.resolve(), args.out.resolve())
    if isinstance(catalog, str):
        print(catalog, file=sys.stderr)
        sys.exit(2)
    names = ", ".join("/".join(model.names) for model in catalog.models)
    print(f"catalog: serving {names} from {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
