"""Bring back a Python-backend model whose stub process died.

Triton 2.51 does not restart a dead stub: the instance then fails every
request routed to it ("Stub process ... is not healthy"). The watchdog notes
each Python model's stub processes once the server is ready and, when one of
them is gone and no new one came, reloads that model (unload, then load)
through the model-repository API, which starts fresh stubs; from then on it
watches those. New stubs in place of the old are an operator's reload, which
needs no repair: reloading again would unload the model and fail its
requests for a moment (the soak found it, perf/soak.py). A reload that
fails is retried with exponential backoff, so a model that cannot load does
not keep the server busy reloading it.

Where the stub died with requests in flight, Triton never finishes unloading
the old instances: their other stubs live on, serving nothing, each holding
its copy of the model. Those still there a grace period after the reload
(what requests in flight were given) are killed.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator

from server.health import python_stubs, server_ready
from server.logs import log
from server.shutdown_timings import WATCHDOG_STOP_TIMEOUT_S

POLL_INTERVAL_S = 0.5
RETRY_INITIAL_S = 0.5
RETRY_MAX_S = 30.0
RELOAD_REQUEST_TIMEOUT_S = 120.0


def _log(message: str, level: str = "info") -> None:
    log("watchdog", message, level=level)


def retry_delays() -> Iterator[float]:
    """Waits before each retry of a reload that keeps failing: 0.5 s,
    doubling with each failure, at most 30 s."""
    delay = RETRY_INITIAL_S
    while True:
        yield delay
        delay = min(delay * 2, RETRY_MAX_S)


class ReloadBackoff:
    """When each model may be reloaded again; a success resets its delay."""

    def __init__(self) -> None:
        self._delays: dict[str, Iterator[float]] = {}
        self._not_before: dict[str, float] = {}

    def due(self, model: str, now: float) -> bool:
        return now >= self._not_before.get(model, now)

    def failed(self, model: str, now: float) -> float:
        """Records a failed reload; returns how long the next one waits."""
        delay = next(self._delays.setdefault(model, retry_delays()))
        self._not_before[model] = now + delay
        return delay

    def succeeded(self, model: str) -> None:
        self._delays.pop(model, None)
        self._not_before.pop(model, None)


class StubWatchdog(threading.Thread):
    def __init__(
        self, server_pid: int, http_url: str, headers: dict[str, str], orphan_grace_s: float
    ) -> None:
        super().__init__(name="stub-watchdog", daemon=True)
        self._stopping = threading.Event()
        self._abandoned = threading.Event()
        self._server_pid = server_pid
        self._http_url = http_url
        self._headers = headers
        self._orphan_grace_s = orphan_grace_s
        self._backoff = ReloadBackoff()
        # Stubs of old instances a reload left, by pid: their model, and
        # when they are killed.
        self._orphans: dict[int, tuple[str, float]] = {}

    def stop(self, timeout_s: float = WATCHDOG_STOP_TIMEOUT_S) -> None:
        """Stops watching and waits up to `timeout_s` for a reload in progress
        to finish, so that a drain after it finds every model loaded. A reload
        still running then is abandoned: it sends no further request."""
        self._stopping.set()
        if not self.is_alive():
            return
        self.join(timeout_s)
        if self.is_alive():
            self._abandoned.set()
            _log(f"abandoned a reload still running after {timeout_s:g} s", level="warning")

    def run(self) -> None:
        while not server_ready(self._http_url):
            if self._stopping.wait(POLL_INTERVAL_S):
                return
        watched = self._stubs()
        _log(
            f"watching {sum(len(pids) for pids in watched.values())} stub processes"
            f" of {len(watched)} models"
        )
        while not self._stopping.wait(POLL_INTERVAL_S):
            alive = self._stubs()
            for model, pids in watched.items():
                if self._stopping.is_set():
                    return
                stubs = alive.get(model, set())
                if not pids - stubs:
                    continue
                if stubs - pids:
                    # Triton never restarts a stub: new ones come of a load
                    # (an operator's reload), which started all of them
                    # before it ends the old ones, each in its own time.
                    watched[model] = stubs - pids
                    _log(f"'{model}' was reloaded; watching its new stubs")
                elif self._backoff.due(model, time.monotonic()):
                    reloaded = self._reload(model, stubs)
                    if reloaded is not None:
                        watched[model] = reloaded
            self._end_orphans()

    def _stubs(self) -> dict[str, set[int]]:
        return {model: set(pids) for model, pids in python_stubs(self._server_pid).items()}

    def _reload(self, model: str, before: set[int]) -> set[int] | None:
        """The model's new stubs (those not among `before`, its stubs when it
        was found short of one), or None where the reload failed."""
        _log(f"a stub of '{model}' died; reloading the model", level="warning")
        for action in ("unload", "load"):
            # Once started, a reload runs to its end even while stopping: an
            # unloaded composing model would fail the requests being drained.
            if self._abandoned.is_set():
                return None
            request = urllib.request.Request(
                f"http://{self._http_url}/v2/repository/models/{model}/{action}",
                data=b"{}",
                headers=self._headers,
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=RELOAD_REQUEST_TIMEOUT_S):
                    pass
            except (urllib.error.URLError, ConnectionError, TimeoutError) as error:
                delay = self._backoff.failed(model, time.monotonic())
                _log(
                    f"{action} of '{model}' failed ({error}); retrying in {delay:g} s",
                    level="warning",
                )
                return None
        self._backoff.succeeded(model)
        after = self._stubs().get(model, set())
        end_at = time.monotonic() + self._orphan_grace_s
        for pid in after & before:
            self._orphans.setdefault(pid, (model, end_at))
        _log(f"'{model}' reloaded")
        return after - before

    def _end_orphans(self) -> None:
        now = time.monotonic()
        due = {pid: model for pid, (model, end_at) in self._orphans.items() if end_at <= now}
        if not due:
            return
        # Still this server's stub of that model: the pid was not reused.
        stubs = self._stubs()
        for pid, model in due.items():
            del self._orphans[pid]
            if pid in stubs.get(model, set()):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    continue  # it ended on its own meanwhile
                _log(
                    f"killed stub {pid} of an old '{model}' instance, left serving nothing"
                    f" {self._orphan_grace_s:g} s after the reload",
                    level="warning",
                )
