"""Laws written once over a backend: the float, numpy and CasADi namespaces give the same numbers."""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.actuator import ServoActuator, ServoFirmware
from mbctl.dynamics.backend import NUMPY, SCALAR, casadi_namespace
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.forces import JointFriction, elastic_diagonal, elastic_forces, friction_damping, friction_terms
from mbctl.dynamics.friction.laws import LuGre, lugre_decay, lugre_rate, lugre_z_step, stribeck_level
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.compiled_forces import normal_loads_of

RNG = np.random.default_rng(31)
# velocities across the Stribeck bump and well beyond it, both signs, and exactly zero
VELOCITIES = np.concatenate([[0.0, -0.0], RNG.normal(scale=0.05, size=20), RNG.normal(scale=3.0, size=10)])


def _casadi(f, *args: float) -> float:
    """``f`` built on SX symbols for ``args`` and evaluated there (a graph, not a float path)."""
    symbols = [ca.SX.sym(f"a{k}") for k in range(len(args))]
    return float(ca.Function("f", symbols, [f(casadi_namespace(), *symbols)])(*args))


@pytest.mark.parametrize(
    "formula",
    [
        lambda xp, v, z: stribeck_level(xp, v, 0.5, 0.7, 0.02, 1.3),
        lambda xp, v, z: lugre_rate(xp, v, z, 1.0e4, stribeck_level(xp, v, 0.5, 0.7, 0.02)),
        lambda xp, v, z: lugre_decay(xp, v, 1.0e4, stribeck_level(xp, v, 0.5, 0.7, 0.02)),
        lambda xp, v, z: lugre_z_step(xp, z, v, 1e-3, 1.0e4, stribeck_level(xp, v, 0.5, 0.7, 0.02)),
    ],
    ids=["stribeck_level", "lugre_rate", "lugre_decay", "lugre_z_step"],
)
def test_friction_formulas_agree_on_floats_numpy_and_casadi(formula):
    """Each friction formula gives the same value on Python floats, numpy arrays and CasADi symbols."""
    z = RNG.normal(scale=5e-5, size=len(VELOCITIES))
    on_numpy = formula(NUMPY, VELOCITIES, z)
    on_floats = np.array([formula(SCALAR, float(v), float(zk)) for v, zk in zip(VELOCITIES, z)])
    on_casadi = np.array([_casadi(formula, float(v), float(zk)) for v, zk in zip(VELOCITIES, z)])
    assert np.abs(on_numpy).max() > 0
    np.testing.assert_allclose(on_floats, on_numpy, rtol=1e-14, atol=0.0)
    np.testing.assert_allclose(on_casadi, on_numpy, rtol=1e-13, atol=1e-18)


def test_scalar_sign_is_numpys():
    """The float namespace's sign is 0 at zero and NaN for NaN, as numpy's (LuGre's z_ss at rest)."""
    for x in (-2.0, -1e-300, 0.0, 3.0):
        assert SCALAR.sign(x) == np.sign(x)
    assert math.isnan(SCALAR.sign(math.nan))


