"""Normal loads from joint reaction wrenches, and load-dependent friction end to end."""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.spatial.transform import Rotation

from mbctl.dynamics.friction.loads import Bearing3D, Journal2D, wrench_components
from mbctl.dynamics.inverse import inverse_dynamics
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError

BEARING = Bearing3D(rb=0.05, rp=0.01, rn=0.015)
Z = np.array([0.0, 0.0, 1.0])


def test_components_and_bearing3d_hand_values():
    """f = (3,4,12) N, m = (6,8,5) N·m about z: f_r = 5, f_a = 12, m_b = 10, m_a = 5."""
    w = np.array([3.0, 4.0, 12.0, 6.0, 8.0, 5.0])
    assert np.allclose(wrench_components(w, Z), [5.0, 12.0, 10.0, 5.0])
    assert BEARING.normal_load(w, Z, "revolute") == pytest.approx((10 / 0.05 + 5) * 0.01 + 12 * 0.015)
    assert BEARING.normal_load(w, Z, "prismatic") == pytest.approx(10 / 0.05 + 5 + 5 / 0.015)
    journal = Journal2D(diameter=0.03)
    assert journal.normal_load(w, Z, "revolute") == pytest.approx(5 * 0.015)
    assert journal.normal_load(w, Z, "prismatic") == pytest.approx(5.0)


def test_zero_wrench_gives_zero_load():
    """No reaction, no normal load, for both models and joint kinds."""
    for model in (BEARING, Journal2D(diameter=0.02)):
        for kind in ("revolute", "prismatic"):
            assert model.normal_load(np.zeros(6), Z, kind) == 0.0


vectors = st.lists(st.floats(-100, 100), min_size=6, max_size=6)


@settings(max_examples=100, deadline=None)
@given(w=vectors, rotvec=st.lists(st.floats(-3, 3), min_size=3, max_size=3))
def test_load_is_invariant_to_the_frame(w, rotvec):
    """Rotating wrench and axis together leaves every normal load unchanged."""
    w = np.array(w)
    R = Rotation.from_rotvec(rotvec).as_matrix()
    axis = np.array([0.6, 0.0, 0.8])
    w_rot = np.concatenate([R @ w[:3], R @ w[3:]])
    for kind in ("revolute", "prismatic"):
        assert BEARING.normal_load(w_rot, R @ axis, kind) == pytest.approx(
            BEARING.normal_load(w, axis, kind), rel=1e-9, abs=1e-9
        )


def test_casadi_and_numpy_loads_agree():
    """The load models evaluate identically on a CasADi 6-vector."""
    w = np.array([1.0, -2.0, 3.0, 0.5, -0.1, 0.7])
    sym = ca.SX.sym("w", 6)
    axis = np.array([0.0, 1.0, 0.0])
    for model in (BEARING, Journal2D(diameter=0.04)):
        f = ca.Function("f", [sym], [model.normal_load(sym, axis, "revolute")])
        assert float(f(w)) == pytest.approx(model.normal_load(w, axis, "revolute"), rel=1e-14)


def test_bad_load_parameters_are_rejected():
    with pytest.raises(ConfigError, match="rb"):
        Bearing3D(rb=0.0, rp=0.01, rn=0.01)
    with pytest.raises(ConfigError, match="diameter"):
        Journal2D(diameter=-1.0)


SPINNER_URDF = """<?xml version="1.0"?>
<robot name="spinner">
  <link name="base"/>
  <joint name="j" type="continuous">
    <parent link="base"/><child link="arm"/>
    <origin xyz="0 0 0.4" rpy="0 0 0"/><axis xyz="0 0 1"/>
    <limit velocity="10" effort="50"/>
  </joint>
  <link name="arm">
    <inertial><origin xyz="0.3 0 0.1"/><mass value="2.0"/>
      <inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.02"/></inertial>
  </link>
</robot>
"""


def test_single_bearing_friction_matches_hand_computation(tmp_path):
    """A 2 kg arm spinning at constant speed about a vertical bearing: loads and friction by hand.

    Centre of mass r = (0.3, 0, 0.1) m in the joint frame. The reaction force is
    m*(a - g) = m*(-w^2*0.3, 0, 9.81); its moment about the joint origin is
    r x f = (0, -m*(0.03*w^2 + 0.981*3), 0), so f_r = 0.6*w^2, f_a = 19.62,
    m_b = 2*(0.03*w^2 + 2.943), and the bearing's normal torque is
    (m_b/rb + f_r)*rp + f_a*rn.
    """
    (tmp_path / "spinner.urdf").write_text(SPINNER_URDF)
    (tmp_path / "spinner.toml").write_text(
        'urdf = "spinner.urdf"\n'
        "[joints.j.friction]\n"
        'law = "stribeck"\nfc = 0.005\nfs = 0.05\nvs = 0.03\nfv = 0.01\n'
        'load = { model = "bearing3d", rb = 0.05, rp = 0.01, rn = 0.015 }\n'
    )
    robot = load_robot(tmp_path / "spinner.toml")
    m, g = 2.0, 9.81
    w = np.array([[0.0], [0.02], [-0.5], [3.0]])  # rad/s
    q = np.array([[0.0], [1.0], [2.5], [-4.0]])
    res = inverse_dynamics(robot, q, w, np.zeros_like(w), reactions=True)
    w = w[:, 0]
    f_r = m * w**2 * 0.3
    f_a = m * g
    m_b = m * (0.03 * w**2 + 0.3 * g)
    tau_n = (m_b / 0.05 + f_r) * 0.01 + f_a * 0.015
    assert np.allclose(res.normal_load[:, 0], tau_n, rtol=1e-12)
    expected = (0.005 + 0.045 * np.exp(-((w / 0.03) ** 2))) * tau_n * np.sign(w) + 0.01 * w
    assert np.allclose(res.tau_friction[:, 0], expected, rtol=1e-12, atol=1e-15)
    assert np.allclose(res.tau_rigid, 0.0, atol=1e-12)  # gravity along the axis drives nothing
    assert res.normal_load[0, 0] > 0 and res.tau_friction[0, 0] == 0.0  # at rest: loaded, no friction torque
    assert math.isclose(np.linalg.norm(res.joint_wrench[0, 0, :3]), f_a, rel_tol=1e-12)
