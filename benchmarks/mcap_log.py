"""Memory and time of a long run log as MCAP: writing it and reading it back, against the NPZ.

A synthetic UR5 run log of ``--minutes`` at 1 kHz (default 10: 600 000 cycles, the run log's
44 columns; joints on slow sines) is written with :class:`mbctl.hardware.runlog.RunLog`, then
each step runs in a process of its own, its modules imported first, and reports the growth of
its resident memory (peak RSS minus the RSS before the step) and its time:

- ``npz``: the NPZ read whole, as the log readers do (``np.load`` + ``log_table``), the reference;
- ``write``: :func:`mbctl.hardware.mcap_log.write_mcap` with ``/tf`` (streamed by blocks);
- ``read bag``: the MCAP read back by :func:`mbctl.rosbag.read_joint_states` (the table of
  ``/joint_states`` that every log command gets);
- ``read mcap``: every message of the MCAP iterated with the ``mcap`` reader.

Usage: ``python benchmarks/mcap_log.py [--minutes 10]``; prints each step's peak as a ratio to
the NPZ's (RSS, not tracemalloc: tracing slows the Python-heavy MCAP steps tenfold).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

RATE_HZ = 1000.0


def make_log(path: Path, cycles: int) -> None:
    """A run log of ``cycles`` rows of the UR5's six joints, written as the loop writes one."""
    from mbctl.hardware.runlog import RunLog

    joints = ["shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint"]
    columns = ["t", "period", "compute", "read_ok"] + [f"{g}.{j}" for g in ("q", "dq", "q_ref", "dq_ref", "tau", "effort") for j in joints]
    columns += [f"phase.{p}" for p in ("read", "control", "write", "log")]
    log = RunLog(path, columns, flush_every=4096)
    rng = np.random.default_rng(0)
    block = 10_000
    for start in range(0, cycles, block):
        t = (start + np.arange(min(block, cycles - start))) / RATE_HZ
        q = 0.5 * np.sin(np.outer(t, 0.3 + 0.1 * np.arange(6)))
        rows = np.column_stack([t, np.full_like(t, 1e-3), np.full_like(t, 1e-4), np.ones_like(t), q, q, q, q, q, q, rng.random((len(t), 4)) * 1e-5])
        for row in rows:
            log.append(row)
    log.close()


def _rss_bytes() -> int:
    return int(Path("/proc/self/statm").read_text().split()[1]) * resource.getpagesize()


def step(name: str, log: Path, mcap: Path) -> dict[str, float]:
    """Run one step in this process; the growth of its peak RSS (bytes) and its time (s)."""
    from mcap.reader import make_reader

    from mbctl.dynamics.model.robot import load_robot
    from mbctl.hardware.mcap_log import write_mcap
    from mbctl.hardware.runlog import log_table
    from mbctl.rosbag import read_joint_states, typestore

    robot = load_robot("ur5")
    typestore()
    base = _rss_bytes()
    start = time.perf_counter()
    if name == "npz":
        with np.load(log) as z:
            columns, table = log_table(z)
    elif name == "write":
        write_mcap(log, mcap, robot)
    elif name == "read bag":
        states = read_joint_states(mcap)
        assert len(states.t) == np.load(log)["t"].shape[0]
    elif name == "read mcap":
        with open(mcap, "rb") as f:
            count = sum(1 for _ in make_reader(f).iter_messages())
        assert count > 0
    elapsed = time.perf_counter() - start
    return {"peak_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - base, "seconds": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--step", help=argparse.SUPPRESS)
    parser.add_argument("--log", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--mcap", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.step:
        print(json.dumps(step(args.step, args.log, args.mcap)))
        return
    cycles = int(args.minutes * 60 * RATE_HZ)
    with tempfile.TemporaryDirectory() as tmp:
        log, mcap = Path(tmp) / "run.npz", Path(tmp) / "run.mcap"
        make_log(log, cycles)
        print(f"run log: {cycles} cycles ({args.minutes:g} min at {RATE_HZ:g} Hz), NPZ {log.stat().st_size / 2**20:.1f} MiB")
        results = {}
        for name in ("npz", "write", "read bag", "read mcap"):
            out = subprocess.run([sys.executable, __file__, "--step", name, "--log", str(log), "--mcap", str(mcap)], check=True, capture_output=True, text=True)
            results[name] = json.loads(out.stdout)
            if name == "write":
                print(f"MCAP {mcap.stat().st_size / 2**20:.1f} MiB")
        ref = results["npz"]["peak_bytes"]
        for name, r in results.items():
            print(f"  {name:<10} peak {r['peak_bytes'] / 2**20:8.1f} MiB ({r['peak_bytes'] / ref:5.2f} x the NPZ read)   {r['seconds']:7.1f} s"
                  f"   ({r['seconds'] / cycles * 1e6:.1f} us/cycle)")


if __name__ == "__main__":
    main()
