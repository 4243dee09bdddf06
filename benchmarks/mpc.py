"""Model predictive control on the UR5: one update beside Crocoddyl's box-FDDP and mim-solvers' CSQP, and the closed loop.

1. One MPC update (``mbctl.ctrl.optimal.mpc``: 6 DOF, ur5.toml's full Stribeck + viscous friction,
   ``--knots`` knots of ``--step`` s, the box-constrained subproblem solved exactly: torque limits,
   position ranges and speed limits), compiled to C, warm-started from the shifted previous plan
   along a reference (a feasible one, and one where every joint moves and the torques saturate):
   p50/p99 of the compiled call and of the controller's whole call, their difference the Python
   overhead. Beside it in the same run, on the same horizon (rigid-body dynamics without friction,
   Euler at the same step, state and control regularisation), one iteration per solve warm-started
   from the shifted solution as an MPC would run it each cycle: Crocoddyl's box-FDDP (torque
   bounds) and mim-solvers' SolverCSQP (torque bounds, and the joints' position ranges and speed
   limits at the MPC's margin as constraints).
2. Closed loop on the simulated plant, lock-step: computed torque against MPC on a feasible
   reference (a 1 s quintic move of 0.3 rad on every joint), on one that exceeds the torque
   limits (shoulder lift and elbow 0.22 rad out and back in 0.14 s moves, twice, within the speed
   limits) and on one where every joint moves (0.14 rad out and back in 0.09 s moves, twice; the
   shoulder lift saturates): tracking RMS per joint and its ratio, saturated commands, worst
   |tau| / effort and |dq| / speed limit. The momentum observer's collision reaction is off (the
   limits make a saturating run look like a collision to it).
3. Paced 1 kHz MPC runs (wall clock, the simulated plant in its own process, ``SCHED_FIFO`` when
   granted): the feasible reference, and the saturating one repeated for ``--paced-seconds``
   (``--paced-repeats`` runs): overruns, the update's p50/p99/max, the paths its subproblem took
   (the active-set passes settled, the capped interior point did, or neither: the clamped plan) and
   the fallbacks. Then the hard subproblems forced: from the plan a run starts with (the first
   sample's feed-forward held) at every 10th sample of the saturating move, the update's wall and
   CPU time (thread time: the machine's other jobs left out) by the path its subproblem took.
4. Offline, time-optimal point to point between two UR5 poses (``mbctl trajectory ocp``): its
   duration beside the best quintic within the same limits (bisection on its duration) and the
   time-optimal timing of the straight joint-space line (``mbctl trajectory optimal``); and
   Crocoddyl's box-FDDP on the same move over the OCP's duration (it has no free final time;
   rigid-body model, terminal state cost): solve time, iterations, final position error and its
   worst feed-forward torque over the limits under the full model.

Crocoddyl is not an mbctl dependency: ``pip install --no-deps crocoddyl==3.2.1 libcrocoddyl==3.2.1``
(without ``--no-deps`` pip pulls example-robot-data-loaders, which downgrades example-robot-data,
the package the UR5's URDF comes from); mim-solvers beside it: ``pip install --no-deps mim-solvers==0.3.0
libmim-solvers==0.3.0 proxsuite`` (pinocchio and crocoddyl are imported first, or its library is not found).
A peer that is absent is skipped with a line saying so.

Run: python benchmarks/mpc.py [--calls 2000] [--knots 20] [--step 0.01] [--paced-seconds 10] [--paced-repeats 3] [--no-realtime]
     [--only update|closed-loop|paced|offline]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

from mbctl.config.control import MpcSpec
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.optimal.box_qp import PATHS
from mbctl.ctrl.optimal.controller import MpcController
from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.interface import JointState
from mbctl.hardware.session import SessionOptions, run_session

ROOT = Path(__file__).resolve().parent.parent
ATTEMPTS = 4
"""Runs of a peer's timing before the benchmark gives up on it (SolverCSQP crashes at random calls)."""
Q0 = np.array([0.0, -1.5, 1.2, -1.2, -1.57, 0.0])
SATURATING = np.array([0.0, 0.22, -0.22, 0.0, 0.0, 0.0])
"""Shoulder lift and elbow out and back in 0.14 s moves (rad): the saturating reference."""


def _percentiles(times: list[float]) -> tuple[float, float]:
    us = np.asarray(times) * 1e6
    return float(np.percentile(us, 50)), float(np.percentile(us, 99))


