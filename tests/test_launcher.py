"""server.launch as the containers run it, on a real tritonserver: the admin
key comes from the environment and stays off the launcher's command line,
--triton-home serves an installed Triton's layout as is, a graceful stop
waits for a reload in progress before it drains; its log lines, JSON
objects by default, the human lines with --log-format text; and the
watchdog's retry backoff."""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from pathlib import Path

import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from harness.edge import tenant_toml
from harness.logs import RECORD_FIELDS, first_index, messages
from harness.ports import StartError, wait_until_ready
from harness.requests import text_inputs
from harness.server import free_loopback_endpoints, post_status
from server.catalog import DEFAULT_CATALOG, Catalog, read_catalog
from server.catalog_exports import engine_of
from server.health import child_pids, python_stubs, server_ready
from server.launch_plan import ADMIN_KEY_HEADER, ADMIN_KEY_VARIABLE
from server.paths import OPENVINO_MODEL_DIR, REPO_ROOT, SERIALIZER_BACKEND, SERIALIZER_FILE
from server.tracing import Tracing
from server.triton_install import installed_triton, wheel_triton
from server.watchdog import RETRY_MAX_S, ReloadBackoff, retry_delays

STARTUP_TIMEOUT_S = 180.0
_CATALOG = read_catalog(DEFAULT_CATALOG)
assert isinstance(_CATALOG, Catalog), _CATALOG
# What a launcher without --model-repository serves.
DEFAULT_MODEL = _CATALOG.models[0]
LAUNCHER_EXIT_TIMEOUT_S = 90.0


@dataclass(frozen=True)
class Launcher:
    process: subprocess.Popen[bytes]
    http_url: str
    grpc_url: str
    log_path: Path
    admin_key: str

    @property
    def tritonserver_pid(self) -> int:
        (pid,) = child_pids(self.process.pid)
        return pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, logger: str, fragment: str, timeout_s: float) -> None:
        """Until a JSON line of `logger` holds `fragment` in its message."""
        deadline = time.monotonic() + timeout_s
        while first_index(self.log(), logger, fragment) < 0:
            assert self.process.poll() is None, f"launcher exited:\n{self.log()[-4000:]}"
            assert time.monotonic() < deadline, f"no {fragment!r} in the log:\n{self.log()[-4000:]}"
            time.sleep(0.1)

    def stop(self) -> int:
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout=LAUNCHER_EXIT_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.process.kill()  # tritonserver follows (PR_SET_PDEATHSIG)
            self.process.wait()
            raise


def _start(log_path: Path, arguments: list[str]) -> Launcher:
    """`python -m server.launch` on free loopback ports with a fresh admin key
    in its environment, once ready; the default catalog's repository is
    written beside the log, so launchers side by side do not share one."""
    endpoints = free_loopback_endpoints()
    admin_key = secrets.token_urlsafe(24)
    command = [
        sys.executable,
        "-m",
        "server.launch",
        "--host=127.0.0.1",
        f"--http-port={endpoints.http_port}",
        f"--grpc-port={endpoints.grpc_port}",
        f"--metrics-port={endpoints.metrics_port}",
        f"--served-repository={log_path.parent / 'served'}",
        *arguments,
    ]
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env={**os.environ, ADMIN_KEY_VARIABLE: admin_key},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    launcher = Launcher(
        process, endpoints.http_address, endpoints.grpc_address, log_path, admin_key
    )
    try:
        wait_until_ready(
            lambda: server_ready(launcher.http_url),
            process,
            log_path,
            what="the launcher",
            timeout_s=STARTUP_TIMEOUT_S,
            interval_s=0.5,
        )
    except StartError:
        process.kill()
        process.wait()
        raise
    return launcher


