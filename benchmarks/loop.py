"""Timing of the paced 1 kHz loop, quiet and with one core kept busy by another process.

Compiled computed torque with friction feed-forward, following quintic
rest-to-rest motions repeated to fill the run, against:

- ``sim``: the robot's [plant] truth model stepping on its own clock in its own
  process (shared memory between plant and loop);
- ``dynamixel`` (``--plants sim,dynamixel``): the truth model behind ``mbctl emulate``,
  reached through dynamixel_sdk on a pseudo-terminal.

Each robot runs twice: quiet, then with a busy-looping child process (the "hog").
Prints overruns, period error p99, compute p99 (read + control + write), the
plant's real-time factor and the scheduling the loop got.

Targets (issue: a loop that holds its rate): quiet 0 overruns in 10,000 cycles,
period-error p99 < 100 us; one core busy < 0.5 % overruns and no safety stop; the
plant's real-time factor >= 1.

Run: python benchmarks/loop.py [--seconds 10] [--robots scara,ur5] [--no-realtime]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.session import SessionOptions, run_session

# one there-and-back motion per robot (rad, m), 1.5 s per segment
MOTIONS = {
    "scara": [[0.0, 0.0, 0.0, 0.0], [0.8, 1.2, -0.6, 0.05], [-0.5, 0.9, 1.0, -0.05]],
    "ur5": [[0.0, -1.2, 1.2, 0.0, 1.2, 0.0], [0.6, -0.8, 0.8, 0.4, 0.8, 0.5], [-0.4, -1.4, 1.6, -0.3, 1.5, -0.4]],
}


@contextlib.contextmanager
def cpu_hog(busy: bool) -> Iterator[None]:
    """A child process spinning on one core while the block runs (if ``busy``)."""
    if not busy:
        yield
        return
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        time.sleep(0.5)
        yield
    finally:
        hog.kill()
        hog.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run (s)")
    parser.add_argument("--rate", type=float, default=1000.0, help="loop rate (Hz)")
    parser.add_argument("--robots", default="scara,ur5", help=f"comma-separated, of: {', '.join(MOTIONS)}")
    parser.add_argument("--plants", default="sim", help="comma-separated: sim, dynamixel")
    parser.add_argument("--no-realtime", action="store_true", help="do not ask for SCHED_FIFO priority")
    args = parser.parse_args()

    print(f"paced loop, computed torque, {args.rate:g} Hz, {args.seconds:g} s per run; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    header = f"{'robot':<7}{'plant':<11}{'load':<7}{'overruns':>15}{'|err| p99 us':>14}{'compute p99 us':>16}{'plant RTF':>11}  scheduling / stop"
    print(header)
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.robots.split(","):
            robot = load_robot(name)
            motion = np.array(MOTIONS[name])
            repeats = int(np.ceil(args.seconds / (1.5 * len(motion))))
            waypoints = np.vstack([motion] * repeats + [motion[:1]])
            traj = quintic_rest_to_rest(waypoints, [1.5] * (len(waypoints) - 1), args.rate, robot.joint_names)
            for plant in args.plants.split(","):
                for busy in (False, True):
                    options = SessionOptions(
                        plant=plant,
                        rate_hz=args.rate,
                        duration_s=args.seconds,
                        emulate=plant == "dynamixel",
                        realtime_priority=None if args.no_realtime else SessionOptions.realtime_priority,
                    )
                    with cpu_hog(busy):
                        s = run_session(robot, traj, options, Path(tmp) / f"{name}-{plant}.npz")
                    rtf = s.plant_timing.get("real_time_factor", float("nan"))
                    overruns = f"{s.overruns} ({100 * s.overrun_fraction:.2f}%)"
                    print(
                        f"{name:<7}{plant:<11}{'busy' if busy else 'quiet':<7}{overruns:>15}{s.period_error_p99_us:>14.1f}"
                        f"{s.compute_p99_us:>16.1f}{rtf:>11.2f}  {s.scheduling}; {s.stop_reason} ({s.cycles} cycles)"
                    )


if __name__ == "__main__":
    main()
