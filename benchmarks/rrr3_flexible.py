"""Wall time of the flexible 3-RRR (floating-frame FEM levers) against the rigid 3-RRR.

All runs in this process, 0.5 s of the spiral, the rigid model's min-internal-force torques
(10 kHz samples) where torques drive the model:

- reference: the rigid 3-RRR as `mbctl simulate configs/rrr3.toml` runs it today (pinocchio
  model, loops and the programmed path, the compiled core, its [simulation] settings);
- the rigid tree driven by the torques in pinocchio's ConstrainedDynamics (Radau, rtol 1e-6,
  interpreted: the compiled core takes no sampled torques);
- FEM: 3 levers x 3 elements (33 coordinates), ROS2 (mbctl.dynamics.simulation.ros2) with the
  exact stiff Jacobian block at every step, at 1e-4 s (the command's default, one step per
  sample) and 5e-5 s, up to 100 steps per call into C (and stepped in numpy at 1e-4 s); each
  with the rms end-effector deviation from the rigid path (accuracy next to speed) and, at
  1e-4 s, the best of three runs like the reference;
- RFE cross-check: 3 levers x 8 rigid finite elements (planar, 30 coordinates), same integrator;
- the rigid part of `mbctl flexfeed` (inverse kinematics along the path at 10 kHz, inverse
  dynamics, the three distribution modes plus the fourth it compares), with the generated
  constraint rows (default) and with the interpreted inverse kinematics.

Printed: wall time of each run (compile time excluded; the C is cached after the first run)
and its ratio to the reference measured here, and at the end the FEM model's ratio to the rigid
reference and its real-time factor (simulated s per wall s) in this run (targets of issue 28:
ratio <= 2, real-time factor > 1). Numbers depend on the machine and its load.

Run: python benchmarks/rrr3_flexible.py
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from mbctl.config.robot import read_robot_spec
from mbctl.config.simulation import Baumgarte
from mbctl.ctrl.closed_chain import closed_chain_feedforward
from mbctl.ctrl.constrained_path import trajectory_from_constraints
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.flexible_feedforward import SampledTorques, flexible_setup, rfe_planar_model
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def main() -> None:
    rigid = load_robot(CONFIGS / "rrr3.toml")
    setup = simulation_setup(rigid)
    dyn = build_dynamics(rigid, setup)
    q0, dq0 = initial_state(rigid, setup, dyn)
    simulate(dyn, q0, dq0, 0.01, integrator=setup.integrator, step=setup.step)  # compile once
    times = []
    for _ in range(3):  # the best of three: the reference is short and the machine shared
        start = time.perf_counter()
        ref = simulate(dyn, q0, dq0, 0.5, integrator=setup.integrator, step=setup.step, output_step=setup.output_step)
        times.append(time.perf_counter() - start)
    reference = min(times)
    print(f"reference: rigid rrr3 as `mbctl simulate` ({ref.integrator} {setup.step:g} s, {ref.backend}): {reference:.3f} s")

    spec = read_robot_spec(CONFIGS / "rrr3_flexible.toml")
    robot, pm, loops = flexible_setup(spec)
    t = np.linspace(0.0, 0.5, 5001)
    traj = trajectory_from_constraints(build_dynamics(robot, setup), t, q0)
    tau = closed_chain_feedforward(feedforward(robot, traj), "min-internal-force", compare=False).chosen.tau
    drives = [robot.joint(n).idx_v for n in ("a1", "a2", "a3")]

    def row(label: str, wall: float) -> None:
        print(f"{label:<80}{wall:8.3f} s   x{wall / reference:6.2f} of the reference")

    system = ConstrainedDynamics(robot, loops, solver="lagrange", baumgarte=Baumgarte("squared", 50.0, 50.0), forces=[SampledTorques(robot.nv, drives, t, tau)])
    start = time.perf_counter()
    simulate(system, traj.q[0], traj.dq[0], 0.5, integrator="radau", rtol=1e-6, atol=1e-9, step=1e-3)
    row("rigid tree + sampled torques (pinocchio, Radau 1e-6)", time.perf_counter() - start)

    drive = np.zeros((len(t), pm.n))  # the torques at the output times (the samples), linear in between
    drive[:, drives] = tau
    x0 = pm.state(traj.q[0], traj.dq[0])
    point = pm.point("p1").map(len(t))
    p_rigid = np.asarray(point(np.vstack([traj.q.T, np.zeros((pm.n - robot.nv, len(t)))])))

    def fem(label: str, repeat: int = 1, **options) -> float:
        pm.simulate(x0, t[:3], drive[:3], integrator="ros2", **options)  # compile once
        runs = [pm.simulate(x0, t, drive, integrator="ros2", **options) for _ in range(repeat)]
        run = min(runs, key=lambda r: r.wall_s)
        e = np.linalg.norm(np.asarray(point(run.q.T)) - p_rigid, axis=0)
        row(f"{label} (rms |e| {np.sqrt(np.mean(e**2)) * 1e6:.2f} µm)", run.wall_s)
        return run.wall_s

    wall = fem(f"FEM {pm.n} coord., ROS2 1e-4 s, C steps (best of 3)", repeat=3, step=1e-4)
    fem(f"FEM {pm.n} coord., ROS2 5e-5 s, C steps", step=5e-5)
    fem(f"FEM {pm.n} coord., ROS2 1e-4 s, numpy steps", step=1e-4, compiled_steps=False)
    rfe_robot, rfe, _ = rfe_planar_model(spec, 8)
    theta0 = np.zeros(rfe_robot.nv)
    for j in robot.joints:
        theta0[rfe_robot.joint(j.name).idx_v] = traj.q[0, j.idx_v]
    drive = np.zeros((len(t), rfe.n))
    drive[:, [rfe_robot.joint(n).idx_v for n in ("a1", "a2", "a3")]] = tau
    rfe.simulate(rfe.state(theta0), t[:3], drive[:3], integrator="ros2", step=1e-4)
    run = rfe.simulate(rfe.state(theta0), t, drive, integrator="ros2", step=1e-4)
    row(f"RFE (8 segments) {rfe.n} coord., ROS2 1e-4 s, C steps", run.wall_s)
    for compiled in (True, False):
        start = time.perf_counter()
        dynamics = build_dynamics(robot, setup)
        traj = trajectory_from_constraints(dynamics, t, q0, compiled=compiled)
        closed_chain_feedforward(feedforward(robot, traj), "non-redundant", compare=True)
        what = "generated constraint rows" if compiled else "interpreted inverse kinematics"
        row(f"rigid part of flexfeed, {what}", time.perf_counter() - start)
    print(f"FEM (ROS2 1e-4 s) / rigid reference: {wall / reference:.2f}x the wall time (target <= 2); real-time factor {0.5 / wall:.2f} (target > 1)")


if __name__ == "__main__":
    main()
