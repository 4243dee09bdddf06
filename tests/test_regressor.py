"""The joint-torque regressor and the base parameters, against pinocchio's RNEA."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.regressor import (
    base_parameters,
    from_pseudo_inertia,
    inertial_parameters,
    joint_torque_regressor,
    pseudo_inertia,
    random_states,
)


def _rnea(robot, q, dq, ddq):
    data = robot.model.createData()
    return np.array([pin.rnea(robot.model, data, robot.configuration(q[k]), dq[k], ddq[k]) for k in range(len(q))])


@pytest.mark.parametrize("name", ["scara", "tree5", "ur5"])
def test_regressor_times_parameters_is_rnea(robots, name):
    """Y(q, dq, ddq) @ theta equals pinocchio's RNEA at random states."""
    robot = robots[name]
    q, dq, ddq = random_states(robot, 30, seed=1)
    Y = joint_torque_regressor(robot, q, dq, ddq)
    assert np.allclose(Y @ inertial_parameters(robot), _rnea(robot, q, dq, ddq), atol=1e-10)


@pytest.mark.parametrize("name", ["scara", "ur5"])
def test_base_parameters_reproduce_torques_of_any_parameters(robots, name):
    """Y_b @ (K @ theta) = Y @ theta for parameters unrelated to the model's, at states not used to find K."""
    robot = robots[name]
    bp = base_parameters(robot, seed=0)
    theta = np.random.default_rng(7).normal(size=10 * (robot.model.njoints - 1))
    q, dq, ddq = random_states(robot, 40, seed=99)
    Y = joint_torque_regressor(robot, q, dq, ddq)
    assert np.allclose(bp.reduce(Y) @ bp.base(theta), Y @ theta, atol=1e-9)
    assert np.linalg.matrix_rank(bp.reduce(Y).reshape(-1, len(bp))) == len(bp)


def test_scara_base_parameter_count():
    """A SCARA (R, R, R about z, P along z) has 8 base parameters, the textbook count for this structure."""
    from mbctl.dynamics.model.robot import load_robot

    assert len(base_parameters(load_robot("scara"))) == 8


def test_pseudo_inertia_round_trip_and_sign(robots):
    """pseudo_inertia inverts, is positive definite for URDF bodies, and not for a rod with an impossible inertia."""
    theta = inertial_parameters(robots["ur5"]).reshape(-1, 10)
    for p in theta:
        assert np.allclose(from_pseudo_inertia(pseudo_inertia(p)), p)
        assert np.linalg.eigvalsh(pseudo_inertia(p)).min() > 0
    # a point mass of 1 kg at the origin with Ixx > Iyy + Izz breaks the triangle inequality
    bad = np.array([1.0, 0, 0, 0, 1.0, 0, 0.1, 0, 0, 0.1])
    assert np.linalg.eigvalsh(pseudo_inertia(bad)).min() < 0
