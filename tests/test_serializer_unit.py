"""Builds the C++ serializer's GoogleTest suite with AddressSanitizer and
UndefinedBehaviorSanitizer and runs it through ctest."""

from __future__ import annotations

import subprocess

from server.paths import REPO_ROOT

SOURCE = REPO_ROOT / "backends" / "embedding_serializer"
BUILD = REPO_ROOT / "build" / "serializer-sanitized"


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)


def test_cpp_unit_tests_pass_under_sanitizers() -> None:
    configure = _run(
        [
            "cmake",
            "-S",
            str(SOURCE),
            "-B",
            str(BUILD),
            "-DCMAKE_BUILD_TYPE=Debug",
            "-DEMBEDDING_SERIALIZER_SANITIZE=ON",
        ]
    )
    assert configure.returncode == 0, configure.stdout + configure.stderr
    build = _run(["cmake", "--build", str(BUILD), "--parallel"])
    assert build.returncode == 0, build.stdout + build.stderr
    tests = _run(["ctest", "--test-dir", str(BUILD), "--output-on-failure"])
    assert tests.returncode == 0, tests.stdout + tests.stderr
    assert "100% tests passed" in tests.stdout
