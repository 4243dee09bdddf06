"""SIGTERM and SIGINT end every long command cleanly: a stated reason, a non-zero exit, nothing half-written.

Each test waits for a sign that the command is at work (a progress line, the run log
growing) before signalling, so it does not depend on how fast the machine is.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot


def start(*args, **popen) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "mbctl.cli", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **popen)


def ignore_sigint() -> None:
    """What a shell script does to the commands it starts in the background (``mbctl ... &``)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def logged_rows(log: Path) -> bool:
    """The loop has run and flushed cycles to its raw log (every 50 rows)."""
    partial = Path(f"{log}.partial")
    return partial.exists() and partial.stat().st_size > 0


def wait_for(condition, timeout_s: float = 120.0) -> None:
    end = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < end, "the command never got to work"
        time.sleep(0.02)


@pytest.mark.parametrize(
    ("sig", "code", "message", "inherited"),
    [
        (signal.SIGTERM, 143, "terminated (SIGTERM)", None),
        (signal.SIGINT, 130, "interrupted", None),
        # a started-with-SIGINT-ignored process (pytest run as a background job) used to lose it and complete
        (signal.SIGINT, 130, "interrupted", ignore_sigint),
    ],
)
def test_simulate_stops_without_writing_half_a_file(tmp_path, sig, code, message, inherited):
    out = tmp_path / "fourbar.npz"
    proc = start("simulate", "fourbar", "--duration", "100", "--out", out, preexec_fn=inherited)
    assert proc.stderr is not None
    line = proc.stderr.readline()  # the first progress line: it is integrating
    assert line.startswith("simulate: "), line
    proc.send_signal(sig)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == code and err.strip().splitlines()[-1] == f"mbctl: {message}"
    assert list(tmp_path.iterdir()) == []  # no output, no temporary file left


def test_run_stops_with_torque_off_and_keeps_its_log(tmp_path):
    """A paced run told to stop: the loop's own handler stops it, the log and summary say so, exit 1."""
    robot = load_robot("scara")
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.4, 0.5, -0.3, 0.02]]), [20.0], 1000.0, robot.joint_names)
    write_trajectory(tmp_path / "traj.csv", traj)
    log, summary = tmp_path / "run.npz", tmp_path / "run.json"
    proc = start("run", "scara", "--trajectory", tmp_path / "traj.csv", "--log", log, "--summary", summary)
    wait_for(lambda: logged_rows(log) or proc.poll() is not None)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=60)
    s = json.loads(summary.read_text())
    assert proc.returncode == 1 and s["stop_reason"] == "signal SIGTERM" and "stop reason: signal SIGTERM" in out
    data = np.load(log)
    assert 0 < len(data["t"]) == s["cycles"] < 20000


def test_identify_run_stops_and_says_so(tmp_path):
    log = tmp_path / "run.npz"
    proc = start("identify", "run", "friction_rig", "--joint", "j1", "--speeds", "0.1,0.2", "--out", tmp_path / "LOG.csv", "--log", log)
    wait_for(lambda: logged_rows(log) or proc.poll() is not None)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0 and "stop reason: signal SIGINT" in out
    assert np.load(log)["t"].size > 0
