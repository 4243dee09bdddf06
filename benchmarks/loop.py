"""Timing of the fixed-rate loop: simulated plant and emulated Dynamixel bus, paced to the wall clock.

SCARA (configs/scara.toml), compiled computed torque with friction feed-forward,
following a quintic pick-and-place trajectory repeated to fill the run:

- ``sim``: the [plant] truth model (LuGre j1, unmodelled payload, 17-bit encoders),
  stepped in the loop's process;
- ``dynamixel``: the same truth model behind ``mbctl emulate`` in a child process,
  reached through dynamixel_sdk on a pseudo-terminal (one sync read and one sync
  write of four servos per cycle).

Prints achieved rate, overruns, period percentiles, period error, compute time
(read + control + write) and tracking RMS. Run: python benchmarks/loop.py [--seconds S]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np

from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.session import SessionOptions, run_session

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "scara.toml"
WAYPOINTS = np.array([[0.0, 0.0, 0.0, 0.0], [0.8, 1.2, -0.6, 0.05], [-0.5, 0.9, 1.0, -0.05], [0.0, 0.0, 0.0, 0.0]])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run (s)")
    parser.add_argument("--rate", type=float, default=1000.0, help="loop rate (Hz)")
    parser.add_argument("--plants", default="sim,dynamixel", help="comma-separated: sim, dynamixel")
    args = parser.parse_args()

    robot = load_robot(CONFIG)
    repeats = int(np.ceil(args.seconds / 4.5))
    waypoints = np.vstack([WAYPOINTS[:-1]] * repeats + [WAYPOINTS[-1:]])
    traj = quintic_rest_to_rest(waypoints, [1.5] * (len(waypoints) - 1), args.rate, robot.joint_names)
    print(f"SCARA, computed torque, {args.rate:g} Hz, {args.seconds:g} s per run, paced to the wall clock")
    header = f"{'plant':<10}{'rate Hz':>9}{'overruns':>14}{'p50 us':>9}{'p99 us':>9}{'|err| p99':>11}{'compute p50':>13}{'p99':>8}{'rms mrad/mm':>14}"
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for plant in args.plants.split(","):
            options = SessionOptions(plant=plant, rate_hz=args.rate, duration_s=args.seconds, emulate=plant == "dynamixel")
            start = time.perf_counter()
            s = run_session(robot, traj, options, Path(tmp) / f"{plant}.npz")
            wall = time.perf_counter() - start
            rms = max(s.tracking_rms.values()) * 1e3 if s.tracking_rms else float("nan")
            print(
                f"{plant:<10}{s.cycles / s.duration_s if s.duration_s else 0:>9.1f}"
                f"{f'{s.overruns} ({100 * s.overruns / max(s.cycles, 1):.2f}%)':>14}"
                f"{s.period_p50_us:>9.1f}{s.period_p99_us:>9.1f}{s.period_error_p99_us:>11.1f}"
                f"{s.compute_p50_us:>13.1f}{s.compute_p99_us:>8.1f}{rms:>14.3f}"
            )
            extra = f"  stop: {s.stop_reason}; failed reads {s.failed_reads}; comm errors {s.comm_errors or 'none'}"
            print(f"{extra}; wall time {wall:.1f} s (set-up included)")
    print("targets (sim): overruns < 0.1 %, p99 period error < 200 us")


if __name__ == "__main__":
    main()
