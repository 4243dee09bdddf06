"""Simulation: Baumgarte laws against their ODE solutions, conservation, LuGre states, singularities."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.errors import SingularConstraintError
from mbctl.dynamics.constraints.kinds import FramePosition, JointLinear
from mbctl.dynamics.constraints.stabilization import Baumgarte, SingularityPolicy
from mbctl.dynamics.constraints.targets import ExpressionTarget
from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.friction.laws import JointFriction as Friction
from mbctl.dynamics.friction.laws import LuGre
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)
from mbctl.errors import ConfigError

PAPER_Q0 = np.array([math.radians(30), math.radians(55), math.radians(24), 0.0])
PAPER_DQ0 = np.array([-0.157, 0.0001, 0.157, 0.0195])


def damped_oscillator(t, c1, c0, x0, v0):
    """Solution of x'' + c1 x' + c0 x = 0, x(0) = x0, x'(0) = v0 (any damping but critical)."""
    disc = np.sqrt(complex(c1**2 / 4 - c0))
    r1, r2 = -c1 / 2 + disc, -c1 / 2 - disc
    a = (v0 - r2 * x0) / (r1 - r2)
    b = (r1 * x0 - v0) / (r1 - r2)
    return (np.outer(np.exp(r1 * t), a) + np.outer(np.exp(r2 * t), b)).real


def scara_run(configs, baumgarte, duration, step=2e-4, perturb=True):
    """The bundled SCARA (friction included) from its assembled start, slightly perturbed."""
    robot = load_robot(configs / "scara.toml")
    setup = dataclasses.replace(simulation_setup(robot), baumgarte=baumgarte)
    dyn = build_dynamics(robot, setup)
    q, dq = initial_state(robot, setup, dyn)
    if perturb:
        q = q + np.array([2e-3, -1e-3, 1.5e-3, 1e-3])
        dq = dq + np.array([0.01, 0.0, -0.02, 0.005])
    return dyn, simulate(dyn, q, dq, duration, step=step, output_step=1e-3)


@pytest.mark.parametrize(
    "baumgarte",
    [Baumgarte("linear", 0.5, 200.0), Baumgarte("squared", 5.0, 20.0), Baumgarte("squared", 50.0, 20.0)],
    ids=["seed004-linear", "squared-underdamped", "squared-overdamped"],
)
def test_violation_follows_the_baumgarte_ode(configs, baumgarte):
    """SCARA from a perturbed consistent state: every Phi_i(t) is the damped-oscillator solution."""
    dyn, run = scara_run(configs, baumgarte, duration=0.5)
    c1, c0 = baumgarte.coefficients
    expected = damped_oscillator(run.t, c1, c0, run.phi[0], run.dphi[0])
    assert np.abs(run.phi[0]).max() > 1e-3
    assert np.abs(run.phi - expected).max() <= 1e-10 * np.abs(run.phi[0]).max()
    if baumgarte.form == "linear":  # the seed values leave the violation lightly damped: still visible at 0.5 s
        assert np.abs(run.phi[-1]).max() > 0.5 * np.exp(-0.25 * 0.5) * 1e-3


def test_without_stabilization_the_violation_drifts_linearly(configs):
    """Phi'' = 0 exactly: an initial violation and its rate persist, Phi(t) = Phi(0) + dPhi(0) t."""
    _, run = scara_run(configs, None, duration=0.3)
    expected = run.phi[0] + np.outer(run.t, run.dphi[0])
    assert np.abs(run.phi - expected).max() <= 1e-10 * np.abs(run.phi[0]).max()


def fourbar_energy(robot, dyn, run):
    data = robot.create_data()
    energy = []
    for q, dq in zip(run.q, run.dq):
        qp = dyn.configuration(q)
        energy.append(pin.computeKineticEnergy(robot.model, data, qp, dq) + pin.computePotentialEnergy(robot.model, data, qp))
    return np.array(energy)


@pytest.mark.slow
def test_closed_loop_conserves_energy_and_closes(configs):
    """Free four-bar, no friction: energy drift < 1e-6 over 2 s (RK4, h = 1e-4), closure < 1e-8."""
    robot = load_robot(configs / "fourbar.toml")
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, dyn)
    run = simulate(dyn, q0, dq0, 2.0, step=1e-4, output_step=1e-3)
    energy = fourbar_energy(robot, dyn, run)
    assert np.abs(energy - energy[0]).max() / abs(energy[0]) < 1e-6
    assert run.violation().max() < 1e-8
    assert np.ptp(run.q[:, 0]) > 3.0  # the crank really swings (about 5.3 rad)


def test_stiff_integrator_conserves_energy_too(configs):
    """Radau on the four-bar for 0.5 s (rtol 1e-10): drift < 1e-6, closure < 1e-8."""
    robot = load_robot(configs / "fourbar.toml")
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, dyn)
    run = simulate(dyn, q0, dq0, 0.5, integrator="radau", step=1e-2, rtol=1e-10, atol=1e-12)
    energy = fourbar_energy(robot, dyn, run)
    assert len(run.t) == 51 and run.t[-1] == pytest.approx(0.5)
    assert np.abs(energy - energy[0]).max() / abs(energy[0]) < 1e-6
    assert run.violation().max() < 1e-8


def test_lugre_state_integrates_with_the_motion(configs):
    """j4 rises at exactly 0.02 m/s: its LuGre state follows z_ss (1 - exp(-sigma0 v t/g)), and the
    constraint force on j4 is m4 g plus the LuGre force."""
    robot = load_robot(configs / "scara.toml")
    law = LuGre(fc=5.0, fs=7.0, vs=0.005, fv=20.0, sigma0=1e5, sigma1=100.0)
    robot = robot.with_friction({"j4": Friction(law)})
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, dyn)
    run = simulate(dyn, q0, dq0, 0.05, step=1e-4, output_step=1e-3)
    col = list(run.state_names).index("z.j4")
    v = 0.02
    z_ss = law.g(v) / law.sigma0
    z = z_ss * (1 - np.exp(-law.sigma0 * v * run.t / law.g(v)))
    assert run.state[:, col] == pytest.approx(z, rel=1e-6, abs=1e-12)
    force = 0.5 * 9.81 + law.torque(v, z)
    assert run.tau_c[:, 3] == pytest.approx(force, rel=1e-6)


def test_paper_initial_state_runs_into_the_stretched_arm(configs):
    """Seed 004's printed state with alpha = 0.5, beta = 200: singular (q2 -> 0) within 0.15 s."""
    robot = load_robot(configs / "scara.toml").with_friction({j: None for j in ("j1", "j2", "j3", "j4")})
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup)
    with pytest.raises(SingularConstraintError) as info:
        simulate(dyn, PAPER_Q0, PAPER_DQ0, 1.0, step=1e-4)
    err = info.value
    assert 0.12 < err.time < 0.15
    assert abs(math.sin(err.q[1])) < 0.05  # elbow (nearly) straight
    assert f"t = {err.time:.6g} s" in str(err) and "j2 = " in str(err)


