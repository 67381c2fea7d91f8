# Builds the TensorRT engine (export/export_tensorrt.py) on the serving GPU.
# 24.10 is the release of the Triton image in triton.Dockerfile: an engine
# loads only into the TensorRT version that built it, and the NGC images of
# one release (yy.mm) ship the same TensorRT (10.5 in 24.10).
FROM nvcr.io/nvidia/tensorrt:24.10-py3

WORKDIR /workspace
COPY export/export_tensorrt.py export/export_tensorrt.py
COPY export/tensorrt_profiles.json export/tensorrt_profiles.json

# Reads the ONNX export from the mounted model repository and writes
# model.plan + engine.json into the engine volume mounted at
# model_repository/tensorrt_gpu/embedder/1.
CMD ["python3", "export/export_tensorrt.py", "--repository", "/workspace/model_repository"]
