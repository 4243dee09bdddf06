"""The MPC's exact box constraints: against a dense QP solver, against the clamped update where no
bound is met, and closed-loop on a UR5 reference where every joint moves and the torques saturate."""

from __future__ import annotations

from pathlib import Path

import casadi as ca
import numpy as np
import pytest

from mbctl.ctrl.optimal.box_ipm import WARM_MU
from mbctl.ctrl.optimal.box_qp import PATH_CLAMPED, PATH_INTERIOR_POINT
from mbctl.ctrl.optimal.mpc import MpcWeights, update_function
from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.hardware.interface import JointState
from mbctl.hardware.session import SessionOptions, run_session

H, N = 0.05, 12
A = np.array([[1.0, H], [0.0, 1.0]])
B = np.array([[0.5 * H**2], [H]])
W = np.diag([100.0, 1.0])
TARGET = np.array([1.0, 0.0])


def _double_integrator_step() -> ca.Function:
    x, u = ca.SX.sym("x", 2), ca.SX.sym("u", 1)
    return ca.Function("step", [x, u], [ca.DM(A) @ x + ca.DM(B) @ u])


def _dense_qp(effort: float, speed: float) -> np.ndarray:
    """The oracle: the same problem stacked over the horizon, solved by HiGHS' active-set QP solver (through CasADi)."""
    opti = ca.Opti("conic")
    u = opti.variable(1, N)
    x, cost = ca.DM.zeros(2), 0
    for k in range(N):
        x = ca.DM(A) @ x + ca.DM(B) * u[k]
        e = x - TARGET
        cost += 0.5 * ca.mtimes([e.T, ca.DM(W * (10.0 if k == N - 1 else 1.0)), e])
        opti.subject_to(opti.bounded(-speed, x[1], speed))
    opti.minimize(cost + 0.5 * 1e-4 * ca.sumsqr(u))
    opti.subject_to(opti.bounded(-effort, u, effort))
    opti.solver("highs", {"highs": {"output_flag": False}})
    return np.asarray(opti.solve().value(u)).ravel()


def _cost(U: np.ndarray) -> float:
    x, cost = np.zeros(2), 0.5 * 1e-4 * float(U @ U)
    for k, u in enumerate(U):
        x = A @ x + B.ravel() * u
        cost += 0.5 * (x - TARGET) @ (W * (10.0 if k == N - 1 else 1.0)) @ (x - TARGET)
    return cost


@pytest.mark.parametrize("speed", [0.12, 0.17, 0.22, 0.29, 10.0])
def test_box_constrained_plan_is_the_dense_qp_optimum_where_clamping_is_not(speed):
    """A step the torque limit cannot follow, under a speed limit: the update's plan (one iteration
    on a linear model: the QP itself) is the dense solver's to 1e-5 (the torque limit is 0.5) and keeps
    the speed limit; the clamped unconstrained optimum passes the speed limit or costs more."""
    weights = MpcWeights(q=np.array([100.0]), dq=np.array([1.0]), tau=np.array([1e-4]), terminal=10.0)
    effort = 0.5
    f = update_function(_double_integrator_step(), N, weights, np.array([effort]), lower=np.array([-np.inf, -speed]), upper=np.array([np.inf, speed]))
    ref = np.tile(TARGET[:, None], (1, N + 1))
    U, X, _, _, _ = (np.asarray(v) for v in f(np.zeros(2), np.zeros((1, N)), ref, np.zeros((1, N))))
    np.testing.assert_allclose(U.ravel(), _dense_qp(effort, speed), atol=1e-5)
    assert np.abs(X[1]).max() <= speed + 1e-6 and np.abs(U).max() <= effort + 1e-9
    free = update_function(_double_integrator_step(), N, weights, np.array([np.inf]))
    clamped = np.clip(np.asarray(free(np.zeros(2), np.zeros((1, N)), ref, np.zeros((1, N)))[0]).ravel(), -effort, effort)
    too_fast = np.abs(np.cumsum(H * clamped)).max() > speed + 1e-3
    assert too_fast or _cost(clamped) > _cost(U.ravel()) + 1e-3


