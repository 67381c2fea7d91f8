"""The soak of perf/soak.py for two minutes: every task over every route,
good, bad, cancelled, dropped, deadline, traced and burst requests, a model
reload and a stub kill, each process sampled; each of its checks
(harness/soak_checks.py) is a test. Its bounds scale with the requests the
run answered on this machine (harness/soak_mix.py), so it holds on the
slowest processor class too."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.soak_checks import CHECK_NAMES, checks
from harness.soak_run import SoakResult, soak
from harness.soak_stack import soak_stack

SECONDS = 120.0


@pytest.fixture(scope="module")
def result(
    cross_encoder_folders: dict[str, Path],
    sparse_encoder_folders: dict[str, Path],
    tmp_path_factory: pytest.TempPathFactory,
) -> SoakResult:
    workdir = tmp_path_factory.mktemp("soak")
    with soak_stack(
        workdir, cross_encoder_folders["bert"], sparse_encoder_folders["bert_max"]
    ) as stack:
        return soak(stack, SECONDS)


@pytest.mark.parametrize("name", CHECK_NAMES)
def test_the_soak_holds(result: SoakResult, name: str) -> None:
    (check,) = [check for check in checks(result) if check.name == name]
    assert check.passed, check.detail
