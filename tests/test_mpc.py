"""Model predictive control: the update against an exact least-squares solve, and the loop's fallback (lock-step)."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

from mbctl.config.control import EndSpec, MpcSpec
from mbctl.ctrl.optimal.mpc import MpcWeights, update_function
from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.hardware.session import SessionOptions, run_session

H = 0.05
A = np.array([[1.0, H], [0.0, 1.0]])
B = np.array([[0.5 * H**2], [H]])


def _double_integrator_step() -> ca.Function:
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u", 1)
    return ca.Function("step", [x, u], [ca.DM(A) @ x + ca.DM(B) @ u])


def _least_squares(x0, ref, uref, w, r, wn, N) -> np.ndarray:
    """The unconstrained optimum by stacking the predictions: x_k = A^k x0 + Σ A^(k-1-j) B u_j."""
    rows, rhs = [], []
    for k in range(1, N + 1):
        G = np.zeros((2, N))
        for j in range(k):
            G[:, [j]] = np.linalg.matrix_power(A, k - 1 - j) @ B
        weight = np.sqrt(wn if k == N else w)
        rows.append(weight @ G)
        rhs.append(weight @ (ref[:, k] - np.linalg.matrix_power(A, k) @ x0))
    rows.append(np.sqrt(r) * np.eye(N))
    rhs.append(np.sqrt(r) * uref)
    return np.linalg.lstsq(np.vstack(rows), np.concatenate(rhs), rcond=None)[0]


def test_one_iteration_on_a_linear_system_is_the_exact_optimum():
    N = 12
    weights = MpcWeights(q=np.array([100.0]), dq=np.array([1.0]), tau=np.array([0.01]), terminal=5.0)
    f = update_function(_double_integrator_step(), N, weights, np.array([np.inf]))
    x0 = np.array([0.2, -0.1])
    t = np.arange(N + 1) * H
    ref = np.vstack([np.sin(t), np.cos(t)])
    uref = -np.sin(t[:-1])
    U, X, u0, _, _ = (np.asarray(v) for v in f(x0, np.zeros((1, N)), ref, uref[None, :]))
    w = np.diag([100.0, 1.0])
    expected = _least_squares(x0, ref, uref, w, 0.01, 5.0 * w, N)
    np.testing.assert_allclose(U.ravel(), expected, rtol=1e-8, atol=1e-10)
    assert u0.item() == pytest.approx(expected[0])
    # the plan's states are the model's rollout of its inputs
    np.testing.assert_allclose(X[:, 1], A @ x0 + B.ravel() * expected[0], atol=1e-12)


def test_every_planned_input_keeps_to_the_torque_limit():
    N = 12
    weights = MpcWeights(q=np.array([100.0]), dq=np.array([1.0]), tau=np.array([1e-4]))
    f = update_function(_double_integrator_step(), N, weights, np.array([0.5]), iterations=3)
    ref = np.tile(np.array([[1.0], [0.0]]), (1, N + 1))  # a step the limit cannot follow
    U, X, _, _, _ = (np.asarray(v) for v in f(np.zeros(2), np.zeros((1, N)), ref, np.zeros((1, N))))
    assert np.max(np.abs(U)) <= 0.5 + 1e-12
    assert U[0, 0] == pytest.approx(0.5)  # full thrust toward the target first
    assert X[0, -1] > 0.0


@pytest.fixture(scope="module")
def scara_reference(robots):
    robot = robots["scara"]
    return robot, quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.4, 0.5, -0.3, 0.03]]), [0.5], 1000.0, robot.joint_names)


@pytest.mark.parametrize("fail_every", [None, 3])
def test_lockstep_mpc_tracks_and_counts_forced_fallbacks(scara_reference, tmp_path, fail_every):
    """On the simulated plant: the MPC follows the move; a solver forced to fail every third update
    falls back to the previous plan with computed-torque feedback, counted, and the run is degraded."""
    robot, traj = scara_reference
    fail = None if fail_every is None else (lambda cycle: cycle % fail_every == 1)
    summary = run_session(robot, traj, SessionOptions(law="mpc", lockstep=True, mpc_fail=fail), tmp_path / "run.npz")
    report = summary.mpc
    cycles = 500 + round(EndSpec.hold_s * 1000)  # the move, then the end hold
    assert summary.stop_reason.startswith("completed") and summary.cycles == cycles
    assert report["updates"] == cycles + 1  # the loop calls the law once before it turns torque on
    expected = 0 if fail_every is None else sum(1 for c in range(report["updates"]) if c % fail_every == 1)
    assert report["fallbacks"] == expected
    assert summary.completed and summary.clean == (expected == 0)
    assert max(summary.tracking_rms.values()) < 6e-3  # rad, m: a 0.5 rad move
    log = np.load(tmp_path / "run.npz")
    effort = np.array([j.limits.effort for j in robot.joints])
    assert np.all(np.abs(log["tau"]) <= effort + 1e-9)


def test_bad_mpc_table_is_refused(tmp_path):
    from mbctl.config.control import parse_control
    from mbctl.errors import ConfigError
    from mbctl.tomlfields import Table

    table = Table({"mpc": {"knots": 1.5}}, file=tmp_path / "r.toml", where="control")
    with pytest.raises(ConfigError, match="control.mpc.knots: must be an integer >= 2"):
        parse_control(table)
    assert parse_control(Table({}, file=tmp_path / "r.toml", where="control")).mpc == MpcSpec()


def test_run_command_reports_the_mpc(cli, scara_reference, tmp_path):
    robot, traj = scara_reference
    from mbctl.ctrl.trajectory import write_trajectory

    write_trajectory(tmp_path / "t.csv", traj)
    log, summary = tmp_path / "run.npz", tmp_path / "run.json"
    r = cli("run", "scara", "--trajectory", tmp_path / "t.csv", "--lockstep", "--controller", "mpc", "--log", log, "--summary", summary)
    assert r.code == 0, r.err
    updates = 501 + round(EndSpec.hold_s * 1000)  # a warm-up call, the move, the end hold
    assert f"mpc: riccati (Gauss-Newton, exact box QP, 20 knots of 0.01 s); {updates} updates" in r.out and "fallbacks 0" in r.out
    assert f"subproblem: active set {updates}, interior point 0, clamped 0" in r.out  # a move within every limit
    import json

    report = json.loads(summary.read_text())["mpc"]
    assert report["updates"] == updates and report["fallbacks"] == 0 and 0 < report["solve_us_p50"] <= report["solve_us_p99"]
    assert (report["active_set"], report["interior_point"], report["clamped"]) == (updates, 0, 0)


def test_model_step_lands_on_the_reference_and_predicts_the_plant(scara_reference):
    """The MPC's step under the reference's model input lands on the reference (trapezoid error
    only), and the plant (exact friction, 0.25 ms steps) held at that input 10 ms ends within a quarter
    of what a semi-implicit Euler step's ``h² |ddq| / 2`` would have been off in position."""
    import dataclasses

    from mbctl.ctrl.optimal.mpc import reference_input_function, step_function
    from mbctl.hardware.sim import TruthPlant

    robot, traj = scara_reference
    h, i, later = 0.01, 200, 210
    x = np.concatenate([traj.q[i], traj.dq[i]])
    u = np.asarray(reference_input_function(robot, h)(x, (traj.dq[later] - traj.dq[i]) / h)).ravel()
    predicted = np.asarray(step_function(robot, h)(x, u, traj.dq[i])).ravel()
    jerk = np.abs(np.diff(traj.ddq[i : later + 1], axis=0)).max() / 1e-3
    np.testing.assert_allclose(predicted[4:], traj.dq[later], atol=1e-12)
    np.testing.assert_allclose(predicted[:4], traj.q[later], atol=h**3 * jerk / 12 * 1.01)
    plant = TruthPlant(robot, 2.5e-4, traj.q[i], compiled=False)
    plant.full = dataclasses.replace(plant.full, dq=traj.dq[i].copy())
    for _ in range(10):
        plant.step(u, 1e-3)
    q, dq = plant.state()
    euler = 0.5 * h**2 * np.abs(traj.ddq[i:later]).max()
    assert np.abs(q - predicted[:4]).max() < 0.25 * euler
    assert np.abs(dq - predicted[4:]).max() < 0.2 * h * np.abs(traj.ddq[i:later]).max()


