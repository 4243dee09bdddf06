"""Control laws against pinocchio, explicit saturation, and closed-loop tracking on an exact model."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from scipy.linalg import expm

from mbctl.ctrl.controllers import LAWS, build_controller
from mbctl.ctrl.settings import ControlSettings, Gains, control_settings
from mbctl.dynamics.friction.laws import JointFriction, LuGre, motion_direction
from mbctl.dynamics.inverse import InverseDynamics
from mbctl.errors import ConfigError


def _random_inputs(robot, n, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-2, 2, (n, robot.nv))
    return [
        q,
        rng.normal(size=(n, robot.nv)),
        q + rng.normal(0, 0.05, (n, robot.nv)),
        rng.normal(size=(n, robot.nv)),
        rng.normal(size=(n, robot.nv)),
        np.zeros((n, robot.nv)),
    ]


def _unsaturated(robot, friction_velocity: str = "measured") -> ControlSettings:
    s = control_settings(robot)
    return ControlSettings(
        effort=np.full(robot.nv, np.inf), computed_torque=s.computed_torque, pd=s.pd, file=s.file, friction_velocity=friction_velocity
    )


def test_laws_equal_their_formulas_with_pinocchio(robots):
    """Each law's demand equals its formula evaluated with pinocchio (crba, nle, gravity, RNEA)."""
    robot = robots["ur5"]
    settings = _unsaturated(robot)
    ct, pd = settings.computed_torque, settings.pd
    n = 40
    q, dq, q_d, dq_d, ddq_d, z = _random_inputs(robot, n)
    ff = InverseDynamics(robot, lugre="steady")(q_d, dq_d, ddq_d).tau
    model, data = robot.model, robot.create_data()
    for law in LAWS:
        batch = build_controller(robot, law, settings=settings).batch(q, dq, q_d, dq_d, ddq_d, z)
        assert not batch.saturated.any() and np.array_equal(batch.tau, batch.tau_demand)
        for k in range(n):
            e, de = q_d[k] - q[k], dq_d[k] - dq[k]
            if law == "feedforward":
                expected = ff[k]
            elif law == "computed-torque":
                a = ddq_d[k] + ct.kd * de + ct.kp * e
                friction = [
                    j.friction.law.steady(dq[k, j.idx_v], motion_direction(dq[k, j.idx_v], a[j.idx_v])) for j in robot.joints
                ]
                expected = pin.crba(model, data, q[k]) @ a + pin.nonLinearEffects(model, data, q[k], dq[k]) + friction
            elif law == "pd-gravity":
                expected = pd.kp * e + pd.kd * de + pin.computeGeneralizedGravity(model, data, q[k])
            else:
                expected = ff[k] + pd.kp * e + pd.kd * de
            assert np.allclose(batch.tau[k], expected, rtol=1e-10, atol=1e-10), law


def test_computed_torque_compensates_friction_at_the_desired_velocity_by_default(robots):
    """friction_velocity = "desired": M a + h from the measured state, friction from (dq_d, ddq_d)."""
    robot = robots["ur5"]
    settings = _unsaturated(robot, "desired")
    ct = settings.computed_torque
    q, dq, q_d, dq_d, ddq_d, z = _random_inputs(robot, 20)
    batch = build_controller(robot, "computed-torque", settings=settings).batch(q, dq, q_d, dq_d, ddq_d, z)
    model, data = robot.model, robot.create_data()
    for k in range(20):
        a = ddq_d[k] + ct.kd * (dq_d[k] - dq[k]) + ct.kp * (q_d[k] - q[k])
        friction = [j.friction.law.steady(dq_d[k, j.idx_v], motion_direction(dq_d[k, j.idx_v], ddq_d[k, j.idx_v])) for j in robot.joints]
        expected = pin.crba(model, data, q[k]) @ a + pin.nonLinearEffects(model, data, q[k], dq[k]) + friction
        assert np.allclose(batch.tau[k], expected, rtol=1e-10, atol=1e-10)
    assert control_settings(robot).friction_velocity == "desired"


