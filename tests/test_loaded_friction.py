"""Load-dependent and LuGre friction in forward simulation: the algebraic loop, passivity."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.reactions import joint_reactions
from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.friction.laws import CoulombViscous, LuGre, Stribeck
from mbctl.dynamics.friction.laws import JointFriction as Friction
from mbctl.dynamics.friction.loads import Bearing3D, Journal2D
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)

LAWS = {
    "coulomb-viscous": CoulombViscous(fc=0.1, fv=0.05),
    "stribeck": Stribeck(fc=0.1, fs=0.15, vs=0.02, fv=0.05, delta=1.5),
    "lugre": LuGre(fc=0.08, fs=0.12, vs=0.01, fv=0.05, sigma0=2000.0, sigma1=1.0),
}
LOADS = {"journal2d": Journal2D(diameter=0.05), "bearing3d": Bearing3D(rb=0.04, rp=0.02, rn=0.03)}

SLIDER_URDF = """<?xml version="1.0"?><robot name="slider"><link name="ground"/>
<joint name="x" type="prismatic"><parent link="ground"/><child link="block"/><axis xyz="1 0 0"/>
<limit lower="-10" upper="10" velocity="5" effort="100"/></joint>
<link name="block"><inertial><origin xyz="0 0 0.05"/><mass value="2.0"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
</robot>"""


def olkc_rigid(configs, law: str, load: str | None):
    """The rigid OLKC with one law (and load model) on every joint."""
    robot = load_robot(configs / "olkc5.toml", rigid_base=True, rigid_links=True)
    return robot.with_friction({j.name: Friction(LAWS[law], LOADS[load] if load else None) for j in robot.joints})


def test_fast_friction_terms_equal_the_laws(configs):
    """JointFriction's float path and its affine split Q0 + B N equal the laws' own formulas."""
    rng = np.random.default_rng(5)
    for law in LAWS:
        robot = olkc_rigid(configs, law, "journal2d")
        friction = JointFriction(robot, smoothing=1e-3, loads=True)
        dq = rng.uniform(-0.05, 0.05, robot.nv)
        s = rng.uniform(-5e-5, 5e-5, friction.n_states)
        N = rng.uniform(0.1, 3.0, robot.nv)
        Q, ds = friction(0.0, np.zeros(robot.nv), dq, s, N)
        Q0, B, ds2 = friction.load_terms(0.0, np.zeros(robot.nv), dq, s)
        for k, j in enumerate(robot.joints):
            v = dq[j.idx_v]
            if law == "lugre":
                expected = j.friction.law.torque(v, s[k], N[k])
                assert ds[k] == pytest.approx(j.friction.law.z_rate(v, s[k]), rel=1e-13)
            else:
                expected = j.friction.law.steady(v, np.tanh(v / 1e-3), N[k])
            assert Q[j.idx_v] == pytest.approx(-expected, rel=1e-12, abs=1e-15)
        assert np.allclose(Q0 + B @ N, Q, rtol=1e-12, atol=1e-15)
        assert np.array_equal(ds, ds2)


@pytest.mark.parametrize("load", LOADS)
def test_normal_loads_and_gradients_equal_the_load_models(configs, load):
    """Vectorized loads equal joint_load's models; their gradients equal finite differences."""
    robot = olkc_rigid(configs, "stribeck", load)
    friction = JointFriction(robot, loads=True)
    W = np.random.default_rng(6).normal(size=(robot.nv, 6)) * [30, 30, 30, 5, 5, 5]
    N, G = friction.loads_and_gradient(W)
    for k, j in enumerate(robot.joints):
        assert N[k] == pytest.approx(j.friction.load.normal_load(W[k], j.axis, j.kind), rel=1e-12)
        for c in range(6):
            Wp, Wm = W.copy(), W.copy()
            Wp[k, c] += 1e-6
            Wm[k, c] -= 1e-6
            fd = (friction.loads_and_gradient(Wp, False)[0][k] - friction.loads_and_gradient(Wm, False)[0][k]) / 2e-6
            assert G[k, c] == pytest.approx(fd, rel=1e-6, abs=1e-9)


