"""The loop's own cost per cycle against its compiled functions, and paced 1 kHz runs quiet and busy.

**Overhead** (lock-step on the simulated plant, so the plant's physics is not the loop's): in one
process, a bare ``pinocchio.rnea`` call on the UR5 (the unit), each compiled function's own time
(the law, the estimate step, the whole generated cycle, the MPC's update) and, per robot and cycle
(``python``: the reference implementation; ``compiled``: one generated call), the phases' p50 of a
lock-step run. The loop's own work is the control phase plus the log phase (read and write are the
backend's; in lock-step the write steps the plant); the target (issue: one compiled cycle) is at most
10 ``rnea`` calls for UR5 computed torque, and the MPC's call at most 20 µs above its update.

**Paced** (``--repeats`` runs of ``--seconds`` each, quiet, then with a busy-looping child process on
one core): the SCARA and the UR5 with computed torque and the UR5 with the MPC, against the simulated
plant stepping on its own clock in its own process (``sim``) or behind ``mbctl emulate`` on a pty
(``--plants sim,dynamixel``). Targets: below 0.5 % overruns, no run stopped by the overrun limit.

Run: python benchmarks/loop.py [--seconds 10] [--repeats 3] [--runs scara:computed-torque,ur5:computed-torque,ur5:mpc]
     [--skip-overhead] [--skip-paced] [--no-realtime]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pinocchio as pin

from mbctl.ctrl.controllers import build_controller
from mbctl.ctrl.tracking import TrackingController
from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.compiled_cycle import compiled_cycle
from mbctl.hardware.estimate import LoopEstimator
from mbctl.hardware.interface import JointState
from mbctl.hardware.loop_support import SafetyLimits
from mbctl.hardware.sample_timing import SampleTiming
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


def p50_us(call: Callable[[], object], repeats: int = 20_000) -> float:
    """Median time of one call (µs), after a warm-up."""
    for _ in range(1000):
        call()
    times = np.empty(repeats)
    clock = time.perf_counter
    for i in range(repeats):
        start = clock()
        call()
        times[i] = clock() - start
    return float(np.median(times) * 1e6)


def motion(name: str, seconds: float, rate: float):
    robot = load_robot(name)
    points = np.array(MOTIONS[name])
    repeats = int(np.ceil(seconds / (1.5 * len(points))))
    waypoints = np.vstack([points] * repeats + [points[:1]])
    return robot, quintic_rest_to_rest(waypoints, [1.5] * (len(waypoints) - 1), rate, robot.joint_names)


def own_times(rate: float) -> tuple[float, dict[str, float]]:
    """``rnea`` on the UR5 and the UR5's compiled functions, each on its own buffers (µs, p50)."""
    robot, traj = motion("ur5", 3.0, rate)
    model, data = robot.model, robot.create_data()
    q, v = pin.neutral(model), np.zeros(model.nv)
    rnea = p50_us(lambda: pin.rnea(model, data, q, v, v))
    tracking = TrackingController(build_controller(robot, "computed-torque"), traj)
    estimator = LoopEstimator(robot, 1.0 / rate)
    law = tracking.controller.compile()
    for buf, value in zip(law.inputs, (traj.q[0], traj.dq[0], traj.q[0], traj.dq[0], traj.ddq[0], np.zeros(robot.nv))):
        buf[...] = value
    step = estimator.estimator
    step.reset(0.0, traj.q[0], traj.dq[0])
    step.update(1.0 / rate, traj.q[0], traj.dq[0], np.zeros(robot.nv))  # its buffers hold a step now
    timing = SampleTiming(1.0 / rate, None, measured=False, delay_cycles=0)
    cycle = compiled_cycle(tracking, SafetyLimits.of(robot), robot.joint_names, tracking.reference, estimator, logs_estimates=True,
                           timing=timing, measured_torque=True, sample_clock=False, paced=False, rate_hz=rate, cycles=10)  # fmt: skip
    cycle.warm_up(JointState(t=0.0, q=traj.q[0], dq=traj.dq[0], effort=np.zeros(robot.nv)))
    times = {
        "computed-torque law": p50_us(law.eval),
        "estimate step (model observer)": p50_us(step.step.eval),
        "whole cycle (law + estimate + checks + row)": p50_us(cycle.functions[0].eval),
    }
    return rnea, times


