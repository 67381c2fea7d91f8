"""Run the serve command (server.launch: tritonserver and its watchdog) as a
child process on free loopback ports and wait until it is ready."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.ports import StartError, free_launcher_endpoints, wait_until_ready
from server.health import child_pids, server_ready
from server.launch_plan import ADMIN_KEY_VARIABLE, Endpoints
from server.paths import REPO_ROOT, default_repositories

STARTUP_TIMEOUT_S = 180
SHUTDOWN_TIMEOUT_S = 60


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
) -> Iterator[RunningServer]:
    """Starts tritonserver, yields once it is ready, stops it on exit.
    `python` runs the launcher, and the Python-backend stubs then use its
    environment (server.launch_plan.server_environment); default: this one.
    `extra_args`: more server.launch options (e.g. --otlp-endpoint=URL)."""
    endpoints = free_loopback_endpoints()
    command = [
        str(python or sys.executable),
        "-m",
        "server.launch",
        f"--host={endpoints.host}",
        f"--http-port={endpoints.http_port}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-port={endpoints.metrics_port}",
        *(
            f"--model-repository={repository}"
            for repository in (repositories or default_repositories())
        ),
        *extra_args,
    ]
    # The launcher reads the admin key from its environment only; one set
    # where the tests run must not restrict a server started without one.
    environment = {key: value for key, value in os.environ.items() if key != ADMIN_KEY_VARIABLE}
    if admin_key:
        environment[ADMIN_KEY_VARIABLE] = admin_key
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, cwd=REPO_ROOT, env=environment, stdout=log, stderr=subprocess.STDOUT
        )
    server = RunningServer(endpoints, log_path, process)
    try:
        wait_until_ready(
            server.is_ready,
            process,
            log_path,
            what="tritonserver",
            timeout_s=STARTUP_TIMEOUT_S,
            interval_s=0.5,
            error=ServerStartError,
        )
        yield server
    finally:
        # A client a test left unreferenced but uncollected keeps its HTTP
        # connection open, and tritonserver waits its whole exit timeout (30 s)
        # for that connection to close.
        gc.collect()
        _stop(process)


def _stop(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM lets in-flight requests finish; past the timeout, kill all."""
    process.terminate()
    try:
        process.wait(timeout=SHUTDOWN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for child in child_pids(process.pid):
            os.kill(child, signal.SIGKILL)
        process.kill()
        process.wait()


def post_status(url: str, headers: dict[str, str]) -> int:
    """The HTTP status of an empty-JSON POST to `url`, errors included (how
    the admin APIs answer with and without their key)."""
    request = urllib.request.Request(url, data=b"{}", headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status
    except urllib.error.HTTPError as error:
        return error.code