def test_saturation_clips_and_flags_every_clipped_joint(robots):
    """tau = clip(demand, -limit, limit), and exactly the clipped joints are flagged."""
    robot = robots["ur5"]
    ctl = build_controller(robot, "pd-gravity")
    limits = np.array([j.limits.effort for j in robot.joints])
    q = np.zeros(robot.nv)
    error = np.array([0.2, 0.0, -0.3, 0.0, 0.2, -0.01])  # rad: large on joints 0, 2, 4
    tau, demand, saturated = (x.full().ravel() for x in ctl.function(q, q * 0, q + error, q * 0, q * 0, q * 0))
    assert np.array_equal(tau, np.clip(demand, -limits, limits))
    assert np.array_equal(saturated, (np.abs(demand) > limits).astype(float))
    assert saturated.tolist() == [1.0, 0.0, 1.0, 0.0, 1.0, 0.0]
    assert np.array_equal(ctl.compile()(q, q * 0, q + error, q * 0, q * 0, q * 0)[2], saturated)


def test_control_table_lowers_the_saturation_level(robots):
    """[control] effort overrides the effort limit, and the batch counts clipped samples."""
    robot = robots["ur5"]
    base = control_settings(robot)
    effort = base.effort.copy()
    effort[1] = 10.0  # N·m, below the shoulder's gravity load
    ctl = build_controller(robot, "feedforward", settings=ControlSettings(effort=effort, computed_torque=None, pd=None))
    q = np.tile([0.0, -0.5, 0.5, 0.0, 0.0, 0.0], (5, 1))
    q[:2, 1] = -np.pi / 2  # arm upright: no gravity torque on the shoulder
    zeros = np.zeros_like(q)
    batch = ctl.batch(zeros, zeros, q, zeros, zeros)
    assert batch.saturated_samples == 3 and batch.saturated[:, 1].tolist() == [False, False, True, True, True]
    assert np.all(np.abs(batch.tau[:, 1]) <= 10.0) and np.all(np.abs(batch.tau_demand[2:, 1]) > 10.0)


def test_batch_equals_single_calls(robots):
    robot = robots["tree5"]  # load-dependent friction
    settings = ControlSettings(effort=np.full(5, 2.0), computed_torque=Gains(np.full(5, 100.0), np.full(5, 20.0)), pd=None)
    ctl = build_controller(robot, "computed-torque", settings=settings)
    inputs = _random_inputs(robot, 25, seed=1)
    batch = ctl.batch(*inputs, threads=2)
    for k in range(25):
        tau, demand, saturated = ctl.function(*[x[k] for x in inputs])
        assert np.array_equal(batch.tau[k], tau.full().ravel()) and np.array_equal(batch.tau_demand[k], demand.full().ravel())
        assert np.array_equal(batch.saturated[k], saturated.full().ravel() > 0.5)
    assert batch.saturated.any()


def test_missing_gains_are_named(robots):
    with pytest.raises(ConfigError, match=r"tree5.toml: control.computed-torque: missing required table"):
        build_controller(robots["tree5"], "computed-torque")
    with pytest.raises(ConfigError, match=r"control.pd: missing"):
        build_controller(robots["tree5"], "pd-gravity")
    build_controller(robots["tree5"], "feedforward")  # needs no gains


# ---- closed loop on the exact model -------------------------------------------------

LUGRE = LuGre(fc=1.0, fs=1.5, vs=0.1, fv=0.5, sigma0=20.0, sigma1=0.5)  # slow bristles: RK4 at 1 ms is stable
Q0 = np.array([0.0, -1.2, 1.4, -1.6, -1.57, 0.0])
Q1 = np.array([0.8, -0.6, 0.9, -1.2, -1.2, 0.7])