def mpc_update(robot, traj, spec: MpcSpec, calls: int) -> dict[str, tuple[float, float]]:
    """Time the compiled update and the whole controller call along ``traj`` (state = reference + noise)."""
    mpc = MpcController(robot, traj, spec=spec, period=None)
    rng = np.random.default_rng(0)
    cycle = []
    n = len(traj.t)
    for i in range(calls):
        k = i % n
        state = JointState(t=traj.t[k], q=traj.q[k] + 1e-4 * rng.standard_normal(6), dq=traj.dq[k] + 1e-3 * rng.standard_normal(6), effort=np.zeros(6))
        start = time.perf_counter()
        mpc(traj.t[k], state)
        cycle.append(time.perf_counter() - start)
    return {"update": _percentiles(mpc.solve_times[50:]), "cycle": _percentiles(cycle[50:]), "paths": _paths(mpc.describe())}


def _paths(report: dict) -> str:
    """The subproblem's paths of a run's MPC report, one line."""
    return ", ".join(f"{name.replace('_', ' ')} {report[name]}" for name in PATHS)


def crocoddyl_iteration(
    robot, traj, knots: int, step: float, calls: int, solver_name: str = "box-fddp"
) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """p50/p99 (us) of one warm-started iteration with the reference update, and of the solve alone:
    ``solver_name`` "box-fddp" (Crocoddyl's SolverBoxFDDP, torque bounds) or "csqp" (mim-solvers'
    SolverCSQP, the torque bounds and the joints' position ranges and speed limits at the MPC's margin
    as constraints). None when the package is absent."""
    try:
        import crocoddyl
        import pinocchio  # noqa: F401  (before crocoddyl and mim_solvers: their libraries need its symbols)

        if solver_name == "csqp":
            import mim_solvers
    except ImportError:
        return None
    from mbctl.ctrl.limits import PLANNING_VELOCITY_MARGIN, run_limits

    model = robot.model
    state = crocoddyl.StateMultibody(model)
    actuation = crocoddyl.ActuationModelFull(state)
    limits = run_limits(robot)
    effort = limits.effort
    speed = PLANNING_VELOCITY_MARGIN * limits.velocity
    tau_ff = feedforward(robot, traj).dynamics.tau
    nv = robot.nv

    def constraints() -> crocoddyl.ConstraintModelManager | None:
        if solver_name != "csqp":
            return None
        manager = crocoddyl.ConstraintModelManager(state, actuation.nu)
        u_res = crocoddyl.ResidualModelControl(state, actuation.nu)
        manager.addConstraint("tau", crocoddyl.ConstraintModelResidual(state, u_res, -effort, effort))
        x_res = crocoddyl.ResidualModelState(state, np.zeros(state.nx), actuation.nu)
        lower, upper = np.concatenate([limits.lower, -speed]), np.concatenate([limits.upper, speed])
        manager.addConstraint("x", crocoddyl.ConstraintModelResidual(state, x_res, lower, upper))
        return manager

    def running(x_ref: np.ndarray, u_ref: np.ndarray, terminal: bool = False):
        costs = crocoddyl.CostModelSum(state, actuation.nu)
        w = np.concatenate([np.full(nv, 1e4), np.full(nv, 50.0)])
        x_res = crocoddyl.ResidualModelState(state, x_ref, actuation.nu)
        costs.addCost("x", crocoddyl.CostModelResidual(state, crocoddyl.ActivationModelWeightedQuad(w * (10 if terminal else 1)), x_res), 1.0)
        if not terminal:
            u_res = crocoddyl.ResidualModelControl(state, u_ref)
            costs.addCost("u", crocoddyl.CostModelResidual(state, crocoddyl.ActivationModelWeightedQuad(np.full(nv, 1e-3)), u_res), 1.0)
        manager = constraints()
        dam = crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, costs, *([manager] if manager is not None else []))
        iam = crocoddyl.IntegratedActionModelEuler(dam, 0.0 if terminal else step)
        if not terminal and solver_name == "box-fddp":
            iam.u_lb, iam.u_ub = -effort, effort
        return iam

    def x_at(i: int) -> np.ndarray:
        i = min(i, len(traj.t) - 1)
        return np.concatenate([robot.configuration(traj.q[i]), traj.dq[i]])

    stride = int(round(step * 1000))
    models = [running(x_at(k * stride), tau_ff[min(k * stride, len(traj.t) - 1)]) for k in range(knots)]
    problem = crocoddyl.ShootingProblem(x_at(0), models, running(x_at(knots * stride), None, terminal=True))
    if solver_name == "csqp":
        solver = mim_solvers.SolverCSQP(problem)
        solver.with_callbacks = False
    else:
        solver = crocoddyl.SolverBoxFDDP(problem)
    solver.solve([x_at(0)] * (knots + 1), [tau_ff[0]] * knots, 10)
    times, solves = [], []
    for i in range(calls):
        k = i % (len(traj.t) - 1)
        start = time.perf_counter()
        problem.x0 = x_at(k)
        for j, m in enumerate(problem.runningModels):  # the reference moves with the cycle
            idx = min(k + j * stride, len(traj.t) - 1)
            m.differential.costs.costs["x"].cost.residual.reference = x_at(idx)
            m.differential.costs.costs["u"].cost.residual.reference = tau_ff[idx]
        xs = list(solver.xs[1:]) + [solver.xs[-1]]
        us = list(solver.us[1:]) + [solver.us[-1]]
        xs[0] = problem.x0
        mid = time.perf_counter()
        solver.solve(xs, us, 1, False)
        end = time.perf_counter()
        times.append(end - start)
        solves.append(end - mid)
    return _percentiles(times[50:]), _percentiles(solves[50:])


