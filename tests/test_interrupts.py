"""SIGINT and SIGTERM at random points of a command's life: always exit 130/143, one line, nothing half-written.

Every phase (importing the command, generating and compiling C code, compiled integration
chunks, progress, recorded samples streamed to disk, writing and renaming outputs, Dask cluster start-up and task submission)
gets a signal at a random call of a function it makes (tests/interrupt_child.py), so the
signal lands in that phase on any machine: no test waits on the clock. The draws are seeded
(``MBCTL_INTERRUPT_SEED``, default 29); a failure names its seed, phase, call and signal.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from mbctl.bundled import bundled_study
from mbctl.fileio import read_csv

CHILD = Path(__file__).with_name("interrupt_child.py")
SEED = int(os.environ.get("MBCTL_INTERRUPT_SEED", "29"))

SIMULATE = ["simulate", "fourbar", "--duration", "2.5", "--out", "{out}/run.npz", "--summary", "{out}/run.json"]
TRAJECTORY = ["trajectory", "quintic", "scara", "--waypoints", "0,0,0,0; 0.1,0.2,0.1,0.01", "--durations", "0.5", "--out", "{out}/traj.csv"]
SWEEP = ["sweep", "{study}", "--out", "{out}/sweep", "--workers", "1", "--no-plots"]

# (command, hook, calls the command makes at least, own codegen cache: code is generated and compiled)
PHASES = [
    (SIMULATE, "import", 1, False),
    (SIMULATE, "codegen", 2, True),
    (SIMULATE, "compile", 3, True),
    (SIMULATE, "chunk", 4000, False),
    (SIMULATE, "progress", 15, False),
    (SIMULATE, "record", 1, False),
    (SIMULATE, "write", 17, False),
    (SIMULATE, "rename", 2, False),
    (TRAJECTORY, "csv", 1, False),
    (SWEEP, "cluster", 1, False),
    (SWEEP, "tasks", 1, False),
]


def draws(seed: int) -> list[tuple]:
    """One case per phase: a random call of its hook and a random signal."""
    rng = random.Random(seed)
    return [(command, hook, rng.randint(1, calls), rng.choice([signal.SIGINT, signal.SIGTERM]), fresh) for command, hook, calls, fresh in PHASES]


def whole(path: Path) -> None:
    """An output that exists is complete: it loads (a half-written NPZ or CSV would not)."""
    if path.suffix == ".npz":
        with np.load(path) as data:
            [data[k] for k in data.files]
    elif path.suffix == ".csv":
        read_csv(path)


def group_gone(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return True
    return False


CASES = draws(SEED)


@pytest.mark.parametrize(("command", "hook", "nth", "sig", "fresh"), CASES, ids=[f"{hook}-{nth}-{sig.name}" for _, hook, nth, sig, _ in CASES])
def test_a_signal_in_any_phase_stops_cleanly(tmp_path, command, hook, nth, sig, fresh):
    out = tmp_path / "out"
    out.mkdir()
    study = tmp_path / "study.toml"
    study.write_text(bundled_study("ur5_payload").read_text().replace("samples = 200", "samples = 4"))
    env = dict(os.environ, **({"MBCTL_CODEGEN_CACHE": str(tmp_path / "cache")} if fresh else {}))
    args = [a.format(out=out, study=study) for a in command]
    proc = subprocess.Popen(
        [sys.executable, str(CHILD), hook, str(nth), str(int(sig)), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True,
    )  # fmt: skip
    try:
        _, err = proc.communicate(timeout=300)
        end = time.monotonic() + 60
        while not group_gone(proc.pid):  # Dask workers and the compiler end with it
            assert time.monotonic() < end, "processes of the command outlived it"
            time.sleep(0.1)
    finally:
        if not group_gone(proc.pid):
            os.killpg(proc.pid, signal.SIGKILL)
    case = f"seed {SEED}: {sig.name} at {hook} #{nth}"
    lines = err.strip().splitlines()
    marker = f"mbctl-test: signal at {hook} #{nth}"
    assert marker in lines, f"{case}: the phase was not reached\n{err}"
    message, code = ("mbctl: terminated (SIGTERM)", 143) if sig == signal.SIGTERM else ("mbctl: interrupted", 130)
    assert proc.returncode == code and lines[-1].startswith(message), f"{case}: exit {proc.returncode}\n{err}"
    after = lines[lines.index(marker) + 1 : -1]  # one line says it: before it, at most progress lines
    assert all(line.startswith(("simulate: ", "sweep: ")) for line in after) and "Traceback" not in err, f"{case}\n{err}"
    files = [p for p in out.rglob("*") if p.is_file()]
    assert not [p for p in files if ".tmp" in p.name or ".partial" in str(p)], f"{case}: temporary files left: {files}"
    for path in files:
        whole(path)
