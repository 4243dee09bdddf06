"""``mbctl demo``: the main jobs on the bundled SCARA.

1. Feed-forward torques (rigid-body dynamics plus Stribeck, LuGre and
   Coulomb–viscous joint friction) for the SCARA of ``configs/scara.toml`` along a
   built-in quintic pick-and-place style trajectory.
2. A closed-loop run along the same trajectory: compiled computed torque with
   friction feed-forward at 1 kHz, paced to the wall clock, against the simulated
   plant of ``[plant]`` (whose truth differs from the model: LuGre friction on j1,
   an unmodelled payload, quantised encoders).

Prints both summaries and writes the trajectory, torques, run log and plots. When
the machine could not hold 1 kHz (overruns: a degraded run, or one stopped by the
overrun limit) it says so in a warning instead of presenting a clean result; the
exit code is 0 for a completed run (clean or degraded) and 1 for a stopped one.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from mbctl.bundled import bundled_config
from mbctl.cli.commands.feedforward import format_summary
from mbctl.cli.commands.run import format_run, write_summary
from mbctl.cli.console import warn
from mbctl.ctrl.feedforward import feedforward, write_torques
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.fileio import check_output_dir
from mbctl.hardware.loop import RunSummary
from mbctl.hardware.session import SessionOptions, run_session
from mbctl.viz.feedforward import plot_feedforward
from mbctl.viz.run import plot_run

# SCARA joint waypoints (j1, j2, j3 in rad, j4 in m) and segment durations (s)
DEMO_WAYPOINTS = np.array(
    [
        [0.0, 0.0, 0.0, 0.0],
        [0.8, 1.2, -0.6, 0.05],
        [-0.5, 0.9, 1.0, -0.05],
        [0.0, 0.0, 0.0, 0.0],
    ]
)
DEMO_DURATIONS = (1.5, 1.5, 1.5)
DEMO_RATE_HZ = 1000.0


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out-dir", type=Path, default=Path("mbctl-demo"), help="where to write files (default ./mbctl-demo)")
    p.add_argument("--lockstep", action="store_true", help="run the closed loop in lock-step (one plant period per cycle, as fast as possible) instead of paced to the wall clock")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out_dir)
    config = bundled_config("scara")
    robot = load_robot(config)
    traj = quintic_rest_to_rest(DEMO_WAYPOINTS, DEMO_DURATIONS, DEMO_RATE_HZ, robot.joint_names)
    start = time.perf_counter()
    ff = feedforward(robot, traj, reactions=True)
    elapsed = time.perf_counter() - start

    args.out_dir.mkdir(parents=True, exist_ok=True)
    files = {
        "trajectory": args.out_dir / "scara_trajectory.csv",
        "torques": args.out_dir / "scara_torques.csv",
        "torque plot": args.out_dir / "scara_torques.png",
        "run log": args.out_dir / "scara_run.npz",
        "run summary": args.out_dir / "scara_run.json",
        "run plot": args.out_dir / "scara_run.png",
    }
    write_trajectory(files["trajectory"], traj)
    write_torques(files["torques"], ff)
    plot_feedforward(ff, files["torque plot"], title="SCARA (the SCARA constraint study): feed-forward torques with joint friction")
    print(f"robot: {config}")
    print(f"trajectory: quintic rest-to-rest through {len(DEMO_WAYPOINTS)} waypoints at {DEMO_RATE_HZ:g} Hz")
    print("\n1. feed-forward torques")
    print(format_summary(ff, elapsed))

    pace = "lock-step" if args.lockstep else "real time"
    print(f"\n2. closed loop: computed torque at 1 kHz against the simulated plant ({traj.duration:.1f} s, {pace})")
    summary = run_session(robot, traj, SessionOptions(plant="sim", law="computed-torque", lockstep=args.lockstep), files["run log"])
    write_summary(files["run summary"], summary, controller="computed-torque", plant="sim")
    plot_run(files["run log"], files["run plot"], summary=summary, title="SCARA: computed torque with friction feed-forward, simulated plant")
    print(format_run(summary))
    print()
    for kind, path in files.items():
        print(f"wrote {kind}: {path}")
    if not summary.clean:
        warn(rate_warning(summary))
    return 0 if summary.completed else 1


def rate_warning(summary: RunSummary) -> str:
    """What to tell the user about a closed loop that was not clean."""
    rate = f"{summary.rate_hz:g} Hz"
    if summary.completed:
        return (
            f"this machine did not hold {rate}: {summary.overruns} of {summary.cycles} cycles overran "
            f"({100 * summary.overrun_fraction:.1f} %); the closed-loop figures are those of a degraded run"
        )
    if summary.stop_reason.startswith("overrun limit"):
        return f"this machine could not hold {rate}; the closed loop stopped with torque off ({summary.stop_reason})"
    return f"the closed loop stopped before its end: {summary.stop_reason}"