def overhead(rate: float, seconds: float, tmp: Path) -> None:
    rnea, times = own_times(rate)
    print(f"one pinocchio.rnea call on the UR5 from Python: {rnea:.2f} us p50 (the unit below)")
    print("compiled functions of the UR5, each alone on its own buffers (p50):")
    for name, us in times.items():
        print(f"  {name:<45}{us:8.2f} us {us / rnea:7.1f} rnea")
    print(f"\nlock-step runs of {seconds:g} s on the simulated plant, phases p50 (us); the loop's own work = control + log")
    print(f"{'robot':<7}{'controller':<17}{'cycle':<10}{'read':>8}{'control':>9}{'write':>8}{'log':>8}{'own work':>10}{'in rnea':>9}  notes")
    for name, law in (("scara", "computed-torque"), ("ur5", "computed-torque"), ("ur5", "mpc")):
        robot, traj = motion(name, seconds, rate)
        for compiled in (False, True) if law != "mpc" else (True,):
            options = SessionOptions(plant="sim", lockstep=True, law=law, rate_hz=rate, duration_s=seconds, compiled_cycle=compiled)
            s = run_session(robot, traj, options, tmp / f"{name}-{law}.npz")
            p = {k: v["p50"] for k, v in s.phases_us.items()}
            own = p["control"] + p["log"]
            note = s.stop_reason
            if law == "mpc":
                update = float(s.mpc["solve_us_p50"])
                note = f"update p50 {update:.1f} us: the call is {p['control'] - update:.1f} us above it; {note}"
            print(f"{name:<7}{law:<17}{s.cycle:<10}{p['read']:8.1f}{p['control']:9.1f}{p['write']:8.1f}{p['log']:8.1f}{own:10.1f}{own / rnea:9.1f}  {note}")


def paced(args: argparse.Namespace, tmp: Path) -> None:
    print(f"\npaced {args.rate:g} Hz, {args.seconds:g} s per run, {args.repeats} runs each; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    print(f"{'robot':<7}{'controller':<17}{'plant':<11}{'load':<7}{'overruns':>15}{'|err| p99 us':>14}{'compute p99 us':>16}{'plant RTF':>11}  cycle; scheduling; stop")
    for run in args.runs.split(","):
        name, law = run.split(":")
        robot, traj = motion(name, args.seconds, args.rate)
        for plant in args.plants.split(","):
            for busy in (False, True):
                for _ in range(args.repeats):
                    options = SessionOptions(
                        plant=plant, law=law, rate_hz=args.rate, duration_s=args.seconds, emulate=plant == "dynamixel",
                        realtime_priority=None if args.no_realtime else SessionOptions.realtime_priority,
                    )  # fmt: skip
                    with cpu_hog(busy):
                        s = run_session(robot, traj, options, tmp / f"{name}-{plant}.npz")
                    rtf = s.plant_timing.get("real_time_factor", float("nan"))
                    overruns = f"{s.overruns} ({100 * s.overrun_fraction:.2f}%)"
                    print(
                        f"{name:<7}{law:<17}{plant:<11}{'busy' if busy else 'quiet':<7}{overruns:>15}{s.period_error_p99_us:>14.1f}"
                        f"{s.compute_p99_us:>16.1f}{rtf:>11.2f}  {getattr(s, 'cycle', 'python')}; {s.scheduling}; {s.stop_reason} ({s.cycles} cycles)",
                        flush=True,
                    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each paced run (s)")
    parser.add_argument("--repeats", type=int, default=3, help="paced runs per robot, controller and load")
    parser.add_argument("--rate", type=float, default=1000.0, help="loop rate (Hz)")
    parser.add_argument("--runs", default="scara:computed-torque,ur5:computed-torque,ur5:mpc", help="comma-separated robot:controller pairs of the paced runs")
    parser.add_argument("--plants", default="sim", help="comma-separated: sim, dynamixel")
    parser.add_argument("--no-realtime", action="store_true", help="do not ask for SCHED_FIFO priority")
    parser.add_argument("--skip-overhead", action="store_true", help="only the paced runs")
    parser.add_argument("--skip-paced", action="store_true", help="only the overhead")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory() as tmp:
        if not args.skip_overhead:
            overhead(args.rate, 3.0, Path(tmp))
        if not args.skip_paced:
            paced(args, Path(tmp))


if __name__ == "__main__":
    main()
