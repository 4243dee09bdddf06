"""Constraint objects: Phi, Phi_q and gamma against closed forms and finite differences."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.constraint_set import ConstraintSet
from mbctl.dynamics.constraints.kinds import (
    FrameOrientation,
    FramePosition,
    FrameVelocity,
    JointLinear,
    Pfaffian,
)
from mbctl.dynamics.constraints.loops import FrameOffset, LoopClosure
from mbctl.dynamics.constraints.targets import ExpressionTarget
from mbctl.errors import ConfigError

L1, L2 = 0.2, 0.25  # SCARA link lengths (systems.md)


def values(robot, constraint, t, q, dq):
    """Evaluate one constraint at (t, q, dq)."""
    dyn = ConstrainedDynamics(robot, [constraint])
    return constraint.evaluate(dyn.kinematics(np.asarray(q, float), np.asarray(dq, float)), t)


def check_derivatives(robot, constraint, seed=0, position_level=True):
    """Phi_q is the q-gradient of Phi, and d/dt(Phi_q dq + Phi_t) = Phi_q ddq - gamma along a motion."""
    rng = np.random.default_rng(seed)
    q, dq, ddq = rng.uniform(-1.2, 1.2, robot.nv), rng.normal(size=robot.nv), rng.normal(size=robot.nv)
    t, h = 0.3, 1e-6
    v = values(robot, constraint, t, q, dq)
    if position_level:
        for i in range(robot.nv):
            e = np.zeros(robot.nv)
            e[i] = h
            fd = (values(robot, constraint, t, q + e, dq).phi - values(robot, constraint, t, q - e, dq).phi) / (2 * h)
            assert v.jac[:, i] == pytest.approx(fd, abs=1e-7), f"column {i}"
        fd_t = (values(robot, constraint, t + h, q, dq).phi - values(robot, constraint, t - h, q, dq).phi) / (2 * h)
        assert v.phi_t == pytest.approx(fd_t, abs=1e-7)

    def rate(tau):
        qq, vv = q + dq * tau + 0.5 * ddq * tau**2, dq + ddq * tau
        w = values(robot, constraint, t + tau, qq, vv)
        return w.jac @ vv + w.phi_t

    fd = (rate(h) - rate(-h)) / (2 * h)
    assert v.jac @ ddq - v.gamma == pytest.approx(fd, abs=1e-6)


def test_scara_tool_position_matches_closed_form(robots):
    """Seed 004's x, y rows: Phi, Phi_q and gamma equal the closed-form kinematics."""
    robot = robots["scara"]
    c = FramePosition(robot, "xy", "tool", ["x", "y"], ExpressionTarget(["0.05*sin(0.4*pi*t)", "0.35 + 0.05*cos(0.4*pi*t)"]))
    q, dq, t = np.array([0.4, 1.1, -0.3, 0.02]), np.array([0.7, -0.4, 0.9, 0.1]), 1.3
    v = values(robot, c, t, q, dq)
    s1, c1, s12, c12 = math.sin(q[0]), math.cos(q[0]), math.sin(q[0] + q[1]), math.cos(q[0] + q[1])
    w = 0.4 * math.pi
    assert v.phi == pytest.approx([-L1 * s1 - L2 * s12 - 0.05 * math.sin(w * t), L1 * c1 + L2 * c12 - 0.35 - 0.05 * math.cos(w * t)], abs=1e-14)
    assert v.jac == pytest.approx(np.array([[-L1 * c1 - L2 * c12, -L2 * c12, 0, 0], [-L1 * s1 - L2 * s12, -L2 * s12, 0, 0]]), abs=1e-14)
    d1, d12 = dq[0], dq[0] + dq[1]
    drift = np.array([L1 * s1 * d1**2 + L2 * s12 * d12**2, -L1 * c1 * d1**2 - L2 * c12 * d12**2])
    target_dd = np.array([-0.05 * w**2 * math.sin(w * t), -0.05 * w**2 * math.cos(w * t)])
    assert v.gamma == pytest.approx(target_dd - drift, abs=1e-13)