def test_block_on_a_guide_decelerates_at_mu_g(tmp_path):
    """A 2 kg block sliding on a horizontal guide (normal load = its weight, from the
    reactions) with Coulomb friction mu: v(t) = v0 - mu g t."""
    (tmp_path / "slider.urdf").write_text(SLIDER_URDF)
    (tmp_path / "slider.toml").write_text(
        'urdf = "slider.urdf"\n[joints.x.friction]\nlaw = "coulomb-viscous"\nfc = 0.3\nload = { model = "journal2d", diameter = 0.01 }\n'
    )
    robot = load_robot(tmp_path / "slider.toml")
    system = ConstrainedDynamics(robot, [], forces=[JointFriction(robot, smoothing=1e-6, loads=True)])
    run = simulate(system, np.zeros(1), np.array([2.0]), 0.5, step=1e-3)
    assert run.dq[-1, 0] == pytest.approx(2.0 - 0.3 * 9.81 * 0.5, rel=1e-10)
    assert run.tau_applied[10, 0] == pytest.approx(-0.3 * 2.0 * 9.81, rel=1e-10)


@pytest.mark.parametrize("load", LOADS)
def test_friction_is_consistent_with_the_reactions_it_causes(configs, load):
    """OLKC tracing its rectangle with load-dependent LuGre friction: the friction applied
    equals the law evaluated at the normal load of the reaction wrench that RNEA gives
    for the solved motion (the loop is closed, not lagged)."""
    robot = load_robot(configs / "olkc5.toml")
    robot = robot.with_friction({j.name: Friction(j.friction.law, LOADS[load]) for j in robot.joints if j.friction})
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    run = simulate(system, q0, dq0, 0.006, step=1e-5, output_step=1e-3)
    r = joint_reactions(system, run.t, run.q, run.dq, run.ddq, run.lam)
    k = 0
    for j in robot.joints:
        if j.friction is None:
            continue
        N = np.array([j.friction.load.normal_load(w, j.axis, j.kind) for w in r.joint_wrench[:, robot.joints.index(j)]])
        expected = j.friction.law.torque(run.dq[:, j.idx_v], run.state[:, k], N)
        assert np.allclose(run.tau_applied[:, j.idx_v], -expected, rtol=1e-8, atol=1e-10)
        k += 1
    assert np.abs(run.tau_applied[1:, [j.idx_v for j in robot.joints if j.actuated]]).max() > 1e-3


def _mechanical_energy(robot, q, dq) -> float:
    """Kinetic (pinocchio's includes the rotors, armature) plus gravity potential energy (J)."""
    model, data = robot.model, robot.create_data()
    qp = robot.configuration(q)
    return float(pin.computeKineticEnergy(model, data, qp, dq) + pin.computePotentialEnergy(model, data, qp))


@pytest.mark.parametrize(("integrator", "step", "duration"), [("rk4", 1e-5, 0.04), ("ros2", 1e-3, 2.0)])
def test_lugre_friction_in_simulation_is_passive_and_stable(configs, integrator, step, duration):
    """Rigid OLKC falling freely with its load-dependent LuGre friction, at the steps the
    config uses: the energy lost equals the friction work, is never negative, the bristles
    stay within fs/sigma0 and the run stays finite."""
    robot = load_robot(configs / "olkc5.toml", rigid_base=True, rigid_links=True)
    system = ConstrainedDynamics(robot, [], forces=[JointFriction(robot, loads=True)])
    q0 = np.array([-0.1, -0.3, 0.75, 0.0, 0.0])
    dq0 = np.array([0.4, -0.2, 0.3, 0.1, -0.1])
    run = simulate(system, q0, dq0, duration, integrator=integrator, step=step, output_step=step if integrator == "rk4" else 1e-3)
    E = np.array([_mechanical_energy(robot, q, dq) for q, dq in zip(run.q, run.dq)])
    power = np.einsum("ij,ij->i", run.tau_applied, run.dq)  # friction power, <= 0 on average
    work = np.concatenate([[0.0], np.cumsum(0.5 * (power[1:] + power[:-1]) * np.diff(run.t))])
    lost = E[0] - E
    assert lost.min() >= -1e-9
    assert -work.min() >= -1e-9
    if integrator == "rk4":  # every step recorded: the trapezoidal work integral is accurate
        assert np.abs(lost + work).max() < 1e-4 * np.abs(work).max()
    assert np.isfinite(run.q).all()
    for k, j in enumerate(j for j in robot.joints if j.friction is not None):
        assert np.abs(run.state[:, k]).max() <= j.friction.law.fs / j.friction.law.sigma0 * (1 + 1e-9)
