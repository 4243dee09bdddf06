"""Batched inverse dynamics against pinocchio, friction composition, LuGre states."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.ctrl.trajectory import constant_acceleration
from mbctl.dynamics.friction.laws import JointFriction, LuGre
from mbctl.dynamics.friction.loads import Bearing3D
from mbctl.dynamics.inverse import InverseDynamics, inverse_dynamics
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import DataError


def random_states(robot, n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-2, 2, (n, robot.nv)), rng.normal(size=(n, robot.nv)), rng.normal(size=(n, robot.nv))


@pytest.mark.parametrize("name", ["scara", "tree5", "ur5"])
def test_batch_rnea_and_wrenches_equal_pinocchio(robots, name):
    """Rigid torques equal pinocchio.rnea and wrenches equal data.f, sample by sample."""
    robot = robots[name]
    q, dq, ddq = random_states(robot, 300)
    res = InverseDynamics(robot, reactions=True, lugre="steady")(q, dq, ddq)
    data = robot.create_data()
    for k in range(0, 300, 7):
        tau = pin.rnea(robot.model, data, robot.configuration(q[k]), dq[k], ddq[k])
        scale = max(1.0, np.abs(tau).max())
        assert np.abs(res.tau_rigid[k] - tau).max() <= 1e-12 * scale
        wrenches = np.array([data.f[j.id].vector for j in robot.joints])
        assert np.abs(res.joint_wrench[k] - wrenches).max() <= 1e-12 * max(1.0, np.abs(wrenches).max())


def test_python_loop_threads_and_chunks_agree(robots):
    """threads=0 (plain loop), several threads and tiny chunks give identical results."""
    robot = robots["tree5"]
    q, dq, ddq = random_states(robot, 101, seed=1)
    calls = []
    a = InverseDynamics(robot, threads=0, reactions=True, lugre="steady")(q, dq, ddq)
    b = InverseDynamics(robot, threads=2, chunk=7, reactions=True, lugre="steady")(
        q, dq, ddq, progress=lambda done, total: calls.append((done, total))
    )
    for field in ("tau", "tau_rigid", "tau_friction", "joint_wrench", "normal_load"):
        assert np.array_equal(getattr(a, field), getattr(b, field)), field
    assert calls[-1] == (101, 101) and len(calls) == 15


def test_total_is_rigid_plus_each_joints_law(robots):
    """tau = tau_rigid + friction, the friction being each joint's law at its velocity."""
    robot = robots["ur5"]
    q, dq, ddq = random_states(robot, 50, seed=2)
    res = inverse_dynamics(robot, q, dq, ddq)
    assert np.array_equal(res.tau, res.tau_rigid + res.tau_friction)
    for j in robot.joints:
        assert np.allclose(res.tau_friction[:, j.idx_v], j.friction.law.steady(dq[:, j.idx_v]))
    assert res.joint_wrench is None and res.normal_load is None and res.friction_state is None


def test_tree5_seed003_motion_loads_bearings_that_gravity_does_not_drive(robots):
    """Every joint accelerating at 0.2 rad/s^2: gravity torque is zero, normal loads are not."""
    robot = robots["tree5"]
    traj = constant_acceleration(np.zeros(5), np.full(5, 0.2), 3.0, 200.0, robot.joint_names)
    res = inverse_dynamics(robot, traj.q, traj.dq, traj.ddq, traj.t)
    data = robot.create_data()
    gravity = pin.computeGeneralizedGravity(robot.model, data, robot.configuration(traj.q[10]))
    assert np.abs(gravity).max() < 1e-12
    assert (res.normal_load > 0.1).all()  # N·m, every joint at every sample
    # at t = 0 the joints are at rest but accelerating: break-away level fs * tau_n
    assert np.allclose(res.tau_friction[0], 0.05 * res.normal_load[0], rtol=1e-12)
    # the Stribeck bump has gone by v = 0.6 rad/s: kc * tau_n + kv * v
    assert np.allclose(res.tau_friction[-1], 0.005 * res.normal_load[-1] + 0.01 * 0.6, rtol=1e-9)


