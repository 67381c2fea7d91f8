"""Copies of the model repositories with edited config.pbtxt files, for
measuring or testing another setting side by side with the shipped one."""

from __future__ import annotations

import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from server.launch import DEFAULT_REPOSITORIES

ConfigEdit = Callable[[str], str]


def repository_variant(
    target: Path,
    edits: Mapping[str, ConfigEdit],
    sources: Sequence[Path] = DEFAULT_REPOSITORIES,
) -> Path:
    """Links every file of the `sources` repositories into the one folder
    `target`, except the configs of the models in `edits`, which are written
    through their edit."""
    for source in sources:
        shutil.copytree(source, target, symlinks=True, copy_function=_link, dirs_exist_ok=True)
    for model, edit in edits.items():
        config = target / model / "config.pbtxt"
        text = config.read_text()
        edited = edit(text)
        if edited == text:
            raise ValueError(f"{getattr(edit, '__name__', edit)} left {config} unchanged")
        config.unlink()
        config.write_text(edited)
    return target


def _link(source: str, destination: str) -> None:
    Path(destination).symlink_to(Path(source).resolve())


def set_parameter(key: str, value: str) -> ConfigEdit:
    """An edit that sets the string value of config parameter `key`."""

    def edit(config: str) -> str:
        marker = f'key: "{key}"\n  value: {{ string_value: "'
        start = config.index(marker) + len(marker)
        end = config.index('"', start)
        return config[:start] + value + config[end:]

    edit.__name__ = f"set_parameter({key}={value})"
    return edit
