"""Samples recorded in blocks by the compiled ROS2 stepper (several per call into C) equal the samples
evaluated one at a time at the same states, and its steps those taken one call at a time."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.compiled import sample_evaluator
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup

FIELDS = {"ddq": "ddq", "lam": "lam", "phi": "phi", "dphi": "dphi", "target": "target", "tau_c": "force", "tau_programmed": "programmed_force", "tau_applied": "applied"}


@pytest.fixture(scope="module")
def scara():
    """The SCARA's programmed circle with LuGre friction (a bristle state per joint), ROS2 at 1 ms."""
    robot = load_robot("scara")
    setup = dataclasses.replace(simulation_setup(robot), integrator="ros2", step=1e-3)
    system = build_dynamics(robot, setup)
    return system, *initial_state(robot, setup, system)


def test_block_samples_equal_the_per_step_samples(scara):
    """0.2 s at 1 ms samples, 50 per call: at every recorded state the per-sample compiled evaluator gives
    exactly the recorded accelerations, multipliers, violations, targets, forces and sigma ratios."""
    system, q0, dq0 = scara
    run = simulate(system, q0, dq0, 0.2, integrator="ros2", step=1e-3, output_step=1e-3, backend="compiled")
    assert len(run.t) == 201 and run.lam.shape[1] == 4 and run.state.shape[1] > 0
    sample = sample_evaluator(system)
    for i, t in enumerate(run.t):
        e = sample(float(t), np.concatenate([run.q[i], run.dq[i], run.state[i]]))
        for name, attribute in FIELDS.items():
            assert np.array_equal(getattr(run, name)[i], getattr(e, attribute)), (name, i)
        ratio = e.sigma[system.rank - 1] / e.sigma[0]
        assert run.sigma_ratio[i] == ratio, i


def test_block_steps_agree_with_single_steps(scara):
    """Samples every 3 steps (no block: one step per call, the samples evaluated one at a time) land on
    the states the block run records at those steps, to round-off (the step times are summed in another
    order), and the samples there agree as closely."""
    system, q0, dq0 = scara
    blocks = simulate(system, q0, dq0, 0.2, integrator="ros2", step=1e-3, output_step=1e-3, backend="compiled")
    single = simulate(system, q0, dq0, 0.2, integrator="ros2", step=1e-3, output_step=3e-3, backend="compiled")
    steps = [*range(0, 200, 3), 200]
    np.testing.assert_allclose(blocks.t[steps], single.t, rtol=0, atol=1e-15)
    for name in ("q", "dq", "state", "ddq", "lam", "tau_c"):
        a, b = getattr(blocks, name)[steps], getattr(single, name)
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12 * max(1.0, np.abs(b).max()), err_msg=name)
