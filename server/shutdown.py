"""Stop tritonserver without failing the requests in flight.

On SIGTERM, Triton 2.51 stops every model's scheduler at once, so an ensemble
request in flight fails at its next step ("Server is stopping"). Unloading
the ensembles first refuses new requests (NOT_FOUND) while Triton finishes
the ones in flight before it lets a model go; the composing models are then
idle when the server itself is told to stop.
"""

from __future__ import annotations

import json
import time
import urllib.request

POLL_INTERVAL_S = 0.1


def _call(http_url: str, path: str, headers: dict[str, str], body: bytes | None = None) -> bytes:
    request = urllib.request.Request(
        f"http://{http_url}{path}",
        data=body,
        headers=headers,
        method="GET" if body is None else "POST",
    )
    with urllib.request.urlopen(request, timeout=10) as reply:
        return reply.read()


def _states(http_url: str, headers: dict[str, str]) -> dict[str, str]:
    index = json.loads(_call(http_url, "/v2/repository/index", headers, b"{}"))
    return {entry["name"]: entry.get("state", "") for entry in index}


def loaded_ensembles(http_url: str, headers: dict[str, str]) -> list[str]:
    names = [name for name, state in _states(http_url, headers).items() if state == "READY"]
    return [
        name
        for name in names
        if json.loads(_call(http_url, f"/v2/models/{name}/config", headers)).get("platform")
        == "ensemble"
    ]


def drain(http_url: str, headers: dict[str, str], timeout_s: float) -> None:
    """Unloads the ensembles and waits (up to timeout_s) until they are gone:
    a model stays UNLOADING while requests are in flight."""
    ensembles = loaded_ensembles(http_url, headers)
    for name in ensembles:
        _call(http_url, f"/v2/repository/models/{name}/unload", headers, b"{}")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        states = _states(http_url, headers)
        if not any(states.get(name) in ("READY", "UNLOADING") for name in ensembles):
            return
        time.sleep(POLL_INTERVAL_S)