def _quintic(t: float, duration: float = 1.0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    s = min(max(t / duration, 0.0), 1.0)
    d = Q1 - Q0
    return (
        Q0 + d * s**3 * (10 - 15 * s + 6 * s**2),
        d * 30 * s**2 * (1 - s) ** 2 / duration,
        d * 60 * s * (1 - s) * (1 - 2 * s) / duration**2,
    )


def _simulate(robot, controller, q0, dq0, duration=1.0, dt=1e-3):
    """RK4 of the plant ``ddq = ABA(q, dq, tau - F(dq, z))``, ``dz = z_rate(dq, z)``, the
    controller evaluated at every stage (continuous-time control). Returns t, q, and
    the number of stages in which the controller saturated."""
    model, data = robot.model, robot.create_data()
    nv = robot.nv
    clipped = 0

    def rhs(t, x):
        nonlocal clipped
        q, dq, z = x[:nv], x[nv : 2 * nv], x[2 * nv :]
        q_d, dq_d, ddq_d = _quintic(t)
        tau, _, saturated = controller(q, dq, q_d, dq_d, ddq_d, z)
        clipped += int(saturated.any())
        friction = LUGRE.torque(dq, z)
        return np.concatenate([dq, pin.aba(model, data, q, dq, tau - friction), LUGRE.z_rate(dq, z)])

    x = np.concatenate([q0, dq0, np.zeros(nv)])
    times, states = [0.0], [x[:nv].copy()]
    for k in range(int(round(duration / dt))):
        t = k * dt
        k1 = rhs(t, x)
        k2 = rhs(t + dt / 2, x + dt / 2 * k1)
        k3 = rhs(t + dt / 2, x + dt / 2 * k2)
        k4 = rhs(t + dt, x + dt * k3)
        x = x + dt / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        times.append(t + dt)
        states.append(x[:nv].copy())
    return np.array(times), np.array(states), clipped


@pytest.fixture(scope="module")
def lugre_ur5(robots):
    """UR5 whose every joint has the (state-based) LuGre law the plant also uses."""
    robot = robots["ur5"]
    return robot.with_friction({j.name: JointFriction(LUGRE) for j in robot.joints})


def test_computed_torque_tracks_a_quintic_exactly(lugre_ur5):
    """From zero initial error the exact-model closed loop stays on the trajectory (< 1e-8 rad over 1 s)."""
    controller = build_controller(lugre_ur5, "computed-torque").compile()
    q_d0, dq_d0, _ = _quintic(0.0)
    t, q, clipped = _simulate(lugre_ur5, controller, q_d0, dq_d0)
    error = np.array([_quintic(tk)[0] for tk in t]) - q
    assert clipped == 0
    assert np.abs(error).max() < 1e-8
    assert np.abs(q[-1] - Q1).max() < 1e-8  # and it got there


def test_computed_torque_error_decays_as_the_gains_imply(lugre_ur5):
    """From an initial error, e(t) = expm(A t) e0 with A = [[0, 1], [-kp, -kd]] on every joint."""
    omega = np.array([10.0, 20.0, 30.0, 15.0, 20.0, 25.0])  # rad/s
    zeta = np.array([1.0, 0.7, 1.2, 0.5, 1.0, 0.8])  # under-, over- and critically damped
    gains = Gains(kp=omega**2, kd=2 * zeta * omega)
    settings = ControlSettings(
        effort=control_settings(lugre_ur5).effort, computed_torque=gains, pd=None, friction_velocity="measured"
    )
    controller = build_controller(lugre_ur5, "computed-torque", settings=settings).compile()
    e0 = np.array([0.02, -0.03, 0.04, -0.05, 0.03, 0.02])  # rad, e = q_d - q
    de0 = np.array([0.1, 0.0, -0.2, 0.0, 0.1, 0.0])  # rad/s
    q_d0, dq_d0, _ = _quintic(0.0)
    t, q, clipped = _simulate(lugre_ur5, controller, q_d0 - e0, dq_d0 - de0)
    assert clipped == 0  # saturation would break the linear error dynamics
    error = np.array([_quintic(tk)[0] for tk in t]) - q
    for i in range(6):
        A = np.array([[0.0, 1.0], [-gains.kp[i], -gains.kd[i]]])
        expected = np.array([(expm(A * tk) @ [e0[i], de0[i]])[0] for tk in t])
        assert np.abs(error[:, i] - expected).max() < 1e-6 * np.abs(e0).max(), i
    assert np.abs(error[-1]).max() < 2e-3 * np.abs(e0).max()  # decayed
