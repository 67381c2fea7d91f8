"""A Hugging Face Hub on loopback for the model-download tests (issue 48):
folders published as git repositories (harness/hub_git.py), served by olah
(build/olah, installed by scripts/install_olah.sh) offline, so
`huggingface_hub` with HF_ENDPOINT at it downloads them as from
huggingface.co, and no test needs the Hub. `hub_front`
(harness/hub_front.py) puts gated repositories and interrupted downloads in
front of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.hub_front import hub_front, mirror_front
from harness.hub_git import publish, repository_path, tag
from harness.ports import StartError, free_loopback_port, stop, wait_until_ready
from server.paths import REPO_ROOT

__all__ = ["HubStartError", "hub_front", "publish", "repository_path", "running_hub", "tag"]

OLAH_CLI = REPO_ROOT / "build" / "olah" / "bin" / "olah-cli"
INSTALL_SCRIPT = "scripts/install_olah.sh"
# olah imports FastAPI, GitPython and huggingface_hub before it listens:
# about 1 s here, more on a loaded machine.
STARTUP_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
# A path no route of olah's takes: answered 404 at once. Its index page is
# no probe: olah 0.5.4 renders it with a template call Starlette 1 no
# longer accepts, a 500 with a traceback in the log.
READY_PATH = "/hub-harness-ready"


class HubStartError(StartError):
    pass


def _answers(url: str) -> bool:
    """Whether an HTTP server answers at `url`, whatever the status."""
    try:
        with urllib.request.urlopen(url, timeout=2):
            return True
    except urllib.error.HTTPError:
        return True
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def olah_config(port: int, mirrors: Path, cache: Path) -> str:
    """olah's TOML: offline (never huggingface.co), the mirrors, its cache
    in `cache`, and its own address as the one its absolute URLs name."""
    netloc = json.dumps(f"127.0.0.1:{port}")
    return "\n".join(
        [
            "[basic]",
            'host = "127.0.0.1"',
            f"port = {port}",
            f"repos-path = {json.dumps(str(cache))}",
            'mirror-scheme = "http"',
            f"mirror-netloc = {netloc}",
            f"mirror-lfs-netloc = {netloc}",
            f"mirrors-path = [{json.dumps(str(mirrors.resolve()))}]",
            "",
            "[accessibility]",
            "offline = true",
            "",
        ]
    )


@contextmanager
def running_hub(mirrors: Path) -> Iterator[str]:
    """olah serving the repositories published under `mirrors` on a free
    loopback port; yields the endpoint (HF_ENDPOINT), stops it on exit.

    The endpoint is `mirror_front`'s, in front of olah, so an unknown
    revision or file is answered as the Hub answers it. olah's HOME (it
    keeps a database in ~/.olah), cache and log are in a temporary folder,
    so runs share nothing."""
    if not OLAH_CLI.exists():
        raise HubStartError(f"{OLAH_CLI} is missing; run {INSTALL_SCRIPT}")
    with tempfile.TemporaryDirectory(prefix="hub-") as scratch:
        home = Path(scratch)
        port = free_loopback_port()
        config = home / "olah.toml"
        config.write_text(olah_config(port, mirrors, home / "cache"))
        log_path = home / "olah.log"
        env = {**os.environ, "HOME": str(home)}
        with log_path.open("w") as log:
            command = [str(OLAH_CLI), "--config", str(config), "--log-path", str(home / "logs")]
            process = subprocess.Popen(
                command, cwd=home, env=env, stdout=log, stderr=subprocess.STDOUT
            )
        endpoint = f"http://127.0.0.1:{port}"
        try:
            wait_until_ready(
                lambda: _answers(endpoint + READY_PATH),
                process,
                log_path,
                what="olah",
                timeout_s=STARTUP_TIMEOUT_S,
                interval_s=0.2,
                error=HubStartError,
            )
            with mirror_front(endpoint, mirrors) as url:
                yield url
        finally:
            stop(process, STOP_TIMEOUT_S)
