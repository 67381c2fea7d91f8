"""What the tests of the gateway's routes share: a JSON request to it."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

from harness.gateway import RunningGateway


def post_json(
    gateway: RunningGateway,
    route: str,
    payload: dict[str, Any],
    parse_float: Callable[[str], Any] = float,
) -> tuple[int, Any]:
    """The status and JSON body of a POST of `payload` to the gateway's route,
    its numbers with a fraction read by `parse_float`."""
    request = urllib.request.Request(
        gateway.url + route,
        data=json.dumps(payload).encode(),
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as reply:
            return reply.status, json.loads(reply.read(), parse_float=parse_float)
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())
