"""What differs between the service's tasks, declared once per task: the sentence-transformers
class a folder of it is saved from (and its export is checked against), the kind of model it
is in messages, the stages that serve it and the engines that can run them, its entry points
and the serializer they end in, where its export and its OpenVINO IR go. The catalog, the
launcher (its served repository, its exports, its load probe and start lines), the export and
the gateway read it here. Adding a task is adding a Task here and its genuinely new code: a
head, a check, its stages' code (docs/adding_a_task.md). Standard library only."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# The serializer that writes embeddings as raw bytes, and the same backend
# writing sparse rows.
SERIALIZER = "serializer"
SPARSE_SERIALIZER = "sparse_serializer"
MULTIVECTOR_SERIALIZER = "multivector_serializer"
# A bi-encoder's token-ids entry point: NAME_tokens.
TOKENS_SUFFIX = "_tokens"
# The engines every task's auto chooses among (export/engine_choice.py).
CPU_ENGINES = ("onnxruntime", "openvino")
# A version folder: where Triton finds a stage's code and export.
VERSION = "1"
# BGE-M3's two heads beside its encoder, each a torch.nn.Linear's state_dict, as FlagEmbedding
# saves them.
COLBERT_HEAD = "colbert_linear.pt"
SPARSE_HEAD = "sparse_linear.pt"


@dataclass(frozen=True)
class Task:
    name: str
    # config_sentence_transformers.json's model_type: the class the folder was saved from,
    # which its export is checked against.
    model_type: str
    kind: str  # what a model of it is called in messages
    # model_repository's folder of the stage that tokenizes.
    tokenizer_stage: str
    # model_repository's folder of the stage that runs the graph, by engine; one folder that
    # several engines run has an `engine` parameter the launcher sets.
    engine_stages: Mapping[str, str]
    # The served name of its engine stage: the catalog name and this suffix.
    stage_suffix: str
    # Its entry points: the suffix after each catalog name, and the model_repository folder
    # of the ensemble served under it.
    entry_points: Mapping[str, str]
    # The shared serializers its entry points end in, each called by its own name in them.
    serializers: tuple[str, ...]
    # The engine stage's parameter giving its threads (what the load probe compiles for).
    threads_parameter: str
    # Every version folder that reads the export's record, beyond its stages'.
    more_records: tuple[str, ...] = ()
    # Engines served for the packaged model only (built on the serving GPU).
    packaged_engines: tuple[str, ...] = field(default=())
    # Its further stages of its own, beside the tokenizer and the engine stage: the suffix of
    # each one's served name (after the catalog name), and its model_repository folder.
    more_stages: Mapping[str, str] = field(default_factory=dict)
    # Those of them that tokenize, so the export writes the serving tokenizer.json there too.
    more_tokenizer_stages: tuple[str, ...] = ()
    # Other tasks whose requests its models answer too, each with the entry point (its
    # suffix) that answers them: the gateway serves them on those tasks' routes.
    also_serves: Mapping[str, str] = field(default_factory=dict)
    # Files whose presence makes a folder this task's whatever its model_type says (bge-m3's
    # heads beside a plain SentenceTransformer's modules).
    folder_files: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Declared as plain dicts, kept read-only.
        for name in ("engine_stages", "entry_points", "more_stages", "also_serves"):
            object.__setattr__(self, name, MappingProxyType(dict(getattr(self, name))))

    def serves(self, task: str) -> bool:
        """Whether its models answer the requests of `task`."""
        return task == self.name or task in self.also_serves

    def entry_point(self, task: str) -> str:
        """The suffix of its entry point that answers `task`'s requests."""
        return "" if task == self.name else self.also_serves[task]

    @property
    def engines(self) -> tuple[str, ...]:
        """What a catalog entry of this task may name as its engine."""
        return ("auto", *self.engine_stages)

    def engine_stage(self, engine: str) -> str:
        return self.engine_stages[engine]

    def shares_engine_stage(self, engine: str) -> bool:
        """Whether the engine's stage folder is another engine's too, so that its `engine`
        parameter says which runs it."""
        folder = self.engine_stages[engine]
        return sum(each == folder for each in self.engine_stages.values()) > 1

    @property
    def onnx_version(self) -> str:
        """Where the export writes model.onnx and its record."""
        return f"{self.engine_stages['onnxruntime']}/{VERSION}"

    @property
    def openvino_version(self) -> str | None:
        """Where the OpenVINO export writes the IR and its record; None: ONNX Runtime only."""
        folder = self.engine_stages.get("openvino")
        return None if folder is None else f"{folder}/{VERSION}"

    @property
    def tokenizer_version(self) -> str:
        """Where the export writes the serving tokenizer.json."""
        return f"{self.tokenizer_stage}/{VERSION}"

    @property
    def tokenizer_versions(self) -> tuple[str, ...]:
        """Every version folder the export writes the serving tokenizer.json into."""
        more = (f"{self.more_stages[suffix]}/{VERSION}" for suffix in self.more_tokenizer_stages)
        return (self.tokenizer_version, *more)

    @property
    def records(self) -> tuple[str, ...]:
        """Every version folder the export writes its record into, so each deploys alone."""
        more = tuple(f"{folder}/{VERSION}" for folder in self.more_stages.values())
        return (self.onnx_version, *self.more_records, *more, self.tokenizer_version)