@pytest.fixture(scope="module")
def triton_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel's server in an installed Triton's layout, as the NGC image
    has it in /opt/tritonserver: bin/tritonserver and a complete backends/."""
    wheel = wheel_triton()
    home = tmp_path_factory.mktemp("triton_home")
    (home / "bin").mkdir()
    (home / "bin" / "tritonserver").symlink_to(wheel.executable)
    (home / "backends").symlink_to(wheel.backend_directory)
    return home


@pytest.fixture(scope="module")
def installed_server(
    tmp_path_factory: pytest.TempPathFactory, triton_home: Path
) -> Iterator[Launcher]:
    log_path = tmp_path_factory.mktemp("installed") / "launcher.log"
    launcher = _start(log_path, [f"--triton-home={triton_home}"])
    try:
        yield launcher
    finally:
        launcher.stop()


def _cmdline(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")


def test_triton_home_serves_the_installed_layout_as_is(
    installed_server: Launcher, triton_home: Path
) -> None:
    arguments = _cmdline(installed_server.tritonserver_pid)
    assert arguments[0] == str(triton_home / "bin" / "tritonserver")
    assert f"--backend-directory={triton_home / 'backends'}" in arguments


def test_the_log_names_each_models_engine_and_the_cosines_that_chose_it(
    installed_server: Launcher,
) -> None:
    engine = engine_of(DEFAULT_MODEL)
    expected = f"{DEFAULT_MODEL.name}: engine {engine}, precision "
    line = next(
        (
            line
            for line in messages(installed_server.log(), "launcher")
            if line.startswith(expected)
        ),
        None,
    )
    assert line is not None, installed_server.log()[-4000:]
    if engine == "openvino":
        openvino = json.loads((OPENVINO_MODEL_DIR / "export.json").read_text())["openvino"]
        assert f"precision {openvino['precision']} (auto)" in line
        for precision, cosine in openvino["min_cosine"].items():
            assert f"{precision} {cosine:.7f}" in line, line
    assert "texts/s per thread: ONNX Runtime f32" in line, line


def test_admin_key_is_not_on_the_launcher_command_line(installed_server: Launcher) -> None:
    key = installed_server.admin_key
    assert not any(key in argument for argument in _cmdline(installed_server.process.pid))
    # Nor in tritonserver's environment, which its model stubs inherit.
    environ = Path(f"/proc/{installed_server.tritonserver_pid}/environ").read_bytes()
    assert key.encode() not in environ
    # Triton 2.51 reads the key only from its own command line: the trade-off
    # docs/operations.md, "Security", documents. Should this fail, Triton has
    # another way.
    assert any(key in argument for argument in _cmdline(installed_server.tritonserver_pid))


def test_admin_apis_need_the_key_from_the_environment(installed_server: Launcher) -> None:
    url = f"http://{installed_server.http_url}/v2/repository/index"
    assert post_status(url, {}) == 403
    assert post_status(url, {ADMIN_KEY_HEADER: "not-the-key"}) == 403
    assert post_status(url, {ADMIN_KEY_HEADER: installed_server.admin_key}) == 200


def test_graceful_stop_waits_for_a_reload_in_progress_before_draining(
    tmp_path: Path,
) -> None:
    launcher = _start(tmp_path / "launcher.log", [])
    try:
        launcher.wait_for_log("watchdog", "watching", timeout_s=30)
        (stub, *_) = python_stubs(launcher.tritonserver_pid)[DEFAULT_MODEL.tokenizer]
        os.kill(stub, signal.SIGKILL)
        launcher.wait_for_log("watchdog", "reloading the model", timeout_s=30)
        reloaded = f"'{DEFAULT_MODEL.tokenizer}' reloaded"
        reload_running = first_index(launcher.log(), "watchdog", reloaded) < 0
    finally:
        exit_code = launcher.stop()  # SIGTERM while the reload (about 3 s) runs
    log = launcher.log()
    assert exit_code == 0, log[-4000:]
    assert reload_running, "the reload ended before SIGTERM: nothing was tested"
    draining = first_index(log, "launcher", "draining")
    assert 0 <= first_index(log, "watchdog", reloaded) < draining, log[-4000:]


def test_triton_home_without_the_project_backends_is_refused(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    (tmp_path / "bin" / "tritonserver").touch()
    with pytest.raises(FileNotFoundError, match="embedding_serializer"):
        installed_triton(tmp_path)


def test_retry_delays_double_up_to_the_cap() -> None:
    assert list(islice(retry_delays(), 9)) == [0.5, 1, 2, 4, 8, 16, 30, 30, 30]
    assert RETRY_MAX_S == 30


def test_reload_backoff_waits_after_failures_and_resets_on_success() -> None:
    backoff = ReloadBackoff()
    assert backoff.due("tokenizer", now=0.0)
    assert backoff.failed("tokenizer", now=0.0) == 0.5
    assert not backoff.due("tokenizer", now=0.4) and backoff.due("tokenizer", now=0.5)
    assert backoff.due("embedder", now=0.1)  # per model
    assert backoff.failed("tokenizer", now=0.5) == 1
    assert backoff.failed("tokenizer", now=1.5) == 2
    assert not backoff.due("tokenizer", now=3.4) and backoff.due("tokenizer", now=3.5)
    backoff.succeeded("tokenizer")
    assert backoff.due("tokenizer", now=3.5)
    assert backoff.failed("tokenizer", now=10.0) == 0.5


def test_with_tenants_the_edge_takes_the_public_ports(tmp_path: Path) -> None:
    key = secrets.token_urlsafe(16)
    tenants = tmp_path / "tenants.toml"
    tenants.write_text(tenant_toml("search", [key], ["all-MiniLM-L6-v2"]))
    launcher = _start(tmp_path / "launcher.log", [f"--tenants={tenants}"])
    try:
        texts = text_inputs(grpcclient, ["through the edge"])
        client = grpcclient.InferenceServerClient(launcher.grpc_url)
        with pytest.raises(InferenceServerException) as refused:
            client.infer("all-MiniLM-L6-v2", texts)
        assert refused.value.status() == "StatusCode.UNAUTHENTICATED", refused.value
        with pytest.raises(InferenceServerException) as denied:
            client.infer("embed", texts, headers={"authorization": f"Bearer {key}"})
        assert denied.value.status() == "StatusCode.PERMISSION_DENIED", denied.value
        result = client.infer("all-MiniLM-L6-v2", texts, headers={"authorization": f"Bearer {key}"})
        assert result.as_numpy("EMBEDDING").shape == (1, 384 * 4)
    finally:
        exit_code = launcher.stop()
    assert exit_code == 0, launcher.log()[-4000:]


def test_a_bad_tenants_file_is_refused_at_start(tmp_path: Path) -> None:
    tenants = tmp_path / "tenants.toml"
    tenants.write_text('[[tenants]]\nname = "search"\n')
    done = subprocess.run(
        [sys.executable, "-m", "server.launch", f"--tenants={tenants}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert "tenants file refused" in done.stderr and "search" in done.stderr, done.stderr


# --- the log's formats, on a stand-in tritonserver ----------------------------

# What the stand-in prints: its arguments, so a test sees tritonserver's log format.
STAND_IN = "stand-in tritonserver:"
OTLP_ENDPOINT = "http://127.0.0.1:4318"


@dataclass(frozen=True)
class StandInRun:
    done: subprocess.CompletedProcess[str]
    http: str
    grpc: str
    metrics: str

    def ours(self, stream: str) -> list[str]:
        """The launcher's lines on `stream` (stdout or stderr)."""
        lines = getattr(self.done, stream).splitlines()
        return [line for line in lines if not line.startswith(STAND_IN)]

    def server_arguments(self) -> list[str]:
        (line,) = [line for line in self.done.stdout.splitlines() if line.startswith(STAND_IN)]
        return line.removeprefix(STAND_IN).split()


