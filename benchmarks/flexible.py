"""Wall time to simulate the flexible OLKC: the stiff integrator against RK4 at 1e-5 s.

configs/olkc5.toml with everything on (flexible base, flexible upper arm, load-dependent
LuGre friction on all five joints, three programmed rows tracing the rectangle,
Baumgarte squared alpha = 1e3, beta = 1e2), from its off-rectangle start, 5 s. Both
integrators run in this process on the same model:

- ``rk4`` at 1e-5 s (the flexible-manipulator study's integration; 4 evaluations per step);
- ``ros2`` at 1 ms (fixed-step Rosenbrock-W, 2 evaluations per step plus a
  finite-difference Jacobian every 50 ms), and optionally at other steps;
- ``radau`` (scipy, rtol 1e-4) with ``--radau``.

Printed per run: wall time, real-time factor (wall / simulated), evaluations and their
cost, and the deviation from the RK4 run of the actuated joint coordinates and of the
tool point. ``--rk4-duration`` shortens the RK4 run (its wall time is then scaled to 5 s,
marked as such, and the deviations are taken over the shorter span).

Run: python benchmarks/flexible.py [--duration 5] [--rk4-duration 5] [--ros2-steps 1e-3,5e-4] [--radau]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np

from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)
from mbctl.dynamics.simulation.variants import Variant, load_variant

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "olkc5.toml"


def run(robot, setup, integrator: str, step: float, duration: float, **options):
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    start = time.perf_counter()
    result = simulate(system, q0, dq0, duration, integrator=integrator, step=step, output_step=1e-3, **options)
    return result, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rk4-duration", type=float, default=None, help="simulated time of the RK4 run (default: --duration)")
    parser.add_argument("--ros2-steps", default="1e-3,5e-4")
    parser.add_argument("--radau", action="store_true")
    args = parser.parse_args()
    robot = load_variant(CONFIG, Variant("flexible", "flexible", "config"))
    setup = dataclasses.replace(simulation_setup(robot), duration=args.duration)
    actuated = [j.idx_v for j in robot.joints if j.actuated]
    tool = slice(0, 3)  # the tool's three rows
    rk4_duration = args.rk4_duration or args.duration

    runs = []
    ref, wall = run(robot, setup, "rk4", 1e-5, rk4_duration)
    runs.append(("rk4 1e-5 s", ref, wall * args.duration / rk4_duration, rk4_duration != args.duration))
    for h in [float(x) for x in args.ros2_steps.split(",") if x]:
        result, wall = run(robot, setup, "ros2", h, args.duration)
        runs.append((f"ros2 {h:g} s", result, wall, False))
    if args.radau:
        result, wall = run(robot, setup, "radau", 1e-3, args.duration, rtol=1e-4, atol=1e-6)
        runs.append(("radau rtol 1e-4", result, wall, False))

    print(f"flexible OLKC ({robot.nv} DOF, {sum(len(s) for s in [robot.elastic_names])} elastic), {args.duration:g} s simulated")
    print(f"{'integrator':<18}{'wall [s]':>10}{'x real time':>13}{'evaluations':>13}{'us/eval':>9}{'vs rk4':>8}{'max dq_act':>12}{'max d tool':>12}")
    n_ref = len(ref.t)
    for name, result, wall, scaled in runs:
        n = min(n_ref, len(result.t))
        dq = np.abs(result.q[:n, actuated] - ref.q[:n, actuated]).max()
        tool_r = ref.target[:n, tool] + ref.phi[:n, tool]
        tool_x = result.target[:n, tool] + result.phi[:n, tool]
        dtool = np.linalg.norm(tool_x - tool_r, axis=1).max()
        per_eval = wall * (rk4_duration / args.duration if scaled else 1.0) / result.evaluations * 1e6
        print(
            f"{name:<18}{wall:>10.1f}{wall / args.duration:>12.2f}{'*' if scaled else ' '}{result.evaluations:>13}"
            f"{per_eval:>9.0f}{runs[0][2] / wall:>7.1f}x{dq:>12.2e}{dtool:>12.2e}"
        )
    if runs[0][3]:
        print(f"* RK4 ran {rk4_duration:g} s; wall time scaled to {args.duration:g} s, deviations over the first {rk4_duration:g} s")
    print("max dq_act: largest deviation of the actuated joint coordinates from RK4 (rad, m); max d tool: of the tool point (m)")


if __name__ == "__main__":
    main()
