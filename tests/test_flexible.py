"""Rigid-finite-element links against beam theory; the RFE model in the other engines."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.flexible.modal import modes, static_equilibrium
from mbctl.dynamics.flexible.rfe import rfe_joint_names
from mbctl.dynamics.forces import ForceElement
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.stepper import FrictionStepper
from mbctl.dynamics.symbolic import SymbolicDynamics

E, G, RHO, L = 70e9, 26e9, 2700.0, 1.0
A, IY, IZ, J = 1.2e-4, 4.0e-9, 2.5e-9, 8.0e-9

BEAM_URDF = """<?xml version="1.0"?><robot name="beam"><link name="ground"/>
<joint name="clamp" type="fixed"><parent link="ground"/><child link="beam"/></joint>
<link name="beam"><inertial><origin xyz="0.5 0 0"/><mass value="0.3"/><inertia ixx="1e-6" ixy="0" ixz="0" iyy="0.025" iyz="0" izz="0.025"/></inertial></link>
<joint name="tip_joint" type="fixed"><parent link="beam"/><child link="tip"/><origin xyz="1.0 0 0"/></joint>
<link name="tip"/>
</robot>"""


def beam_toml(elements: int, damping: str = "{ ratio = 0.0 }") -> str:
    return f"""urdf = "beam.urdf"
gravity = [0.0, 0.0, 0.0]
[flexible.beam]
method = "rfe"
elements = {elements}
axis = "x"
length = {L}
E = {E}
G = {G}
section = {{ A = {A}, Iy = {IY}, Iz = {IZ}, J = {J} }}
density = {RHO}
damping = {damping}
"""


@pytest.fixture
def cantilever(tmp_path):
    """A uniform cantilever clamped to the world, as an RFE chain of ``m`` elements."""
    (tmp_path / "beam.urdf").write_text(BEAM_URDF)

    def build(elements: int, damping: str = "{ ratio = 0.0 }"):
        path = tmp_path / f"beam{elements}.toml"
        path.write_text(beam_toml(elements, damping))
        return load_robot(path)

    return build


class FrameLoad(ForceElement):
    """A constant force (N, world axes) and moment (N·m) at a frame, as generalized forces."""

    def __init__(self, robot, frame: str, force=(0.0, 0.0, 0.0), moment=(0.0, 0.0, 0.0)):
        self.robot, self.fid = robot, robot.model.getFrameId(frame)
        self.wrench = np.concatenate([force, moment])
        self.data = robot.model.createData()

    def __call__(self, t, q, dq, s):
        model, data = self.robot.model, self.data
        pin.computeJointJacobians(model, data, self.robot.configuration(q))
        pin.updateFramePlacements(model, data)
        return pin.getFrameJacobian(model, data, self.fid, pin.LOCAL_WORLD_ALIGNED).T @ self.wrench, np.zeros(0)


def tip_pose(robot, q):
    data = robot.create_data()
    pin.framesForwardKinematics(robot.model, data, robot.configuration(q))
    return data.oMf[robot.model.getFrameId("tip")]


@pytest.mark.parametrize("m", range(1, 21))
def test_cantilever_tip_deflection_matches_the_rfe_formula(cantilever, m):
    """Tip load P: deflection P L^3/(3 E I) (1 - 1/(4 m^2)) to 1e-6 about both bending axes."""
    robot = cantilever(m)
    for axis, inertia in ((2, IY), (1, IZ)):  # load along z bends about y, along y about z
        P = 1e-3
        force = np.zeros(3)
        force[axis] = -P
        q = static_equilibrium(robot, np.zeros(robot.nv), forces=[ElasticForces(robot), FrameLoad(robot, "tip", force)], tol=1e-14)
        deflection = -tip_pose(robot, q).translation[axis]
        expected = P * L**3 / (3 * E * inertia) * (1 - 1 / (4 * m * m))
        assert deflection == pytest.approx(expected, rel=1e-6)


def test_cantilever_tip_twist_is_l_over_gj(cantilever):
    """Tip torque T: twist T L/(G J), exactly (the twist springs act in series)."""
    robot = cantilever(7)
    T = 1e-3
    q = static_equilibrium(robot, np.zeros(robot.nv), forces=[ElasticForces(robot), FrameLoad(robot, "tip", moment=(T, 0, 0))], tol=1e-14)
    R = tip_pose(robot, q).rotation
    assert math.atan2(R[2, 1], R[1, 1]) == pytest.approx(T * L / (G * J), rel=1e-6)


def test_first_bending_frequency_within_two_percent_at_ten_elements(cantilever):
    """m = 10: first bending frequencies within 2 % of 1.8751^2 sqrt(E I/(rho A L^4)), about both axes."""
    robot = cantilever(10)
    for family, inertia in (("bend_y", IY), ("bend_z", IZ)):
        # the straight beam's bending families and torsion are uncoupled: one family at a time
        free = [j.name for j in robot.joints if j.name.endswith(family)]
        first = modes(robot, np.zeros(robot.nv), free=free).frequencies_hz[0]
        exact = 1.8751**2 * math.sqrt(E * inertia / (RHO * A * L**4)) / (2 * math.pi)
        assert abs(first / exact - 1) < 0.02
    assert modes(robot, np.zeros(robot.nv)).frequencies_hz[0] == pytest.approx(
        1.8751**2 * math.sqrt(E * IZ / (RHO * A * L**4)) / (2 * math.pi), rel=0.02
    )


def test_damping_ratio_sets_the_first_modes_damping(cantilever):
    """ratio = 0.02: the first bending mode has 2 % modal damping (to its ~0.3 % frequency error)."""
    robot = cantilever(10, "{ ratio = 0.02 }")
    free = [j.name for j in robot.joints if j.name.endswith("bend_y")]
    assert modes(robot, np.zeros(robot.nv), free=free).damping_ratios[0] == pytest.approx(0.02, rel=0.01)


def test_elastic_joints_are_named_unactuated_and_in_model_order(cantilever):
    """Three revolute joints per sde (twist, bend_y, bend_z), unactuated, an rfe frame each."""
    robot = cantilever(3)
    names = [n for sde in rfe_joint_names("beam", 3) for n in sde]
    assert robot.joint_names == tuple(names) == robot.elastic_names
    assert not any(j.actuated for j in robot.joints)
    assert [j.kind for j in robot.joints] == ["revolute"] * 9
    assert all(robot.model.existFrame(f"beam_rfe{k}") for k in (1, 2, 3))
    assert np.allclose([j.axis for j in robot.joints[:3]], np.eye(3))
    link = robot.rfe_links[0]
    D = L / 3
    assert np.allclose(link.stiffness[:3], [G * J / D, E * IY / D, E * IZ / D])


def test_rigid_finite_elements_carry_the_uniform_beam(cantilever):
    """Undeformed: total mass rho A L, first moment at L/2 and the beam's inertia about the clamp."""
    robot = cantilever(6)
    model = robot.model
    data = model.createData()
    pin.forwardKinematics(model, data, robot.configuration(np.zeros(robot.nv)))
    total = np.zeros(10)
    for jid in range(model.njoints):  # rfe 0 rides on the clamp: the universe's body
        total += data.oMi[jid].act(model.inertias[jid]).toDynamicParameters()
    inertia = pin.Inertia.FromDynamicParameters(total)
    mass = RHO * A * L
    assert inertia.mass == pytest.approx(mass, rel=1e-12)
    assert np.allclose(inertia.lever, [L / 2, 0, 0], rtol=1e-12)
    about_centre = np.diag([RHO * (IY + IZ) * L, RHO * IY * L + mass * L**2 / 12, RHO * IZ * L + mass * L**2 / 12])
    assert np.allclose(inertia.inertia, about_centre, rtol=1e-10, atol=1e-16)


