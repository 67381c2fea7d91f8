"""Python client and command-line tools for the Triton embedding
service (each catalog model's ensembles: NAME for texts, NAME_tokens for
token ids, `embed` and `embed_tokens` by default; a reranker's NAME for
(query, document) pairs; a sparse encoder's NAME for texts, in sparse rows; a
BGE-M3 model's NAME for texts, any of its three outputs)."""

from embedding_client.aio import AsyncEmbeddingClient
from embedding_client.client import EmbeddingClient
from embedding_client.decode import ROW_DTYPES, decode_rows
from embedding_client.errors import (
    EmbeddingError,
    InvalidInputError,
    ServerError,
    UnavailableError,
)
from embedding_client.m3 import M3Result
from embedding_client.rerank import Ranked
from embedding_client.retry import NO_RETRIES, RetryPolicy
from embedding_client.sparse import SparseRow
from embedding_client.tokenization import ClientTokenizer

__all__ = [
    "NO_RETRIES",
    "ROW_DTYPES",
    "AsyncEmbeddingClient",
    "ClientTokenizer",
    "EmbeddingClient",
    "EmbeddingError",
    "InvalidInputError",
    "M3Result",
    "Ranked",
    "RetryPolicy",
    "ServerError",
    "SparseRow",
    "UnavailableError",
    "decode_rows",
]
