"""Downloads a catalog entry's Hub model (`hub = "org/name"`) into the
Hugging Face cache with huggingface_hub, before the catalog is read
(embedding_catalog.hub finds it there afterwards).

Only what the export reads is fetched: configs, tokenizers and
safetensors weights; pickled weights (.bin, .pt), which run code when
loaded, only for an entry that sets `trust_pickle`, and a model that needs
`trust_remote_code` is refused. huggingface_hub's own settings hold:
`HF_TOKEN`, `HF_ENDPOINT`, `HF_HOME` / `HF_HUB_CACHE`, and
`HF_HUB_OFFLINE=1`, which serves from the cache alone. huggingface_hub
writes each file under a temporary name and links it into the snapshot
only once whole, and refuses a cached snapshot its file listing shows
incomplete, so an interrupted download is never served: the next start
resumes it.

Every failure is one line naming the id and what to do; the catalog
reader prefixes the entry. huggingface_hub is imported only when a catalog
names a Hub model: the launcher otherwise runs on the standard library.
"""

from __future__ import annotations

import fnmatch
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from embedding_catalog.hub import HubSource, hub_cache
from embedding_catalog.tasks import TASKS

from server.logs import log, log_format

# What the export reads from a sentence-transformers repository, at its root
# and in its module folders (fnmatch's '*' crosses '/'), and the files that
# make a folder a task's (BGE-M3's heads: .pt state_dicts, which the export
# loads with torch.load(weights_only=True), running no code).
NEEDED = (
    "*.json",
    "*.txt",
    "*.model",
    "*.safetensors",
    *(name for task in TASKS.values() for name in task.folder_files),
)
PICKLES = ("*pytorch_model*.bin", "*.pt", "*.pth")
# Other engines' exports some repositories ship: never read here.
IGNORED = ("onnx/*", "openvino/*")
# How often a logged download says how far it is.
PROGRESS_EVERY_S = 5.0


def fetch(source: HubSource) -> Path | str:
    """The snapshot folder of `source` in the cache, downloaded where the
    cache lacks it; or the line that refuses it."""
    try:
        import httpx2
        from huggingface_hub import HfApi, constants, snapshot_download
        from huggingface_hub import errors as hub_errors
    except ImportError:
        return (
            f"hub {source.describe()}: huggingface_hub is not installed in the launcher's "
            "environment (scripts/setup.sh installs it in .venv)"
        )
    started = time.monotonic()
    try:
        files = None
        if not constants.HF_HUB_OFFLINE:
            # model_info, not list_repo_files: that one retries an unreachable
            # Hub for about 23 s before it fails.
            try:
                info = HfApi().model_info(source.repo_id, revision=source.revision)
                files = [sibling.rfilename for sibling in info.siblings or ()]
            except (httpx2.ConnectError, httpx2.TimeoutException):
                files = None  # unreachable: the cache decides, as below
        refusal = _pickle_refusal(source, files)
        if refusal:
            return refusal
        patterns = [*NEEDED, *(PICKLES if source.trust_pickle else ())]
        log("catalog", f"fetching hub {source.describe()} from {_where(constants)}")
        progress = None if _bars() else _logged_progress(source)
        try:
            folder = Path(
                snapshot_download(
                    source.repo_id,
                    revision=source.revision,
                    allow_patterns=patterns,
                    ignore_patterns=list(IGNORED),
                    tqdm_class=progress,
                )
            )
        finally:
            if progress is not None:
                # huggingface_hub closes its bars late, at garbage collection:
                # after the download's last line, or after a refusal's.
                progress.over = True
    except hub_errors.GatedRepoError:
        return _gated(source)
    except hub_errors.RepositoryNotFoundError:
        return (
            f"hub {source.describe()}: no such model at {constants.ENDPOINT}, or it is private "
            "and HF_TOKEN is unset or has no access to it: check the id, or set HF_TOKEN"
        )
    except hub_errors.RevisionNotFoundError:
        return (
            f"hub {source.describe()}: the repository has no such revision: name a branch, tag "
            "or commit it has"
        )
    except hub_errors.IncompleteSnapshotError:
        return (
            f"hub {source.describe()}: the cache {hub_cache()} holds it only in part (an "
            "interrupted download), and the Hub cannot be reached to finish it: start once "
            "with network access"
        )
    except hub_errors.LocalEntryNotFoundError:
        return _not_cached(source, constants)
    except hub_errors.HfHubHTTPError as error:
        return f"hub {source.describe()}: the Hub at {constants.ENDPOINT} answered: {_first_line(error)}"
    except (httpx2.TransportError, OSError) as error:
        return (
            f"hub {source.describe()}: the download was interrupted ({_first_line(error)}); "
            "nothing of it is served: start again to resume it"
        )
    refusal = _content_refusal(source, folder)
    if refusal:
        return refusal
    log(
        "catalog",
        f"hub {source.describe()} is commit {folder.name} "
        f"({time.monotonic() - started:.1f} s, in {folder})",
        hub=source.repo_id,
        revision=source.revision,
        commit=folder.name,
    )
    return folder


