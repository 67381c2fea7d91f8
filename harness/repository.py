"""Copies of the model repositories with edited config.pbtxt files, for
measuring or testing another setting side by side with the shipped one.
Edits go through Triton's own config schema (model_config_pb2), so they name
fields instead of matching the text's layout."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from google.protobuf import text_format
from tritonclient.grpc import model_config_pb2

from server.paths import default_repositories

# Changes the parsed config in place.
ConfigEdit = Callable[[model_config_pb2.ModelConfig], None]


def read_config(path: Path) -> model_config_pb2.ModelConfig:
    return text_format.Parse(path.read_text(), model_config_pb2.ModelConfig())


def edited(path: Path, edit: ConfigEdit) -> model_config_pb2.ModelConfig:
    """The config at `path` with `edit` applied; the file stays as it is."""
    config = read_config(path)
    edit(config)
    return config


def repository_variant(
    target: Path,
    edits: Mapping[str, ConfigEdit],
    sources: Sequence[Path] | None = None,
) -> Path:
    """Links every file of the `sources` repositories into the one folder
    `target`, except the configs of the models in `edits`, which are written
    through their edit (without the shipped file's comments). `sources`:
    the default repositories unless given."""
    for source in sources or default_repositories():
        shutil.copytree(source, target, symlinks=True, copy_function=_link, dirs_exist_ok=True)
    for model, edit in edits.items():
        path = target / model / "config.pbtxt"
        config = edited(path, edit)
        # An edit that changes nothing measures or tests nothing: a stale one.
        if config == read_config(path):
            raise ValueError(f"{getattr(edit, '__name__', edit)} left {path} unchanged")
        path.unlink()
        path.write_text(text_format.MessageToString(config))
    return target


def _link(source: str, destination: str) -> None:
    Path(destination).symlink_to(Path(source).resolve())


def set_parameter(key: str, value: str) -> ConfigEdit:
    """An edit that sets the string value of config parameter `key`, which
    the config must already declare (a misspelt key would be ignored)."""

    def edit(config: model_config_pb2.ModelConfig) -> None:
        if key not in config.parameters:
            raise KeyError(f"the config declares no parameter {key!r}")
        config.parameters[key].string_value = value

    edit.__name__ = f"set_parameter({key}={value})"
    return edit


def chained(*edits: ConfigEdit) -> ConfigEdit:
    """One edit applying `edits` in order."""

    def edit(config: model_config_pb2.ModelConfig) -> None:
        for each in edits:
            each(config)

    edit.__name__ = " + ".join(getattr(each, "__name__", repr(each)) for each in edits)
    return edit
