"""The shared loop of the reference scripts that the tests run in the export
environment (st_reference.py, torch_reference.py): one JSON request, or a
list of them, on stdin; the answer, or the list of answers, on stdout; one
cache of loaded models for the whole run."""

import json
import sys
from collections.abc import Callable
from typing import Any

Embed = Callable[[dict[str, Any], dict[Any, Any]], Any]


def answer_requests(embed: Embed) -> None:
    request = json.load(sys.stdin)
    loaded: dict[Any, Any] = {}
    answer = (
        [embed(each, loaded) for each in request]
        if isinstance(request, list)
        else embed(request, loaded)
    )
    json.dump(answer, sys.stdout)
    sys.stdout.write("\n")
