"""How a child process ended, in the words a refusal quotes: "died of SIGFPE" or "exited with
status 1". The export's engine workers and the launcher's probes and exports read it. Standard
library only."""

from __future__ import annotations

import signal


def ending(returncode: int) -> str:
    """A process's end from its exit status (negative: the signal that killed it)."""
    if returncode < 0:
        try:
            return f"died of {signal.Signals(-returncode).name}"
        except ValueError:
            return f"died of signal {-returncode}"
    return f"exited with status {returncode}"
