"""Run the gateway as a child process on a free loopback port and wait until
it answers: for tests, benchmarks and scripts."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from embedding_client.gateway.server import API_KEY_VARIABLE

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0


class GatewayStartError(RuntimeError):
    pass


@dataclass(frozen=True)
class RunningGateway:
    url: str
    log_path: Path
    pid: int

    @property
    def base_url(self) -> str:
        """What OpenAI clients take as base_url."""
        return f"{self.url}/v1"

    def is_live(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/health/live", timeout=2) as reply:
                return reply.status == 200
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return False


def free_loopback_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def running_gateway(
    triton_grpc_url: str,
    tokenizer: Path,
    log_path: Path,
    *,
    api_key: str | None = None,
    extra_args: tuple[str, ...] = (),
) -> Iterator[RunningGateway]:
    port = free_loopback_port()
    command = [
        sys.executable,
        "-m",
        "embedding_client.gateway.server",
        f"--triton-url={triton_grpc_url}",
        f"--tokenizer={tokenizer}",
        "--host=127.0.0.1",
        f"--port={port}",
        *extra_args,
    ]
    environment = {key: value for key, value in os.environ.items() if key != API_KEY_VARIABLE}
    if api_key:
        environment[API_KEY_VARIABLE] = api_key
    with log_path.open("w") as log:
        process = subprocess.Popen(command, env=environment, stdout=log, stderr=subprocess.STDOUT)
    gateway = RunningGateway(f"http://127.0.0.1:{port}", log_path, process.pid)
    try:
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not gateway.is_live():
            if process.poll() is not None or time.monotonic() > deadline:
                raise GatewayStartError(
                    f"the gateway did not start; log {log_path}:\n{log_path.read_text()[-4000:]}"
                )
            time.sleep(0.2)
        yield gateway
    finally:
        process.terminate()
        try:
            process.wait(timeout=SHUTDOWN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
