"""Everything the soak drives, started as a deployment runs it: one
tritonserver serving a catalog of every task (the packaged MiniLM, a
reranker and a sparse encoder) with traces to a real Jaeger, the gateway on
the same catalog, and the edge (Envoy) with two tenants in front of Triton."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from harness.catalog_files import catalog_beside_minilm
from harness.edge import RunningEdge, running_edge, tenant_toml
from harness.gateway import RunningGateway, running_gateway
from harness.jaeger import RunningJaeger, running_jaeger
from harness.server import RunningServer, running_server
from server.catalog import Catalog
from server.edge.tracing import EdgeTracing
from server.health import python_stubs
from server.paths import EXPORTS, MODEL_REPOSITORY

EMBED_MODEL = "all-MiniLM-L6-v2"
# The names and engines the rerank and sparse tests give the same random-weight
# folders: an export is kept by name (server/catalog_exports.py), so the suite
# exports each once.
RERANK_MODEL = "bert-reranker"
SPARSE_MODEL = "bert_max-sparse"
ENGINES = {RERANK_MODEL: "onnxruntime"}
# The tenant the load goes through, with room for all of it, and the one
# whose small quota the bursts go over.
TENANT_KEY = "soak-tenant-key"
BURST_KEY = "soak-burst-key"
# A tenant of the embedding model alone, with room for the requests for
# another model it sends (each refused).
EMBED_ONLY_KEY = "soak-embed-only-key"
BURST_RATE = 5  # requests a second
BURST_IN_FLIGHT = 4
# Traced requests not carrying a sampled context: none of them, so the
# traced share is the mix's.
TRACE_SAMPLING = "0"


@dataclass(frozen=True)
class SoakStack:
    server: RunningServer
    gateway: RunningGateway
    edge: RunningEdge
    jaeger: RunningJaeger
    catalog: Catalog

    def processes(self) -> dict[str, int]:
        """Each process of the service now, by label: the launcher,
        tritonserver, every Python-backend stub (by model and pid: a killed
        stub's replacement is another process), the gateway and Envoy."""
        triton = self.server.tritonserver_pid
        envoy = self.edge.edge.process
        found = {
            "launcher": self.server.launcher.pid,
            "tritonserver": triton,
            "gateway": self.gateway.pid,
        }
        if envoy is not None:
            found["envoy"] = envoy.pid
        for model, pids in python_stubs(triton).items():
            found.update({f"stub {model} #{pid}": pid for pid in pids})
        return found

    def stub_counts(self) -> dict[str, int]:
        """Live stubs by model."""
        return {
            model: len(pids) for model, pids in python_stubs(self.server.tritonserver_pid).items()
        }


def _tenants(path: Path) -> Path:
    models = [EMBED_MODEL, RERANK_MODEL, SPARSE_MODEL]
    path.write_text(
        tenant_toml("soak", [TENANT_KEY], models, rate=100_000, in_flight=256)
        + tenant_toml(
            "burst", [BURST_KEY], [EMBED_MODEL], rate=BURST_RATE, in_flight=BURST_IN_FLIGHT
        )
        + tenant_toml("embed-only", [EMBED_ONLY_KEY], [EMBED_MODEL], rate=100_000)
    )
    return path


@contextmanager
def soak_stack(workdir: Path, reranker: Path, sparse_encoder: Path) -> Iterator[SoakStack]:
    """The stack on free loopback ports, its logs in `workdir`: `reranker`
    and `sparse_encoder` are sentence-transformers folders (random weights
    in the tests), exported on first use like any catalog entry."""
    catalog = catalog_beside_minilm(
        workdir, {RERANK_MODEL: reranker, SPARSE_MODEL: sparse_encoder}, ENGINES
    )
    with ExitStack() as stack:
        jaeger = stack.enter_context(running_jaeger(workdir / "jaeger"))
        tracing = (f"--otlp-endpoint={jaeger.otlp_endpoint}", f"--trace-sampling={TRACE_SAMPLING}")
        server = stack.enter_context(
            running_server(workdir / "tritonserver.log", [workdir / "served"], extra_args=tracing)
        )
        gateway = stack.enter_context(
            running_gateway(
                server.grpc_url,
                [],
                workdir / "gateway.log",
                extra_args=(
                    f"--catalog={catalog.path}",
                    f"--model-repository={MODEL_REPOSITORY}",
                    f"--exports={EXPORTS}",
                    *tracing,
                ),
            )
        )
        edge = stack.enter_context(
            running_edge(
                server.endpoints,
                _tenants(workdir / "tenants.toml"),
                workdir / "edge",
                catalog.stages(),
                EdgeTracing(jaeger.otlp_endpoint, float(TRACE_SAMPLING)),
            )
        )
        yield SoakStack(server, gateway, edge, jaeger, catalog)
