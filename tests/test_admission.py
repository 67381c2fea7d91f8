"""The tokenizer's door without a tritonserver: the stages' shared counts
(model_common.backlog) across processes, and the gate (model_common.admission)
against a real HTTP endpoint serving Triton-format metrics, which counts the
readings. On a real server the door is tested under overload by
tests/test_robustness.py (refused untokenized)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from model_common.admission import (
    MEAN_WEIGHT,
    WINDOW_CPU_S,
    BacklogGate,
    BacklogLimit,
    tokens_of_work,
)
from model_common.backlog import (
    BACKLOG_DIR_VARIABLE,
    RAN_CPU_US,
    RAN_TOKENS,
    RELEASED,
    STARTED,
    Backlog,
)
from model_common.embedder_setup import EmbedderSetup
from model_common.record import ExportRecord

from server import launch_plan

LIMIT = 8
SECONDS = 0.25
CPUS = 2.0
# The embedder's speed in the tests: 0.25 s of its work on 2 CPUs is 6400 tokens.
TOKENS_PER_CPU_S = 12800
TOKENS = tokens_of_work(SECONDS, TOKENS_PER_CPU_S, CPUS)


def _measured(
    requests: int = LIMIT, tokens_per_cpu_s: float = TOKENS_PER_CPU_S, cpus: float = CPUS
) -> BacklogLimit:
    """A limit whose embedder has worked one window at `tokens_per_cpu_s`."""
    limit = BacklogLimit(seconds=SECONDS, requests=requests, cpus=cpus)
    limit.worked(round(tokens_per_cpu_s * WINDOW_CPU_S), WINDOW_CPU_S)
    return limit


class Metrics:
    """Serves the embedder's pending gauge; counts the readings."""

    def __init__(self) -> None:
        self.pending = 0
        self.readings = 0
        metrics = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (http.server's name)
                metrics.readings += 1
                body = (
                    f'nv_inference_pending_request_count{{model="embedder",version="1"}} '
                    f"{metrics.pending}\n"
                ).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/metrics"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


@pytest.fixture
def backlog_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(BACKLOG_DIR_VARIABLE, str(tmp_path))
    return tmp_path


@pytest.fixture
def metrics() -> Iterator[Metrics]:
    served = Metrics()
    yield served
    served.server.shutdown()


def _release(instance: str, count: int) -> None:
    Backlog("embedder").own(RELEASED, instance).add(count)


def test_counts_of_other_processes_add_up(backlog_dir: Path) -> None:
    backlog = Backlog("embedder")
    started = backlog.own(STARTED, "embedder_0_0")
    context = multiprocessing.get_context("spawn")
    for instance, count in (("tokenizer_0_0", 5), ("tokenizer_0_1", 4)):
        process = context.Process(target=_release, args=(instance, count))
        process.start()
        process.join()
        assert process.exitcode == 0
    started.add(3)
    # The embedder's work counts are not requests.
    backlog.own(RAN_TOKENS, "embedder_0_0").add(900)
    backlog.own(RAN_CPU_US, "embedder_0_0").add(250_000)
    backlog.own(RAN_TOKENS, "embedder_0_1").add(100)
    backlog.own(RAN_CPU_US, "embedder_0_1").add(50_000)
    backlog.rescan()
    assert backlog.value() == 5 + 4 - 3
    assert backlog.work() == (1000, 0.3)
    # A restarted instance counts on from its value.
    Backlog("embedder").own(RELEASED, "tokenizer_0_0").add(1)
    assert backlog.value() == 7


def test_without_the_launchers_folder_the_stage_refuses_to_load(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BACKLOG_DIR_VARIABLE, raising=False)
    with pytest.raises(ValueError, match=BACKLOG_DIR_VARIABLE):
        Backlog("embedder")


def test_the_launcher_names_what_the_stages_read() -> None:
    assert launch_plan.BACKLOG_DIR_VARIABLE == BACKLOG_DIR_VARIABLE


def _gate(metrics: Metrics, limit: BacklogLimit | None = None) -> tuple[BacklogGate, Backlog]:
    backlog = Backlog("embedder")
    limit = limit or _measured()
    return BacklogGate(metrics.url, "embedder", limit, backlog, poll_s=0.001), backlog


def test_before_any_release_the_limit_is_the_request_bound() -> None:
    assert _measured().value() == LIMIT


def test_before_a_measured_speed_the_limit_is_the_request_bound() -> None:
    limit = BacklogLimit(seconds=SECONDS, requests=LIMIT, cpus=CPUS)
    limit.released(4, 4 * TOKENS)
    assert limit.tokens() is None and limit.value() == LIMIT
    # Less than a window of work measures nothing yet.
    limit.worked(10**6, WINDOW_CPU_S / 2)
    assert limit.tokens() is None and limit.value() == LIMIT


@pytest.mark.parametrize("cpus", [1.0, 2.0, 16.0])
def test_a_fast_and_a_slow_engine_hold_the_same_time_of_work(cpus: float) -> None:
    """An AVX2 core and an AMX core: the same seconds of work wait, so more
    tokens on the faster one."""
    tokens_per_request = 100
    held_s = []
    for tokens_per_cpu_s in (4_000.0, 30_000.0):
        limit = _measured(requests=10**6, tokens_per_cpu_s=tokens_per_cpu_s, cpus=cpus)
        limit.released(1, tokens_per_request)
        held_s.append(limit.value() * tokens_per_request / (tokens_per_cpu_s * cpus))
    assert held_s == pytest.approx([SECONDS, SECONDS], rel=0.01)


def test_the_speed_follows_the_latest_window() -> None:
    limit = _measured()
    assert limit.tokens() == TOKENS
    tokens, cpu_s = round(TOKENS_PER_CPU_S * WINDOW_CPU_S), WINDOW_CPU_S
    # Long texts: half the tokens per CPU second. A part of a window changes nothing.
    limit.worked(tokens + round(TOKENS_PER_CPU_S / 2 * WINDOW_CPU_S / 2), cpu_s + WINDOW_CPU_S / 2)
    assert limit.tokens() == TOKENS
    limit.worked(tokens + round(TOKENS_PER_CPU_S / 2 * WINDOW_CPU_S), cpu_s + WINDOW_CPU_S)
    assert limit.tokens() == TOKENS // 2


def test_counts_that_begin_again_begin_a_new_window() -> None:
    limit = _measured()
    limit.worked(10, 0.01)
    limit.worked(10 + round(TOKENS_PER_CPU_S * 2 * WINDOW_CPU_S), 0.01 + WINDOW_CPU_S)
    assert limit.tokens() == 2 * TOKENS


@pytest.mark.parametrize(
    ("tokens_per_request", "expected"),
    [
        (50, LIMIT),  # one short text: the token budget would allow 128
        (TOKENS // 3, 3),  # long texts: fewer requests wait
        (TOKENS * 4, 1),  # one request over the budget still goes alone
    ],
)
def test_the_limit_holds_the_token_budget(tokens_per_request: int, expected: int) -> None:
    limit = _measured()
    limit.released(4, 4 * tokens_per_request)
    assert limit.value() == expected


def test_an_execute_that_releases_nothing_leaves_the_limit() -> None:
    limit = _measured()
    limit.released(2, 2 * TOKENS // 2)
    limit.released(0, 0)
    assert limit.value() == 2


def test_the_limit_follows_a_change_of_traffic_within_a_few_executes() -> None:
    limit = _measured(requests=1000)
    limit.released(1, 100)
    assert limit.value() == TOKENS // 100
    # Each execute moves the mean MEAN_WEIGHT of the way to the new traffic;
    # bounded, so a mean that never moves fails rather than hangs.
    executes = 0
    while limit.value() > TOKENS // 1000 + 1 and executes < 10 * round(4 / MEAN_WEIGHT):
        limit.released(1, 1000)
        executes += 1
    assert executes <= round(4 / MEAN_WEIGHT)
    assert limit.value() <= TOKENS // 1000 + 1


def test_a_reading_takes_the_embedders_work_as_its_speed(
    backlog_dir: Path, metrics: Metrics
) -> None:
    gate, backlog = _gate(metrics, BacklogLimit(seconds=SECONDS, requests=LIMIT, cpus=CPUS))
    for instance in ("embedder_0_0", "embedder_0_1"):
        backlog.own(RAN_TOKENS, instance).add(round(TOKENS_PER_CPU_S * WINDOW_CPU_S / 2))
        backlog.own(RAN_CPU_US, instance).add(round(WINDOW_CPU_S / 2 * 1e6))
    gate.wait()
    assert gate.limit.tokens() == TOKENS


def test_requests_of_long_texts_hold_the_door_sooner(backlog_dir: Path, metrics: Metrics) -> None:
    """Three requests waiting hold the door when each carries a third of
    the budget, and not when each is short."""
    long, _ = _gate(metrics)
    long.limit.released(1, TOKENS // 3)
    short, _ = _gate(metrics, _measured())
    short.limit.released(1, 50)
    metrics.pending = 3
    assert short.wait() < 0.04
    timer = threading.Timer(0.05, lambda: setattr(metrics, "pending", 2))
    timer.start()
    assert long.wait() >= 0.04


def test_the_gauge_is_read_only_when_the_estimate_nears_the_limit(
    backlog_dir: Path, metrics: Metrics
) -> None:
    gate, backlog = _gate(metrics)
    released = backlog.own(RELEASED, "tokenizer_0_0")
    started = backlog.own(STARTED, "embedder_0_0")
    gate.wait()
    assert metrics.readings == 1
    # The embedder keeps up: released and started move together, no reading.
    for _ in range(50):
        released.add(3)
        started.add(3)
        gate.wait()
    assert metrics.readings == 1
    # Released past the limit without being started: read again; the gauge
    # says the queue is short (the requests timed out there), so the door
    # opens and the drift is corrected.
    released.add(LIMIT)
    gate.wait()
    assert metrics.readings == 2
    assert gate.estimate() == 0
    gate.wait()
    assert metrics.readings == 2


def test_a_full_queue_holds_until_the_gauge_drops(backlog_dir: Path, metrics: Metrics) -> None:
    gate, backlog = _gate(metrics)
    metrics.pending = LIMIT
    backlog.own(RELEASED, "tokenizer_0_0").add(LIMIT)
    timer = threading.Timer(0.05, lambda: setattr(metrics, "pending", LIMIT - 1))
    timer.start()
    waited = gate.wait()
    assert waited >= 0.04
    assert metrics.readings > 2


def test_an_old_reading_is_renewed(backlog_dir: Path, metrics: Metrics) -> None:
    """Requests sent straight to the embedder (`embed_tokens`) pass no
    tokenizer count: the gauge is read again once the reading is old."""
    gate, _ = _gate(metrics)
    gate.max_age_s = 0.02
    gate.wait()
    gate.wait()
    assert metrics.readings == 1
    time.sleep(0.03)
    gate.wait()
    assert metrics.readings == 2


@pytest.mark.parametrize("value", ["0", "-1", "soon", "nan", ""])
def test_a_backlog_in_seconds_that_is_not_a_positive_number_fails_the_load_naming_it(
    value: str,
) -> None:
    setup = EmbedderSetup(
        {"max_embedder_backlog_seconds": value}, Path("."), ExportRecord(512, 30522, {}), 64
    )
    with pytest.raises(ValueError, match="'max_embedder_backlog_seconds' is .*positive number"):
        setup.seconds("max_embedder_backlog_seconds")
    assert (
        EmbedderSetup({"s": "1.0"}, Path("."), ExportRecord(512, 30522, {}), 64).seconds("s") == 1
    )