def _pickle_refusal(source: HubSource, files: list[str] | None) -> str | None:
    """Refuses a repository some of whose weights are pickles only (a
    module folder with a pickle and no safetensors), unless trusted.
    Without a listing (offline), the folder's content decides later."""
    if files is None or source.trust_pickle:
        return None
    wanted = [f for f in files if not any(fnmatch.fnmatch(f, p) for p in IGNORED)]
    safe = {Path(f).parent for f in wanted if f.endswith(".safetensors")}
    pickles = [
        f
        for f in wanted
        if any(fnmatch.fnmatch(f, p) for p in PICKLES) and Path(f).parent not in safe
    ]
    if not pickles:
        return None
    return (
        f"hub {source.describe()} holds weights as pickles only ({', '.join(pickles[:3])}), "
        "which run code when loaded: set trust_pickle = true in its entry (--trust-pickle) "
        "only if you trust its authors"
    )


def _content_refusal(source: HubSource, folder: Path) -> str | None:
    """Refuses what the export must not load: code shipped with the model,
    or pickles the entry does not trust."""
    for name in ("config.json", "tokenizer_config.json"):
        document = _json(folder / name)
        if isinstance(document, dict) and "auto_map" in document:
            return (
                f"hub {source.describe()} needs trust_remote_code (its {name} maps classes to "
                "code in the repository), which this server never runs: serve a model whose "
                "architecture transformers ships"
            )
    modules = _json(folder / "modules.json")
    if isinstance(modules, list):
        for module in modules:
            kind = module.get("type", "") if isinstance(module, dict) else ""
            if not str(kind).startswith("sentence_transformers."):
                return (
                    f"hub {source.describe()} needs trust_remote_code (its modules.json names "
                    f"the module {kind!r} from the repository), which this server never runs"
                )
    files = [str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file()]
    return _pickle_refusal(source, files)


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _gated(source: HubSource) -> str:
    token = "HF_TOKEN has no access to it" if os.environ.get("HF_TOKEN") else "HF_TOKEN is unset"
    return (
        f"hub {source.describe()} is gated and {token}: accept its conditions on the Hub "
        "with your account, then set HF_TOKEN to a token of that account"
    )


def _not_cached(source: HubSource, constants: Any) -> str:
    if constants.HF_HUB_OFFLINE:
        return (
            f"hub {source.describe()}: HF_HUB_OFFLINE=1 and the cache {hub_cache()} does not "
            "hold it: start once with network access, or fill the cache first "
            "(docs/deployment.md, Models by Hub id)"
        )
    return (
        f"hub {source.describe()}: cannot reach the Hub at {constants.ENDPOINT}, and the cache "
        f"{hub_cache()} does not hold it: check the network or HF_ENDPOINT, or fill the cache "
        "and set HF_HUB_OFFLINE=1"
    )


def _where(constants: Any) -> str:
    return f"the cache {hub_cache()}" if constants.HF_HUB_OFFLINE else constants.ENDPOINT


def _first_line(error: BaseException) -> str:
    text = str(error).strip() or type(error).__name__
    return text.splitlines()[0]


def _bars() -> bool:
    """Progress bars for a person at a terminal; logged lines otherwise."""
    return log_format() == "text" and sys.stderr.isatty()


def _logged_progress(source: HubSource) -> type:
    """A tqdm class that logs a line every few seconds instead of drawing a bar."""
    from tqdm.auto import tqdm

    class LoggedProgress(tqdm):  # type: ignore[misc]
        over = False  # set once the download ended, well or not

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            kwargs["disable"] = False
            kwargs["file"] = io.StringIO()  # display() below writes nothing to it
            self._logged_at = time.monotonic()  # tqdm's __init__ displays already
            super().__init__(*args, **kwargs)

        def display(self, msg: str | None = None, pos: int | None = None) -> bool:
            # Bytes only, while under way: fetch() logs the end itself.
            now = time.monotonic()
            under_way = not self.over and self.unit == "B" and 0 < self.n < (self.total or 0)
            if under_way and now - self._logged_at >= PROGRESS_EVERY_S:
                self._logged_at = now
                log(
                    "catalog",
                    f"downloading hub {source.repo_id!r}: "
                    f"{self.n / 1e6:.1f} of {self.total / 1e6:.1f} MB",
                    hub=source.repo_id,
                    bytes=self.n,
                    total_bytes=self.total,
                )
            return True

    return LoggedProgress