def _references(robot) -> dict:  # noqa: ANN001
    """The benchmark's references by name: feasible, saturating (lift and elbow), all joints."""
    move = SATURATING
    every = np.array([0.14, 0.14, -0.14, 0.14, 0.14, 0.14])  # every joint, out and back
    names = robot.joint_names
    return {
        "feasible": quintic_rest_to_rest(np.array([Q0, Q0 + 0.3]), [1.0], 1000.0, names),
        "saturating": quintic_rest_to_rest(np.array([Q0, Q0 + move, Q0, Q0 + move, Q0]), [0.14] * 4, 1000.0, names),
        "all joints": quintic_rest_to_rest(np.array([Q0, Q0 + every, Q0, Q0 + every, Q0]), [0.09] * 4, 1000.0, names),
    }


def _peer(config: Path, reference: str, solver: str, knots: int, step: float, calls: int):  # noqa: ANN202
    """One peer's timing in a process of its own (``--peer``): SolverCSQP ends its process with an
    uncaught C++ exception (tryStep: step_error) on some references. A one-line reason when the
    child dies, None when the peer is not installed."""
    import json
    import subprocess

    command = [sys.executable, __file__, "--peer", solver, "--reference", reference, "--config", str(config)]
    command += ["--knots", str(knots), "--step", str(step), "--calls", str(calls)]
    codes = []
    for _ in range(ATTEMPTS):  # the crash comes at a different call each time, or not at all
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode == 0:
            result = json.loads(done.stdout.strip().splitlines()[-1])
            suffix = f" (after {len(codes)} crashed attempt(s): exit codes {codes})" if codes else ""
            return None if result is None else (*tuple(tuple(v) for v in result), suffix)
        codes.append(done.returncode)
    return f"its process ended with exit codes {codes} in {ATTEMPTS} attempts (a crash of the solver: tryStep step_error): no comparison"


