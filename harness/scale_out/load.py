"""Load through the balancer while a scenario acts on the replicas, in a
background thread until told to stop (a closed loop, or open-loop arrivals
at a fixed rate), and a watch on which hosts Envoy routes to. Every request
ends in an Outcome (harness/load.py)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import tritonclient.grpc.aio as grpcaio

from harness.load import Outcome, request_texts, send
from harness.priority import INTERACTIVE
from harness.scale_out.cluster import Envoy

TEXTS_PER_REQUEST = 8
# Distinct requests the closed loops cycle through: few enough that every
# measured window holds the same mix of text lengths many times over, so
# throughputs compare the replicas, not the texts each window drew.
CYCLE_REQUESTS = 16
# Long enough that only the service, never the client, gives up on a request
# of a zero-failure scenario.
CLIENT_DEADLINE_S = 30.0


class BackgroundLoad:
    """Requests to `url` over one gRPC channel from start() until stop():
    `concurrency` clients in a closed loop, each sending its next request
    when one returns, or else open-loop arrivals at `rate_per_s`, whatever
    the service does. With `key`, each request carries it, as a tenant's
    client sends it to the edge."""

    def __init__(
        self,
        url: str,
        *,
        concurrency: int = 0,
        rate_per_s: float = 0.0,
        deadline_s: float = CLIENT_DEADLINE_S,
        key: str | None = None,
        texts_per_request: int = TEXTS_PER_REQUEST,
    ) -> None:
        if (concurrency > 0) == (rate_per_s > 0):
            raise ValueError("give either concurrency or rate_per_s")
        self.url = url
        self.concurrency = concurrency
        self.rate_per_s = rate_per_s
        self.deadline_s = deadline_s
        self.headers = None if key is None else {"authorization": f"Bearer {key}"}
        self.outcomes: list[Outcome] = []
        self._requests = request_texts(CYCLE_REQUESTS, texts_per_request)
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    async def _run(self) -> None:
        async with grpcaio.InferenceServerClient(self.url) as client:
            if self.rate_per_s:
                await self._open_loop(client)
            else:
                await asyncio.gather(*(self._worker(client, i) for i in range(self.concurrency)))

    async def _send(self, client: grpcaio.InferenceServerClient, index: int) -> None:
        texts = self._requests[index % len(self._requests)]
        self.outcomes.append(
            await send(client, texts, INTERACTIVE, self.deadline_s, headers=self.headers)
        )

    async def _worker(self, client: grpcaio.InferenceServerClient, offset: int) -> None:
        index = offset
        while not self._stopping.is_set():
            await self._send(client, index)
            index += self.concurrency

    async def _open_loop(self, client: grpcaio.InferenceServerClient) -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        tasks = []
        index = 0
        while not self._stopping.is_set():
            tasks.append(asyncio.create_task(self._send(client, index)))
            index += 1
            await asyncio.sleep(max(0.0, start + index / self.rate_per_s - loop.time()))
        await asyncio.gather(*tasks)

    def start(self) -> BackgroundLoad:
        self._thread.start()
        return self

    def stop(self) -> list[Outcome]:
        """Stops sending; returns once every request sent was answered."""
        self._stopping.set()
        self._thread.join()
        return self.outcomes


@dataclass
class RouteWatch:
    """Polls Envoy's view of its hosts every `interval_s` in a thread:
    (time.monotonic(), gRPC ports Envoy routes to) at each change."""

    envoy: Envoy
    interval_s: float = 0.05
    changes: list[tuple[float, frozenset[int]]] = field(default_factory=list)
    _stopping: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _run(self) -> None:
        while not self._stopping.is_set():
            ports = frozenset(self.envoy.routable_ports())
            if not self.changes or self.changes[-1][1] != ports:
                self.changes.append((time.monotonic(), ports))
            time.sleep(self.interval_s)

    def start(self) -> RouteWatch:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopping.set()
        if self._thread:
            self._thread.join()

    def first_without(self, port: int, after: float) -> float | None:
        """The first time at or after `after` at which Envoy did not route
        to `port`; None if it always did."""
        return self._first(lambda ports: port not in ports, after)

    def first_with(self, port: int, after: float) -> float | None:
        return self._first(lambda ports: port in ports, after)

    def _first(self, holds: Callable[[frozenset[int]], bool], after: float) -> float | None:
        # The state at `after` is the last change before it.
        for index, (at, ports) in enumerate(self.changes):
            following = self.changes[index + 1][0] if index + 1 < len(self.changes) else None
            if (following is None or following > after) and holds(ports):
                return max(at, after)
        return None