def test_scara_yaw_angle_equals_the_joint_sum(robots):
    """frame_orientation yaw of the SCARA tool is q1+q2+q3 (wrapped), like the joint_linear row."""
    robot = robots["scara"]
    yaw = FrameOrientation(robot, "yaw", "tool", ["yaw"], ExpressionTarget(["0"]))
    lin = JointLinear(robot, "yaw", {"j1": 1, "j2": 1, "j3": 1}, ExpressionTarget(["0"]))
    q, dq = np.array([1.2, 1.5, 0.9, 0.0]), np.array([0.3, -0.1, 0.5, 0.0])
    a, b = values(robot, yaw, 0.0, q, dq), values(robot, lin, 0.0, q, dq)
    assert a.phi[0] == pytest.approx(q[:3].sum() - 2 * math.pi)  # 3.6 rad wraps to -2.68
    assert b.phi[0] == pytest.approx(q[:3].sum())
    assert a.jac == pytest.approx(b.jac) and a.gamma == pytest.approx(b.gamma, abs=1e-12)


@pytest.mark.parametrize("angles", [["roll", "pitch", "yaw"], ["pitch"], ["yaw", "roll"]])
def test_orientation_rows_differentiate_correctly(robots, angles):
    """Z-Y-X Euler angle rows of a UR5 frame: Jacobian and gamma match finite differences."""
    robot = robots["ur5"]
    c = FrameOrientation(robot, "o", "wrist_3_link", angles, ExpressionTarget(["0.1*t**2"] * len(angles)))
    check_derivatives(robot, c, seed=3)


@pytest.mark.parametrize(
    "joint, plane, axis",
    [
        ("spherical", None, None),
        ("revolute", None, [0.0, 1.0, 0.0]),
        ("revolute", None, [0.3, -0.5, 0.8]),
        ("prismatic", None, [1.0, 0.0, 0.0]),
        ("revolute", "xy", None),
        ("prismatic", "zx", [0.0, 0.0, 1.0]),
    ],
)
def test_loop_rows_differentiate_correctly(robots, joint, plane, axis):
    """Loop-closure rows between two UR5 frames: Jacobian and gamma match finite differences."""
    robot = robots["ur5"]
    c = LoopClosure(robot, "loop", ["wrist_3_link", "upper_arm_link"], joint, axis=axis, plane=plane)
    assert len(c.rows) == {"spherical": 3, "revolute": 5, "prismatic": 5}[joint] - (0 if plane is None else 3 if joint == "revolute" else 3)
    check_derivatives(robot, c, seed=5)


def test_loop_row_jacobian_is_the_wrench_map(robots):
    """Each loop row's Jacobian is g_A J_A + g_B J_B: the virtual work of its wrenches."""
    robot = robots["ur5"]
    c = LoopClosure(robot, "loop", ["wrist_3_link", "upper_arm_link"], "prismatic", axis=[0.0, 1.0, 0.0])
    dyn = ConstrainedDynamics(robot, [c])
    ks = dyn.kinematics(np.full(6, 0.4), np.zeros(6))
    gA, gB = c.wrench_maps(ks)
    J = gA @ ks.frame(c.fid_a).J + gB @ ks.frame(c.fid_b).J
    assert J == pytest.approx(c.evaluate(ks, 0.0).jac, abs=1e-14)


def test_frame_offset_rows_differentiate_correctly(robots):
    """Driving rows (R_A e_k).(p_B - p_A) = g(t) between two UR5 frames: Jacobian, Phi_t and gamma match finite differences."""
    robot = robots["ur5"]
    c = FrameOffset(robot, "stroke", ["wrist_3_link", "upper_arm_link"], ["x", "z"], ExpressionTarget(["0.1*sin(2*t)", "0.05*t**2"]))
    check_derivatives(robot, c, seed=9)
    ks = ConstrainedDynamics(robot, [c]).kinematics(np.full(6, 0.3), np.zeros(6))
    A, B = ks.frame(c.fid_a), ks.frame(c.fid_b)
    v = c.evaluate(ks, 0.5)
    assert v.phi == pytest.approx((A.R.T @ (B.p - A.p))[[0, 2]] - [0.1 * math.sin(1.0), 0.05 * 0.25], abs=1e-14)
    assert not c.programmed  # an actuator between two bodies: its force is a reaction pair


