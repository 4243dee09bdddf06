"""Time-optimal path timing: mbctl beside toppra (TOPP-RA) on one UR5 path.

The path: a cubic spline (not-a-knot) through the four UR5 waypoints below at uniform s,
the same path in both tools. Limits: the URDF's velocity and effort limits. Rows:

1. Coulomb friction only (the model toppra can express, ``fs_coef`` = ur5.toml's ``fc``), both at
   the same grids: durations, their ratio, compute times (median of ``--repeat``) and their ratio;
   the worst torque ratio at 1 kHz under that model and under ur5.toml's full model
   (Stribeck + viscous), checked with mbctl's feed-forward for both results.
2. Full friction model: mbctl with ``friction="full"`` (verified at 1 kHz, refined between the grid
   points) against toppra's result slowed uniformly until it fits the full model.
3. Jerk-limited: the same path with a jerk limit on every joint: duration, peak jerk at 1 kHz.
4. Closed loop: the full-model timing with torque margin 0.9, without and with a velocity margin
   of 0.95 (the run's safety check stops at the velocity limit itself, which the timing rides),
   followed by computed torque on the bundled UR5's simulated plant in lock-step (``mbctl run
   --lockstep``; its encoders are the drives', 2^19 counts x 101): saturated commands and chatter
   warnings counted.
5. The SCARA's programmed tool circle and the 3-RRR's spiral (redundant drives distributed by the
   timing's LP), retimed.

toppra is not an mbctl dependency: ``pip install toppra`` (or ``pip install -e ".[bench]"``).

Run: python benchmarks/optimal_timing.py [--repeat R] [--grids 200,500,1000]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from timing import median_seconds  # noqa: E402

from mbctl.ctrl.feedforward import feedforward  # noqa: E402
from mbctl.ctrl.timing import optimal_timing, spline_path, timing_limits  # noqa: E402
from mbctl.ctrl.timing.limits import timing_robot  # noqa: E402
from mbctl.ctrl.timing.programmed import path_from_constraints  # noqa: E402
from mbctl.ctrl.trajectory import Trajectory, write_trajectory  # noqa: E402
from mbctl.dynamics.model.robot import load_robot  # noqa: E402

# rad: shoulder and elbow swing against gravity, wrists turn along
WAYPOINTS = np.array([
    [0.0, -1.6, 1.6, -1.5, -1.57, 0.0],
    [0.6, -0.7, 0.4, -1.0, -1.2, 0.6],
    [1.4, -1.9, 1.9, -1.9, -1.6, 1.2],
    [2.2, -0.6, 0.3, -0.7, -1.0, 1.8],
])  # fmt: skip


def toppra_timing(robot, wp: np.ndarray, grid: int, fc: np.ndarray):  # noqa: ANN001, ANN201
    """toppra's optimal timing of the same spline with Coulomb friction fc: (trajectory, the
    instance) with rest at both ends, torque and velocity limits as mbctl's defaults."""
    import pinocchio as pin
    import toppra
    import toppra.algorithm as algo
    import toppra.constraint as constraint

    model, data = robot.model, robot.model.createData()
    path = toppra.SplineInterpolator(np.linspace(0, 1, len(wp)), wp)
    vlim = np.array([j.limits.velocity for j in robot.joints])
    tlim = np.array([j.limits.effort for j in robot.joints])
    vel = constraint.JointVelocityConstraint(np.column_stack([-vlim, vlim]))
    trq = constraint.JointTorqueConstraint(lambda q, v, a: pin.rnea(model, data, q, v, a), np.column_stack([-tlim, tlim]), fc)
    inst = algo.TOPPRA([vel, trq], path, gridpoints=np.linspace(0, 1, grid + 1), parametrizer="ParametrizeConstAccel")
    return inst.compute_trajectory(0, 0), inst


def sampled(jnt_traj, names, rate: float = 1000.0) -> Trajectory:  # noqa: ANN001
    """toppra's trajectory sampled at ``rate`` Hz."""
    t = np.linspace(0, jnt_traj.duration, int(np.ceil(jnt_traj.duration * rate - 1e-9)) + 1)
    dq = jnt_traj(t, 1)
    dq[0] = dq[-1] = 0.0
    ddq = jnt_traj(t, 2)
    ddq[-1] = 0.0
    return Trajectory(t=t, joint_names=names, q=jnt_traj(t), dq=dq, ddq=ddq)


