"""Observe a running tritonserver: readiness, and its Python-backend stubs."""

from __future__ import annotations

import urllib.error
import urllib.request
from pathlib import Path

STUB_NAME = "triton_python_backend_stub"


def server_ready(http_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{http_url}/v2/health/ready", timeout=2) as reply:
            return reply.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def python_stubs(server_pid: int) -> dict[str, list[int]]:
    """Stub pids of a tritonserver process, by model name."""
    stubs: dict[str, list[int]] = {}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            args = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        # argv: stub, <repository>/<model>/<version>/model.py, shm region,
        # two shm sizes, the server's pid, ...
        if len(args) > 5 and args[0].endswith(STUB_NAME.encode()) and args[5] == b"%d" % server_pid:
            model = Path(args[1].decode()).parent.parent.name
            stubs.setdefault(model, []).append(int(proc.name))
    return stubs


def child_pids(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children.extend(int(child) for child in (task / "children").read_text().split())
    return children