def test_applied_torque_is_the_feed_forward_of_now_plus_computed_torque_like_feedback(scara_reference):
    """On the reference the applied torque is the feed-forward at the current time (not the first
    step's, h/2 ahead), and a position error gets about computed torque's ``kp M`` (the default
    weights are set for that)."""
    from mbctl.ctrl.feedforward import feedforward
    from mbctl.ctrl.optimal.controller import MpcController
    from mbctl.dynamics.symbolic import SymbolicDynamics
    from mbctl.hardware.interface import JointState

    robot, traj = scara_reference
    mpc = MpcController(robot, traj, compiled=False, period=None)
    ff = feedforward(robot, traj).dynamics.tau
    for k in range(190, 201):  # warm the plan along the reference
        tau = mpc(k / 1000, JointState(t=k / 1000, q=traj.q[k], dq=traj.dq[k], effort=np.zeros(4)))
    lead = np.abs(ff[205] - ff[200])
    assert np.all(np.abs(tau - ff[200]) <= 0.1 * lead + 0.01)
    offset = np.array([1e-3, -1e-3, 0.0, 0.0])
    moved = mpc(0.2, JointState(t=0.2, q=traj.q[200] + offset, dq=traj.dq[200], effort=np.zeros(4)))
    ct = -400.0 * np.asarray(SymbolicDynamics(robot).mass_matrix(traj.q[200])) @ offset  # scara.toml's kp
    ratio = (moved - tau)[:2] / ct[:2]
    assert np.all((ratio > 0.8) & (ratio < 1.5)), ratio