def test_damped_mode_continues_through_the_singularity(configs):
    """With singularity.action = damped the same run goes on past the stretched configuration."""
    robot = load_robot(configs / "scara.toml").with_friction({j: None for j in ("j1", "j2", "j3", "j4")})
    setup = dataclasses.replace(simulation_setup(robot), singularity=SingularityPolicy(action="damped"))
    dyn = build_dynamics(robot, setup)
    run = simulate(dyn, PAPER_Q0, PAPER_DQ0, 0.14, step=1e-4, output_step=1e-4)
    assert run.sigma_ratio.min() < 1e-3 and run.singular_samples > 0
    assert np.isfinite(run.q).all()


def test_rk4_refuses_a_step_unstable_for_lugre(configs):
    """Fast joints make the LuGre bristles stiff: RK4 stops with a clear message instead of blowing up."""
    robot = load_robot(configs / "scara.toml")
    dyn = build_dynamics(robot, simulation_setup(robot))
    with pytest.raises(ConfigError) as info:
        simulate(dyn, PAPER_Q0, PAPER_DQ0, 0.05, step=1e-4)
    assert info.value.field == "simulation.step" and "z.j2" in str(info.value) and "radau" in str(info.value)


def test_unconstrained_free_fall_of_the_quill(robots):
    """No constraints, no friction: the SCARA quill falls freely, q4 = -g t^2/2."""
    robot = robots["scara"].with_friction({j: None for j in ("j1", "j2", "j3", "j4")})
    dyn = ConstrainedDynamics(robot, [])
    run = simulate(dyn, np.zeros(4), np.zeros(4), 0.2, step=1e-3)
    assert run.q[:, 3] == pytest.approx(-0.5 * 9.81 * run.t**2, abs=1e-12)
    assert run.phi.shape == (201, 0) and (run.sigma_ratio == 1).all()


