"""The compiled simulation core against the interpreted one, bare pinocchio, and MuJoCo, in one run.

1. One evaluation of the dynamics (constraints, friction) per bundled robot the core
   covers: compiled C, the interpreted reference, and a bare ``pinocchio.aba`` call on
   the same model (the ratio compiled/aba is the issue's yardstick).
2. Wall time per simulated second, RK4 at 1e-4 s (samples every 1 ms): compiled and
   interpreted, SCARA (programmed constraints, friction with a LuGre state), the
   four-bar and the 3-RRR (loop closures).
3. The five-link flexible chain: ROS2 at 1 ms (samples every 10 ms and every 1 ms, and
   what the 1 ms samples cost over the 10 ms ones; compiled: CPU time, the best of five rounds
   of the two in turn) and RK4 at 1e-5 s, compiled and interpreted.
4. The simulated plant behind ``mbctl run`` (SCARA, UR5, friction, 8 substeps per
   1 ms period), stepped back to back: real-time factor compiled and interpreted.
5. The four-bar in MuJoCo and in Exudyn (``pip install -e ".[bench]"``; each skipped
   when absent), written from the same URDF numbers, at the same step: wall time per
   simulated second, energy drift and loop closure over 2 s, next to mbctl's.

Run: python benchmarks/compiled.py
"""

from __future__ import annotations

import time

import numpy as np
import pinocchio as pin

from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.compiled import CompiledCore
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup

EVALUATED = ["scara", "fourbar", "rrr3", "parallelogram", "mobile", "threeloop", "ur5", "panda", "tree5", "olkc5"]


def per_call_us(fn, repeats: int = 2000) -> float:
    """Median over 5 rounds of the cost of one call (µs)."""
    rounds = []
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(repeats):
            fn()
        rounds.append((time.perf_counter() - start) / repeats * 1e6)
    return float(np.median(rounds))


def system_of(name: str):
    robot = load_robot(name)
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    system.initialize(0.0, q0, dq0)
    return robot, system, q0, dq0


def evaluation_costs() -> None:
    print("1. one evaluation (µs; median of 5 rounds)")
    print(f"{'robot':<10}{'nv':>4}{'rows':>6}{'compiled':>10}{'interpreted':>13}{'pin.aba':>9}{'compiled/aba':>14}{'interp/aba':>12}")
    for name in EVALUATED:
        robot, system, q0, dq0 = system_of(name)
        s0 = system.initial_state()
        x = np.concatenate([q0, dq0 + 0.1, s0])
        core = CompiledCore(system)
        f = core.rhs()
        f.inputs[0][...] = 0.1
        f.inputs[1][...] = x
        f.inputs[2][...] = core.p
        compiled = per_call_us(f.eval)
        interpreted = per_call_us(lambda: system.evaluate(0.1, q0, dq0 + 0.1, s0), 200)
        model, data = robot.model, robot.model.createData()
        qp, v, tau = robot.configuration(q0), dq0 + 0.1, np.zeros(robot.nv)
        aba = per_call_us(lambda: pin.aba(model, data, qp, v, tau))
        print(f"{name:<10}{robot.nv:>4}{system.constraints.m:>6}{compiled:>10.2f}{interpreted:>13.1f}{aba:>9.2f}{compiled / aba:>13.2f}x{interpreted / aba:>11.0f}x")


def wall_per_simulated_second() -> dict[str, object]:
    print("\n2. wall time per simulated second, RK4 1e-4 s, samples every 1 ms (compile excluded)")
    print(f"{'robot':<10}{'compiled s/s':>14}{'interpreted s/s':>17}{'speed-up':>10}{'max |q| difference':>20}")
    runs = {}
    for name, seconds, reference_seconds in (("scara", 10.0, 0.5), ("fourbar", 2.0, 0.5), ("rrr3", 0.5, 0.2)):
        _, system, q0, dq0 = system_of(name)
        simulate(system, q0, dq0, 1e-3, step=1e-4, output_step=1e-3, backend="compiled")  # builds or loads the C code
        start = time.perf_counter()
        run = simulate(system, q0, dq0, seconds, step=1e-4, output_step=1e-3, backend="compiled")
        compiled = (time.perf_counter() - start - run.compile_s) / seconds
        start = time.perf_counter()
        ref = simulate(system, q0, dq0, reference_seconds, step=1e-4, output_step=1e-3, backend="python")
        interpreted = (time.perf_counter() - start) / reference_seconds
        k = len(ref.t)
        print(f"{name:<10}{compiled:>14.4f}{interpreted:>17.2f}{interpreted / compiled:>9.0f}x{np.abs(run.q[:k] - ref.q).max():>20.2e}")
        runs[name] = (run, compiled)
    return runs


