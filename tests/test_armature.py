"""Rotor inertia (``[joints.<name>] armature``) in every model that moves or predicts the arm, against
pinocchio, whose RNEA, CRBA and ABA add ``model.armature`` (the oracle)."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.model.robot import load_robot

ARMATURE = {"shoulder_pan_joint": 0.5, "shoulder_lift_joint": 0.7, "elbow_joint": 0.45, "wrist_1_joint": 0.26, "wrist_2_joint": 0.17, "wrist_3_joint": 0.24}


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    """The UR5 without friction, a rotor inertia on every joint (kg m^2)."""
    path = tmp_path_factory.mktemp("armature") / "arm.toml"
    path.write_text('urdf = "example-robot-data:ur5"\ngravity = [0.0, 0.0, -9.81]\n' + "".join(f"[joints.{j}]\narmature = {a}\n" for j, a in ARMATURE.items()))
    return load_robot(path)


Q = np.array([0.3, -1.2, 1.0, -0.8, 1.4, 0.2])
DQ = np.array([0.4, -0.3, 0.5, 0.2, -0.6, 0.9])


def test_the_toml_armature_is_pinocchios(arm):
    """Each joint's armature from the TOML lands on its DOF of model.armature, and the mass matrix's diagonal grows by it."""
    for name, a in ARMATURE.items():
        assert arm.model.armature[arm.joint(name).idx_v] == a
    bare = pin.Model(arm.model)
    bare.armature = np.zeros(arm.nv)
    added = pin.crba(arm.model, arm.model.createData(), Q) - pin.crba(bare, bare.createData(), Q)
    assert np.allclose(added, np.diag(arm.model.armature), atol=1e-12)


@pytest.mark.parametrize("compiled", [True, False])
def test_the_simulated_plant_accelerates_as_pinocchios_aba(arm, compiled):
    """One step of the simulated plant (compiled or interpreted) from rest gives dq = h ABA(q, 0, tau), rotor inertia included."""
    from mbctl.hardware.sim import TruthPlant

    h = 1e-4
    tau = np.array([20.0, -30.0, 15.0, 4.0, -3.0, 2.0])
    plant = TruthPlant(arm, h, Q.copy(), compiled=compiled, period_s=h)
    plant.step(tau, h)
    expected = h * pin.aba(arm.model, arm.model.createData(), Q, np.zeros(arm.nv), tau)
    assert np.allclose(plant.full.dq, expected, rtol=1e-9, atol=1e-12)
    # the armature matters here: without it wrist 3 would accelerate about 14 times faster
    bare = pin.Model(arm.model)
    bare.armature = np.zeros(arm.nv)
    assert abs(h * pin.aba(bare, bare.createData(), Q, np.zeros(arm.nv), tau)[5]) > 10 * abs(expected[5])


def test_the_estimators_model_has_the_rotor_inertia(arm):
    """The estimators' and momentum observer's model: momentum M dq and the velocity increment h M^-1 (tau - bias) as pinocchio's CRBA and ABA."""
    from mbctl.ctrl.estimation.model import EstimationModel

    em = EstimationModel(arm)
    p, _, _, _, m = em._momentum_function(Q, DQ, ca.DM(0, 1))
    M = pin.crba(arm.model, arm.model.createData(), Q)
    assert np.allclose(np.asarray(p).ravel(), M @ DQ, rtol=1e-10)
    assert np.allclose(np.asarray(m).ravel(), np.diag(M), rtol=1e-10)
    tau, h = np.array([20.0, -30.0, 15.0, 4.0, -3.0, 2.0]), 1e-3
    q, dq = ca.SX.sym("q", arm.nv), ca.SX.sym("dq", arm.nv)
    dv = ca.Function("dv", [q, dq], [em.velocity_increment(q, dq, ca.DM(tau), h)])(Q, DQ)
    assert np.allclose(np.asarray(dv).ravel(), h * pin.aba(arm.model, arm.model.createData(), Q, DQ, tau), rtol=1e-9)


def test_computed_torque_and_feedforward_include_the_rotor_inertia(arm):
    """Computed torque on the reference (no error) and the feed-forward torque are pinocchio's RNEA, armature * ddq included."""
    from mbctl.ctrl.controllers import build_controller
    from mbctl.ctrl.settings import ControlSettings, Gains
    from mbctl.dynamics.inverse import InverseDynamics

    ddq = np.array([2.0, -1.5, 3.0, 4.0, -5.0, 6.0])
    expected = pin.rnea(arm.model, arm.model.createData(), Q, DQ, ddq)
    assert arm.model.armature @ np.abs(ddq) > 1.0  # the rotors' share is not round-off
    assert np.allclose(InverseDynamics(arm)(Q[None], DQ[None], ddq[None]).tau[0], expected, rtol=1e-10)
    gains = Gains(kp=np.full(arm.nv, 400.0), kd=np.full(arm.nv, 40.0))
    settings = ControlSettings(effort=np.full(arm.nv, np.inf), computed_torque=gains, pd=None)
    ct = build_controller(arm, "computed-torque", settings=settings).batch(Q[None], DQ[None], Q[None], DQ[None], ddq[None])
    assert np.allclose(ct.tau[0], expected, rtol=1e-10)