EMBED = Task(
    name="embed",
    model_type="SentenceTransformer",
    kind="embedding model",
    tokenizer_stage="shared/tokenizer",
    engine_stages={
        "onnxruntime": "onnx_cpu/embedder",
        "openvino": "openvino_cpu/embedder",
        "tensorrt": "tensorrt_gpu/embedder",
    },
    stage_suffix=".embedder",
    entry_points={"": "shared/embed", TOKENS_SUFFIX: "shared/embed_tokens"},
    serializers=(SERIALIZER,),
    threads_parameter="threads",
    # The PyTorch embedder of the GPU kit reads it too.
    more_records=("torch_gpu/embedder/1",),
    packaged_engines=("tensorrt",),
)
RERANK = Task(
    name="rerank",
    model_type="CrossEncoder",
    kind="reranker",
    tokenizer_stage="reranker/pair_tokenizer",
    engine_stages={"onnxruntime": "reranker/scorer", "openvino": "reranker/scorer"},
    stage_suffix=".scorer",
    entry_points={"": "reranker/rerank"},
    # Scores need no serializer.
    serializers=(),
    threads_parameter="intra_op_num_threads",
)
SPARSE = Task(
    name="sparse",
    model_type="SparseEncoder",
    kind="sparse encoder",
    # Its texts are tokenized as a bi-encoder's, by the same stage.
    tokenizer_stage="shared/tokenizer",
    engine_stages={"onnxruntime": "sparse/encoder"},
    stage_suffix=".encoder",
    entry_points={"": "sparse/embed_sparse"},
    serializers=(SPARSE_SERIALIZER,),
    threads_parameter="intra_op_num_threads",
)

MULTIVECTOR = Task(
    name="multivector",
    model_type="MultiVectorEncoder",
    kind="multi-vector encoder",
    # Its tokenizer gives the graph's rows per role (query or document) and which positions
    # are served as vectors (model_common.multivector).
    tokenizer_stage="multivector/tokenizer",
    engine_stages={"onnxruntime": "multivector/encoder"},
    stage_suffix=".encoder",
    # NAME: texts to token vectors; NAME_rerank: a query against documents by MaxSim;
    # NAME_muvera: texts to one MUVERA encoding each, for a single-vector index.
    entry_points={
        "": "multivector/embed_multi",
        "_rerank": "multivector/rerank",
        "_muvera": "multivector/embed_muvera",
    },
    serializers=(MULTIVECTOR_SERIALIZER,),
    threads_parameter="intra_op_num_threads",
    # The MUVERA stage needs nothing of the model's, but a further stage is the launcher's one
    # way to serve a stage beside a model's (each model gets its own, named NAME.muvera).
    more_stages={
        ".pair_tokenizer": "multivector/pair_tokenizer",
        ".maxsim": "multivector/maxsim",
        ".muvera": "multivector/muvera",
    },
    more_tokenizer_stages=(".pair_tokenizer",),
    # Cohere's and TEI's rerank routes score by MaxSim where they name one.
    also_serves={"rerank": "_rerank"},
)

M3 = Task(
    name="m3",
    # BGE-M3 is no sentence-transformers class: its folder is a SentenceTransformer's (CLS,
    # Normalize) with two heads beside it, read by FlagEmbedding's BGEM3FlagModel.
    model_type="BGEM3FlagModel",
    kind="BGE-M3 encoder",
    tokenizer_stage="shared/tokenizer",
    engine_stages={"onnxruntime": "m3/encoder"},
    stage_suffix=".encoder",
    # NAME: texts to any of the dense vector, the sparse token weights and the token vectors,
    # from one pass; a request names the outputs it wants. NAME_tokens: the same from token ids,
    # which the gateway sends, having counted the tokens.
    entry_points={"": "m3/embed_m3", TOKENS_SUFFIX: "m3/embed_m3_tokens"},
    serializers=(SERIALIZER, SPARSE_SERIALIZER, MULTIVECTOR_SERIALIZER),
    threads_parameter="intra_op_num_threads",
    # An embedding request asks NAME for the dense output only, a sparse one for the sparse
    # output only: the embedding and sparse routes serve it as they are.
    also_serves={"embed": "", "sparse": ""},
    folder_files=(COLBERT_HEAD, SPARSE_HEAD),
)

TASKS: Mapping[str, Task] = MappingProxyType(
    {task.name: task for task in (EMBED, RERANK, SPARSE, MULTIVECTOR, M3)}
)
TASKS_BY_MODEL_TYPE: Mapping[str, Task] = MappingProxyType(
    {task.model_type: task for task in TASKS.values()}
)


def folder_task(model_type: object, holds: Callable[[str], bool]) -> Task | None:
    """The task of a folder whose config_sentence_transformers.json names `model_type`, where
    `holds` says whether the folder has a file: a task whose folder_files it has, else the
    one of that model_type; None: no task of this server."""
    for task in TASKS.values():
        if task.folder_files and all(holds(name) for name in task.folder_files):
            return task
    return TASKS_BY_MODEL_TYPE.get(model_type) if isinstance(model_type, str) else None


# The serializers a catalog may need, each a model_repository folder's backend.
SERIALIZER_FOLDERS = MappingProxyType(
    {
        SERIALIZER: "shared/serializer",
        SPARSE_SERIALIZER: "sparse/serializer",
        MULTIVECTOR_SERIALIZER: "multivector/serializer",
    }
)