def test_joint_friction_terms_agree_between_the_interpreted_and_casadi_backends(robots):
    """The per-joint friction of the SCARA (Stribeck, LuGre, Coulomb) and its damping are the
    same numbers on floats (the interpreted element) and as a CasADi graph (the compiled core)."""
    element = JointFriction(robots["scara"], smoothing=1e-3)
    nv, ns = robots["scara"].nv, element.n_states
    dq_s, z_s = ca.SX.sym("dq", nv), ca.SX.sym("z", ns)
    terms, rates = friction_terms(casadi_namespace(), element._static, element._lugre, dq_s, z_s, element.smoothing)
    damping = friction_damping(casadi_namespace(), element._static, element._lugre, dq_s, element.smoothing)
    graph = ca.Function("f", [dq_s, z_s], [ca.vertcat(*(m for _, _, m, _ in terms)), ca.vertcat(*rates), ca.vertcat(*(c for _, c in damping))])
    for _ in range(20):
        dq, z = RNG.normal(scale=0.05, size=nv), RNG.normal(scale=5e-5, size=ns)
        floats, float_rates = friction_terms(SCALAR, element._static, element._lugre, dq.tolist(), z.tolist(), element.smoothing)
        float_damping = friction_damping(SCALAR, element._static, element._lugre, dq.tolist(), element.smoothing)
        mu, rate, c = (np.asarray(x).ravel() for x in graph(dq, z))
        np.testing.assert_allclose(mu, [m for _, _, m, _ in floats], rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(rate, float_rates, rtol=1e-13, atol=1e-15)
        np.testing.assert_allclose(c, [c for _, c in float_damping], rtol=1e-13, atol=1e-15)
        # and the element's forces are minus these terms (no load-dependent joint on the SCARA)
        Q, ds = element(0.0, np.zeros(nv), dq, z)
        np.testing.assert_allclose(-Q[[i for i, _, _, _ in floats]], [m + v for _, _, m, v in floats], rtol=1e-15)
        np.testing.assert_allclose(ds, float_rates, rtol=1e-15)


def test_servo_lugre_is_the_friction_modules_lugre():
    """A servo with its motor off feels exactly the LuGre law of its gearbox parameters, and
    its bristle step is the law's exact step."""
    p = {"kt": 0.4, "R": 3.0, "armature": 1e-3, "fc": 0.05, "fs": 0.08, "vs": 0.1, "fv": 0.01, "sigma0": 20.0, "sigma1": 0.3}
    servo = ServoActuator(ServoFirmware(kp=800.0, vin=12.0), "lugre", p)
    law = LuGre(**{k: p[k] for k in ("fc", "fs", "vs", "fv", "sigma0", "sigma1")})
    for v, z in zip(VELOCITIES, RNG.normal(scale=2e-3, size=len(VELOCITIES))):
        torque, _ = servo.torque(0.0, v, 0.0, on=0.0, z=z)
        assert torque == pytest.approx(-law.torque(v, z), rel=1e-14, abs=1e-17)
        assert servo.z_step(z, v, 1e-3) == pytest.approx(law.z_step(z, v, 1e-3), rel=1e-14, abs=1e-17)


def test_elastic_formula_with_pinocchio_kinematics_is_elastic_forces(configs):
    """The shared spring–damper formula, fed pinocchio's support positions and Jacobians, gives
    ElasticForces' generalized force and its stiffness and damping diagonals (five-link chain:
    RFE link and flexible base)."""
    robot = load_robot(configs / "olkc5.toml")
    element = ElasticForces(robot)
    assert len(element._idx) and element._fids
    model, data = robot.model, robot.create_data()
    for _ in range(5):
        q, dq = RNG.normal(scale=0.05, size=robot.nv), RNG.normal(scale=0.5, size=robot.nv)
        pin.computeJointJacobians(model, data, robot.configuration(q))
        pin.updateFramePlacements(model, data)
        frames = [(data.oMf[f].translation.copy(), pin.getFrameJacobian(model, data, f, pin.LOCAL_WORLD_ALIGNED)[:3]) for f in element._fids]
        supports = [(p, J, p0, S, D) for (p, J), p0, S, D in zip(frames, element._p0, element._S, element._D)]
        Q = elastic_forces(np.zeros(robot.nv), q, dq, element._idx, element._k, element._c, supports)
        expected = element(0.0, q, dq, np.zeros(0))[0]
        assert np.abs(expected).max() > 0
        np.testing.assert_allclose(Q, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
        K = elastic_diagonal(np.zeros(robot.nv), element._idx, element._k, [(J, S) for (_, J), S in zip(frames, element._S)])
        np.testing.assert_allclose(K, element.stiffness(q), rtol=1e-12)
        C = elastic_diagonal(np.zeros(robot.nv), element._idx, element._c, [(J, D) for (_, J), D in zip(frames, element._D)])
        np.testing.assert_allclose(C, element.damping(dq, np.zeros(0)), rtol=1e-12)


def test_normal_loads_are_the_load_models_and_agree_with_casadi(robots):
    """The equivalent normal loads of the load-dependent joints (tree5) are their load models'
    own values; the gradient matches central differences; numpy and CasADi give the same numbers."""
    robot = robots["tree5"]
    element = JointFriction(robot, loads=True)
    joints = [j for j in robot.joints if j.friction is not None and j.friction.load is not None]
    assert joints
    k = len(joints)
    W_s = ca.SX.sym("W", k, 6)
    N_s, G_s = normal_loads_of(element, W_s, element._radial.tolist(), element._axial.tolist())
    graph = ca.Function("loads", [W_s], [N_s, G_s])
    for _ in range(10):
        W = RNG.normal(scale=20.0, size=(k, 6))
        N, G = element.loads_and_gradient(W)
        models = [float(j.friction.load.normal_load(W[r], j.axis, j.kind)) for r, j in enumerate(joints)]
        np.testing.assert_allclose(N, models, rtol=1e-12)
        h = 1e-6
        for c in range(6):
            step = np.zeros((k, 6))
            step[:, c] = h
            central = (element.normal_loads(W + step) - element.normal_loads(W - step)) / (2 * h)
            np.testing.assert_allclose(G[:, c], central, rtol=1e-6, atol=1e-8)
        N_c, G_c = (np.asarray(x) for x in graph(W))
        np.testing.assert_allclose(N_c.ravel(), N, rtol=1e-13)
        np.testing.assert_allclose(G_c.reshape(k, 6), G, rtol=1e-13, atol=1e-15)
