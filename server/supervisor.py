"""Run a launch plan (server/launch_plan.py): start tritonserver, and the
edge with tenants, each in its own session and stopped by the kernel should
the launcher die; watch the Python-backend stubs (server/watchdog.py); on
SIGTERM or SIGINT stop without failing the requests in flight (the edge
first, then Triton's drain, server/shutdown.py), within the budgets of
server/shutdown_timings.py. A second signal stops tritonserver at once.
Without its edge a server with tenants stops: its clients could no longer
reach it, and nothing would say so.
"""

from __future__ import annotations

import ctypes
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from pathlib import Path

from server.launch_plan import LaunchPlan, Process, ScratchFolder
from server.logs import log
from server.shutdown import drain
from server.shutdown_timings import EDGE_STOP_MARGIN_S, EXIT_TIMEOUT_S
from server.watchdog import StubWatchdog

PR_SET_PDEATHSIG = 1  # from <linux/prctl.h>


def _log(message: str, level: str = "info") -> None:
    log("launcher", message, level=level)


def _stop_with_parent() -> None:
    """Runs in the child: the kernel sends it SIGTERM if this launcher dies."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")


def _start(process: Process, extra: dict[str, str] | None = None) -> subprocess.Popen[bytes]:
    environment = None if process.environment is None else {**process.environment, **(extra or {})}
    # Its own session: a Ctrl-C in the terminal reaches only this launcher,
    # which then stops the server gracefully.
    return subprocess.Popen(
        process.command,
        env=environment,
        preexec_fn=_stop_with_parent,
        start_new_session=True,
    )


def _make_scratch(scratch: ScratchFolder) -> Path:
    return Path(tempfile.mkdtemp(prefix=scratch.prefix, dir=scratch.parent))


def supervise(plan: LaunchPlan) -> int:
    """Runs `plan` until tritonserver exits; its exit status."""
    folder = _make_scratch(plan.scratch)
    try:
        return _Supervisor(plan, folder).run()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


class _Supervisor:
    def __init__(self, plan: LaunchPlan, scratch: Path) -> None:
        self.plan = plan
        self.stopping = threading.Event()
        self.server = _start(plan.server, {plan.scratch.variable: str(scratch)})
        self.edge = None if plan.edge is None else _start(plan.edge)
        self.watchdog = StubWatchdog(
            self.server.pid,
            plan.endpoints.http_address,
            plan.admin_headers,
            orphan_grace_s=EXIT_TIMEOUT_S,
        )
        self.watchdog.start()

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self.on_signal)
        if self.edge is not None:
            threading.Thread(target=self._stop_when_edge_exits, daemon=True).start()
        return self.server.wait()

    def on_signal(self, number: int, _frame: object) -> None:
        if self.stopping.is_set():
            self.server.send_signal(number)  # a second signal: stop at once
            return
        self.stopping.set()
        threading.Thread(target=self._stop_gracefully, name="graceful-stop", daemon=True).start()

    def _stop_gracefully(self) -> None:
        # The edge first: it stops taking requests and lets those in flight
        # through it finish. Then the watchdog: a reload in progress
        # finishes before the drain, and no reload starts while it runs.
        drain_s = self._stop_edge()
        self.watchdog.stop()
        _log("draining: new requests are refused, those in flight finish")
        try:
            drain(self.plan.endpoints.http_address, self.plan.admin_headers, drain_s)
        finally:
            _log("stopping tritonserver")
            self.server.send_signal(signal.SIGTERM)

    def _stop_edge(self) -> float:
        """Stops the edge, if running; what is left of EXIT_TIMEOUT_S for
        Triton's drain."""
        if self.edge is None or self.edge.poll() is not None:
            return EXIT_TIMEOUT_S
        _log("stopping the edge")
        started = time.monotonic()
        self.edge.send_signal(signal.SIGTERM)
        try:
            self.edge.wait(timeout=EXIT_TIMEOUT_S + EDGE_STOP_MARGIN_S)
        except subprocess.TimeoutExpired:
            self.edge.kill()
        # With tenants every request came through the edge: those it let
        # finish are done, and Triton's drain has what is left of the same
        # EXIT_TIMEOUT_S, so the two never add up.
        return max(0.0, EXIT_TIMEOUT_S - (time.monotonic() - started))

    def _stop_when_edge_exits(self) -> None:
        assert self.edge is not None
        code = self.edge.wait()
        if not self.stopping.is_set():
            _log(f"the edge exited ({code}); stopping", level="error")
            self.on_signal(signal.SIGTERM, None)
