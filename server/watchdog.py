"""Bring back a Python-backend model whose stub process died.

Triton 2.51 does not restart a dead stub: the instance then fails every
request routed to it ("Stub process ... is not healthy"). The watchdog counts
each Python model's stub processes once the server is ready and, when a count
drops, reloads that model (unload, then load) through the model-repository
API, which starts fresh stubs. A reload that fails is retried with
exponential backoff, so a model that cannot load does not keep the server
busy reloading it.
"""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Iterator

from server.health import python_stubs, server_ready
from server.logs import log

POLL_INTERVAL_S = 0.5
RETRY_INITIAL_S = 0.5
RETRY_MAX_S = 30.0
# How long stop() waits for a reload in progress (about 3 s on CPU); one
# still running then is abandoned. The launcher's stop budget counts it.
STOP_TIMEOUT_S = 10.0
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
    def __init__(self, server_pid: int, http_url: str, headers: dict[str, str]) -> None:
        super().__init__(name="stub-watchdog", daemon=True)
        self._stopping = threading.Event()
        self._abandoned = threading.Event()
        self._server_pid = server_pid
        self._http_url = http_url
        self._headers = headers
        self._backoff = ReloadBackoff()

    def stop(self, timeout_s: float = STOP_TIMEOUT_S) -> None:
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
        expected = self._counts()
        _log(f"watching {sum(expected.values())} stub processes of {len(expected)} models")
        while not self._stopping.wait(POLL_INTERVAL_S):
            current = self._counts()
            for model, count in expected.items():
                if self._stopping.is_set():
                    return
                if current[model] < count and self._backoff.due(model, time.monotonic()):
                    self._reload(model)

    def _counts(self) -> Counter[str]:
        return Counter({model: len(pids) for model, pids in python_stubs(self._server_pid).items()})

    def _reload(self, model: str) -> None:
        _log(f"a stub of '{model}' died; reloading the model", level="warning")
        for action in ("unload", "load"):
            # Once started, a reload runs to its end even while stopping: an
            # unloaded composing model would fail the requests being drained.
            if self._abandoned.is_set():
                return
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
                return
        self._backoff.succeeded(model)
        _log(f"'{model}' reloaded")