@pytest.mark.parametrize("expressed", ["local", "world"])
def test_material_frame_velocity_wrench_does_the_rows_virtual_work(robots, expressed):
    """A knife edge's body wrench w = wrench_world(lambda) at the frame gives the generalized force J^T w = -Psi^T lambda."""
    robot = robots["ur5"]
    c = FrameVelocity(robot, "edge", "wrist_3_link", ["y", "wx"], ExpressionTarget(["0", "0"]), expressed=expressed, material=True)
    ks = ConstrainedDynamics(robot, [c]).kinematics(np.array([0.3, -0.7, 1.1, 0.2, -0.4, 0.9]), np.zeros(6))
    lam = np.array([2.5, -0.7])
    w = c.wrench_world(ks, lam)
    assert ks.frame(c.fid).J.T @ w == pytest.approx(-c.evaluate(ks, 0.0).jac.T @ lam, abs=1e-12)
    assert not c.programmed


@pytest.mark.parametrize("expressed", ["local", "world"])
def test_frame_velocity_rows_differentiate_correctly(robots, expressed):
    """Pfaffian frame-velocity rows: gamma is minus the drift of d/dt(Psi dq), target derivative included."""
    robot = robots["ur5"]
    c = FrameVelocity(robot, "v", "wrist_3_link", ["y", "wz"], ExpressionTarget(["0.2*t", "sin(t)"]), expressed=expressed)
    check_derivatives(robot, c, seed=7, position_level=False)
    v = values(robot, c, 0.0, np.zeros(6), np.zeros(6))
    assert np.isnan(v.phi).all()


def test_pfaffian_from_callables(robots):
    """A user Pfaffian row Psi(q) dq = 0 passes through unchanged."""
    robot = robots["scara"]
    c = Pfaffian("knife", lambda q: [[math.cos(q[0]), math.sin(q[0]), 0, 0]], lambda q, dq: [dq[0] * (-math.sin(q[0]) * dq[0] + math.cos(q[0]) * dq[1])], ["n"])
    v = values(robot, c, 0.0, [0.3, 0, 0, 0], [1.0, 2.0, 0, 0])
    assert v.jac[0] == pytest.approx([math.cos(0.3), math.sin(0.3), 0, 0])
    assert v.gamma[0] == pytest.approx(-(-math.sin(0.3) + 2 * math.cos(0.3)))


def test_stacked_rows_keep_declaration_order(robots):
    robot = robots["scara"]
    cs = ConstraintSet(
        [
            JointLinear(robot, "yaw", {"j1": 1, "j2": 1, "j3": 1}, ExpressionTarget(["0"])),
            FramePosition(robot, "p", "tool", ["z", "x"], ExpressionTarget(["0", "0"])),
        ],
        robot.nv,
    )
    assert cs.rows == ("yaw", "p.z", "p.x") and cs.slices["p"] == slice(1, 3)
    assert cs.row_index("p.x") == 2
    with pytest.raises(ConfigError, match="did you mean 'p.x'"):
        cs.row_index("p.xx")


@pytest.mark.parametrize(
    "make, field, text",
    [
        (lambda r: FramePosition(r, "c", "tol", ["x"], ExpressionTarget(["0"])), "frame", "did you mean 'tool'"),
        (lambda r: FramePosition(r, "c", "tool", ["x", "q"], ExpressionTarget(["0", "0"])), "axes", "unknown axe"),
        (lambda r: FramePosition(r, "c", "tool", ["x", "x"], ExpressionTarget(["0", "0"])), "axes", "twice"),
        (lambda r: FramePosition(r, "c", "tool", ["x", "y"], ExpressionTarget(["0"])), "target", "needs 2 target"),
        (lambda r: JointLinear(r, "c", {"j9": 1.0}, ExpressionTarget(["0"])), "coefficients.j9", "no joint 'j9'"),
        (lambda r: JointLinear(r, "c", {"j1": 0.0}, ExpressionTarget(["0"])), "coefficients", "all coefficients are zero"),
        (lambda r: LoopClosure(r, "c", ["tool", "tool"], "revolute"), "frames", "must differ"),
        (lambda r: LoopClosure(r, "c", ["tool", "link1"], "ball"), "joint", "unknown cut joint"),
        (lambda r: LoopClosure(r, "c", ["tool", "link1"], "spherical", plane="xy"), "plane", "no planar variant"),
        (lambda r: LoopClosure(r, "c", ["tool", "link1"], "prismatic", axis=[0, 0, 1], plane="xy"), "axis", "in the xy plane"),
    ],
)
def test_bad_constraint_definitions_name_the_field(robots, make, field, text):
    with pytest.raises(ConfigError) as info:
        make(robots["scara"])
    assert info.value.field == field and text in info.value.reason