def test_lugre_state_integrates_to_the_steady_state(robots):
    """Along a long constant-speed run the integrated LuGre friction reaches its steady law."""
    robot = robots["scara"]
    j2 = robot.joint("j2")
    n = 3000
    t = np.linspace(0, 3.0, n)
    q, dq, ddq = np.zeros((n, 4)), np.zeros((n, 4)), np.zeros((n, 4))
    dq[:, j2.idx_v] = 0.01  # rad/s, below the Stribeck velocity
    q[:, j2.idx_v] = 0.01 * t
    dynamic = inverse_dynamics(robot, q, dq, ddq, t)
    steady = inverse_dynamics(robot, q, dq, ddq, t, lugre="steady")
    law = j2.friction.law
    assert dynamic.friction_state[0, j2.idx_v] == 0.0  # relaxed bristles at the start
    assert dynamic.tau_friction[-1, j2.idx_v] == pytest.approx(steady.tau_friction[-1, j2.idx_v], rel=1e-9)
    assert steady.tau_friction[-1, j2.idx_v] == pytest.approx(law.g(0.01) + law.fv * 0.01, rel=1e-12)
    # presliding: the bristles deflect over a displacement of about g/sigma0 = 7e-5 rad (7 ms here)
    z = dynamic.friction_state[:, j2.idx_v]
    assert z[1] < 0.5 * law.z_steady(0.01) and np.all(np.diff(z[:20]) > 0)


def test_load_dependent_lugre_scales_the_bristle_force(robots):
    """A LuGre law with a load model multiplies sigma0*z + sigma1*dz by the normal load."""
    base = robots["tree5"]
    law = LuGre(fc=0.005, fs=0.05, vs=0.03, fv=0.01, sigma0=1e3, sigma1=1.0)
    robot = base.with_friction({"joint1": JointFriction(law, Bearing3D(rb=0.05, rp=0.01, rn=0.015))})
    traj = constant_acceleration(np.zeros(5), np.full(5, 0.2), 1.0, 500.0, robot.joint_names)
    res = inverse_dynamics(robot, traj.q, traj.dq, traj.ddq, traj.t)
    v, z, load = traj.dq[:, 0], res.friction_state[:, 0], res.normal_load[:, 0]
    assert np.allclose(res.tau_friction[:, 0], load * (law.sigma0 * z + law.sigma1 * law.z_rate(v, z)) + law.fv * v)


def test_armature_enters_rigid_torques_and_wrenches(configs):
    """Rotor inertia (model.armature) is kept by the wrench-augmented model."""
    robot = load_robot(configs / "scara.toml")
    robot.model.armature = np.array([0.5, 0.2, 0.1, 0.05])
    q, dq, ddq = random_states(robot, 20, seed=3)
    with_wrenches = InverseDynamics(robot, reactions=True, lugre="steady")(q, dq, ddq)
    plain = InverseDynamics(robot, lugre="steady")(q, dq, ddq)
    data = robot.create_data()
    expected = np.array([pin.rnea(robot.model, data, robot.configuration(q[k]), dq[k], ddq[k]) for k in range(20)])
    assert np.allclose(plain.tau_rigid, expected, rtol=1e-12, atol=1e-12)
    assert np.allclose(with_wrenches.tau_rigid, expected, rtol=1e-12, atol=1e-12)
    assert np.abs(expected - InverseDynamics(load_robot(configs / "scara.toml"), lugre="steady")(q, dq, ddq).tau_rigid).max() > 0.01


def test_bad_shapes_and_values_are_reported(robots):
    robot = robots["scara"]
    q, dq, ddq = random_states(robot, 5)
    with pytest.raises(DataError, match="shape"):
        inverse_dynamics(robot, q[:, :3], dq, ddq)
    dq[2, 1] = np.nan
    with pytest.raises(DataError, match="non-finite"):
        inverse_dynamics(robot, q, dq, ddq)
    with pytest.raises(DataError, match="sample times"):
        inverse_dynamics(robot, q, np.zeros_like(q), ddq)  # scara has a LuGre joint
