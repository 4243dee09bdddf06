"""The CasADi mirror of the model against pinocchio: dynamics, joint wrenches, frames, friction."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.bundled import example_robot_urdfs
from mbctl.dynamics.friction.laws import (
    CoulombViscous,
    JointFriction,
    LuGre,
    Stribeck,
    motion_direction,
)
from mbctl.dynamics.friction.loads import Bearing3D, Journal2D
from mbctl.dynamics.model.robot import RobotModel, load_robot, robot_from_pinocchio
from mbctl.dynamics.model.urdf import parse_urdf
from mbctl.dynamics.symbolic import SymbolicDynamics

SAMPLES = 200

# every joint kind the model builder produces: revolute and prismatic about skew axes,
# a continuous joint, a fixed joint folded into its parent body, and a branch
ZOO_URDF = """<?xml version="1.0"?>
<robot name="zoo">
  <link name="base"/>
  <joint name="skew" type="revolute"><parent link="base"/><child link="a"/>
    <origin xyz="0.1 -0.2 0.3" rpy="0.3 -0.2 0.5"/><axis xyz="0.3 0.5 0.81"/>
    <limit lower="-3" upper="3" velocity="2" effort="50"/></joint>
  <link name="a"><inertial><origin xyz="0.1 0.02 -0.05" rpy="0.1 0.2 0.3"/><mass value="2.0"/>
    <inertia ixx="0.03" ixy="0.001" ixz="-0.002" iyy="0.04" iyz="0.003" izz="0.05"/></inertial></link>
  <joint name="slide" type="prismatic"><parent link="a"/><child link="b"/>
    <origin xyz="0.3 0.1 0" rpy="0 0.4 0"/><axis xyz="1 1 0"/>
    <limit lower="-0.5" upper="0.5" velocity="1" effort="200"/></joint>
  <link name="b"><inertial><origin xyz="0 0.05 0.1"/><mass value="1.5"/>
    <inertia ixx="0.02" ixy="0" ixz="0.001" iyy="0.01" iyz="0" izz="0.02"/></inertial></link>
  <joint name="fixed_plate" type="fixed"><parent link="b"/><child link="plate"/>
    <origin xyz="0.05 0 0.2" rpy="0.5 0 0"/></joint>
  <link name="plate"><inertial><origin xyz="0.02 0 0"/><mass value="0.7"/>
    <inertia ixx="0.004" ixy="0" ixz="0" iyy="0.003" iyz="0" izz="0.002"/></inertial></link>
  <joint name="spin" type="continuous"><parent link="plate"/><child link="c"/>
    <origin xyz="0 0.1 0.1" rpy="0 0 -0.7"/><axis xyz="0 -1 0"/></joint>
  <link name="c"><inertial><origin xyz="0.1 0 0"/><mass value="0.9"/>
    <inertia ixx="0.005" ixy="0" ixz="0" iyy="0.006" iyz="0" izz="0.007"/></inertial></link>
  <joint name="branch" type="revolute"><parent link="a"/><child link="d"/>
    <origin xyz="-0.2 0 0.1"/><axis xyz="0 0 -1"/>
    <limit lower="-3" upper="3" velocity="2" effort="50"/></joint>
  <link name="d"><inertial><origin xyz="0 0.1 0"/><mass value="1.1"/>
    <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
  <joint name="tool_mount" type="fixed"><parent link="d"/><child link="tool"/>
    <origin xyz="0 0.25 0" rpy="0 0.3 0"/></joint>
  <link name="tool"/>