FOURBAR_MJCF = """<mujoco model="fourbar">
  <option timestep="{h}" gravity="0 -9.81 0" integrator="{integrator}"><flag energy="enable" contact="disable"/></option>
  <worldbody>
    <body name="crank"><joint name="crank_joint" type="hinge" axis="0 0 1"/>
      <inertial pos="0.05 0 0" mass="0.5" diaginertia="1e-5 4.1667e-4 4.1667e-4"/>
      <body name="coupler" pos="0.1 0 0"><joint name="coupler_joint" type="hinge" axis="0 0 1"/>
        <inertial pos="0.175 0 0" mass="1.0" diaginertia="1e-5 1.02083e-2 1.02083e-2"/>
        <site name="coupler_end" pos="0.35 0 0"/>
      </body>
    </body>
    <body name="rocker" pos="0.3 0 0"><joint name="rocker_joint" type="hinge" axis="0 0 1"/>
      <inertial pos="0.125 0 0" mass="0.8" diaginertia="1e-5 4.1667e-3 4.1667e-3"/>
      <site name="rocker_end" pos="0.25 0 0"/>
    </body>
  </worldbody>
  <equality><connect site1="coupler_end" site2="rocker_end" {solref}/></equality>
</mujoco>"""


def mbctl_fourbar_accuracy(run) -> tuple[float, float]:
    """Relative energy drift and the largest loop-closure error (m) of an mbctl run."""
    robot = load_robot("fourbar")
    model, data = robot.model, robot.model.createData()
    energy = np.array([pin.computeKineticEnergy(model, data, robot.configuration(q), v) + pin.computePotentialEnergy(model, data, robot.configuration(q)) for q, v in zip(run.q, run.dq)])
    return float(np.abs(energy - energy[0]).max() / abs(energy[0])), float(run.violation().max())


def mujoco_fourbar(mbctl_run, mbctl_wall_per_s: float, seconds: float = 2.0) -> None:
    try:
        import mujoco
    except ImportError:
        print("\n5. MuJoCo: not installed (pip install mujoco, or pip install -e '.[bench]'); skipped")
        return
    q0, dq0 = mbctl_run.q[0], mbctl_run.dq[0]
    print(f"\n5. four-bar, {seconds:g} s, step 1e-4 s: MuJoCo {mujoco.__version__} against mbctl (relative energy drift; loop closure max, m)")
    print(f"{'simulator':<44}{'s/s':>9}{'energy drift':>14}{'closure':>10}{'final crank':>13}")
    drift, closure = mbctl_fourbar_accuracy(mbctl_run)
    print(f"{'mbctl compiled, RK4, Udwadia-Kalaba':<44}{mbctl_wall_per_s:>9.4f}{drift:>14.2e}{closure:>10.1e}{mbctl_run.q[-1][0]:>13.4f}")
    for integrator, solref, label in (("Euler", "", "MuJoCo Euler, defaults"), ("RK4", 'solref="0.0002 1"', "MuJoCo RK4, stiff equality (solref 2e-4 s)")):
        model = mujoco.MjModel.from_xml_string(FOURBAR_MJCF.format(h=1e-4, integrator=integrator, solref=solref))
        data = mujoco.MjData(model)
        data.qpos[:] = q0
        data.qvel[:] = dq0
        mujoco.mj_forward(model, data)
        e0 = data.energy.sum()
        steps = round(seconds / 1e-4)
        worst_drift = worst_closure = 0.0
        start = time.perf_counter()
        for k in range(steps):
            mujoco.mj_step(model, data)
            if k % 10 == 9:
                worst_drift = max(worst_drift, abs(data.energy.sum() - e0))
                worst_closure = max(worst_closure, float(np.linalg.norm(data.site_xpos[0] - data.site_xpos[1])))
        wall = (time.perf_counter() - start) / seconds
        print(f"{label:<44}{wall:>9.4f}{worst_drift / abs(e0):>14.2e}{worst_closure:>10.1e}{data.qpos[0]:>13.4f}")
    print("(energy drift checked every 1 ms in MuJoCo, at every 1 ms sample in mbctl; the timings include that check)")


