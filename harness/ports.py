"""Free loopback ports for a child process to listen on, and waiting until it
is ready: one loop for every launcher, so they fail the same way (the log
tail in the error) whether the child died or never became ready."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path

from server.launch import EDGE_STATS_PORT_OFFSET, Endpoints

LOG_TAIL_CHARS = 4000


class StartError(RuntimeError):
    pass


def free_loopback_ports(count: int) -> list[int]:
    """`count` distinct ports free on 127.0.0.1 a moment ago. All are held
    open together so the OS cannot hand out the same one twice."""
    with ExitStack() as stack:
        sockets = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]


def free_launcher_endpoints(count: int) -> list[Endpoints]:
    """Free loopback ports for `count` launchers' HTTP, gRPC and metrics,
    and the metrics port's neighbour for the edge's stats with tenants. All are held open
    together so the OS cannot hand out the same one twice."""
    with ExitStack() as stack:

        def held(port: int = 0) -> socket.socket | None:
            sock = stack.enter_context(socket.socket())
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                return None
            return sock

        def any_port() -> int:
            sock = held()
            assert sock is not None
            return sock.getsockname()[1]

        found: list[Endpoints] = []
        while len(found) < count:
            metrics = any_port()
            if held(metrics + EDGE_STATS_PORT_OFFSET) is not None:
                found.append(Endpoints("127.0.0.1", any_port(), any_port(), metrics))
        return found


def free_loopback_port() -> int:
    (port,) = free_loopback_ports(1)
    return port


def wait_until_ready(
    ready: Callable[[], bool],
    process: subprocess.Popen[bytes],
    log_path: Path,
    *,
    what: str,
    timeout_s: float,
    interval_s: float,
    error: type[StartError] = StartError,
) -> None:
    """Polls `ready` until it holds; raises `error` with the tail of
    `log_path` once `process` has exited or `timeout_s` has passed."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        exit_code = process.poll()
        if exit_code is not None or time.monotonic() > deadline:
            why = f"exited with code {exit_code}" if exit_code is not None else "timed out"
            tail = log_path.read_text(errors="replace")[-LOG_TAIL_CHARS:]
            raise error(f"{what} did not become ready ({why}); log {log_path}:\n{tail}")
        time.sleep(interval_s)


def answers_ok(url: str) -> bool:
    """Whether a GET of `url` answers 200 within 2 s (a health endpoint)."""
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def stop(process: subprocess.Popen[bytes], timeout_s: float) -> None:
    """Asks `process` to stop (SIGTERM), and kills it if it is still running
    after `timeout_s`."""
    process.terminate()
    try:
        process.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
