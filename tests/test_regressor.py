"""The joint-torque regressor and the base parameters, against pinocchio's RNEA."""

from __future__ import annotations

import dataclasses

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.regressor import (
    base_parameters,
    from_pseudo_inertia,
    inertial_parameters,
    joint_torque_regressor,
    parameter_names,
    pseudo_inertia,
    random_states,
)


def _rnea(robot, q, dq, ddq):
    data = robot.model.createData()
    return np.array([pin.rnea(robot.model, data, robot.configuration(q[k]), dq[k], ddq[k]) for k in range(len(q))])


def _with_armature(robot, seed=3):
    """A copy of ``robot`` with rotor inertias (0.1 to 0.7 kg m^2) on every DOF."""
    model = pin.Model(robot.model)
    model.armature = np.random.default_rng(seed).uniform(0.1, 0.7, model.nv)
    return dataclasses.replace(robot, model=model)


@pytest.mark.parametrize("name", ["scara", "tree5", "ur5"])
def test_regressor_times_parameters_is_rnea(robots, name):
    """Y(q, dq, ddq) @ (theta, armature) equals pinocchio's RNEA (which adds armature * ddq) at random states."""
    robot = _with_armature(robots[name])
    q, dq, ddq = random_states(robot, 30, seed=1)
    Y = joint_torque_regressor(robot, q, dq, ddq, armature=True)
    assert np.allclose(Y @ inertial_parameters(robot, armature=True), _rnea(robot, q, dq, ddq), atol=1e-10)
    # without the armature's columns, the rigid bodies alone: pinocchio's RNEA with the armature taken out
    bare = dataclasses.replace(robot, model=pin.Model(robot.model))
    bare.model.armature = np.zeros(robot.nv)
    assert np.allclose(joint_torque_regressor(robot, q, dq, ddq) @ inertial_parameters(robot), _rnea(bare, q, dq, ddq), atol=1e-10)


@pytest.mark.parametrize("armature", [False, True])
@pytest.mark.parametrize("name", ["scara", "ur5"])
def test_base_parameters_reproduce_torques_of_any_parameters(robots, name, armature):
    """Y_b @ (K @ theta) = Y @ theta for parameters unrelated to the model's (armature included or not), at states not used to find K."""
    robot = robots[name]
    bp = base_parameters(robot, seed=0, armature=armature)
    theta = np.random.default_rng(7).normal(size=10 * (robot.model.njoints - 1) + (robot.nv if armature else 0))
    q, dq, ddq = random_states(robot, 40, seed=99)
    Y = joint_torque_regressor(robot, q, dq, ddq, armature=armature)
    assert np.allclose(bp.reduce(Y) @ bp.base(theta), Y @ theta, atol=1e-9)
    assert np.linalg.matrix_rank(bp.reduce(Y).reshape(-1, len(bp))) == len(bp)


def test_ur5_armature_of_the_first_two_joints_joins_a_body_inertia(robots):
    """On the UR5 the elbow's and the wrists' armatures are base parameters of their own; the pan's and the lift's
    each act as their body's inertia about the joint's axis does (one base parameter, both with coefficient 1)."""
    robot = robots["ur5"]
    bp = base_parameters(robot, armature=True)
    names = parameter_names(robot, armature=True)
    assert len(bp) == len(base_parameters(robot)) + 4
    for joint in ("elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint"):
        assert f"{joint}.armature" in bp.names
    for joint, axis in (("shoulder_pan_joint", "izz"), ("shoulder_lift_joint", "iyy")):
        row = bp.K[:, names.index(f"{joint}.armature")]
        (i,) = np.flatnonzero(row)
        assert row[i] == pytest.approx(1.0) and bp.K[i, names.index(f"{joint}.{axis}")] == pytest.approx(1.0)


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