def exudyn_fourbar(mbctl_run, seconds: float = 2.0) -> None:
    """The same four-bar in Exudyn: three 2-D rigid bodies in absolute coordinates, four
    revolute joints, its implicit generalized-alpha solver (index 3, spectral radius 0.95)
    at the same step."""
    try:
        import exudyn as exu
        from exudyn.itemInterface import Force, MarkerBodyPosition, ObjectGround, RevoluteJoint2D, Rigid2D, RigidBody2D
    except ImportError:
        print("Exudyn: not installed (pip install exudyn, or pip install -e '.[bench]'); skipped")
        return
    g = 9.81
    bodies = (  # mass, inertia about the centre (kg m^2), half length (m)
        (0.5, 4.1667e-4, 0.05),
        (1.0, 1.02083e-2, 0.175),
        (0.8, 4.1667e-3, 0.125),
    )
    (qc, qk, qr), (wc, wk, wr) = mbctl_run.q[0], mbctl_run.dq[0]
    angles, rates = (qc, qc + qk, qr), (wc, wc + wk, wr)
    pivot_a = np.zeros(2)
    pivot_b = np.array([0.1 * np.cos(qc), 0.1 * np.sin(qc)])
    pivot_c = np.array([0.3, 0.0])
    velocity_b = wc * 0.1 * np.array([-np.sin(qc), np.cos(qc)])
    starts, start_velocities = (pivot_a, pivot_b, pivot_c), (np.zeros(2), velocity_b, np.zeros(2))

    def state(start, start_velocity, angle, rate, half):
        u = np.array([np.cos(angle), np.sin(angle)])
        centre = start + half * u
        return centre, start_velocity + rate * half * np.array([-u[1], u[0]])

    sc = exu.SystemContainer()
    mbs = sc.AddSystem()
    ground = mbs.AddObject(ObjectGround())
    ends = []
    for (m, inertia, half), start, start_velocity, angle, rate in zip(bodies, starts, start_velocities, angles, rates):
        centre, velocity = state(start, start_velocity, angle, rate, half)
        node = mbs.AddNode(Rigid2D(referenceCoordinates=[*centre, angle], initialVelocities=[*velocity, rate]))
        body = mbs.AddObject(RigidBody2D(mass=m, inertia=inertia, nodeNumber=node))
        mbs.AddLoad(Force(markerNumber=mbs.AddMarker(MarkerBodyPosition(bodyNumber=body, localPosition=[0, 0, 0])), loadVector=[0, -m * g, 0]))
        ends.append((node, mbs.AddMarker(MarkerBodyPosition(bodyNumber=body, localPosition=[-half, 0, 0])), mbs.AddMarker(MarkerBodyPosition(bodyNumber=body, localPosition=[half, 0, 0]))))
    at = [mbs.AddMarker(MarkerBodyPosition(bodyNumber=ground, localPosition=[x, 0, 0])) for x in (0.0, 0.3)]
    for a, b in ((at[0], ends[0][1]), (ends[0][2], ends[1][1]), (at[1], ends[2][1]), (ends[1][2], ends[2][2])):
        mbs.AddObject(RevoluteJoint2D(markerNumbers=[a, b]))
    mbs.Assemble()
    settings = exu.SimulationSettings()
    settings.timeIntegration.numberOfSteps = round(seconds / 1e-4)
    settings.timeIntegration.endTime = seconds
    # rho 1 (no numerical damping) stalls Newton near 1.78 s, where coupler and rocker
    # line up; 0.95 passes and damps little
    settings.timeIntegration.generalizedAlpha.spectralRadius = 0.95
    settings.timeIntegration.newton.absoluteTolerance = 1e-10
    settings.timeIntegration.verboseMode = 0
    settings.solution.file.write = False
    settings.show.computationTime = False
    settings.show.statistics = False

    def energy_and_closure() -> tuple[float, float]:
        energy, tips = 0.0, []
        for (m, inertia, half), (node, _, _) in zip(bodies, ends):
            x, y, angle = mbs.GetNodeOutput(node, exu.OutputVariableType.Coordinates) + np.array(mbs.GetNode(node)["referenceCoordinates"])
            vx, vy, rate = mbs.GetNodeOutput(node, exu.OutputVariableType.Coordinates_t)
            energy += 0.5 * m * (vx**2 + vy**2) + 0.5 * inertia * rate**2 + m * g * y
            tips.append(np.array([x, y]) + half * np.array([np.cos(angle), np.sin(angle)]))
        return energy, float(np.linalg.norm(tips[1] - tips[2]))

    e0, _ = energy_and_closure()
    start = time.perf_counter()
    exu.SolveDynamic(mbs, settings)
    wall = (time.perf_counter() - start) / seconds
    e1, closure = energy_and_closure()
    crank = mbs.GetNodeOutput(ends[0][0], exu.OutputVariableType.Coordinates)[2] + angles[0]
    label = f"Exudyn {exu.config.Version()}, generalized-alpha, rho 0.95"
    print(f"{label:<44}{wall:>9.4f}{abs(e1 - e0) / abs(e0):>14.2e}{closure:>10.1e}{crank:>13.4f}")
    print("(Exudyn: energy drift and closure at the end of the run)")


