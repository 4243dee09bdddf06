"""franky-sim in a process of its own: an FR3 in MuJoCo behind libfranka's protocol, on a loopback
address nobody else uses.

libfranka holds Python's interpreter lock while it waits for the robot, so the simulator must not run
in the client's process. Each simulator gets a random address in 127.0.0.0/8 (all of it is loopback
on Linux): simulators started side by side (tests under pytest-xdist, other sessions) never share one,
and none takes 127.0.0.1, where a user's own ``franky-sim`` listens by default. franky-sim's port is
fixed (1337, the gripper 1338), as libfranka's is.
"""

from __future__ import annotations

import contextlib
import importlib.util
import random
import selectors
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from mbctl.hardware.franka.serve import READY
from mbctl.hardware.interface import HardwareError
from mbctl.hardware.runlog import raw_paths
from mbctl.processes import interrupt

__all__ = ["FrankySim", "franky_sim_available", "franky_sim_process", "kill_when_logged", "loopback_address"]

START_TIMEOUT_S = 120.0  # importing MuJoCo and pinocchio on a busy machine
ATTEMPTS = 3  # addresses tried (a taken one fails to bind)


@dataclass
class FrankySim:
    """A running franky-sim: its ``address`` and its ``process``."""

    address: str
    process: subprocess.Popen


def franky_sim_available() -> str:
    """``""`` when franky-sim and MuJoCo import here, else why not (one line)."""
    missing = [name for name in ("franky_sim", "mujoco", "pinocchio") if importlib.util.find_spec(name) is None]
    return f"franky-sim is not available here (no {', '.join(missing)}); pip install franky-sim" if missing else ""


def loopback_address(rng: random.Random | None = None) -> str:
    """A random address in 127.64.0.1 - 127.254.255.254 (loopback; never 127.0.0.1)."""
    rng = rng or random.SystemRandom()
    return f"127.{rng.randrange(64, 255)}.{rng.randrange(0, 256)}.{rng.randrange(1, 255)}"


def _start(address: str, q0: Sequence[float], errors: object) -> tuple[subprocess.Popen, str]:
    """Start the server; returns the process and its first line (``""`` if it ended or timed out first)."""
    cmd = [sys.executable, "-u", "-m", "mbctl.hardware.franka.serve", "--hostname", address, "--q0", ",".join(f"{x:.17g}" for x in q0)]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=errors, text=True, start_new_session=True)
    with selectors.DefaultSelector() as sel:
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + START_TIMEOUT_S
        while (left := deadline - time.monotonic()) > 0:
            if sel.select(timeout=left):
                return proc, proc.stdout.readline()
        return proc, ""


@contextlib.contextmanager
def franky_sim_process(q0: Sequence[float], address: str | None = None) -> Iterator[FrankySim]:
    """franky-sim's FR3 starting at ``q0`` (rad) in a child process, on ``address`` or a random loopback
    address; stopped on exit.

    Raises:
        HardwareError: franky-sim did not start (its last line of error output).
    """
    reason = franky_sim_available()
    if reason:
        raise HardwareError(reason)
    with tempfile.TemporaryFile(mode="w+") as errors:
        for _ in range(ATTEMPTS if address is None else 1):
            where = address or loopback_address()
            proc, first = _start(where, q0, errors)
            if READY in first:
                break
            interrupt(proc)
        else:
            errors.seek(0)
            lines = errors.read().strip().splitlines()
            raise HardwareError(f"franky-sim did not start on {where}: {lines[-1] if lines else 'no output'}")
        try:
            yield FrankySim(address=first.split(READY, 1)[1].strip(), process=proc)
        finally:
            interrupt(proc)


# run apart, so that the kill does not wait on this process's interpreter lock (libfranka holds it)
_KILLER = """
import json, os, signal, sys, time
raw, header, rows, pid = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
while not os.path.exists(header):
    time.sleep(0.001)
size = rows * 8 * len(json.loads(open(header).read())["columns"])
while not os.path.exists(raw) or os.path.getsize(raw) < size:
    time.sleep(0.001)
os.kill(pid, signal.SIGKILL)
print(time.monotonic(), flush=True)
"""


def kill_when_logged(log: Path, rows: int, pid: int) -> subprocess.Popen:
    """A process that kills ``pid`` with SIGKILL (a simulator dying mid-run) once the run writing ``log``
    has logged ``rows`` cycles (its raw file, :func:`~mbctl.hardware.runlog.raw_paths`); it prints the
    kill's CLOCK_MONOTONIC time (s). It waits for ever if the run ends before: kill it then."""
    raw, header = raw_paths(log)
    return subprocess.Popen([sys.executable, "-c", _KILLER, str(raw), str(header), str(rows), str(pid)], stdout=subprocess.PIPE, text=True)
