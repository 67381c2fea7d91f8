"""Run tritonserver as a child process on free loopback ports and wait until
it is ready: used by the tests and the perf tools."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from server.launch import MODEL_REPOSITORY, Endpoints, server_command, server_environment

STARTUP_TIMEOUT_S = 180
SHUTDOWN_TIMEOUT_S = 60


@dataclass(frozen=True)
class RunningServer:
    endpoints: Endpoints
    log_path: Path

    @property
    def http_url(self) -> str:
        return f"{self.endpoints.host}:{self.endpoints.http_port}"

    @property
    def grpc_url(self) -> str:
        return f"{self.endpoints.host}:{self.endpoints.grpc_port}"

    def is_ready(self) -> bool:
        url = f"http://{self.http_url}/v2/health/ready"
        try:
            with urllib.request.urlopen(url, timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False


class ServerStartError(RuntimeError):
    pass


def free_loopback_endpoints() -> Endpoints:
    sockets = [socket.socket() for _ in range(3)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        http_port, grpc_port, metrics_port = (sock.getsockname()[1] for sock in sockets)
    finally:
        for sock in sockets:
            sock.close()
    return Endpoints("127.0.0.1", http_port, grpc_port, metrics_port)


@contextmanager
def running_server(log_path: Path, repository: Path = MODEL_REPOSITORY) -> Iterator[RunningServer]:
    """Starts tritonserver, yields once it is ready, stops it on exit."""
    endpoints = free_loopback_endpoints()
    with log_path.open("w") as log:
        process = subprocess.Popen(
            server_command(endpoints, repository),
            env=server_environment(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    server = RunningServer(endpoints, log_path)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not server.is_ready():
            if process.poll() is not None or time.monotonic() > deadline:
                raise ServerStartError(
                    f"tritonserver did not become ready; log {log_path}:\n"
                    + log_path.read_text()[-4000:]
                )
            time.sleep(0.5)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