def closed_loop(robot, traj, law: str, tmp: Path) -> dict:
    summary = run_session(robot, traj, SessionOptions(law=law, lockstep=True), tmp / f"{law}.npz")
    log = np.load(tmp / f"{law}.npz")
    effort = np.array([j.limits.effort for j in robot.joints])
    speed = np.array([j.limits.velocity for j in robot.joints])
    return {
        "rms": summary.tracking_rms, "saturated": summary.saturated, "worst": float(np.max(np.abs(log["tau"]) / effort)),
        "speed": float(np.max(np.abs(log["dq"]) / speed)), "stop": summary.stop_reason + (f"; {_paths(summary.mpc)}" if summary.mpc else ""),
    }  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--knots", type=int, default=20)
    parser.add_argument("--step", type=float, default=0.01)
    parser.add_argument("--paced-seconds", type=float, default=10.0, help="length of the paced saturating runs (s)")
    parser.add_argument("--paced-repeats", type=int, default=3)
    parser.add_argument("--no-realtime", action="store_true", help="paced runs without SCHED_FIFO")
    parser.add_argument("--only", choices=["update", "closed-loop", "paced", "offline"], help="run one section (1, 2, 3 or 4)")
    parser.add_argument("--peer", help=argparse.SUPPRESS)  # a child process timing one peer
    parser.add_argument("--reference", help=argparse.SUPPRESS)
    parser.add_argument("--config", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.peer:
        import json

        robot = load_robot(Path(args.config))
        traj = _references(robot)[args.reference]
        print(json.dumps(crocoddyl_iteration(robot, traj, args.knots, args.step, args.calls, args.peer)))
        return 0
    config = Path(tempfile.mkdtemp()) / "ur5.toml"
    config.write_text((ROOT / "configs" / "ur5.toml").read_text().replace('reaction = "stop"', 'reaction = "none"'))
    robot = load_robot(config)
    spec = replace(MpcSpec(), knots=args.knots, step=args.step)
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min) on {os.cpu_count()} cores")
    references = _references(robot)
    feasible, hard, every = references["feasible"], references["saturating"], references["all joints"]
    run = lambda section: args.only in (None, section)  # noqa: E731
    if run("update"):
        update_and_peers(robot, config, {"feasible": feasible, "all joints": every}, spec, args)
    if run("closed-loop"):
        closed_loops(robot, feasible, hard, every)
    if run("paced"):
        with tempfile.TemporaryDirectory() as tmp:
            paced(robot, feasible, args, Path(tmp))
        worst_path(robot, hard, spec)
    if run("offline"):
        offline(robot)
    return 0


def update_and_peers(robot, config: Path, references: dict, spec: MpcSpec, args: argparse.Namespace) -> None:  # noqa: ANN001
    """1. one update beside its peers, per reference."""
    print(f"\n1. one update, UR5, {args.knots} knots of {args.step:g} s ({args.knots * args.step:.2f} s), {args.calls} calls per reference")
    for name, traj in references.items():
        ours = mpc_update(robot, traj, spec, args.calls)
        print(f"  reference: {name}")
        print(f"    mbctl MPC update (compiled, full friction)   p50 {ours['update'][0]:7.1f} us  p99 {ours['update'][1]:7.1f} us")
        print(f"    mbctl MPC controller call (Python included) p50 {ours['cycle'][0]:7.1f} us  p99 {ours['cycle'][1]:7.1f} us")
        print(
            f"    Python overhead of the call: p50 {ours['cycle'][0] - ours['update'][0]:5.1f} us; subproblem paths: {ours['paths']}"
        )
        for solver, label, how in (
            ("box-fddp", "Crocoddyl box-FDDP (torque bounds)", "pip install --no-deps crocoddyl==3.2.1 libcrocoddyl==3.2.1"),
            ("csqp", "mim-solvers SolverCSQP (torque, position and speed bounds)", "pip install --no-deps mim-solvers==0.3.0 libmim-solvers==0.3.0 proxsuite"),
        ):
            # along the reference once at most (no jump back to its start)
            peer = _peer(config, name, solver, args.knots, args.step, min(args.calls, len(traj.t) - 1, 600))
            if peer is None:
                print(f"    {label}: not installed ({how}): no comparison")
                continue
            if isinstance(peer, str):
                print(f"    {label}: {peer}")
                continue
            (c50, c99), (s50, s99), crashes = peer
            print(
                f"    {label}, 1 iteration (no friction): solve alone p50 {s50:7.1f} us  p99 {s99:7.1f} us (with the reference update p50 {c50:7.1f} us){crashes}"
            )
            print(f"      ratio to the mbctl update: p50 {s50 / ours['update'][0]:.2f}x, p99 {s99 / ours['update'][1]:.2f}x")


def closed_loops(robot, feasible, hard, every) -> None:  # noqa: ANN001
    """2. closed loop, lock-step: computed torque against the MPC."""
    print("\n2. closed loop, simulated plant, lock-step (tracking RMS in mrad; ratio MPC / computed torque per joint)")
    limits = ", ".join(f"{j.limits.effort:.0f}" for j in robot.joints)
    for name, traj in (("saturating", hard), ("all joints", every)):
        peak = np.abs(feedforward(robot, traj).dynamics.tau).max(axis=0)
        print(f"  {name} reference: feed-forward peak {', '.join(f'{v:.0f}' for v in peak)} N*m against {limits}")
    with tempfile.TemporaryDirectory() as tmp:
        for name, traj in (("feasible", feasible), ("saturating", hard), ("all joints", every)):
            results = {}
            for law in ("computed-torque", "mpc"):
                r = results[law] = closed_loop(robot, traj, law, Path(tmp))
                rms = " ".join(f"{1e3 * v:6.2f}" for v in r["rms"].values())
                print(
                    f"  {name:10s} {law:15s} rms [{rms}]  saturated {r['saturated']:4d}  worst |tau|/effort {r['worst']:.3f}  "
                    f"|dq|/limit {r['speed']:.3f}  ({r['stop']})"
                )
            ratio = " ".join(f"{results['mpc']['rms'][j] / results['computed-torque']['rms'][j]:6.2f}" for j in robot.joint_names)
            print(f"  {name:10s} {'ratio':15s}     [{ratio}]")