def flexible_chain() -> None:
    """The five-link flexible chain (23 DOF: flexible base, RFE link, load-dependent LuGre)."""
    print("\n3. five-link flexible chain (olkc5: 23 DOF, flexible base and link, load-dependent LuGre), compile excluded")
    print(f"{'run':<44}{'compiled s/s':>14}{'real-time x':>13}{'interpreted s/s':>17}")
    _, system, q0, dq0 = system_of("olkc5")
    runs = (("ros2", 1e-3, 1e-2, 2.0, 0.5), ("ros2", 1e-3, 1e-3, 2.0, 0.5), ("rk4", 1e-5, 1e-3, 0.5, 0.01))
    compiled = dict.fromkeys(range(len(runs)), np.inf)
    for i, (integrator, step, output, _, _) in enumerate(runs):
        simulate(system, q0, dq0, 0.1, backend="compiled", integrator=integrator, step=step, output_step=output)  # builds or loads the C code
    # the two ROS2 runs in turn, five rounds, the best of each, in CPU time of this process: the
    # machine is shared, and bursts of load last longer than a run
    for _ in range(5):
        for i in (0, 1):
            integrator, step, output, seconds, _ = runs[i]
            start = time.process_time()
            run = simulate(system, q0, dq0, seconds, backend="compiled", integrator=integrator, step=step, output_step=output)
            compiled[i] = min(compiled[i], (time.process_time() - start) / seconds)
    for i, (integrator, step, output, seconds, reference) in enumerate(runs):
        options = {"integrator": integrator, "step": step, "output_step": output}
        if i == 2:
            start = time.perf_counter()
            run = simulate(system, q0, dq0, seconds, backend="compiled", **options)
            compiled[i] = (time.perf_counter() - start - run.compile_s) / seconds
        start = time.perf_counter()
        simulate(system, q0, dq0, reference, backend="python", **options)
        interpreted = (time.perf_counter() - start) / reference
        label = f"{integrator.upper()} {step:g} s, samples every {output * 1e3:g} ms"
        print(f"{label:<44}{compiled[i]:>14.3f}{1 / compiled[i]:>13.1f}{interpreted:>17.2f}")
    print(f"(ROS2: samples every 1 ms cost {100 * (compiled[1] / compiled[0] - 1):.0f} % more than every 10 ms: "
          f"{1 / compiled[1]:.1f}x against {1 / compiled[0]:.1f}x real time, CPU time, the best of five rounds in turn; the samples come from the stepper in blocks)")
    print("(RK4 1e-5 s for the configured 5 s: about 5x the compiled s/s figure in wall seconds)")


def plant_real_time_factor(seconds: float = 2.0) -> None:
    from mbctl.hardware.interface import JointCommand
    from mbctl.hardware.sim import SimPlant, TruthPlant

    print(f"\n4. simulated plant, 1 ms periods of 8 steps, {seconds:g} s back to back (real-time factor = simulated s / wall s)")
    print(f"{'robot':<10}{'compiled':>10}{'interpreted':>13}{'µs/period compiled':>20}")
    for name in ("scara", "ur5"):
        robot = load_robot(name)
        rtf = {}
        for compiled in (True, False):
            plant = SimPlant(robot, 1e-3)
            plant.plant = TruthPlant(robot, 1e-3 / 8, compiled=compiled, period_s=1e-3)
            plant.enable()
            periods = int(seconds / 1e-3) if compiled else int(seconds / 1e-3) // 10
            command = JointCommand.torque(np.full(len(plant.joint_names), 0.5))
            start = time.perf_counter()
            for _ in range(periods):
                plant.write(command)
                plant.read()
            rtf[compiled] = periods * 1e-3 / (time.perf_counter() - start)
        print(f"{name:<10}{rtf[True]:>10.1f}{rtf[False]:>13.1f}{1e3 / rtf[True]:>20.1f}")


def main() -> None:
    import os

    print(f"compiled simulation core; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
    evaluation_costs()
    runs = wall_per_simulated_second()
    flexible_chain()
    plant_real_time_factor()
    mujoco_fourbar(*runs["fourbar"])
    exudyn_fourbar(runs["fourbar"][0])


if __name__ == "__main__":
    main()