def torque_ratio(robot, traj: Trajectory, limits) -> float:  # noqa: ANN001
    return float(np.max(np.abs(feedforward(robot, traj).dynamics.tau) / limits.torque))


def slowed(traj: Trajectory, k: float) -> Trajectory:
    """The same motion k times slower (time scaled by k)."""
    return Trajectory(t=traj.t * k, joint_names=traj.joint_names, q=traj.q, dq=traj.dq / k, ddq=traj.ddq / k**2)


def slow_until_fits(robot, traj: Trajectory, limits, tol: float = 1e-3) -> float:  # noqa: ANN001
    """The smallest uniform slow-down k (bisection) whose torques fit the limits within tol."""
    lo, hi = 1.0, 2.0
    while torque_ratio(robot, slowed(traj, hi), limits) > 1 + tol:
        hi *= 1.5
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if torque_ratio(robot, slowed(traj, mid), limits) > 1 + tol else (lo, mid)
    return hi


def closed_loop(robot_name: str, traj: Trajectory) -> dict:
    """Run computed torque on the simulated plant in lock-step; the run summary plus the times (s) of the
    saturated commands."""
    with tempfile.TemporaryDirectory() as tmp:
        csv, log, out = Path(tmp) / "t.csv", Path(tmp) / "log.npz", Path(tmp) / "s.json"
        write_trajectory(csv, traj)
        cmd = [sys.executable, "-m", "mbctl", "run", robot_name, "--trajectory", str(csv), "--lockstep", "--controller", "computed-torque",
               "--log", str(log), "--summary", str(out)]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True)
        summary = json.loads(out.read_text()) if out.exists() else {}
        summary["exit"] = proc.returncode
        if log.exists():
            data = np.load(log)
            limit = np.array([150.0, 150.0, 150.0, 28.0, 28.0, 28.0])
            summary["saturated_at"] = data["t"][(np.abs(data["tau"]) >= limit - 1e-9).any(axis=1)]
        return summary


