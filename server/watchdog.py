"""Bring back a Python-backend model whose stub process died.

Triton 2.51 does not restart a dead stub: the instance then fails every
request routed to it ("Stub process ... is not healthy"). The watchdog counts
each Python model's stub processes once the server is ready and, when a count
drops, reloads that model (unload, then load) through the model-repository
API, which starts fresh stubs.
"""

from __future__ import annotations

import sys
import threading
import urllib.error
import urllib.request
from collections import Counter

from server.health import python_stubs, server_ready

POLL_INTERVAL_S = 0.5


def _log(message: str) -> None:
    print(f"watchdog: {message}", file=sys.stderr, flush=True)


class StubWatchdog(threading.Thread):
    def __init__(self, server_pid: int, http_url: str, headers: dict[str, str]) -> None:
        super().__init__(name="stub-watchdog", daemon=True)
        self._stopped = threading.Event()
        self._server_pid = server_pid
        self._http_url = http_url
        self._headers = headers

    def stop(self) -> None:
        """Stops watching: models that go away from now on are meant to."""
        self._stopped.set()

    def run(self) -> None:
        while not server_ready(self._http_url):
            if self._stopped.wait(POLL_INTERVAL_S):
                return
        expected = self._counts()
        while not self._stopped.wait(POLL_INTERVAL_S):
            current = self._counts()
            for model, count in expected.items():
                if current[model] < count and not self._stopped.is_set():
                    self._reload(model)

    def _counts(self) -> Counter[str]:
        return Counter({model: len(pids) for model, pids in python_stubs(self._server_pid).items()})

    def _reload(self, model: str) -> None:
        _log(f"a stub of '{model}' died; reloading the model")
        for action in ("unload", "load"):
            request = urllib.request.Request(
                f"http://{self._http_url}/v2/repository/models/{model}/{action}",
                data=b"{}",
                headers=self._headers,
                method="POST",
            )
            try:
                with urllib.request.urlopen(request, timeout=120):
                    pass
            except urllib.error.URLError as error:
                _log(f"{action} of '{model}' failed: {error}")
                return
        _log(f"'{model}' reloaded")
