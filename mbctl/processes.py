"""Child processes that serve a run (emulators, simulators): their orderly end."""

from __future__ import annotations

import signal
import subprocess

__all__ = ["interrupt"]


def interrupt(proc: subprocess.Popen, timeout_s: float = 10.0) -> None:
    """End ``proc`` as Ctrl-C would (SIGINT: it closes its sockets and flushes its logs), killed if it
    has not ended after ``timeout_s`` (s); its pipes are drained and closed either way."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGINT)
    try:
        proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