def describe(summary: dict) -> str:
    at = summary.get("saturated_at", np.array([]))
    when = f" (t = {at.min():.3f} .. {at.max():.3f} s)" if len(at) else ""
    return (f"exit {summary['exit']}, {summary.get('stop_reason', '?')}, {summary.get('saturated', '?')} saturated commands{when}, "
            f"{len(summary.get('chatter', []))} chatter warnings")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--grids", default="200,500,1000")
    p.add_argument("--no-jerk", action="store_true", help="skip the jerk-limited row")
    args = p.parse_args()
    try:
        import toppra  # noqa: F401
    except ImportError:
        print("toppra is not installed: pip install toppra (or pip install -e '.[bench]')")
        return 1
    import logging

    logging.getLogger("toppra").setLevel(logging.WARNING)
    robot = load_robot("ur5")
    names = robot.joint_names
    path = spline_path(WAYPOINTS, names)
    fc = np.array([j.friction.law.fc for j in robot.joints])
    coulomb, full = timing_limits(robot, friction="coulomb"), timing_limits(robot, friction="full")
    coulomb_robot = timing_robot(robot, "coulomb")

    print("1. Coulomb friction only, same grid (grid optimum, no refinement; times: median of", args.repeat, "runs)")
    print(f"{'grid':>5} {'toppra T':>9} {'mbctl T':>9} {'ratio':>7} {'toppra ms':>10} {'mbctl ms':>9} {'time ratio':>10}"
          f" {'toppra tau/lim (coul, full)':>28} {'mbctl tau/lim (coul, full)':>27}")  # fmt: skip
    for grid in [int(g) for g in args.grids.split(",")]:
        traj_tp, _ = toppra_timing(robot, WAYPOINTS, grid, fc)
        res = optimal_timing(robot, path, coulomb, grid=grid, verify=False)
        t_tp = median_seconds(lambda: toppra_timing(robot, WAYPOINTS, grid, fc), args.repeat)
        t_mb = median_seconds(lambda: optimal_timing(robot, path, coulomb, grid=grid, verify=False), args.repeat)
        tp = sampled(traj_tp, names)
        print(
            f"{grid:>5} {traj_tp.duration:>9.4f} {res.duration:>9.4f} {res.duration / traj_tp.duration:>7.4f} {1e3 * t_tp:>10.1f} "
            f"{1e3 * t_mb:>9.1f} {t_mb / t_tp:>10.2f} {torque_ratio(coulomb_robot, tp, coulomb):>13.4f} {torque_ratio(robot, tp, full):>8.4f}"
            f" {torque_ratio(coulomb_robot, res.trajectory, coulomb):>18.4f} {torque_ratio(robot, res.trajectory, full):>8.4f}"
        )
    grid = 1000
    ref = optimal_timing(robot, path, coulomb, grid=grid)
    print(
        f"  mbctl Coulomb only, refined until the limits hold at 1 kHz (grid {grid}): {ref.duration:.4f} s, torque ratio "
        f"{ref.ratios['torque']:.4f}, {ref.refinements} refinements, {1e3 * ref.solve_time:.0f} ms"
    )
    print(f"\n2. Full friction model (Stribeck + viscous), grid {grid}, checked at 1 kHz")
    traj_tp, _ = toppra_timing(robot, WAYPOINTS, grid, fc)
    k = slow_until_fits(robot, sampled(traj_tp, names), full)
    start = time.perf_counter()
    res = optimal_timing(robot, path, full, grid=grid)
    wall = time.perf_counter() - start
    print(f"  toppra slowed uniformly until it fits: {traj_tp.duration * k:.4f} s (x{k:.4f})")
    print(
        f"  mbctl full friction: {res.duration:.4f} s ({res.duration / (traj_tp.duration * k) - 1:+.2%}), held={res.held}, "
        f"worst ratios {', '.join(f'{kk} {v:.4f}' for kk, v in res.ratios.items())}, {res.iterations} solves, "
        f"{res.refinements} refinements, {wall * 1e3:.0f} ms"
    )
    print("  active: " + ", ".join(f"{kk} {v:.0%}" for kk, v in res.active_fractions().items()))
    if not args.no_jerk:
        jl = timing_limits(robot, friction="full", jerk={n: 100.0 for n in names})
        start = time.perf_counter()
        rj = optimal_timing(robot, path, jl, grid=200)
        print(
            f"\n3. Jerk limit 100 rad/s^3 on every joint (grid 200): {rj.duration:.4f} s, peak jerk {rj.peak_jerk.max():.2f} rad/s^3 at 1 kHz, "
            f"held={rj.held}, worst ratios {', '.join(f'{kk} {v:.4f}' for kk, v in rj.ratios.items())}, {time.perf_counter() - start:.1f} s"
        )
    plain = optimal_timing(robot, path, timing_limits(robot, torque_margin=0.9), grid=grid)
    margin = optimal_timing(robot, path, timing_limits(robot, torque_margin=0.9, velocity_margin=0.95), grid=grid)
    print("\n4. Closed loop, computed torque (ur5.toml gains), the bundled plant, lock-step:")
    print(f"  optimal, torque margin 0.9 ({plain.duration:.4f} s): {describe(closed_loop('ur5', plain.trajectory))}")
    print(f"  optimal, torque margin 0.9, velocity margin 0.95 ({margin.duration:.4f} s): {describe(closed_loop('ur5', margin.trajectory))}")
    print("\n5. Beyond serial arms (the routes of the configs' programmed constraints, limits checked at 1 kHz)")
    for name, lim_of in (("scara", lambda r: timing_limits(r, torque_margin=0.9)), ("rrr3", timing_limits)):
        other = load_robot(name)
        start = time.perf_counter()
        rc = optimal_timing(other, path_from_constraints(other), lim_of(other), grid=grid)
        print(
            f"  {name}: {rc.duration:.4f} s (config's own motion {other.spec.simulation.duration:g} s), held={rc.held}, "
            f"worst ratios {', '.join(f'{kk} {v:.4f}' for kk, v in rc.ratios.items())}, {time.perf_counter() - start:.2f} s"
        )
    print(f"\nmachine load: {Path('/proc/loadavg').read_text().split()[:3]} (a shared 2-core machine)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
