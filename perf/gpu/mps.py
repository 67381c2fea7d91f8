"""NVIDIA MPS (Multi-Process Service) around one served setup: the embedder
instances are separate stub processes, each with its own CUDA context, which
the GPU time-slices; under MPS their kernels share the GPU at once."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

CONTROL = "nvidia-cuda-mps-control"
# Where the daemon and its clients meet (the pipe) and where it logs: in the
# setup's workdir, so the run needs no root and the logs travel with it.
PIPE_VARIABLE = "CUDA_MPS_PIPE_DIRECTORY"
LOG_VARIABLE = "CUDA_MPS_LOG_DIRECTORY"
COMMAND_TIMEOUT_S = 60


class MpsUnavailableError(RuntimeError):
    pass


@contextmanager
def mps_daemon(workdir: Path) -> Iterator[None]:
    """Runs the MPS control daemon, its pipe and logs in `workdir`, with
    this process's environment pointing at them (a server started inside
    copies it, so its CUDA processes become MPS clients); on exit, quits
    the daemon and restores the environment."""
    control = shutil.which(CONTROL)
    if control is None:
        raise MpsUnavailableError(f"MPS is not available on this machine: no {CONTROL} on PATH")
    variables = {PIPE_VARIABLE: workdir / "pipe", LOG_VARIABLE: workdir / "log"}
    for folder in variables.values():
        folder.mkdir(parents=True, exist_ok=True)
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update({name: str(folder) for name, folder in variables.items()})
    try:
        # -d forks the daemon into the background and returns. Its output goes
        # to a file: a daemon left holding this run's stdout would keep
        # whoever reads it waiting.
        with (workdir / "daemon.log").open("w") as output:
            subprocess.run(
                [control, "-d"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=COMMAND_TIMEOUT_S,
            )
        try:
            yield
        finally:
            # `quit` on a control client's stdin: the daemon stops with its
            # MPS server, whose clients (this setup's server) are gone by now.
            subprocess.run(
                [control], input="quit\n", text=True, check=True, timeout=COMMAND_TIMEOUT_S
            )
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
