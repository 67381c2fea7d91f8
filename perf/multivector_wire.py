"""What perf/multivector.py reports of the served multi-vector rows themselves: their bytes per
document on the wire in our row format (docs/contract.md, "Multi-vector rows") against the JSON
of the same vectors as a client would parse it, and the client's time per document to decode
each: decode_multivector_rows on the received bytes against json.loads (and orjson.loads) and the
conversion to numpy."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from statistics import fmean, median
from typing import Any

import numpy as np
import numpy.typing as npt
import orjson
import tritonclient.grpc as grpcclient
from embedding_client.multivector_decode import decode_multivector_rows, vector_dims

from harness.priority import BULK

# The row formats compared: the two float widths and a code of each kind (a byte and a bit per
# dimension); uint8 and ubinary are int8's and binary's sizes.
WIRE_DTYPES = ("float32", "float16", "int8", "binary")
# The count before each row's vectors (uint32).
COUNT_BYTES = 4
# What the client library reads (clients/embedding_client/multivector.py).
TEXT_INPUT = "TEXT"
MULTIVECTOR_OUTPUT = "MULTIVECTOR"
CLIENT_TIMEOUT_S = 600
# Decode timing: rounds of enough calls to last this long; the median round counts.
ROUND_S = 0.2
ROUNDS = 5


def raw_rows(url: str, name: str, documents: Sequence[str], dtype: str) -> npt.NDArray[np.uint8]:
    """The entry point's answer for the documents as received: uint8 rows [N, B]."""
    client = grpcclient.InferenceServerClient(url)
    try:
        values = np.array([[text.encode()] for text in documents], dtype=np.object_)
        text = grpcclient.InferInput(TEXT_INPUT, list(values.shape), "BYTES")
        text.set_data_from_numpy(values)
        result = client.infer(
            name,
            [text],
            outputs=[grpcclient.InferRequestedOutput(MULTIVECTOR_OUTPUT)],
            parameters={"input_type": "document", "dtype": dtype},
            priority=BULK,
            client_timeout=CLIENT_TIMEOUT_S,
        )
    finally:
        client.close()
    rows = result.as_numpy(MULTIVECTOR_OUTPUT)
    if rows is None:
        raise RuntimeError(f"{name} answered no {MULTIVECTOR_OUTPUT}")
    return np.asarray(rows, np.uint8)


def decode(rows: npt.NDArray[np.uint8], dtype: str) -> list[npt.NDArray[Any]]:
    dims = vector_dims(rows, dtype)
    if dims is None:
        raise ValueError("no document of the response has a vector")
    return decode_multivector_rows(rows, dtype, dims)


def json_body(vectors: Sequence[npt.NDArray[np.float32]]) -> bytes:
    """The documents' vectors as nested float lists, each float32 in its shortest digits: orjson
    on the float32 arrays, as the gateway writes vectors in JSON (TEI's /embed, vLLM's
    /pooling)."""
    return orjson.dumps(list(vectors), option=orjson.OPT_SERIALIZE_NUMPY)


def json_body_widened(vectors: Sequence[npt.NDArray[np.float32]]) -> bytes:
    """The same with the standard library's json.dumps of .tolist(): each float32 widened to a
    double and written in its digits, as a server without numpy support would."""
    return json.dumps([each.tolist() for each in vectors], separators=(",", ":")).encode()


@dataclass(frozen=True)
class WireBytes:
    """Mean bytes per document over every request's documents."""

    vectors: float  # per document
    dims: int
    own: dict[str, float]  # by dtype: the count and the document's vectors
    sent: dict[str, float]  # by dtype: each row padded to its response's widest (B)
    json_float32: float  # json_body's
    json_widened: float  # json_body_widened's


def wire_bytes(responses: dict[str, Sequence[npt.NDArray[np.uint8]]]) -> WireBytes:
    """responses: by dtype, each request's rows as received (a request of 32 documents is
    under the entry point's max batch size, so the client sends it whole)."""
    own, sent = {}, {}
    for dtype, per_request in responses.items():
        sizes = [COUNT_BYTES + each.nbytes for rows in per_request for each in decode(rows, dtype)]
        own[dtype] = fmean(sizes)
        sent[dtype] = fmean(rows.shape[1] for rows in per_request for _ in rows)
    float32 = [decode(rows, "float32") for rows in responses["float32"]]
    documents = sum(len(each) for each in float32)
    return WireBytes(
        vectors=fmean(len(each) for per_request in float32 for each in per_request),
        dims=int(float32[0][0].shape[1]),
        own=own,
        sent=sent,
        json_float32=sum(len(json_body(each)) for each in float32) / documents,
        json_widened=sum(len(json_body_widened(each)) for each in float32) / documents,
    )


def seconds_per_call(work: Callable[[], Any]) -> float:
    """The median over ROUNDS rounds of one call's time, each round at least ROUND_S long."""
    calls = 1
    while True:
        began = time.perf_counter()
        for _ in range(calls):
            work()
        if time.perf_counter() - began >= ROUND_S:
            break
        calls *= 2
    rounds = []
    for _ in range(ROUNDS):
        began = time.perf_counter()
        for _ in range(calls):
            work()
        rounds.append((time.perf_counter() - began) / calls)
    return median(rounds)


@dataclass(frozen=True)
class DecodeTimes:
    """Microseconds per document to turn one response into numpy arrays, per way."""

    documents: int
    rows: dict[str, float]  # by dtype: decode_multivector_rows on the received bytes
    json_loads: float  # json.loads of json_body, then np.asarray per document
    orjson_loads: float  # the same with orjson.loads


def _from_json(loads: Callable[[bytes], Any], body: bytes) -> list[npt.NDArray[np.float32]]:
    return [np.asarray(each, np.float32) for each in loads(body)]


def decode_times(responses: dict[str, npt.NDArray[np.uint8]]) -> DecodeTimes:
    """responses: by dtype, one request's rows as received."""
    documents = len(responses["float32"])
    body = json_body(decode(responses["float32"], "float32"))

    def per_document(work: Callable[[], Any]) -> float:
        return seconds_per_call(work) / documents * 1e6

    return DecodeTimes(
        documents=documents,
        rows={
            dtype: per_document(lambda rows=rows, dtype=dtype: decode(rows, dtype))
            for dtype, rows in responses.items()
        },
        json_loads=per_document(lambda: _from_json(json.loads, body)),
        orjson_loads=per_document(lambda: _from_json(orjson.loads, body)),
    )
