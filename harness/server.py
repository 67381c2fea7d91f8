"""Run the serve command (server.launch: tritonserver and its watchdog) as a
child process on free loopback ports and wait until it is ready."""

from __future__ import annotations

import gc
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.ports import StartError, free_launcher_endpoints, wait_until_ready
from server.health import child_pids, server_ready
from server.launch_plan import ADMIN_KEY_VARIABLE, BACKLOG_DIR_VARIABLE, Endpoints
from server.paths import REPO_ROOT, default_repositories

STARTUP_TIMEOUT_S = 180
SHUTDOWN_TIMEOUT_S = 60
# A model load: its stubs start and compile their engines.
RELOAD_TIMEOUT_S = 120
# The shared-memory regions of Triton's Python-backend stubs.
STUB_REGION_PREFIX = "/dev/shm/triton_python_backend_shm_region_"


class EndpointUrls:
    """The client addresses of whatever serves on `endpoints`."""

    endpoints: Endpoints

    @property
    def http_url(self) -> str:
        return self.endpoints.http_address

    @property
    def grpc_url(self) -> str:
        return self.endpoints.grpc_address


@dataclass(frozen=True)
class RunningServer(EndpointUrls):
    endpoints: Endpoints
    log_path: Path
    launcher: subprocess.Popen[bytes]  # server.launch, parent of tritonserver

    def is_ready(self) -> bool:
        return server_ready(self.http_url)

    @property
    def tritonserver_pid(self) -> int:
        (pid,) = child_pids(self.launcher.pid)
        return pid

    @property
    def backlog_dir(self) -> Path:
        """The launcher's folder of the stages' shared counts (model_common.backlog)."""
        (folder,) = _backlog_dirs(self.tritonserver_pid)
        return folder


class ServerStartError(StartError):
    pass


def free_loopback_endpoints() -> Endpoints:
    (endpoints,) = free_launcher_endpoints(1)
    return endpoints


@contextmanager
def running_server(
    log_path: Path,
    repositories: Sequence[Path] | None = None,
    admin_key: str | None = None,
    python: Path | None = None,
    extra_args: Sequence[str] = (),
    graceful: bool = False,
    launcher: Sequence[str] | None = None,
    environment: Mapping[str, str] | None = None,
) -> Iterator[RunningServer]:
    """Starts tritonserver, yields once it is ready, stops it on exit.
    `python` runs the launcher, and the Python-backend stubs then use its
    environment (server.launch_plan.server_environment); default: this one.
    `extra_args`: more server.launch options (e.g. --otlp-endpoint=URL).
    `launcher`: the command that starts the launcher with what it serves
    (e.g. scripts/serve.sh --model-id ID) instead of `python` serving
    `repositories`; `environment`: variables set for it.
    The stop kills it and removes the shared memory it leaves, unless
    `graceful`: the tests of a graceful stop start the server so (or a
    launcher of their own), and to every other test the stop is only time,
    about 4 s of unloading each (Triton unloads Python-backend models a
    second or more each), or its whole exit timeout where a stub was killed
    under load and left an instance Triton never unloads."""
    endpoints = free_loopback_endpoints()
    served = launcher or [
        str(python or sys.executable),
        "-m",
        "server.launch",
        *(
            f"--model-repository={repository}"
            for repository in (repositories or default_repositories())
        ),
    ]
    command = [
        *served,
        f"--host={endpoints.host}",
        f"--http-port={endpoints.http_port}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-port={endpoints.metrics_port}",
        *extra_args,
    ]
    # The launcher reads the admin key from its environment only; one set
    # where the tests run must not restrict a server started without one.
    variables = {key: value for key, value in os.environ.items() if key != ADMIN_KEY_VARIABLE}
    variables.update(environment or {})
    if admin_key:
        variables[ADMIN_KEY_VARIABLE] = admin_key
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=variables, stdout=log, stderr=subprocess.STDOUT
        )
    server = RunningServer(endpoints, log_path, process)
    try:
        wait_until_ready(
            server.is_ready,
            process,
            log_path,
            what="tritonserver",
            timeout_s=STARTUP_TIMEOUT_S,
            # Often: the suite starts dozens of servers, and the check is a
            # refused connect or one health request.
            interval_s=0.1,
            error=ServerStartError,
        )
        yield server
    finally:
        # A client a test left unreferenced but uncollected keeps its HTTP
        # connection open, and tritonserver waits its whole exit timeout (30 s)
        # for that connection to close.
        gc.collect()
        _stop(process, graceful)


def _stop(process: subprocess.Popen[bytes], graceful: bool) -> None:
    """SIGTERM lets in-flight requests finish; past the timeout, or at once
    where not graceful, kill all."""
    if graceful:
        process.terminate()
        try:
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
            return
        except subprocess.TimeoutExpired:
            pass
    tree = _tree(process.pid)
    left = _shared_memory(tree)
    for pid in reversed(tree):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass  # it ended meanwhile
    process.wait()
    for path in left:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def _tree(pid: int) -> list[int]:
    """The process and every process under it, parents first (none of one
    that ended: a test may have stopped the server itself)."""
    try:
        children = child_pids(pid)
    except FileNotFoundError:
        return []
    return [pid, *(each for child in children for each in _tree(child))]


def _shared_memory(pids: list[int]) -> set[Path]:
    """What a kill leaves in shared memory: the Python-backend stubs' regions
    the processes have open, and the launcher's folder of backlog counts
    (server.launch_plan.BACKLOG_DIR_VARIABLE in tritonserver's environment)."""
    left: set[Path] = set()
    for pid in pids:
        try:
            targets = [os.readlink(fd) for fd in Path(f"/proc/{pid}/fd").iterdir()]
            left |= _backlog_dirs(pid)
        except OSError:
            continue  # ended meanwhile
        left |= {Path(target) for target in targets if target.startswith(STUB_REGION_PREFIX)}
    return left


def _backlog_dirs(pid: int) -> set[Path]:
    """The backlog folder named in the process's environment (none, or one)."""
    environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    prefix = f"{BACKLOG_DIR_VARIABLE}=".encode()
    return {Path(item[len(prefix) :].decode()) for item in environ if item.startswith(prefix)}


def post_status(url: str, headers: dict[str, str]) -> int:
    """The HTTP status of an empty-JSON POST to `url`, errors included (how
    the admin APIs answer with and without their key)."""
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code


def reload_model(http_url: str, model: str) -> tuple[int, str]:
    """Loads a loaded model again with its config as served but for one
    parameter that no stage reads (`reloaded_at`), as an operator applying a
    changed config does: Triton starts it anew (a load that changes no
    config and no file does nothing). The status and, for an error, its body."""
    url = f"http://{http_url}/v2/models/{model}/config"
    with urllib.request.urlopen(url, timeout=10) as reply:
        config = json.load(reply)
    config.setdefault("parameters", {})["reloaded_at"] = {"string_value": f"{time.time():.6f}"}
    body = json.dumps({"parameters": {"config": json.dumps(config)}}).encode()
    request = urllib.request.Request(
        f"http://{http_url}/v2/repository/models/{model}/load", data=body, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=RELOAD_TIMEOUT_S) as reply:
            return reply.status, ""
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode(errors="replace")
