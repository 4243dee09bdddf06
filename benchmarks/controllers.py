"""Per-call cost of the compiled control laws on a UR5, relative to one bare pinocchio.rnea call.

The reference is ``pinocchio.rnea(model, data, q, v, a)`` called from Python, measured
in the same process. Each law (configs/ur5.toml, ``[control]`` gains) is timed as

- compiled, convenience call: ``f(q, dq, q_d, dq_d, ddq_d, z)`` -> new output arrays;
- compiled, buffer path: write ``f.inputs``, ``f.eval()``, read ``f.outputs``;
- CasADi's default call of the same ``Function``, with numpy arrays and with DMs.

Figures are medians over ``--repeat`` runs of ``--calls`` calls each.

Run: python benchmarks/controllers.py [--calls N] [--repeat R]
"""

from __future__ import annotations

import argparse
import statistics
import time
import timeit
from pathlib import Path

import casadi as ca
import numpy as np
import pinocchio as pin

from mbctl.ctrl.controllers import LAWS, build_controller
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.symbolic import SymbolicDynamics

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "ur5.toml"


def median_call_us(fn, calls: int, repeat: int) -> float:
    fn()  # warm-up
    return statistics.median(timeit.repeat(fn, number=calls, repeat=repeat)) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    robot = load_robot(CONFIG)
    rng = np.random.default_rng(0)
    q, dq, ddq = rng.uniform(-2, 2, robot.nv), rng.normal(size=robot.nv), rng.normal(size=robot.nv)
    inputs = [q, dq, q + 0.01, dq + 0.1, ddq, np.zeros(robot.nv)]
    model, data = robot.model, robot.create_data()
    qp = robot.configuration(q)
    reference = median_call_us(lambda: pin.rnea(model, data, qp, dq, ddq), args.calls, args.repeat)
    print(f"UR5, median of {args.repeat} x {args.calls} calls; bare pinocchio.rnea: {reference:.3f} us/call")

    dynamics = SymbolicDynamics(robot)
    print(f"{'law':<17}{'path':<30}{'us/call':>9}{'x rnea':>8}")
    for law in LAWS:
        controller = build_controller(robot, law, dynamics=dynamics)
        start = time.perf_counter()
        compiled = controller.compile()
        prepared = time.perf_counter() - start
        if not compiled.compiled:
            print(f"{law:<17}no C compiler: skipped")
            continue
        for buf, value in zip(compiled.inputs, inputs):
            buf[:] = value
        dms = [ca.DM(x) for x in inputs]
        rows = [
            ("compiled, f(*arrays)", lambda c=compiled: c(*inputs)),
            ("compiled, buffers + eval()", compiled.eval),
            ("casadi Function(*arrays)", lambda f=controller.function: f(*inputs)),
            ("casadi Function(*DM)", lambda f=controller.function: f(*dms)),
        ]
        for label, fn in rows:
            calls = args.calls if label.startswith("compiled") else max(args.calls // 20, 100)
            cost = median_call_us(fn, calls, args.repeat)
            print(f"{law:<17}{label:<30}{cost:>9.3f}{cost / reference:>7.2f}x")
        how = "loaded from cache" if compiled.reused else f"generated and compiled in {prepared:.2f} s"
        print(f"{'':<17}({how}: {compiled.library.name})")
    print("target: compiled computed-torque call <= 5 us median and <= 4x a bare rnea call")


if __name__ == "__main__":
    main()
