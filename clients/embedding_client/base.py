"""What the sync and asyncio clients share: their arguments, the transport
picked by protocol, the planner and the max batch sizes already read."""

from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Generic, TypeVar

from embedding_client.plan import planner
from embedding_client.tokenization import ClientTokenizer
from embedding_client.transport import PROTOCOLS, Connection, Protocol, unknown_protocol

TransportT = TypeVar("TransportT")


class ClientBase(ABC, Generic[TransportT]):
    """url is host:port without a scheme (gRPC 8001 or HTTP 8000 by default).
    With `tokenizer` (the server's tokenizer.json), texts are tokenized here
    and sent to `tokens_model`. `priority` is Triton's request priority level
    (0: the model's default), `max_in_flight` the requests kept in flight at
    once, `timeout_s` the most one request may take."""

    def __init__(
        self,
        url: str,
        protocol: Protocol = "grpc",
        *,
        tokenizer: str | Path | ClientTokenizer | None = None,
        model: str = "embed",
        tokens_model: str = "embed_tokens",
        max_in_flight: int = 4,
        priority: int = 0,
        timeout_s: float = 60.0,
    ) -> None:
        if protocol not in PROTOCOLS:
            raise unknown_protocol(protocol)
        self._transport = self._open(protocol, Connection(url, max_in_flight, priority, timeout_s))
        self._planner = planner(model, tokens_model, tokenizer)
        self._limits: dict[str, int] = {}

    @abstractmethod
    def _open(self, protocol: Protocol, connection: Connection) -> TransportT:
        """The transport for a valid protocol."""