def test_flexible_olkc_at_rest_is_the_rigid_olkc(configs):
    """At zero elastic coordinates the flexible arm's joint-space dynamics and tool pose are
    the rigid arm's (its URDF inertia is the uniform tube's, rounded to 6 digits)."""
    flex = load_robot(configs / "olkc5.toml", rigid_base=True)
    rigid = load_robot(configs / "olkc5.toml", rigid_base=True, rigid_links=True)
    rng = np.random.default_rng(3)
    q_r = rng.uniform(-0.5, 0.5, rigid.nv)
    dq_r, ddq_r = rng.uniform(-1, 1, rigid.nv), rng.uniform(-1, 1, rigid.nv)
    idx = [flex.joint(n).idx_v for n in rigid.joint_names]
    q, dq, ddq = np.zeros(flex.nv), np.zeros(flex.nv), np.zeros(flex.nv)
    q[idx], dq[idx], ddq[idx] = q_r, dq_r, ddq_r
    tau_f = pin.rnea(flex.model, flex.create_data(), flex.configuration(q), dq, ddq)[idx]
    tau_r = pin.rnea(rigid.model, rigid.create_data(), rigid.configuration(q_r), dq_r, ddq_r)
    assert np.allclose(tau_f, tau_r, rtol=1e-5, atol=1e-5)
    df, dr = flex.create_data(), rigid.create_data()
    pin.framesForwardKinematics(flex.model, df, flex.configuration(q))
    pin.framesForwardKinematics(rigid.model, dr, rigid.configuration(q_r))
    assert np.allclose(df.oMf[flex.model.getFrameId("tool")].homogeneous, dr.oMf[rigid.model.getFrameId("tool")].homogeneous, atol=1e-14)


def test_symbolic_mirror_handles_elastic_joints(configs):
    """The CasADi mirror of the flexible OLKC (base and link) equals pinocchio."""
    robot = load_robot(configs / "olkc5.toml")
    sym = SymbolicDynamics(robot)
    rng = np.random.default_rng(4)
    q, dq, ddq = (rng.uniform(-0.3, 0.3, robot.nv) for _ in range(3))
    tau = np.asarray(sym.rnea(q, dq, ddq)).ravel()
    assert np.allclose(tau, pin.rnea(robot.model, robot.create_data(), robot.configuration(q), dq, ddq), atol=1e-9)


def test_plant_stepper_settles_a_flexible_beam_to_its_static_deflection(cantilever):
    """Semi-implicit plant steps (springs implicit, 1 ms) bring a damped cantilever under
    gravity to the static equilibrium, stably despite its kHz torsion modes."""
    robot = cantilever(4, "{ ratio = 0.2 }")
    robot.model.gravity = pin.Motion(np.array([0, 0, -9.81, 0, 0, 0]))
    stepper = FrictionStepper(robot)
    state = stepper.initial(np.zeros(robot.nv))
    for _ in range(3000):
        state = stepper.step(state, np.zeros(robot.nv), 1e-3)
    expected = static_equilibrium(robot, np.zeros(robot.nv), tol=1e-14)
    assert np.abs(state.q - expected).max() < 1e-6 * np.abs(expected).max()
