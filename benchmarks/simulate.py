"""Cost of one constrained-dynamics evaluation, relative to a bare pinocchio ABA loop.

SCARA (configs/scara.toml: four programmed constraint rows, Stribeck/LuGre/Coulomb
friction) and the four-bar (configs/fourbar.toml: two loop rows), at the assembled
initial state of each config. The reference is the cheapest unconstrained forward
dynamics a user could write in Python, ``pinocchio.aba(model, data, q, v, tau)`` in a
loop, measured in the same process. An RK4 step costs four evaluations. Each figure
is the median of several repetitions.

Run: python benchmarks/simulate.py [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pinocchio as pin
from timing import median_seconds  # noqa: E402  (benchmarks/timing.py)

from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)

CONFIGS = Path(__file__).resolve().parent.parent / "configs"



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=5_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    n = args.calls
    print(f"{'config':<10}{'solver':<16}{'us/evaluation':>15}{'ratio to aba':>14}")
    for name in ("scara", "fourbar"):
        robot = load_robot(CONFIGS / f"{name}.toml")
        setup = simulation_setup(robot)
        model, data = robot.model, robot.create_data()
        systems = {solver: build_dynamics(robot, setup, solver=solver) for solver in ("udwadia-kalaba", "lagrange", "nullspace")}
        q0, dq0 = initial_state(robot, setup, systems["lagrange"])
        qp, tau = robot.configuration(q0), np.zeros(robot.nv)

        def bare_loop() -> None:
            for _ in range(n):
                pin.aba(model, data, qp, dq0, tau)

        reference = median_seconds(bare_loop, args.repeat)
        for solver, system in systems.items():
            s0 = system.initial_state()

            def evaluations(system=system, s0=s0) -> None:
                for _ in range(n):
                    system.evaluate(0.1, q0, dq0, s0)

            seconds = median_seconds(evaluations, args.repeat)
            print(f"{name:<10}{solver:<16}{seconds / n * 1e6:>15.1f}{seconds / reference:>13.0f}x")
        print(f"{name:<10}{'(bare aba)':<16}{reference / n * 1e6:>15.2f}")


if __name__ == "__main__":
    main()
