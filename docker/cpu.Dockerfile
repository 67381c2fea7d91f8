# The CPU server: Triton 2.51 from the nvidia-pytriton wheel (the server
# scripts/serve.sh runs on a workstation), the C++ serializer, the launcher
# (server/, with the catalog package catalog/) with Envoy for its tenants
# edge, and the gateway (gateway/, on the client library clients/), on
# Debian 12 with its Python 3.11, run as a non-root user. No
# torch: the model repository, exported by the onnx-export service or
# scripts/setup.sh, is mounted at /models, as on the GPU; a model by its Hub
# id comes fetched and exported in volumes (the hub-export service).
#
#   docker build -f docker/cpu.Dockerfile -t triton-embedding/cpu:2.51 .
#
# Where PyPI is reachable only through a proxy that re-signs TLS, pass the
# host's CA bundle as a build secret; it is mounted for the pip steps only and
# never stored in a layer:
#   --secret id=ca-certificates,src=/etc/ssl/certs/ca-certificates.crt

# Build stage: the serializer backend (its unit tests run in the test suite).
# nlohmann-json3-dev: the header-only JSON library it reads its model
# configuration with.
FROM debian:bookworm-slim AS serializer
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       cmake g++ make nlohmann-json3-dev \
    && rm -rf /var/lib/apt/lists/*
COPY backends/embedding_serializer /src/embedding_serializer
RUN cmake -S /src/embedding_serializer -B /build -DCMAKE_BUILD_TYPE=Release \
       -DEMBEDDING_SERIALIZER_TESTS=OFF \
    && cmake --build /build --parallel

# Build stage: the virtual environment. Pip builds model_common, clients,
# catalog and gateway with hatchling here; the final image copies only the
# environment.
FROM debian:bookworm-slim AS venv
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       python3 python3-venv \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/venv
COPY requirements/image.txt requirements/models.txt requirements/edge.txt /src/requirements/
# The pinned packages first, so that a change to the project's packages
# does not download them again.
RUN --mount=type=secret,id=ca-certificates \
    if [ -f /run/secrets/ca-certificates ]; then export PIP_CERT=/run/secrets/ca-certificates; fi \
    && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check \
       -r /src/requirements/image.txt
COPY model_common /src/model_common
COPY clients /src/clients
COPY catalog /src/catalog
COPY gateway /src/gateway
RUN --mount=type=secret,id=ca-certificates \
    if [ -f /run/secrets/ca-certificates ]; then export PIP_CERT=/run/secrets/ca-certificates; fi \
    && /opt/venv/bin/pip install --no-cache-dir --disable-pip-version-check \
       /src/model_common /src/clients /src/catalog /src/gateway

FROM debian:bookworm-slim
# The launcher and the gateway run on Python 3.11; the Python backend's stub
# embeds its shared library.
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       python3 libpython3.11 \
    && rm -rf /var/lib/apt/lists/* \
    && useradd --system --user-group --uid 10001 --no-create-home triton
COPY --from=venv /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# The launcher runs as `python3 -m server.launch` from this folder, its
# REPO_ROOT: it serves the wheel's Triton with the serializer from
# build/serializer/, through the backend folder build/triton_backends/.
WORKDIR /opt/embedding
COPY server /opt/embedding/server
# Read, never run here (no torch; model_common runs from the venv): the
# launcher keys each export by a digest of these files
# (server/catalog_exports.py, EXPORT_CODE), so it serves a model by Hub id
# that compose's hub-export service exported only with the same files under
# its REPO_ROOT.
COPY export /opt/embedding/export
COPY model_common /opt/embedding/model_common
COPY catalog /opt/embedding/catalog
# The default catalog, served from the model repository mounted at /models,
# which the launcher finds as its REPO_ROOT/model_repository.
COPY models.toml /opt/embedding/models.toml
RUN ln -s /models /opt/embedding/model_repository
COPY --from=serializer /build/libtriton_embedding_serializer.so \
     /opt/embedding/build/serializer/libtriton_embedding_serializer.so
# The launcher makes that backend folder's links on every start and leaves
# links already in place as they are: made here, as root, they let the
# non-root user start it with nothing to write.
RUN python3 -c "from server.launch import wheel_triton; wheel_triton()"
# OpenVINO's model cache (the embedder's compiled blobs, so a restart loads
# instead of compiling): the user has no home, and /models is read-only.
ENV XDG_CACHE_HOME=/tmp/cache
USER triton
# HTTP, gRPC, metrics, with --tenants the edge's stats; the gateway service
# listens on 8080.
EXPOSE 8000 8001 8002 8003 8080
HEALTHCHECK --interval=10s --timeout=5s --start-period=120s --retries=3 \
    CMD ["python3", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8000/v2/health/ready', timeout=2)"]
# The catalog (models.toml): its packaged model on the engine its export
# measured faster (OpenVINO in bfloat16 where the processor has it, float32
# elsewhere, or ONNX Runtime; perf/results/*/cpu_engines.md), from a
# repository the launcher writes under the writable /tmp.
CMD ["python3", "-m", "server.launch", "--host=0.0.0.0", "--served-repository=/tmp/served"]