</robot>
"""


def _example(name: str) -> RobotModel:
    urdf = example_robot_urdfs()[name]
    return robot_from_pinocchio(parse_urdf(urdf), name=name, urdf=urdf)


def _zoo(tmp_path_factory) -> RobotModel:
    urdf = tmp_path_factory.mktemp("zoo") / "zoo.urdf"
    urdf.write_text(ZOO_URDF)
    model = parse_urdf(urdf)
    model.gravity = pin.Motion(np.array([0.5, -1.0, -9.7, 0, 0, 0]))
    model.armature = np.array([0.3, 0.1, 0.02, 0.05])
    return robot_from_pinocchio(model, name="zoo", urdf=urdf)


@pytest.fixture(scope="module")
def models(robots, tmp_path_factory) -> dict[str, RobotModel]:
    return {
        **robots,
        "panda": _example("panda"),
        "zoo": _zoo(tmp_path_factory),
        "pendulum": _example("double_pendulum_continuous"),
    }


def _states(robot: RobotModel, seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.uniform(-np.pi, np.pi, (SAMPLES, robot.nv))
    return q, rng.normal(0, 2, (SAMPLES, robot.nv)), rng.normal(0, 5, (SAMPLES, robot.nv))


def _batch(f, *arrays) -> np.ndarray:
    """Evaluate a CasADi function on every row at once: (N, rows) or (N, rows, cols)."""
    out = f.map(len(arrays[0]))(*[np.asarray(a).T for a in arrays]).full()
    rows, cols = f.size1_out(0), f.size2_out(0)
    return out.T if cols == 1 else out.reshape(rows, len(arrays[0]), cols).transpose(1, 0, 2)


def _rel_error(a: np.ndarray, b: np.ndarray) -> float:
    """Largest difference, relative to the largest reference entry of the sample (or 1)."""
    axes = tuple(range(1, b.ndim))
    scale = np.maximum(np.abs(b).max(axis=axes), 1.0)
    return float((np.abs(a - b).max(axis=axes) / scale).max())


@pytest.mark.parametrize("name", ["scara", "tree5", "ur5", "panda", "zoo", "pendulum"])
def test_dynamics_equal_pinocchio(models, name):
    """rnea, crba, nle, gravity and joint wrenches equal pinocchio's on 200 random states."""
    robot = models[name]
    model, data = robot.model, robot.create_data()
    sd = SymbolicDynamics(robot)
    q, dq, ddq = _states(robot)
    expected = {key: [] for key in ("rnea", "M", "nle", "g", "wrench")}
    for k in range(SAMPLES):
        qp = robot.configuration(q[k])
        expected["rnea"].append(pin.rnea(model, data, qp, dq[k], ddq[k]))
        expected["wrench"].append(np.array([data.f[j.id].vector for j in robot.joints]).T)
        M = pin.crba(model, data, qp)
        expected["M"].append(np.triu(M) + np.triu(M, 1).T)
        expected["nle"].append(pin.nonLinearEffects(model, data, qp, dq[k]))
        expected["g"].append(pin.computeGeneralizedGravity(model, data, qp))
    got = {
        "rnea": _batch(sd.rnea, q, dq, ddq),
        "M": _batch(sd.mass_matrix, q),
        "nle": _batch(sd.bias, q, dq),
        "g": _batch(sd.gravity, q),
        "wrench": _batch(sd.joint_wrenches, q, dq, ddq),
    }
    for key, value in got.items():
        assert _rel_error(value, np.array(expected[key])) <= 1e-9, key


@pytest.mark.parametrize("name", ["scara", "tree5", "ur5", "panda", "zoo", "pendulum"])
def test_frame_placements_and_jacobians_equal_pinocchio(models, name):
    """Position, rotation and world-aligned Jacobian of every frame equal pinocchio's."""
    robot = models[name]
    model, data = robot.model, robot.create_data()
    sd = SymbolicDynamics(robot)
    q, _, _ = _states(robot, seed=1)
    names = list(dict.fromkeys(f.name for f in model.frames))
    expected = {n: ([], [], []) for n in names}
    for k in range(SAMPLES):
        qp = robot.configuration(q[k])
        pin.computeJointJacobians(model, data, qp)
        pin.framesForwardKinematics(model, data, qp)
        for n in names:
            fid = model.getFrameId(n)
            expected[n][0].append(data.oMf[fid].translation.copy())
            expected[n][1].append(data.oMf[fid].rotation.copy())
            expected[n][2].append(pin.getFrameJacobian(model, data, fid, pin.LOCAL_WORLD_ALIGNED))
    for n in names:
        position, rotation, jacobian = (np.array(x) for x in expected[n])
        assert _rel_error(_batch(sd.frame_position(n), q), position) <= 1e-9, n
        assert _rel_error(_batch(sd.frame_rotation(n), q), rotation) <= 1e-9, n
        assert _rel_error(_batch(sd.frame_jacobian(n), q), jacobian) <= 1e-9, n


def test_unknown_frame_is_named(robots):
    with pytest.raises(KeyError, match="no frame 'nope'"):
        SymbolicDynamics(robots["scara"]).frame_position("nope")