@pytest.mark.parametrize("cap", [1, 2, 4])
def test_a_capped_interior_point_still_commands_within_the_torque_limit_and_says_so(cap):
    """The step under a speed limit from a plan at rest needs the interior point (its active-set
    passes do not settle); capped at a few warm iterations it does not converge: the update reports the
    clamped plan, the update before the exact constraints (full thrust toward the target here: every
    input at, not past, the torque limit, the speed limit it does not know passed). With the iterations
    of an exact solve the same update reports the interior point and is the optimum."""
    weights = MpcWeights(q=np.array([100.0]), dq=np.array([1.0]), tau=np.array([1e-4]), terminal=10.0)
    effort, speed = 0.5, 0.17
    bounds = dict(lower=np.array([-np.inf, -speed]), upper=np.array([np.inf, speed]))
    ref = np.tile(TARGET[:, None], (1, N + 1))
    args = (np.zeros(2), np.zeros((1, N)), ref, np.zeros((1, N)))
    capped = update_function(_double_integrator_step(), N, weights, np.array([effort]), qp_iterations=cap, qp_mu0=WARM_MU, **bounds)
    U, X, u0, _, path = (np.asarray(v) for v in capped(*args))
    assert path.item() == PATH_CLAMPED
    assert np.abs(U).max() <= effort + 1e-12 and u0.item() == pytest.approx(effort)
    np.testing.assert_allclose(U.ravel(), effort, atol=1e-9)
    assert np.abs(X[1]).max() > speed
    exact = update_function(_double_integrator_step(), N, weights, np.array([effort]), **bounds)
    U, _, _, _, path = (np.asarray(v) for v in exact(*args))
    assert path.item() == PATH_INTERIOR_POINT
    np.testing.assert_allclose(U.ravel(), _dense_qp(effort, speed), atol=1e-5)


def test_a_state_past_its_speed_bound_gets_full_braking_not_a_failure():
    """Starting at 0.5 m/s under a 0.2 m/s bound the torque limit cannot restore for 12 steps: the
    plan is finite and brakes at the limit throughout (the bound held as closely as it can be)."""
    weights = MpcWeights(q=np.array([100.0]), dq=np.array([1.0]), tau=np.array([1e-4]), terminal=10.0)
    f = update_function(_double_integrator_step(), N, weights, np.array([0.5]), lower=np.array([-np.inf, -0.2]), upper=np.array([np.inf, 0.2]))
    ref = np.tile(TARGET[:, None], (1, N + 1))
    U, X, _, _, _ = (np.asarray(v) for v in f(np.array([0.0, 0.5]), np.zeros((1, N)), ref, np.zeros((1, N))))
    np.testing.assert_allclose(U, -0.5, atol=1e-5)  # the stiff bound holds to lambda / rho
    np.testing.assert_allclose(X[1], 0.5 - 0.025 * np.arange(N + 1), atol=1e-5)


# tau of the clamped Gauss-Newton update at cycles 10, 20, 29 of the run below (commit 1b28535, before the
# exact constraints and the generated shift): its plan stayed within 0.19 of the torque limits there
CLAMPED_UPDATE = np.array([
    [17.622709471366875, 9.206144238548896, -0.14417380976505095, 10.260150647319056],
    [18.784900956559973, 9.795584261226029, -0.14060561859358228, 10.235688119098155],
    [19.057525086048116, 9.952684278645467, -0.14241883048000673, 10.287520313976202],
])  # fmt: skip


def test_cycle_equals_the_clamped_update_where_no_bound_is_met(robots):
    """The generated shift and the lean reference rows give today's torques to round-off along a
    1 s SCARA move within every limit (irregular call times, noisy states)."""
    from mbctl.ctrl.optimal.controller import MpcController

    robot = robots["scara"]
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.4, 0.5, -0.3, 0.03]]), [1.0], 1000.0, robot.joint_names)
    mpc = MpcController(robot, traj, compiled=False, period=None)
    rng = np.random.default_rng(7)
    taus = {}
    for c in range(30):
        t = 0.1 + c * 1e-3 + 2e-5 * c
        i = int(t * 1000)
        state = JointState(t=t, q=traj.q[i] + 1e-4 * rng.standard_normal(4), dq=traj.dq[i] + 1e-3 * rng.standard_normal(4), effort=np.zeros(4))
        taus[c] = mpc(t, state)
    np.testing.assert_allclose(np.array([taus[c] for c in (10, 20, 29)]), CLAMPED_UPDATE, rtol=1e-9, atol=1e-9)
    assert mpc.paths[1:] == [0, 0] and mpc.fallbacks == 0


