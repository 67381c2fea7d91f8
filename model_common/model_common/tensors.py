"""The tensors the Python stages read and write, declared once: each one's
Triton name, data type and per-row dims as the stages' config.pbtxt files
declare them, and the exported graph's tensor it feeds or comes from. The
stages read and write through these, and check their config and graph
against them when they load (model_common.stage_io)."""

from __future__ import annotations

from dataclasses import dataclass

# The numpy type of each Triton data type a stage reads or writes.
_NUMPY_TYPES = {
    "TYPE_STRING": "object",
    "TYPE_INT64": "int64",
    "TYPE_FP32": "float32",
    "TYPE_FP64": "float64",
}


@dataclass(frozen=True)
class Tensor:
    name: str
    data_type: str  # Triton's, as config.pbtxt writes it
    # Per row: every stage batches (max_batch_size > 0); -1 is any length.
    dims: tuple[int, ...]
    graph: str | None = None  # the exported graph's tensor, for those a graph takes or gives

    @property
    def graph_name(self) -> str:
        if self.graph is None:
            raise ValueError(f"{self.name} is no graph's tensor")
        return self.graph

    @property
    def numpy_type(self) -> str:
        return _NUMPY_TYPES.get(self.data_type, self.data_type)


@dataclass(frozen=True)
class StageIO:
    """The tensors a stage's code reads from a request and writes to its
    response: exactly what its config.pbtxt must declare."""

    inputs: tuple[Tensor, ...]
    outputs: tuple[Tensor, ...]


TEXT = Tensor("TEXT", "TYPE_STRING", (1,))
QUERY = Tensor("QUERY", "TYPE_STRING", (1,))
INPUT_IDS = Tensor("INPUT_IDS", "TYPE_INT64", (-1,), "input_ids")
ATTENTION_MASK = Tensor("ATTENTION_MASK", "TYPE_INT64", (-1,), "attention_mask")
TOKEN_TYPE_IDS = Tensor("TOKEN_TYPE_IDS", "TYPE_INT64", (-1,), "token_type_ids")
EMBEDDING = Tensor("EMBEDDING", "TYPE_FP32", (-1,), "embedding")
NORM = Tensor("NORM", "TYPE_FP32", (1,), "norm")
SCORE = Tensor("SCORE", "TYPE_FP32", (1,), "score")
ACTIVATIONS = Tensor("ACTIVATIONS", "TYPE_FP32", (-1,), "activations")
# A multi-vector encoder's: which positions are served vectors (model_common.multivector), and
# each position's vector.
VECTOR_MASK = Tensor("VECTOR_MASK", "TYPE_INT64", (-1,))
TOKEN_VECTORS = Tensor("TOKEN_VECTORS", "TYPE_FP32", (-1, -1), "token_vectors")
# The query's rows beside a document's, where a query is scored against documents by MaxSim.
QUERY_INPUT_IDS = Tensor("QUERY_INPUT_IDS", "TYPE_INT64", (-1,))
QUERY_ATTENTION_MASK = Tensor("QUERY_ATTENTION_MASK", "TYPE_INT64", (-1,))
QUERY_VECTOR_MASK = Tensor("QUERY_VECTOR_MASK", "TYPE_INT64", (-1,))
QUERY_VECTORS = Tensor("QUERY_VECTORS", "TYPE_FP32", (-1, -1))
# Token pooling (model_common.token_pooling): per row the factors the encoder pools its
# VECTOR_MASK positions' vectors by, the model's own then the request's (0: that step does not
# apply); the encoder answers with SERVED_MASK, the positions then served (a pooled row's first
# n), which the serializer and the MaxSim scorer read as their VECTOR_MASK.
POOL_FACTORS = Tensor("POOL_FACTORS", "TYPE_FP64", (2,))
QUERY_POOL_FACTORS = Tensor("QUERY_POOL_FACTORS", "TYPE_FP64", (2,))
SERVED_MASK = Tensor("SERVED_MASK", "TYPE_INT64", (-1,))
# MUVERA (model_common.muvera): per text its one encoding, as a row of one vector [1, F], and a
# mask of that one vector, which the multi-vector serializer writes as a row of one vector;
# named apart from TOKEN_VECTORS and VECTOR_MASK, which the muvera stage reads.
MUVERA_VECTORS = Tensor("MUVERA_VECTORS", "TYPE_FP32", (1, -1))
MUVERA_MASK = Tensor("MUVERA_MASK", "TYPE_INT64", (1,))

# Every embedder's, whatever runs it: token ids in, embeddings and norms out.
EMBEDDER_IO = StageIO(inputs=(INPUT_IDS, ATTENTION_MASK), outputs=(EMBEDDING, NORM))
