"""Run the gateway (embedding_gateway.server, the `embedding-gateway`
command) as a child process on a free loopback port and wait until it
answers."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from embedding_gateway.server import API_KEY_VARIABLE

from harness.ports import StartError, answers_ok, free_loopback_port, stop, wait_until_ready

STARTUP_TIMEOUT_S = 30.0
SHUTDOWN_TIMEOUT_S = 10.0


class GatewayStartError(StartError):
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
        return answers_ok(f"{self.url}/health/live")


@contextmanager
def running_gateway(
    triton_grpc_url: str,
    models: Sequence[tuple[str, Path]],
    log_path: Path,
    *,
    api_key: str | None = None,
    extra_args: tuple[str, ...] = (),
    program: Sequence[str] = (sys.executable, "-m", "embedding_gateway.server"),
    cwd: Path | None = None,
) -> Iterator[RunningGateway]:
    """models: (name, tokenizer.json) of each model to serve, `--model` each;
    program: the command that runs the gateway, in `cwd` (default: this
    process's)."""
    port = free_loopback_port()
    command = [
        *program,
        f"--triton-url={triton_grpc_url}",
        *(f"--model={name}={tokenizer}" for name, tokenizer in models),
        "--host=127.0.0.1",
        f"--port={port}",
        *extra_args,
    ]
    environment = {key: value for key, value in os.environ.items() if key != API_KEY_VARIABLE}
    if api_key:
        environment[API_KEY_VARIABLE] = api_key
    with log_path.open("w") as log:
        process = subprocess.Popen(
            command, env=environment, stdout=log, stderr=subprocess.STDOUT, cwd=cwd
        )
    gateway = RunningGateway(f"http://127.0.0.1:{port}", log_path, process.pid)
    try:
        wait_until_ready(
            gateway.is_live,
            process,
            log_path,
            what="the gateway",
            timeout_s=STARTUP_TIMEOUT_S,
            interval_s=0.2,
            error=GatewayStartError,
        )
        yield gateway
    finally:
        stop(process, SHUTDOWN_TIMEOUT_S)
