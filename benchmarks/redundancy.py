"""Per-sample cost of the torque distribution modes on the 3-RRR, relative to one bare pinocchio.rnea call.

The motion is the spiral of configs/rrr3.toml (501 samples, ``mbctl trajectory
constraints``); the tree torques come from the feed-forward. Every mode is timed per
sample over the whole motion (one pass = 501 samples, a different state each time) as

- compiled, buffer path: write ``f.inputs``, ``f.eval()`` (kinematics, reactions and
  the QP in generated C; qrqp);
- ``ActuationRedundancy.distribute``: the same plus the per-sample checks (residuals,
  bounds) and copying the results;
- the same CasADi ``Function`` in CasADi's interpreter (numpy arrays in);
- with qpOASES instead of qrqp (interpreted: CasADi cannot generate it);
- compiled, with a tight limit (1.2 N·m: the limit is active on part of the motion).

The reference is ``pinocchio.rnea`` on the 3-RRR's tree (6 DOF), called from Python
over the same samples, in the same process. Figures are medians of ``--repeat`` passes.

Run: python benchmarks/redundancy.py [--repeat R]
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import pinocchio as pin
from timing import median_seconds  # noqa: E402  (benchmarks/timing.py)

from mbctl.ctrl.actuation import MODES, actuation_settings
from mbctl.ctrl.constrained_path import trajectory_from_constraints
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.redundancy import ActuationRedundancy
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    constraint_set,
    initial_state,
    simulation_setup,
)

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "rrr3.toml"


def per_sample_us(run_pass, samples: int, repeat: int) -> float:
    return median_seconds(run_pass, repeat) / samples * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    robot = load_robot(CONFIG)
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup)
    q0, _ = initial_state(robot, setup, dyn)
    traj = trajectory_from_constraints(dyn, np.linspace(0.0, 0.5, 501), q0)
    tau_tree = feedforward(robot, traj).dynamics.tau
    n = len(traj.t)
    constraints = constraint_set(robot)
    settings = actuation_settings(robot)

    model, data = robot.model, robot.create_data()
    qp = robot.configuration(traj.q)

    def rnea_pass() -> None:
        for k in range(n):
            pin.rnea(model, data, qp[k], traj.dq[k], traj.ddq[k])

    reference = per_sample_us(rnea_pass, n, args.repeat)
    print(f"3-RRR spiral, {n} samples, median of {args.repeat} passes; bare pinocchio.rnea: {reference:.3f} us/sample")
    print(f"{'mode':<20}{'path':<34}{'us/sample':>10}{'x rnea':>8}")

    def variants(mode: str):
        redundancy = ActuationRedundancy(robot, settings, constraints=constraints, q_reference=traj.q[0])
        yield "compiled, buffers + eval()", redundancy, "eval"
        yield "distribute() (checks included)", redundancy, "distribute"
        if mode != "non-redundant":
            yield "casadi Function(*arrays)", redundancy, "interpreted"
            qpoases = dataclasses.replace(settings, solver="qpoases")
            yield "qpOASES, distribute()", ActuationRedundancy(robot, qpoases, constraints=constraints, q_reference=traj.q[0]), "distribute"
            tight = dataclasses.replace(settings, effort=np.full(3, 1.2))
            yield "compiled, |tau| <= 1.2 N·m", ActuationRedundancy(robot, tight, constraints=constraints, q_reference=traj.q[0]), "eval"

    for mode in MODES:
        for label, redundancy, how in variants(mode):
            lo, hi = redundancy.limits(mode)
            if how == "eval":
                start = time.perf_counter()
                f = redundancy.compiled(mode)
                prepared = time.perf_counter() - start
                if not f.compiled:
                    print(f"{mode:<20}{label:<34}  no C compiler: skipped")
                    continue
                f.inputs[4][...], f.inputs[5][...] = lo, hi

                def run_pass(f=f) -> None:
                    inputs = f.inputs
                    for k in range(n):
                        inputs[0][...], inputs[1][...], inputs[2][...], inputs[3][...] = traj.q[k], traj.dq[k], traj.ddq[k], tau_tree[k]
                        f.eval()

            elif how == "distribute":

                def run_pass(r=redundancy, m=mode) -> None:
                    r.distribute(traj.t, traj.q, traj.dq, traj.ddq, tau_tree, m)

            else:
                function = redundancy.function(mode)

                def run_pass(fn=function, lo=lo, hi=hi) -> None:
                    for k in range(n):
                        fn(traj.q[k], traj.dq[k], traj.ddq[k], tau_tree[k], lo, hi)

            repeat = args.repeat if how != "interpreted" else max(args.repeat // 3, 1)
            cost = per_sample_us(run_pass, n, repeat)
            print(f"{mode:<20}{label:<34}{cost:>10.2f}{cost / reference:>7.1f}x")
            if how == "eval" and label.startswith("compiled, buffers"):
                how_built = "loaded from cache" if f.reused else f"generated and compiled in {prepared:.2f} s"
                print(f"{'':<20}({how_built})")


if __name__ == "__main__":
    main()
