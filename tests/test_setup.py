"""scripts/setup.sh stops at the first step that fails, with that step's
reason, and refuses to start where the disk cannot hold a set-up from
nothing: a CI run once went on past pip's "No space left on device", and
never finished.

Each test runs the real script on a copy of the parts of the tree it reads.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from server.paths import REPO_ROOT

SETUP = REPO_ROOT / "scripts" / "setup.sh"
NEEDED_MIB = int(re.search(r"^NEEDED_MIB=(\d+)$", SETUP.read_text(), re.MULTILINE).group(1))
MISSING_PACKAGE = "embedding-setup-test-no-such-package"


def run_setup(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(tree / "scripts" / "setup.sh")],
        capture_output=True,
        text=True,
        timeout=300,
    )


def copy_tracked(destination: Path) -> None:
    """The tracked files, as a clean clone has them."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
    ).stdout
    for name in listed.decode().split("\0"):
        if not name:
            continue
        target = destination / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, target)


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 64 MiB filesystem of its own (tmpfs)."""
    mount_point = tmp_path / "disk"
    mount_point.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(mount_point)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        yield mount_point
    finally:
        subprocess.run(["umount", "--lazy", str(mount_point)], check=True)


def test_a_set_up_from_nothing_is_refused_on_a_disk_too_small_for_it(small_disk: Path) -> None:
    for folder in ("scripts", "requirements"):
        shutil.copytree(REPO_ROOT / folder, small_disk / folder)

    completed = run_setup(small_disk)

    assert completed.returncode == 1, completed.stderr
    assert re.search(
        rf"setup: \d+ MiB free on {re.escape(str(small_disk))}, and a set-up from nothing "
        rf"needs about {NEEDED_MIB} MiB",
        completed.stderr,
    ), completed.stderr
    assert not (small_disk / ".venv").exists()
    assert not (small_disk / ".venv-export").exists()


def test_a_failing_install_stops_the_set_up_there(tmp_path: Path) -> None:
    free_mib = shutil.disk_usage(tmp_path).free // 2**20
    if free_mib < NEEDED_MIB:
        pytest.skip(
            f"{free_mib} MiB free where the test's copy would go: the set-up refuses "
            f"below {NEEDED_MIB} MiB before it installs anything"
        )
    tree = tmp_path / "tree"
    copy_tracked(tree)
    # The export environment as it is (current, so skipped); the serving one
    # from requirements that cannot be met.
    (tree / ".venv-export").symlink_to(REPO_ROOT / ".venv-export")
    (tree / "requirements" / "serve.txt").write_text(f"{MISSING_PACKAGE}==0.0.0\n")

    completed = run_setup(tree)

    assert completed.returncode != 0
    # The installer wraps its message to the terminal's width (COLUMNS).
    assert f"{MISSING_PACKAGE} was not found in the package registry" in " ".join(
        completed.stderr.split()
    ), completed.stderr
    # Nothing after the failed step ran, and the environment is not marked
    # installed, so the next run tries again.
    assert "install_perf_analyzer" not in completed.stderr, completed.stderr
    assert not (tree / "build" / "perf_analyzer").exists()
    assert not (tree / ".venv" / ".requirements.sha256").exists()