def paced(robot, feasible, args: argparse.Namespace, tmp: Path) -> None:  # noqa: ANN001
    """Paced 1 kHz runs: the feasible reference once, the saturating one repeated for ``--paced-seconds``."""
    segments = max(2, 2 * int(np.ceil(args.paced_seconds / (2 * 0.14))))
    long = quintic_rest_to_rest(np.array([Q0 + SATURATING * (k % 2) for k in range(segments + 1)]), [0.14] * segments, 1000.0, robot.joint_names)
    priority = None if args.no_realtime else SessionOptions.realtime_priority
    print(f"\n3. paced 1 kHz MPC runs (simulated plant in its own process; SCHED_FIFO {priority})")
    for name, traj, repeats in (("feasible", feasible, 1), (f"saturating x{segments // 4}", long, args.paced_repeats)):
        for _ in range(repeats):
            load = os.getloadavg()[0]
            s = run_session(robot, traj, SessionOptions(law="mpc", lockstep=False, realtime_priority=priority), tmp / "paced.npz")
            c = s.mpc
            print(
                f"  {name:15s} load {load:4.2f}: {s.cycles} cycles, overruns {s.overruns} ({100 * s.overrun_fraction:.2f} %); update p50 "
                f"{c['solve_us_p50']:.0f} us, p99 {c['solve_us_p99']:.0f} us, max {c['solve_us_max']:.0f} us; {_paths(c)}; "
                f"fallbacks {c['fallbacks']}; {s.scheduling}; {s.stop_reason}",
                flush=True,
            )


def worst_path(robot, hard, spec: MpcSpec, repeats: int = 10) -> None:  # noqa: ANN001
    """The update from the plan a run starts with (the first sample's feed-forward held) at every 10th
    sample of the saturating move, the least wall and CPU time of ``repeats`` calls, by path."""
    mpc = MpcController(robot, hard, spec=spec, period=None)
    f = mpc._update  # the compiled cycle: its plan inputs reset to the first plan before each call
    first = (f.inputs[2].copy(), f.inputs[3].copy())
    by_path: dict[str, list] = {name: [] for name in PATHS}
    for k in range(0, len(hard.t), 10):
        mpc._plan_t = None
        mpc(hard.t[k], JointState(t=hard.t[k], q=hard.q[k], dq=hard.dq[k], effort=np.zeros(6)))  # the knots' rows in place
        wall, cpu = np.inf, np.inf
        for _ in range(repeats):
            f.inputs[2][...], f.inputs[3][...] = first
            start, thread = time.perf_counter(), time.thread_time()
            f.eval()
            wall, cpu = min(wall, time.perf_counter() - start), min(cpu, time.thread_time() - thread)
        by_path[PATHS[int(f.outputs[4][0])]].append((1e6 * wall, 1e6 * cpu))
    load = os.getloadavg()[0]
    print(f"\n   hard subproblems forced (the plan a run starts with, every 10th sample of the saturating move; load {load:.2f}), least of {repeats}:")
    for name, times in by_path.items():
        if times:
            w, c = np.array(times).T
            print(f"     {name.replace('_', ' '):15s} {len(times):3d} updates: wall median {np.median(w):5.0f} us, max {w.max():5.0f} us; CPU max {c.max():5.0f} us")


def _ratios(robot, traj) -> tuple[float, float]:
    """Worst feed-forward |tau| / effort (full model) and |dq| / speed limit at the samples."""
    effort = np.array([j.limits.effort for j in robot.joints])
    speed = np.array([j.limits.velocity for j in robot.joints])
    return float(np.max(np.abs(feedforward(robot, traj).dynamics.tau) / effort)), float(np.max(np.abs(traj.dq) / speed))


