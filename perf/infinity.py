"""Infinity (infinity-emb), the open-source embedding server our served
throughput is measured against, serving the plain ONNX graph of the same model
on this machine: its ONNX Runtime ("optimum") engine with Infinity's own
graph optimization turned off, so it runs the graph as exported.

scripts/install_infinity.sh puts it in its own environment with the model
beside it (build/infinity/); `install_infinity` runs that script.
perf_analyzer drives it through its OpenAI service kind, with the same texts
as the Triton runs and base64 output, Infinity's fastest response format.
"""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import numpy.typing as npt

from harness.ports import free_loopback_port, wait_until_ready
from perf.workloads import Workload
from server.paths import REPO_ROOT

INFINITY_DIR = REPO_ROOT / "build" / "infinity"
INFINITY = INFINITY_DIR / "venv" / "bin" / "infinity_emb"
MODEL_DIR = INFINITY_DIR / "model"
INSTALL_SCRIPT = REPO_ROOT / "scripts" / "install_infinity.sh"
INFINITY_VERSION = "0.0.78"
SERVED_NAME = "all-MiniLM-L6-v2"
ENDPOINT = "embeddings"  # Infinity's path; it has no /v1 prefix unless told
READY_TIMEOUT_S = 300.0


def install_infinity() -> None:
    """Runs scripts/install_infinity.sh (which keeps a complete install as it is)."""
    completed = subprocess.run(
        ["bash", str(INSTALL_SCRIPT)], capture_output=True, text=True, check=False
    )
    if completed.returncode != 0:
        raise RuntimeError(f"{INSTALL_SCRIPT} failed: {completed.stderr.strip()[-2000:]}")


def _is_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def running_infinity(log_path: Path) -> Iterator[str]:
    """Infinity on a free loopback port, its output in `log_path`; yields host:port once
    it answers /health, and stops it (its whole process group) on exit."""
    port = free_loopback_port()
    url = f"127.0.0.1:{port}"
    command = [
        str(INFINITY),
        "v2",
        # Infinity 0.0.78 hands optimum the ONNX file's path as found under the model
        # id, and optimum 2 matches it against bare file names: a model id of "." (run
        # inside the model's folder) makes the two agree.
        *("--model-id", ".", "--served-model-name", SERVED_NAME),
        *("--engine", "optimum", "--device", "cpu", "--onnx-disable-optimize"),
        # The model pools by mean (its 1_Pooling); this engine's "auto" would take [CLS].
        *("--pooling-method", "mean"),
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    # Offline: no hub look-ups and no usage statistics sent anywhere.
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=MODEL_DIR,
            env=environment,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_until_ready(
            lambda: _is_healthy(url),
            process,
            log_path,
            what="Infinity",
            timeout_s=READY_TIMEOUT_S,
            interval_s=1.0,
        )
        yield url
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()


def openai_body(texts: Sequence[str], model: str = SERVED_NAME) -> dict[str, object]:
    """One `/embeddings` request body asking for base64 float32 rows."""
    return {"model": model, "input": list(texts), "encoding_format": "base64"}


def write_openai_input_data(load: Workload, path: Path, model: str = SERVED_NAME) -> Path:
    """perf_analyzer's `--input-data` for its OpenAI service kind: one whole request body
    (`payload`) per entry, each holding one request of the workload, for `model`."""
    entries = [{"payload": [openai_body(request, model)]} for request in load.requests]
    path.write_text(json.dumps({"data": entries}))
    return path


def infinity_embeddings(url: str, sentences: Sequence[str]) -> npt.NDArray[np.float32]:
    """Infinity's embeddings of `sentences`, in order, one row each."""
    request = urllib.request.Request(
        f"http://{url}/{ENDPOINT}",
        data=json.dumps(openai_body(sentences)).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        rows = json.load(response)["data"]
    ordered = sorted(rows, key=lambda row: row["index"])
    return np.stack([np.frombuffer(base64.b64decode(row["embedding"]), "<f4") for row in ordered])
