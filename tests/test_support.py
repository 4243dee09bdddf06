"""Flexible base support against a rigid body on springs (closed forms)."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.flexible.base import BASE_JOINTS
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.flexible.modal import modes, static_equilibrium
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.stepper import FrictionStepper

# the 1 g rotor on the 40 kg block is on purpose (it must not disturb the block's modes); the model check warns about it
pytestmark = pytest.mark.filterwarnings("ignore::mbctl.dynamics.model.validate.SuspiciousModelWarning")

MASS, H = 40.0, 0.3  # kg, height of the centre of mass above the feet (m)
IXX, IZZ = 1.7, 1.1  # kg m^2 about the centre of mass
KX, KY, KZ, C = 1.0e5, 2.0e5, 1.5e5, 300.0
FEET = [(0.15, 0.2), (0.15, -0.2), (-0.15, 0.2), (-0.15, -0.2)]

BLOCK_URDF = f"""<?xml version="1.0"?><robot name="block">
<link name="block"><inertial><origin xyz="0 0 {H}"/><mass value="{MASS}"/>
<inertia ixx="{IXX}" ixy="0" ixz="0" iyy="{IXX}" iyz="0" izz="{IZZ}"/></inertial></link>
<joint name="spin" type="revolute"><parent link="block"/><child link="rotor"/><origin xyz="0 0 0.6"/><axis xyz="0 0 1"/>
<limit lower="-3" upper="3" velocity="2" effort="10"/></joint>
<link name="rotor"><inertial><mass value="1e-3"/><inertia ixx="1e-6" ixy="0" ixz="0" iyy="1e-6" iyz="0" izz="1e-6"/></inertial></link>
</robot>"""


def block_toml(supports: str, support: str = "flexible") -> str:
    return f'urdf = "block.urdf"\ngravity = [0.0, 0.0, -9.81]\n[base]\nsupport = "{support}"\nsupports = [\n{supports}]\n'


def feet(damping: float = C) -> str:
    return "".join(
        f'  {{ name = "f{i}", position = [{x}, {y}, 0.0], stiffness = [{KX}, {KY}, {KZ}], damping = {damping} }},\n'
        for i, (x, y) in enumerate(FEET)
    )


@pytest.fixture
def block(tmp_path):
    """A 40 kg block (plus a 1 g rotor on a driven joint) on four elastic feet."""
    (tmp_path / "block.urdf").write_text(BLOCK_URDF)

    def build(supports: str | None = None, support: str = "flexible", **kwargs):
        path = tmp_path / "block.toml"
        path.write_text(block_toml(feet() if supports is None else supports, support))
        return load_robot(path, **kwargs)

    return build


def test_base_joints_come_first_unactuated(block):
    """Six base DOF (x, y, z, rx, ry, rz) before the robot's own joints, unactuated; one
    frame per support point at its position on the base."""
    robot = block()
    assert robot.joint_names == (*BASE_JOINTS, "spin")
    assert [j.kind for j in robot.joints[:6]] == ["prismatic"] * 3 + ["revolute"] * 3
    assert np.allclose([j.axis for j in robot.joints[:6]], np.vstack([np.eye(3), np.eye(3)]))
    assert robot.elastic_names == BASE_JOINTS and robot.actuated_names == ("spin",)
    data = robot.create_data()
    pin.framesForwardKinematics(robot.model, data, robot.configuration(np.zeros(robot.nv)))
    assert np.allclose(data.oMf[robot.model.getFrameId("base_support_f1")].translation, [0.15, -0.2, 0.0])


def test_rigid_support_inserts_nothing(block):
    """support = "rigid" (or rigid_base=True) leaves the URDF's fixed base."""
    assert block(support="rigid").joint_names == ("spin",)
    assert block(rigid_base=True).joint_names == ("spin",)


def test_static_sag_is_weight_over_vertical_stiffness(block):
    """Centre of mass above the middle of the feet: the block sinks by m g/(4 k_z), level."""
    robot = block()
    q = static_equilibrium(robot, np.zeros(robot.nv), free=BASE_JOINTS, tol=1e-14)
    total = MASS + 1e-3
    assert q[2] == pytest.approx(-total * 9.81 / (4 * KZ), rel=1e-9)
    assert np.abs(q[[0, 1, 3, 4, 5]]).max() < 1e-12


def test_vertical_and_yaw_frequencies_of_a_body_on_springs(block):
    """Linearized about the sag: vertical sqrt(4 k_z/m); yaw sqrt(sum(k_x y^2 + k_y x^2)/I_zz)."""
    robot = block()
    q = static_equilibrium(robot, np.zeros(robot.nv), free=BASE_JOINTS, tol=1e-14)
    md = modes(robot, q, free=BASE_JOINTS)
    total = MASS + 1e-3
    vertical = math.sqrt(4 * KZ / total) / (2 * math.pi)
    assert md.frequencies_hz[md.dominant("base_z")] == pytest.approx(vertical, rel=1e-6)
    k_yaw = sum(KX * y * y + KY * x * x for x, y in FEET)
    i_zz = IZZ + 1e-6 + 1e-3 * 0.0  # the rotor sits on the axis
    assert md.frequencies_hz[md.dominant("base_rz")] == pytest.approx(math.sqrt(k_yaw / i_zz) / (2 * math.pi), rel=1e-6)


def test_vertical_damping_ratio_is_c_over_critical(block):
    """Four vertical dampers c: zeta = 4 c/(2 sqrt(4 k_z m))."""
    robot = block()
    q = static_equilibrium(robot, np.zeros(robot.nv), free=BASE_JOINTS, tol=1e-14)
    md = modes(robot, q, free=BASE_JOINTS)
    total = MASS + 1e-3
    assert md.damping_ratios[md.dominant("base_z")] == pytest.approx(4 * C / (2 * math.sqrt(4 * KZ * total)), rel=1e-5)


def test_support_springs_are_exact_not_linearized(block):
    """Tilted by a finite angle about x, the generalized spring torque is the exact
    sum of r x F over the feet, F = -S (R r - r)."""
    robot = block()
    angle = 0.2
    q = np.zeros(robot.nv)
    q[3] = angle
    Q, _ = ElasticForces(robot, damping=False)(0.0, q, np.zeros(robot.nv), np.zeros(0))
    R = pin.rpy.rpyToMatrix(angle, 0.0, 0.0)
    torque = np.zeros(3)
    for x, y in FEET:
        r = np.array([x, y, 0.0])
        p = R @ r
        torque += np.cross(p, -np.array([KX, KY, KZ]) * (p - r))
    assert Q[3] == pytest.approx(torque[0], rel=1e-12)
    assert np.abs(Q[:3] + sum(np.array([KX, KY, KZ]) * (R @ [x, y, 0.0] - [x, y, 0.0]) for x, y in FEET)).max() < 1e-9


def test_plant_stepper_settles_on_the_springs(block):
    """The semi-implicit plant (supports implicit) comes to rest at the analytic sag."""
    robot = block()
    stepper = FrictionStepper(robot)
    state = stepper.initial(np.zeros(robot.nv))
    for _ in range(4000):
        state = stepper.step(state, np.zeros(robot.nv), 5e-4)
    assert state.q[2] == pytest.approx(-(MASS + 1e-3) * 9.81 / (4 * KZ), rel=1e-6)