Q0 = np.array([0.0, -1.5, 1.2, -1.2, -1.57, 0.0])
ALL_JOINTS = np.array([0.14, 0.14, -0.14, 0.14, 0.14, 0.14])


@pytest.fixture(scope="module")
def ur5_without_reaction(tmp_path_factory):
    """The UR5 with the collision reaction off: a saturating run looks like a collision to the observer."""
    from mbctl.dynamics.model.robot import load_robot

    config = tmp_path_factory.mktemp("ur5") / "ur5.toml"
    source = Path(__file__).resolve().parent.parent / "configs" / "ur5.toml"
    config.write_text(source.read_text().replace('reaction = "stop"', 'reaction = "none"'))
    return load_robot(config)


def test_no_joint_is_traded_away_when_every_joint_moves_and_the_torques_saturate(ur5_without_reaction, tmp_path):
    """Every joint 0.14 rad out and back in 0.09 s moves, twice (feed-forward 290 N·m at the shoulder
    lift against 150, 48 and 46 at wrists 1 and 2 against 28): MPC against computed torque, lock-step
    on the simulated plant. No joint more than 10 % worse, the saturated ones together at least 1.5
    times better (RMS over them: on wrist 2, asking 1.6 times its limit, the MPC tracks as computed
    torque does), no command beyond a limit and no speed beyond a limit."""
    from mbctl.ctrl.feedforward import feedforward

    robot = ur5_without_reaction
    traj = quintic_rest_to_rest(np.array([Q0, Q0 + ALL_JOINTS, Q0, Q0 + ALL_JOINTS, Q0]), [0.09] * 4, 1000.0, robot.joint_names)
    effort = np.array([j.limits.effort for j in robot.joints])
    speed = np.array([j.limits.velocity for j in robot.joints])
    saturating = np.abs(feedforward(robot, traj).dynamics.tau).max(axis=0) > effort
    assert saturating.any() and not saturating.all()
    rms, logs = {}, {}
    for law in ("computed-torque", "mpc"):
        summary = run_session(robot, traj, SessionOptions(law=law, lockstep=True), tmp_path / f"{law}.npz")
        assert summary.completed, summary.stop_reason
        rms[law] = np.array([summary.tracking_rms[n] for n in robot.joint_names])
        logs[law] = np.load(tmp_path / f"{law}.npz")
    ratio = rms["mpc"] / rms["computed-torque"]
    assert np.all(ratio <= 1.1), dict(zip(robot.joint_names, ratio))
    together = np.sqrt(np.mean(rms["mpc"][saturating] ** 2) / np.mean(rms["computed-torque"][saturating] ** 2))
    assert together <= 1 / 1.5, (together, dict(zip(robot.joint_names, ratio)))
    assert np.all(np.abs(logs["mpc"]["tau"]) <= effort + 1e-9)
    assert np.all(np.abs(logs["mpc"]["dq"]) <= speed)


def test_the_active_set_passes_settle_along_a_saturating_ur5_reference(ur5_without_reaction, tmp_path):
    """Shoulder lift and elbow 0.22 rad out and back in 0.14 s, twice (feed-forward 178 N·m against 150),
    lock-step: every update's subproblem but at most the first two (the warm-up call, from a plan that
    holds the first sample's feed-forward) settles in its active-set passes (the former solver left 4 to
    its interior point, 2.4 ms each). The paths add up to the updates."""
    robot = ur5_without_reaction
    move = np.array([0.0, 0.22, -0.22, 0.0, 0.0, 0.0])
    traj = quintic_rest_to_rest(np.array([Q0, Q0 + move, Q0, Q0 + move, Q0]), [0.14] * 4, 1000.0, robot.joint_names)
    summary = run_session(robot, traj, SessionOptions(law="mpc", lockstep=True), tmp_path / "run.npz")
    report = summary.mpc
    assert summary.completed and summary.saturated > 0, summary.stop_reason
    assert report["interior_point"] + report["clamped"] <= 2 and report["fallbacks"] == 0, report
    assert report["active_set"] + report["interior_point"] + report["clamped"] == report["updates"]
