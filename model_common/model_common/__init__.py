"""What the Python-backend models of model_repository/ share: the one base
every stage subclasses (`stage`: set up from the model config, checked
against the tensors the code reads and writes, then decode, admit, run,
respond, release), the error kinds, the request-option check and the token
checks, so every first stage refuses a bad request the same way before any
work is spent on it.

Pure Python and numpy except the modules that import
triton_python_backend_utils (`stage`, `embedder`, `onnx_rows`, `door`,
`request_io`, `merged_runs`), which only a Triton Python-backend stub can
import."""
