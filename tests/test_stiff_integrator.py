"""The fixed-step Rosenbrock-W integrator (ros2): order two, stable on stiff elastic robots."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_simulate import damped_oscillator

from mbctl.dynamics.constraints.errors import SingularConstraintError
from mbctl.dynamics.constraints.stabilization import Baumgarte
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import SimulationError, simulate
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)
from mbctl.dynamics.simulation.variants import Variant, load_variant


def test_violation_error_falls_with_the_square_of_the_step(configs):
    """SCARA from a perturbed consistent state (friction included): the violation follows
    its Baumgarte law, with an error that falls ~4x when the step halves (second order)."""
    robot = load_robot(configs / "scara.toml")
    baumgarte = Baumgarte("squared", 5.0, 20.0)
    setup = dataclasses.replace(simulation_setup(robot), baumgarte=baumgarte)
    errors = []
    for h in (4e-3, 2e-3):
        system = build_dynamics(robot, setup)
        q, dq = initial_state(robot, setup, system)
        q, dq = q + np.array([2e-3, -1e-3, 1.5e-3, 1e-3]), dq + np.array([0.01, 0.0, -0.02, 0.005])
        run = simulate(system, q, dq, 0.4, integrator="ros2", step=h, output_step=4e-3, jacobian_interval=0.02)
        c1, c0 = baumgarte.coefficients
        exact = damped_oscillator(run.t, c1, c0, run.phi[0], run.dphi[0])
        errors.append(np.abs(run.phi - exact).max() / np.abs(run.phi[0]).max())
    assert errors[1] < 5e-3
    assert 3.0 < errors[0] / errors[1] < 5.0


def test_stable_at_a_millisecond_where_rk4_is_not(configs):
    """Flexible base and link (kHz torsion modes): RK4 at 1 ms blows up, ros2 at 1 ms
    traces the program with the violation decaying as its Baumgarte law says."""
    path = configs / "olkc5.toml"
    robot = load_variant(path, Variant("flexible", "flexible", "none"))
    setup = dataclasses.replace(simulation_setup(robot), duration=0.4, step=1e-3, output_step=1e-3)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    with pytest.raises((SimulationError, SingularConstraintError)):  # whichever the blow-up hits first
        simulate(system, q0, dq0, 0.4, integrator="rk4", step=1e-3)
    run = simulate(build_dynamics(robot, setup), q0, dq0, 0.4, integrator="ros2", step=1e-3, output_step=1e-3)
    v = run.violation()
    # slow Baumgarte root: exp(-5 t) once the fast one (-1995 1/s) has died out
    assert v[-1] / v[100] == pytest.approx(np.exp(-5 * 0.3), rel=0.05)