def test_armature_enters_rnea_and_mass_matrix(configs):
    """Rotor inertia adds armature*ddq to the torque and armature to the diagonal of M."""
    robot = load_robot(configs / "scara.toml")
    robot.model.armature = np.array([0.5, 0.2, 0.1, 0.05])
    sd = SymbolicDynamics(robot)
    q, dq, ddq = _states(robot, seed=2)
    data = robot.create_data()
    for k in range(0, SAMPLES, 20):
        qp = robot.configuration(q[k])
        assert np.allclose(
            sd.rnea(q[k], dq[k], ddq[k]).full().ravel(), pin.rnea(robot.model, data, qp, dq[k], ddq[k]), rtol=1e-12, atol=1e-12
        )
        M = pin.crba(robot.model, data, qp)
        assert np.allclose(sd.mass_matrix(q[k]).full(), np.triu(M) + np.triu(M, 1).T, rtol=1e-12, atol=1e-12)
    bare = SymbolicDynamics(load_robot(configs / "scara.toml"))
    assert np.allclose(sd.mass_matrix(q[0]).full() - bare.mass_matrix(q[0]).full(), np.diag(robot.model.armature), atol=1e-12)


def test_functions_have_the_documented_shapes(robots):
    robot = robots["ur5"]
    sd = SymbolicDynamics(robot)
    nv = robot.nv
    assert sd.rnea.name_in() == ["q", "dq", "ddq"] and sd.rnea.size_out(0) == (nv, 1)
    assert sd.mass_matrix.size_out(0) == (nv, nv) and sd.joint_wrenches.size_out(0) == (6, nv)
    assert sd.frame_jacobian("tool0").size_out(0) == (6, nv) and sd.frame_rotation("tool0").size_out(0) == (3, 3)
    assert sd.inverse_dynamics.name_out() == ["tau", "tau_rigid", "tau_friction", "wrench", "load"]
    assert sd.frame_jacobian("tool0") is sd.frame_jacobian("tool0")  # built once


LAWS = {
    "coulomb-viscous": CoulombViscous(fc=0.8, fv=0.3),
    "stribeck": Stribeck(fc=0.8, fs=1.2, vs=0.05, fv=0.3, delta=1.5),
    "lugre": LuGre(fc=0.8, fs=1.2, vs=0.05, fv=0.3, sigma0=1e3, sigma1=5.0),
}


@pytest.mark.parametrize("law", sorted(LAWS))
@pytest.mark.parametrize("load", [None, "bearing3d", "journal2d"])
def test_friction_laws_equal_the_numpy_laws(robots, law, load):
    """friction(dq, ddq, z, load) is each joint's law evaluated by numpy, sign at rest from ddq."""
    model = {"bearing3d": Bearing3D(rb=0.05, rp=0.01, rn=0.015), "journal2d": Journal2D(diameter=0.04), None: None}[load]
    robot = robots["scara"].with_friction({j.name: JointFriction(LAWS[law], model) for j in robots["scara"].joints})
    rng = np.random.default_rng(3)
    n = SAMPLES
    dq = rng.normal(0, 0.1, (n, robot.nv))
    dq[::5] = 0.0  # at rest: the sign follows the acceleration
    ddq, z, normal = rng.normal(size=(n, robot.nv)), rng.normal(0, 1e-3, (n, robot.nv)), rng.uniform(1, 50, (n, robot.nv))
    for lugre in ("dynamic", "steady"):
        sd = SymbolicDynamics(robot, lugre=lugre)
        got = _batch(sd.friction, dq, ddq, z, normal)
        factor = normal if model is not None else 1.0
        if law == "lugre" and lugre == "dynamic":
            expected = LAWS[law].torque(dq, z, factor)
        else:
            expected = LAWS[law].steady(dq, motion_direction(dq, ddq), factor)
        assert np.allclose(got, expected, rtol=1e-12, atol=1e-14), lugre


def test_normal_load_comes_from_the_joint_wrenches(robots):
    """Load-dependent friction is loaded by the reaction of the same RNEA pass."""
    robot = robots["tree5"]
    sd = SymbolicDynamics(robot)
    q, dq, ddq = _states(robot, seed=4)
    wrench = _batch(sd.joint_wrenches, q, dq, ddq)  # (N, 6, nv)
    load = _batch(sd.normal_load, q, dq, ddq)
    for j in robot.joints:
        assert np.allclose(load[:, j.idx_v], j.friction.load.normal_load(wrench[:, :, j.idx_v], j.axis, j.kind), rtol=1e-12)
    scara = SymbolicDynamics(robots["scara"])
    assert np.isnan(scara.normal_load(np.zeros(4), np.zeros(4), np.zeros(4)).full()).all()  # no load models


def test_graphs_stay_compact(robots):
    """The UR5 RNEA needs fewer than 700 SX operations (generated C stays small)."""
    sd = SymbolicDynamics(robots["ur5"])
    assert sd.rnea.n_instructions() < 700
    assert sd.mass_matrix.n_instructions() < 500
