"""Infinity 0.0.78 (perf/infinity.py installs and describes it) serving a reranker, for
perf/rerank.py: the CrossEncoder folder with optimum's plain ONNX graph of it beside
(`optimum-cli export onnx --task text-classification`, no fusions, no quantization), served by
its ONNX Runtime ("optimum") engine with its graph optimization off, or by its torch engine
(sentence-transformers' CrossEncoder) on the same folder's weights; and its `/rerank` route.

Infinity's optimum cross-encoder feeds the graph no token type ids (optimum fills zeros), where
CrossEncoder gives the document segment 1: on a BERT reranker its scores are a slightly
different function of the same weights. Its torch engine feeds them.
"""

from __future__ import annotations

import http.client
import json
import os
import shutil
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from harness.ports import free_loopback_port, wait_until_ready
from perf.infinity import INFINITY, INFINITY_DIR, READY_TIMEOUT_S
from perf.rerank_load import Call, RerankRequest

OPTIMUM_CLI = INFINITY.parent / "optimum-cli"
ENGINES = ("torch", "optimum")
# Why the optimum engine's scores are not held to the bar (the module's docstring says more):
# its throughput is the same graph's work, its scores a different function.
UNCHECKED = {
    "optimum": "Infinity's optimum cross-encoder feeds no token type ids (zeros for the document)"
}
SERVED_NAME = "reranker"
STAMP = "source.stamp"  # which weights the folder was made from
HTTP_TIMEOUT_S = 600.0


def _weights_stamp(model_dir: Path) -> str:
    weights = (model_dir / "model.safetensors").stat()
    return f"{model_dir.resolve()}:{weights.st_size}:{weights.st_mtime_ns}\n"


def infinity_folder(model_dir: Path, out: Path) -> Path:
    """`model_dir` copied to `out` with optimum's plain ONNX graph as model.onnx; kept while the
    weights it was made from are the same file (exporting takes a minute)."""
    stamp = _weights_stamp(model_dir)
    if (out / STAMP).exists() and (out / STAMP).read_text() == stamp:
        return out
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(model_dir, partial)
    exported = out.with_name(out.name + ".export")
    shutil.rmtree(exported, ignore_errors=True)
    done = subprocess.run(
        [
            str(OPTIMUM_CLI),
            *("export", "onnx", "--model", str(model_dir)),
            *("--task", "text-classification", "--library-name", "transformers"),
            str(exported),
        ],
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"optimum-cli export of {model_dir} failed: {done.stderr[-2000:]}")
    (exported / "model.onnx").rename(partial / "model.onnx")
    (partial / STAMP).write_text(stamp)
    shutil.rmtree(exported)
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def _is_healthy(url: str) -> bool:
    try:
        with urllib.request.urlopen(f"http://{url}/health", timeout=2) as response:
            return bool(response.status == 200)
    except (urllib.error.URLError, OSError):
        return False


@contextmanager
def running_rerank_infinity(folder: Path, engine: str, log_path: Path) -> Iterator[str]:
    """Infinity serving `folder` as SERVED_NAME with `engine` on a free loopback port; yields
    host:port once it answers /health, stops its process group on exit."""
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, not {engine!r}")
    port = free_loopback_port()
    url = f"127.0.0.1:{port}"
    engine_args = ["--engine", engine, "--device", "cpu"]
    if engine == "optimum":
        engine_args.append("--onnx-disable-optimize")
    command = [
        str(INFINITY),
        "v2",
        # Run inside the folder with model id ".": Infinity 0.0.78 and optimum 2 then agree on
        # the ONNX file's name (perf/infinity.py says why).
        *("--model-id", ".", "--served-model-name", SERVED_NAME),
        *engine_args,
        *("--host", "127.0.0.1", "--port", str(port)),
    ]
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "INFINITY_ANONYMOUS_USAGE_STATS": "0"}
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=folder,
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


def infinity_call(url: str) -> Call:
    """One client with its own kept-alive connection: a request's scores, in document order."""
    host, port = url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=HTTP_TIMEOUT_S)

    def post(body: str) -> tuple[int, dict[str, object]]:
        connection.request("POST", "/rerank", body, {"Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())

    def call(request: RerankRequest) -> list[float]:
        body = json.dumps(
            {
                "model": SERVED_NAME,
                "query": request.query,
                "documents": list(request.documents),
                "return_documents": False,
            }
        )
        try:
            status, answer = post(body)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            # Uvicorn closes a connection idle for 5 s (a client that warmed up first and waited
            # for the others): once more, on a new one.
            connection.close()
            status, answer = post(body)
        if status != 200:
            raise RuntimeError(f"Infinity /rerank answered {status}: {answer}")
        results = answer["results"]
        assert isinstance(results, list)
        ranked = sorted(results, key=lambda result: result["index"])
        return [float(result["relevance_score"]) for result in ranked]

    return call


def infinity_folder_for(model_name: str) -> Path:
    """Where the Infinity copy of a benchmark model is kept."""
    return INFINITY_DIR / "rerank" / model_name
