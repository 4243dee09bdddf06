"""Robot models from URDF + TOML: dynamics against closed forms, metadata, URDF lookup."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from mbctl.bundled import example_robot_urdfs, resolve_urdf
from mbctl.dynamics.friction.laws import LuGre, Stribeck
from mbctl.dynamics.friction.loads import Bearing3D
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError

# parameters of the SCARA of the constraint study (shared reference notes, systems.md)
M1, M2, M3, M4 = 20.0, 15.0, 15.0, 0.5
L1, L2, R1, R2 = 0.2, 0.25, 0.1, 0.125
IZ1, IZ2, IZ3, IZ4 = 0.27, 0.31, 0.02, 0.0001
G = 9.81


def scara_closed_form(q, dq):
    """M(q), C(q, dq) dq and G of the seed-004 SCARA."""
    a = IZ1 + R1**2 * M1 + L1**2 * (M2 + M3 + M4)
    b = IZ2 + IZ3 + IZ4 + L2**2 * (M3 + M4) + R2**2 * M2
    g_ = L1 * L2 * (M3 + M4) + L1 * R2 * M2
    d = IZ3 + IZ4
    c2, s2 = math.cos(q[1]), math.sin(q[1])
    M = np.array(
        [
            [a + b + 2 * g_ * c2, b + g_ * c2, d, 0],
            [b + g_ * c2, b, d, 0],
            [d, d, d, 0],
            [0, 0, 0, M4],
        ]
    )
    C = np.array(
        [
            [-g_ * s2 * dq[1], -g_ * s2 * (dq[0] + dq[1]), 0, 0],
            [g_ * s2 * dq[0], 0, 0, 0],
            [0, 0, 0, 0],
            [0, 0, 0, 0],
        ]
    )
    return M, C @ dq, np.array([0, 0, 0, M4 * G])


def test_scara_matches_closed_form_dynamics(robots):
    """Pinocchio's SCARA model reproduces M, C dq and G of systems.md to 1e-10."""
    robot = robots["scara"]
    data = robot.create_data()
    rng = np.random.default_rng(4)
    for _ in range(50):
        q = rng.uniform(-3, 3, 4)
        dq = rng.uniform(-3, 3, 4)
        M_ref, c_ref, g_ref = scara_closed_form(q, dq)
        qp = robot.configuration(q)
        M = pin.crba(robot.model, data, qp)
        M = np.triu(M) + np.triu(M, 1).T
        g = pin.computeGeneralizedGravity(robot.model, data, qp)
        c = pin.nonLinearEffects(robot.model, data, qp, dq) - g
        assert np.abs(M - M_ref).max() < 1e-10
        assert np.abs(c - c_ref).max() < 1e-10
        assert np.abs(g - g_ref).max() < 1e-10


def test_scara_joint_metadata(robots):
    """Kinds, axes, limits from the URDF and friction laws from the TOML."""
    robot = robots["scara"]
    assert robot.joint_names == ("j1", "j2", "j3", "j4")
    assert robot.actuated_names == robot.joint_names
    assert [j.kind for j in robot.joints] == ["revolute"] * 3 + ["prismatic"]
    for j in robot.joints:
        assert np.allclose(j.axis, [0, 0, 1])
    j1 = robot.joint("j1")
    assert (j1.limits.lower, j1.limits.upper, j1.limits.velocity, j1.limits.effort) == (-2.9, 2.9, 3.0, 120.0)
    assert j1.friction.law == Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)
    assert isinstance(robot.joint("j2").friction.law, LuGre)
    assert np.array_equal(robot.actuation_matrix, np.eye(4))
    with pytest.raises(ConfigError, match="no joint"):
        robot.joint("j9")


def test_tree5_has_load_dependent_friction_and_given_gravity(robots):
    robot = robots["tree5"]
    assert np.allclose(robot.model.gravity.linear, [0, 0, -9.8])
    assert all(j.friction.load == Bearing3D(rb=0.05, rp=0.01, rn=0.015) for j in robot.joints)
    assert robot.model.parents[robot.joint("joint5").id] == robot.joint("joint4").id
    assert robot.model.parents[robot.joint("joint4").id] == robot.joint("joint1").id


def test_ur5_comes_from_example_robot_data(robots):
    robot = robots["ur5"]
    assert robot.urdf.name == "ur5_robot.urdf" and robot.urdf.is_file()
    assert robot.nv == 6 and robot.joint("elbow_joint").limits.effort == 150.0


def test_example_robot_lookup_names_and_errors(tmp_path):
    """Robots are found by file stem or without the _robot suffix; typos get a suggestion."""
    table = example_robot_urdfs()
    assert table["ur5"] == table["ur5_robot"] and "panda" in table
    assert resolve_urdf("example-robot-data:panda", tmp_path) == table["panda"]
    with pytest.raises(ConfigError, match="ur5"):
        resolve_urdf("example-robot-data:ur55", tmp_path)


def test_toml_overrides_limits_actuation_and_continuous_joints(tmp_path):
    """Limits and actuation from TOML win over the URDF; continuous joints store (cos, sin)."""
    (tmp_path / "arm.urdf").write_text(
        """<?xml version="1.0"?><robot name="arm"><link name="b"/>
        <joint name="spin" type="continuous"><parent link="b"/><child link="l1"/><axis xyz="1 0 0"/></joint>
        <link name="l1"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
        <joint name="slide" type="prismatic"><parent link="l1"/><child link="l2"/><axis xyz="0 1 0"/>
          <limit lower="-0.1" upper="0.3" velocity="0.5" effort="80"/></joint>
        <link name="l2"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
        </robot>"""
    )
    (tmp_path / "arm.toml").write_text(
        'urdf = "arm.urdf"\n'
        "[joints.spin]\nactuated = false\nlimits = { velocity = 4.0 }\n"
        "[joints.slide]\nlimits = { position = [0.0, 0.2], effort = 60.0 }\n"
    )
    robot = load_robot(tmp_path / "arm.toml")
    spin, slide = robot.joint("spin"), robot.joint("slide")
    assert spin.continuous and spin.kind == "revolute" and np.allclose(spin.axis, [1, 0, 0])
    assert (spin.limits.lower, spin.limits.upper, spin.limits.velocity) == (-math.inf, math.inf, 4.0)
    assert not spin.actuated and robot.actuated_names == ("slide",)
    assert slide.kind == "prismatic" and np.allclose(slide.axis, [0, 1, 0])
    assert (slide.limits.lower, slide.limits.upper, slide.limits.velocity, slide.limits.effort) == (0.0, 0.2, 0.5, 60.0)
    assert robot.actuation_matrix.tolist() == [[0.0], [1.0]]
    qp = robot.configuration(np.array([[0.3, 0.1], [-2.0, 0.2]]))
    assert np.allclose(qp, [[math.cos(0.3), math.sin(0.3), 0.1], [math.cos(-2.0), math.sin(-2.0), 0.2]])


def test_floating_joints_are_rejected(tmp_path):
    (tmp_path / "f.urdf").write_text(
        """<?xml version="1.0"?><robot name="f"><link name="b"/>
        <joint name="free" type="floating"><parent link="b"/><child link="l"/></joint>
        <link name="l"><inertial><mass value="1"/><inertia ixx="1" ixy="0" ixz="0" iyy="1" iyz="0" izz="1"/></inertial></link>
        </robot>"""
    )
    (tmp_path / "f.toml").write_text('urdf = "f.urdf"\n')
    with pytest.raises(ConfigError, match="1-DOF joints"):
        load_robot(tmp_path / "f.toml")
