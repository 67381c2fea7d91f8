"""The embedder instances' busy flags (model_common.busy) across processes,
without a tritonserver: an OpenVINO embedder splits an execute's rows across
its streams only while another instance idles. On a real server the split
and unsplit executes are checked against sentence-transformers by the
embedding tests, whichever the load made them."""

from __future__ import annotations

import multiprocessing
from multiprocessing.synchronize import Event
from pathlib import Path

import pytest
from model_common.backlog import BACKLOG_DIR_VARIABLE, RELEASED, Backlog
from model_common.busy import Executing


@pytest.fixture
def backlog_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(BACKLOG_DIR_VARIABLE, str(tmp_path))
    return tmp_path


def _execute_until(instance: str, started: Event, finish: Event) -> None:
    with Executing("embedder", instance):
        started.set()
        finish.wait(30)


def test_a_lone_instance_is_never_told_the_others_are_busy(backlog_dir: Path) -> None:
    alone = Executing("embedder", "embedder_0_0")
    with alone:
        assert not alone.every_other_busy()


def test_busy_while_every_other_instance_executes(backlog_dir: Path) -> None:
    context = multiprocessing.get_context("spawn")
    own = Executing("embedder", "embedder_0_0")
    Executing("embedder", "embedder_0_1")
    Executing("embedder", "embedder_0_2")
    assert not own.every_other_busy()
    started = [context.Event() for _ in range(2)]
    finish = context.Event()
    workers = [
        context.Process(target=_execute_until, args=(f"embedder_0_{index + 1}", event, finish))
        for index, event in enumerate(started)
    ]
    workers[0].start()
    assert started[0].wait(30)
    # One other instance is still idle.
    assert not own.every_other_busy()
    workers[1].start()
    assert started[1].wait(30)
    with own:
        assert own.every_other_busy()
    finish.set()
    for worker in workers:
        worker.join(30)
        assert worker.exitcode == 0
    assert not own.every_other_busy()


def test_a_restarted_instance_starts_idle(backlog_dir: Path) -> None:
    own = Executing("embedder", "embedder_0_0")
    crashed = Executing("embedder", "embedder_0_1")
    crashed.__enter__()  # its stub died mid-execute
    assert own.every_other_busy()
    Executing("embedder", "embedder_0_1")
    assert not own.every_other_busy()


def test_the_flags_do_not_count_in_the_backlog(backlog_dir: Path) -> None:
    backlog = Backlog("embedder")
    backlog.own(RELEASED, "tokenizer_0_0").add(2)
    with Executing("embedder", "embedder_0_0"):
        backlog.rescan()
        assert backlog.value() == 2
