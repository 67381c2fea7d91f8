"""Catalog entries named by their Hugging Face Hub id (`hub = "org/name"`),
and where their files are once downloaded: the standard Hugging Face cache
(`HF_HUB_CACHE`, else `HF_HOME/hub`, else `~/.cache/huggingface/hub`),
laid out as huggingface_hub lays it out, `models--org--name/refs/<branch or
tag>` naming a commit and `snapshots/<commit>/` holding its files.

The launcher downloads an entry before it reads the catalog
(server/hub_fetch.py); the gateway and the edge, reading the same catalog
after it, find the snapshot here without the network. Standard library
only, like the rest of the catalog.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

# The Hub's repository ids: an owner and a name, each of letters, digits,
# '-', '_' and '.', not starting or ending with '-' or '.'.
REPO_ID_PATTERN = re.compile(
    r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?/[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9_])?"
)
DEFAULT_REVISION = "main"
COMMIT_PATTERN = re.compile(r"[0-9a-f]{40}")


@dataclass(frozen=True)
class HubSource:
    repo_id: str
    revision: str = DEFAULT_REVISION
    # Weights as pickles (.bin, .pt) run code when loaded: only where the
    # entry says it trusts them.
    trust_pickle: bool = False

    def describe(self) -> str:
        return f"{self.repo_id!r} at revision {self.revision!r}"


def hub_cache() -> Path:
    """The Hugging Face cache folder huggingface_hub uses in this environment."""
    env = os.environ
    if env.get("HF_HUB_CACHE"):
        return Path(env["HF_HUB_CACHE"]).expanduser()
    home = env.get("HF_HOME") or str(
        Path(env.get("XDG_CACHE_HOME") or "~/.cache").expanduser() / "huggingface"
    )
    return Path(home).expanduser() / "hub"


def cached_snapshot(source: HubSource) -> Path | None:
    """The cached snapshot of `source`'s revision, if the cache holds one."""
    repo = hub_cache() / ("models--" + source.repo_id.replace("/", "--"))
    commit = source.revision
    if not COMMIT_PATTERN.fullmatch(commit):
        ref = repo / "refs" / commit
        if not ref.is_file():
            return None
        commit = ref.read_text(encoding="utf-8").strip()
    snapshot = repo / "snapshots" / commit
    return snapshot if snapshot.is_dir() else None


def hub_source(table: dict[str, object]) -> HubSource | str:
    """The `hub`, `revision` and `trust_pickle` keys of a catalog entry, or
    the message that refuses them."""
    repo_id = table.get("hub")
    if not isinstance(repo_id, str) or not REPO_ID_PATTERN.fullmatch(repo_id):
        return f"'hub' is {repo_id!r}; expected a Hub model id 'owner/name'"
    revision = table.get("revision", DEFAULT_REVISION)
    if not isinstance(revision, str) or not revision.strip():
        return "'revision' must be a branch, tag or commit of the Hub repository"
    trust_pickle = table.get("trust_pickle", False)
    if not isinstance(trust_pickle, bool):
        return "'trust_pickle' must be true or false"
    return HubSource(repo_id, revision, trust_pickle)


def not_cached(source: HubSource) -> str:
    """The refusal of an entry whose snapshot the cache does not hold."""
    return (
        f"hub {source.describe()} is not in the Hugging Face cache {hub_cache()}: "
        "start the server with this catalog first, which downloads it"
    )
