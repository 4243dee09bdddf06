"""Per-sample cost of mbctl's feed-forward path, relative to a bare pinocchio.rnea loop.

UR5 (configs/ur5.toml), 10 000 random samples. The reference is the cheapest thing
a user could write in Python: ``for k: pinocchio.rnea(model, data, q[k], v[k], a[k])``,
measured in the same process. Each figure is the median of several repetitions.

Run: python benchmarks/feedforward.py [--samples N] [--repeat R]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pinocchio as pin
from timing import median_seconds  # noqa: E402  (benchmarks/timing.py)

from mbctl.ctrl.casadi_inverse import CasadiInverseDynamics
from mbctl.dynamics.friction.laws import JointFriction, LuGre
from mbctl.dynamics.friction.loads import Bearing3D
from mbctl.dynamics.inverse import InverseDynamics
from mbctl.dynamics.model.robot import load_robot

CONFIG = Path(__file__).resolve().parent.parent / "configs" / "ur5.toml"



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    robot = load_robot(CONFIG)
    rng = np.random.default_rng(0)
    n = args.samples
    q = rng.uniform(-3, 3, (n, robot.nv))
    dq = rng.uniform(-2, 2, (n, robot.nv))
    ddq = rng.uniform(-5, 5, (n, robot.nv))
    t = np.arange(n) * 1e-3
    model, data = robot.model, robot.create_data()
    qp = robot.configuration(q)

    def bare_loop() -> None:
        for k in range(n):
            pin.rnea(model, data, qp[k], dq[k], ddq[k])

    bearing = Bearing3D(rb=0.04, rp=0.015, rn=0.02)
    loaded = robot.with_friction({j.name: JointFriction(j.friction.law, bearing) for j in robot.joints})
    lugre = robot.with_friction(
        {
            j.name: JointFriction(
                LuGre(fc=j.friction.law.fc, fs=j.friction.law.fs, vs=j.friction.law.vs, fv=j.friction.law.fv, sigma0=1e4, sigma1=50.0)
            )
            for j in robot.joints
        }
    )
    cases = [
        ("stribeck friction (configs/ur5.toml)", robot, {}),
        ("load-dependent stribeck (bearing3d, all joints)", loaded, {}),
        ("reactions of every joint in the output", robot, {"reactions": True}),
        ("LuGre on every joint, states integrated", lugre, {}),
    ]
    reference = median_seconds(bare_loop, args.repeat) / n
    print(f"UR5, {n} samples, median of {args.repeat} runs; bare pinocchio.rnea loop: {reference * 1e6:.3f} us/sample")
    print(f"{'feed-forward path':<50}{'threads':>8}{'us/sample':>11}{'ratio':>8}")
    for label, model_, options in cases:
        for threads in (1, None):
            ff = InverseDynamics(model_, threads=threads, **options)
            cost = median_seconds(lambda ff=ff: ff(q, dq, ddq, t), args.repeat) / n
            shown = "1" if threads == 1 else "auto"
            print(f"{label:<50}{shown:>8}{cost * 1e6:>11.3f}{cost / reference:>7.2f}x")
    casadi_cases = [("--engine casadi: stribeck friction", {}), ("--engine casadi: reactions of every joint", {"reactions": True})]
    for label, options in casadi_cases:
        ff = CasadiInverseDynamics(robot, **options)
        cost = median_seconds(lambda ff=ff: ff(q, dq, ddq, t), args.repeat) / n
        print(f"{label:<50}{'1':>8}{cost * 1e6:>11.3f}{cost / reference:>7.2f}x")
    print("targets: <= 1.5x without load-dependent friction, <= 3x with (threads=1 is the like-for-like figure)")


if __name__ == "__main__":
    main()