def _launch_stand_in(tmp_path: Path, *arguments: str) -> StandInRun:
    """The launcher, to its end, on an installed Triton whose tritonserver
    prints its arguments and exits 0: the launcher's own lines, in seconds
    and without a server."""
    home = tmp_path / "triton"
    for library in ("python/libtriton_python.so", f"{SERIALIZER_BACKEND}/{SERIALIZER_FILE}"):
        (home / "backends" / library).parent.mkdir(parents=True, exist_ok=True)
        (home / "backends" / library).touch()
    (home / "bin").mkdir()
    stand_in = home / "bin" / "tritonserver"
    stand_in.write_text(f'#!/bin/sh\necho "{STAND_IN} $*"\n')
    stand_in.chmod(0o755)
    (tmp_path / "repository").mkdir()
    endpoints = free_loopback_endpoints()
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "server.launch",
            f"--triton-home={home}",
            f"--model-repository={tmp_path / 'repository'}",
            f"--http-port={endpoints.http_port}",
            f"--grpc-port={endpoints.grpc_port}",
            f"--metrics-port={endpoints.metrics_port}",
            f"--otlp-endpoint={OTLP_ENDPOINT}",
            *arguments,
        ],
        cwd=REPO_ROOT,
        env={key: value for key, value in os.environ.items() if key != ADMIN_KEY_VARIABLE},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return StandInRun(
        done, endpoints.http_address, endpoints.grpc_address, endpoints.metrics_address
    )