def test_lockstep_mpc_tracks_a_feasible_move_like_computed_torque(scara_reference, tmp_path):
    """Same plant, same move: the MPC's tracking RMS within 1.5 times computed torque's on every joint."""
    robot, traj = scara_reference
    rms = {law: run_session(robot, traj, SessionOptions(law=law, lockstep=True), tmp_path / f"{law}.npz").tracking_rms for law in ("computed-torque", "mpc")}
    for name, ct in rms["computed-torque"].items():
        assert rms["mpc"][name] <= 1.5 * ct, (name, rms)


def test_analytic_linearisation_agrees_with_differentiating_the_step(scara_reference):
    """The stage Jacobians from the inverse dynamics' derivatives equal CasADi's differentiation of
    the step, and so does the whole update built on them, with the recursion on dense Jacobians or
    on the held acceleration's blocks."""
    from mbctl.ctrl.optimal.mpc import linearisation_function, step_function

    robot, traj = scara_reference
    h = 0.01
    step, lin = step_function(robot, h), linearisation_function(robot, h)
    x, u, v = ca.SX.sym("x", 8), ca.SX.sym("u", 4), ca.SX.sym("v", 4)
    nxt = step(x, u, v)
    ad = ca.Function("ad", [x, u, v], [nxt, ca.jacobian(nxt, x), ca.jacobian(nxt, u)])
    rng = np.random.default_rng(3)
    for _ in range(3):
        args = (rng.uniform(-1, 1, 8), rng.uniform(-5, 5, 4), rng.uniform(-1, 1, 4))
        for ours, theirs in zip(lin(*args), ad(*args)):
            np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-9, atol=1e-12)
    weights = MpcWeights(q=np.full(4, 1e4), dq=np.full(4, 50.0), tau=np.full(4, 1e-2))
    effort = np.array([j.limits.effort for j in robot.joints])
    plain = update_function(step, 5, weights, effort)
    fast = update_function(step, 5, weights, effort, linearisation=lin)
    args = (np.concatenate([traj.q[100], traj.dq[100]]), rng.uniform(-2, 2, (4, 5)), np.tile(np.concatenate([traj.q[150], traj.dq[150]])[:, None], (1, 6)), np.zeros((4, 5)))
    structured = update_function(step, 5, weights, effort, linearisation=lin, step_size=h)  # the recursion on (D, M⁻¹)
    for ours, blocks, theirs in zip(fast(*args), structured(*args), plain(*args)):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-8, atol=1e-9)
        np.testing.assert_allclose(np.asarray(blocks), np.asarray(theirs), rtol=1e-8, atol=1e-9)