def _worst(robot, traj) -> float:
    return max(_ratios(robot, traj))


def offline(robot) -> None:
    from mbctl.ctrl.optimal import solve_point_to_point
    from mbctl.ctrl.timing import optimal_timing, spline_path, timing_limits

    q1 = np.array([1.0, -0.8, 0.4, -0.8, -1.0, 0.8])
    start = time.perf_counter()
    ocp = solve_point_to_point(robot, Q0, q1, objective="time", knots=40)
    ocp_time = time.perf_counter() - start
    lo, hi = 0.01, 10.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        ok = _worst(robot, quintic_rest_to_rest(np.array([Q0, q1]), [mid], 1000.0, robot.joint_names)) <= 1.0
        lo, hi = (lo, mid) if ok else (mid, hi)
    line = optimal_timing(robot, spline_path(np.array([Q0, q1]), robot.joint_names), timing_limits(robot), grid=1000, rate_hz=1000.0)
    print("\n4. offline, UR5 rest to rest, time-optimal")
    print(f"  mbctl trajectory ocp (40 intervals)       {ocp.solution.duration:.4f} s  (solved in {ocp_time:.1f} s, worst ratio {max(ocp.worst.values()):.4f})")
    print(f"  best quintic within the limits (bisection) {hi:.4f} s")
    print(f"  mbctl trajectory optimal, straight line    {line.duration:.4f} s")
    try:
        import crocoddyl
    except ImportError:
        print("  crocoddyl is not installed: no comparison")
        return
    T, N = ocp.solution.duration, 40
    state = crocoddyl.StateMultibody(robot.model)
    actuation = crocoddyl.ActuationModelFull(state)
    effort = np.array([j.limits.effort for j in robot.joints])
    goal = np.concatenate([q1, np.zeros(6)])

    def model(terminal: bool):
        costs = crocoddyl.CostModelSum(state, actuation.nu)
        x_res = crocoddyl.ResidualModelState(state, goal, actuation.nu)
        costs.addCost("x", crocoddyl.CostModelResidual(state, x_res), 1e6 if terminal else 0.0)
        if not terminal:
            costs.addCost("u", crocoddyl.CostModelResidual(state, crocoddyl.ResidualModelControl(state, actuation.nu)), 1e-6)
        m = crocoddyl.IntegratedActionModelEuler(crocoddyl.DifferentialActionModelFreeFwdDynamics(state, actuation, costs), 0.0 if terminal else T / N)
        if not terminal:
            m.u_lb, m.u_ub = -effort, effort
        return m

    problem = crocoddyl.ShootingProblem(np.concatenate([Q0, np.zeros(6)]), [model(False) for _ in range(N)], model(True))
    solver = crocoddyl.SolverBoxFDDP(problem)
    start = time.perf_counter()
    solver.solve([problem.x0] * (N + 1), [np.zeros(6)] * N, 200)
    wall = time.perf_counter() - start
    xs = np.array(solver.xs)
    us = np.array(solver.us)
    # its motion sampled at 1 kHz (piecewise-constant accelerations of its own Euler steps), under the full model
    acc = np.diff(xs[:, 6:], axis=0) / (T / N)
    t = np.arange(int(np.floor(T * 1000)) + 1) / 1000.0
    k = np.minimum((t / (T / N)).astype(int), N - 1)
    s = (t - k * T / N)[:, None]
    from mbctl.ctrl.trajectory import Trajectory

    traj = Trajectory(t=t, joint_names=robot.joint_names, q=xs[k, :6] + xs[k, 6:] * s + 0.5 * acc[k] * s**2, dq=xs[k, 6:] + acc[k] * s, ddq=acc[k])
    torque, speed = _ratios(robot, traj)
    print(
        f"  Crocoddyl box-FDDP over {T:.4f} s ({N} steps, no speed limits, no friction): {wall:.2f} s, {solver.iter} iterations, "
        f"final |q - q1| {np.abs(xs[-1, :6] - q1).max():.1e} rad, |dq| {np.abs(xs[-1, 6:]).max():.1e} rad/s; its inputs use "
        f"{np.max(np.abs(us) / effort):.3f} of the effort limits; its motion at 1 kHz under the full model: "
        f"torque {torque:.3f}, speed {speed:.3f} of the limits"
    )


if __name__ == "__main__":
    sys.exit(main())