def test_the_launcher_logs_one_json_object_per_line(tmp_path: Path) -> None:
    run = _launch_stand_in(tmp_path)
    entries = [json.loads(line) for line in run.ours("stdout") + run.ours("stderr")]
    for entry in entries:
        assert isinstance(entry, dict) and RECORD_FIELDS <= set(entry), entry
        assert datetime.fromisoformat(entry["time"]).utcoffset() == timedelta(0), entry
        assert entry["level"] == "info", entry
    by_logger = {entry["logger"]: entry for entry in entries}
    assert by_logger.keys() == {"tritonserver", "launcher"}, entries
    address = by_logger["tritonserver"]
    assert address["message"] == (
        f"HTTP {run.http}, gRPC {run.grpc}, metrics {run.metrics}, admin APIs open"
    )
    assert (address["http"], address["grpc"], address["metrics"]) == (
        run.http,
        run.grpc,
        run.metrics,
    )
    assert by_logger["launcher"]["message"] == Tracing(OTLP_ENDPOINT).describe()
    # Triton cannot write JSON: its lines get ISO 8601 UTC time stamps.
    assert "--log-format=ISO8601" in run.server_arguments()


def test_log_format_text_keeps_the_human_lines(tmp_path: Path) -> None:
    run = _launch_stand_in(tmp_path, "--log-format=text")
    assert run.ours("stdout") == [
        f"tritonserver: HTTP {run.http}, gRPC {run.grpc}, metrics {run.metrics}, admin APIs open"
    ]
    assert run.ours("stderr") == [f"launcher: {Tracing(OTLP_ENDPOINT).describe()}"]
    assert not any(part.startswith("--log-format") for part in run.server_arguments())


def test_an_unknown_log_format_is_refused_at_start() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "server.launch", "--log-format=yaml"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "--log-format: invalid choice: 'yaml'" in done.stderr, done.stderr


def test_tritonserver_takes_the_iso8601_log_format(installed_server: Launcher) -> None:
    """The real server, started with the default log format, accepted
    --log-format=ISO8601 and writes its lines with ISO 8601 UTC stamps
    (`2026-11-27T08:00:00Z I <pid> <file>:<line>] ...`) beside ours."""
    assert "--log-format=ISO8601" in _cmdline(installed_server.tritonserver_pid)
    log = installed_server.log()
    assert re.search(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ I \d+ \S+:\d+\] ", log, re.M), log[-4000:]
    assert messages(log, "watchdog") or messages(log, "launcher"), log[-4000:]