def test_rk4_step_divides_the_duration_and_output_decimates(robots):
    robot = robots["scara"]
    dyn = ConstrainedDynamics(robot, [JointLinear(robot, "hold", {"j4": 1.0}, ExpressionTarget(["0"]))], forces=[JointFriction(robot)])
    run = simulate(dyn, np.zeros(4), np.zeros(4), 0.1, step=3e-3, output_step=0.01)
    assert run.steps == 34 and len(run.t) == 13 and run.t[-1] == pytest.approx(0.1)
    with pytest.raises(ConfigError, match="unknown integrator"):
        simulate(dyn, np.zeros(4), np.zeros(4), 0.1, integrator="euler")
    with pytest.raises(ConfigError, match="must be > 0"):
        simulate(dyn, np.zeros(4), np.zeros(4), -1.0)


def test_frame_position_path_is_followed(robots):
    """A built-in rectangle path: the tool reaches each corner (fully constrained SCARA, consistent start)."""
    from mbctl.dynamics.constraints.targets import rectangle

    robot = robots["scara"].with_friction({j: None for j in ("j1", "j2", "j3", "j4")})
    path = rectangle([[-0.05, 0.3], [0.05, 0.3], [0.05, 0.4], [-0.05, 0.4]], edge_duration=0.25)
    cs = [
        FramePosition(robot, "xy", "tool", ["x", "y"], path),
        JointLinear(robot, "yaw", {"j1": 1, "j2": 1, "j3": 1}, ExpressionTarget(["0"])),
        JointLinear(robot, "z", {"j4": 1}, ExpressionTarget(["0"])),
    ]
    dyn = ConstrainedDynamics(robot, cs, baumgarte=Baumgarte("squared", 20.0, 20.0))
    q, dq = dyn.assemble(0.0, np.array([-0.5, 1.5, -1.0, 0.0]), np.zeros(4))
    run = simulate(dyn, q, dq, 1.0, step=1e-3, output_step=0.25)
    assert run.violation().max() < 1e-9
    tool = run.target[:, :2] + run.phi[:, :2]
    assert tool == pytest.approx(np.array([[-0.05, 0.3], [0.05, 0.3], [0.05, 0.4], [-0.05, 0.4], [-0.05, 0.3]]), abs=1e-9)


def test_nonholonomic_constraint_does_no_work(robots):
    """A knife edge at the SCARA tool (no sideways velocity in its own axes): the velocity-level row
    holds to round-off and, as an ideal constraint, it conserves the energy."""
    from mbctl.dynamics.constraints.kinds import FrameVelocity

    robot = robots["scara"].with_friction({j: None for j in ("j1", "j2", "j3", "j4")})
    dyn = ConstrainedDynamics(
        robot, [FrameVelocity(robot, "knife", "tool", ["y"], ExpressionTarget(["0"]))], baumgarte=Baumgarte("linear", 10.0, 0.0)
    )
    q0, dq0 = dyn.assemble(0.0, np.array([0.3, 1.0, -0.5, 0.0]), np.array([0.5, -0.3, 0.8, 0.0]))
    run = simulate(dyn, q0, dq0, 1.0, step=1e-3, output_step=0.01)
    data = robot.create_data()
    energy = np.array(
        [
            pin.computeKineticEnergy(robot.model, data, robot.configuration(q), v) + pin.computePotentialEnergy(robot.model, data, robot.configuration(q))
            for q, v in zip(run.q, run.dq)
        ]
    )
    assert np.abs(run.dphi).max() < 1e-12 and np.isnan(run.phi).all()
    assert np.abs(energy - energy[0]).max() < 1e-9 * abs(energy[0])
    assert np.ptp(run.q[:, 0]) > 0.1  # it does move
