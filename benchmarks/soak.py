"""Soak: a long paced 1 kHz closed-loop run on the simulated plant; overruns, memory over time, log size.

Runs the real command, ``python -m mbctl run ROBOT --trajectory ... --log ... --summary ...``
(compiled computed torque, the robot's [plant] truth stepping in its own process), on a
there-and-back motion repeated for ``--minutes``, and samples from outside, every
``--every`` seconds, the resident memory (VmRSS) of the loop's process and of the plant's
and the size of the raw log. Reports:

- overruns (count and fraction of the cycles) and the loop timing from the run's summary;
- memory: the loop's RSS after the warm-up, at the end, their ratio, and the growth rate
  fitted over the run (MiB/min): flat means a ratio near 1 and a rate near 0;
- the raw log's growth (bytes per cycle: the row width, so the disk use is predictable)
  and the final NPZ's size.

Target (issue 29): memory flat over 30 minutes, overruns reported (not hidden).

Run: python benchmarks/soak.py [--minutes 30] [--robot scara] [--every 10] [--no-realtime]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot

MOTIONS = {  # one there-and-back motion (rad, m), 1.5 s a segment, repeated to fill the run
    "scara": [[0.0, 0.0, 0.0, 0.0], [0.8, 1.2, -0.6, 0.05], [-0.5, 0.9, 1.0, -0.05], [0.0, 0.0, 0.0, 0.0]],
    "ur5": [[0.0, -1.2, 1.2, 0.0, 1.2, 0.0], [0.6, -0.8, 0.8, 0.4, 0.8, 0.5], [-0.4, -1.4, 1.6, -0.3, 1.5, -0.4], [0.0, -1.2, 1.2, 0.0, 1.2, 0.0]],
}
TRAJECTORY_RATE_HZ = 100.0  # the reference is interpolated between samples: a 30-minute CSV stays ~50 MB


def rss_mib(pid: int) -> float:
    """Resident memory of a process (MiB), NaN once it has gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return float(line.split()[1]) / 1024.0
    except OSError:
        pass
    return float("nan")


def children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=30.0, help="length of the run (default 30)")
    p.add_argument("--robot", choices=tuple(MOTIONS), default="scara")
    p.add_argument("--every", type=float, default=10.0, help="seconds between memory samples (default 10)")
    p.add_argument("--no-realtime", action="store_true", help="do not ask for SCHED_FIFO")
    args = p.parse_args()

    robot = load_robot(args.robot)
    legs = len(MOTIONS[args.robot]) - 1
    repeats = max(1, int(np.ceil(args.minutes * 60.0 / (1.5 * legs))))
    waypoints = np.array(MOTIONS[args.robot] + MOTIONS[args.robot][1:] * (repeats - 1))
    with tempfile.TemporaryDirectory(prefix="mbctl-soak-") as tmp:
        traj_path, log, summary_path = Path(tmp) / "traj.csv", Path(tmp) / "run.npz", Path(tmp) / "run.json"
        write_trajectory(traj_path, quintic_rest_to_rest(waypoints, [1.5] * (len(waypoints) - 1), TRAJECTORY_RATE_HZ, robot.joint_names))
        duration = args.minutes * 60.0
        command = [sys.executable, "-m", "mbctl", "run", args.robot, "--trajectory", str(traj_path), "--duration", f"{duration:g}",
                   "--log", str(log), "--summary", str(summary_path), *(["--no-realtime"] if args.no_realtime else [])]  # fmt: skip
        print(f"soak: {args.robot}, paced 1 kHz for {args.minutes:g} min ({duration * 1000:.0f} cycles); load average {os.getloadavg()[0]:.2f}", flush=True)
        start = time.monotonic()
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        samples = []  # (s since start, loop RSS MiB, plant RSS MiB, raw log bytes)
        partial = log.with_name(log.name + ".partial")
        while proc.poll() is None:
            time.sleep(args.every)
            plant = sum(rss_mib(c) for c in children(proc.pid))
            size = partial.stat().st_size if partial.exists() else 0
            row = (time.monotonic() - start, rss_mib(proc.pid), plant, size)
            if row[3] > 0 and np.isfinite(row[1]):  # the loop is running
                samples.append(row)
                print(f"  t {row[0]:7.1f} s  loop RSS {row[1]:7.1f} MiB  plant RSS {row[2]:7.1f} MiB  raw log {row[3] / 2**20:8.1f} MiB", flush=True)
        out, err = proc.communicate()
        if proc.returncode not in (0, 3):  # 3: completed, degraded (overruns): still a soak result
            print(out, err, file=sys.stderr)
            return 1
        s = json.loads(summary_path.read_text())
        npz_bytes = log.stat().st_size
    cycles = s["cycles"]
    print(f"stop reason: {s['stop_reason']}")
    print(f"cycles {cycles}, overruns {s['overruns']} ({100 * s['overruns'] / max(cycles, 1):.3f} %); period p99 {s['period_p99_us']:.1f} us, "
          f"|error| p99 {s['period_error_p99_us']:.1f} us, max {s['period_error_max_us']:.1f} us; compute p99 {s['compute_p99_us']:.1f} us; "
          f"scheduling {s.get('scheduling') or 'default'}")  # fmt: skip
    steady = [r for r in samples if r[0] >= samples[0][0] + 0.1 * (samples[-1][0] - samples[0][0])] if len(samples) > 2 else samples
    if len(steady) >= 2:
        t = np.array([r[0] for r in steady]) / 60.0
        rss = np.array([r[1] for r in steady])
        rate = float(np.polyfit(t, rss, 1)[0])
        per_cycle = (steady[-1][3] - steady[0][3]) / ((steady[-1][0] - steady[0][0]) * 1000.0)
        print(f"loop RSS: {rss[0]:.1f} MiB after warm-up, {rss[-1]:.1f} MiB at the end (ratio {rss[-1] / rss[0]:.4f}); "
              f"fitted growth {rate:+.3f} MiB/min over {t[-1] - t[0]:.1f} min; plant RSS {steady[0][2]:.1f} -> {steady[-1][2]:.1f} MiB")  # fmt: skip
        print(f"raw log: {per_cycle:.0f} bytes/cycle ({per_cycle * 1000 * 3600 / 2**30:.2f} GiB/h); NPZ {npz_bytes / 2**20:.1f} MiB "
              f"({npz_bytes / max(cycles, 1):.0f} bytes/cycle)")  # fmt: skip
    else:
        print("run too short for a memory trend: give --minutes >= 1 and a smaller --every")
    return 0


if __name__ == "__main__":
    sys.exit(main())
