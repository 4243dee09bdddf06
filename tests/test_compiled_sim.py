"""The compiled simulation core against the interpreted reference.

Accelerations, constraint forces and violations at random states, whole runs, and
the stop at a singular configuration must be those of the interpreted dynamics.
"""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.errors import SingularConstraintError
from mbctl.dynamics.constraints.kinds import Pfaffian
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.compiled import NotCompilable, sample_evaluator, unsupported
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
from mbctl.hardware.sim import TruthPlant

SUPPORTED = ["scara", "fourbar", "rrr3", "ur5", "panda", "friction_rig", "tree5", "olkc5"]  # tree5: load-dependent friction; olkc5: RFE links, flexible base, load-dependent LuGre
FIELDS = ("q", "dq", "ddq", "state", "phi", "dphi", "target", "lam", "tau_c", "tau_programmed", "tau_applied", "sigma_ratio")


def system_of(name: str):
    robot = load_robot(name)
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    system.initialize(0.0, q0, dq0)
    return system, q0, dq0


@pytest.mark.parametrize("name", SUPPORTED)
def test_one_evaluation_equals_the_interpreted(name):
    """At states around the initial one: accelerations, bristle rates, multipliers, constraint
    and friction forces, violations agree to 1e-9 relative."""
    system, q0, dq0 = system_of(name)
    compiled = sample_evaluator(system)
    rng = np.random.default_rng(7)
    s0 = system.initial_state()
    for k in range(4):
        q = q0 + 0.02 * rng.standard_normal(len(q0))
        dq = 0.3 * rng.standard_normal(len(q0))
        s = s0 + 1e-5 * rng.standard_normal(len(s0))
        t = 0.31 * k
        ref = system.evaluate(t, q, dq, s)
        got = compiled(t, np.concatenate([q, dq, s]))
        for field in ("ddq", "state_rate", "applied", "force", "programmed_force", "lam", "phi", "dphi", "sigma", "normal_loads"):
            a, b = getattr(got, field), getattr(ref, field)
            scale = max(1.0, float(np.abs(b).max())) if b.size else 1.0
            assert np.allclose(a, b, rtol=0, atol=1e-9 * scale), (name, field, np.abs(a - b).max())


@pytest.mark.parametrize("name", ["scara", "fourbar", "friction_rig"])
def test_a_run_equals_the_interpreted_run(name):
    """0.3 s of RK4 at 1e-4 s, recorded every 1 ms: every recorded array agrees to 1e-8 relative."""
    system, q0, dq0 = system_of(name)
    runs = {b: simulate(system, q0, dq0, 0.3, step=1e-4, output_step=1e-3, backend=b) for b in ("compiled", "python")}
    assert runs["compiled"].backend == "compiled" and runs["python"].backend == "python"
    for field in FIELDS:
        a, b = getattr(runs["compiled"], field), getattr(runs["python"], field)
        scale = max(1.0, float(np.nanmax(np.abs(b)))) if b.size and not np.isnan(b).all() else 1.0
        assert a.shape == b.shape and np.allclose(a, b, rtol=0, atol=1e-8 * scale, equal_nan=True), (name, field)
    assert np.abs(runs["compiled"].q[-1] - runs["compiled"].q[0]).max() > 1e-3  # it moved


@pytest.mark.parametrize(
    ("name", "integrator", "step", "tolerance"),
    [
        ("scara", "ros2", 1e-3, 1e-8),  # the same Jacobian (differences of the same function): round-off
        # the interpreted Jacobian holds the normal loads of the load-dependent friction, the compiled
        # one differentiates through them: the two W-methods agree to their local error
        ("olkc5", "ros2", 1e-3, 2e-4),
        ("tree5", "radau", 1e-3, 1e-6),  # adaptive scipy method, compiled right-hand side: its tolerance
    ],
)
def test_other_integrators_on_the_compiled_right_hand_side(name, integrator, step, tolerance):
    """ROS2 in C and scipy's methods on the compiled right-hand side follow the interpreted run."""
    system, q0, dq0 = system_of(name)
    if not system.constraints.m:
        dq0 = np.linspace(1.0, -1.0, len(dq0))  # a swing, else the tree rests where it starts
    runs = {b: simulate(system, q0, dq0, 0.1, integrator=integrator, step=step, output_step=1e-2, rtol=1e-9, atol=1e-11, backend=b) for b in ("compiled", "python")}
    assert runs["compiled"].backend == "compiled"
    for field in ("q", "dq", "ddq", "state", "phi", "lam", "tau_c", "tau_applied"):
        a, b = getattr(runs["compiled"], field), getattr(runs["python"], field)
        scale = max(1.0, float(np.abs(b).max(initial=0.0)))
        assert a.shape == b.shape and np.allclose(a, b, rtol=0, atol=tolerance * scale), (field, np.abs(a - b).max() / scale)
    assert np.abs(runs["compiled"].q[-1] - q0).max() > 1e-4  # it moved


def test_what_it_does_not_cover_is_named_and_auto_falls_back():
    """Pfaffian rows are Python callables: the compiled core refuses them by name; auto runs interpreted."""
    robot = load_robot("fourbar")
    system0, q0, dq0 = system_of("fourbar")
    knife = Pfaffian("knife", lambda q: np.eye(robot.nv)[:1], lambda q, dq: np.zeros(1), ["v"])
    system = ConstrainedDynamics(robot, [*system0.constraints, knife], forces=system0.forces)
    dq0 = np.zeros(robot.nv)
    system.initialize(0.0, q0, dq0)
    assert unsupported(system) == "Pfaffian constraints"
    with pytest.raises(NotCompilable, match="Pfaffian constraints"):
        simulate(system, q0, dq0, 1e-4, step=1e-5, backend="compiled")
    assert simulate(system, q0, dq0, 1e-4, step=1e-5).backend == "python"


def test_the_stop_at_a_singular_configuration_is_the_interpreted_one():
    """The SCARA driven into its stretched arm stops at the same stage, with the same message."""
    robot = load_robot("scara").with_friction({j: None for j in ("j1", "j2", "j3", "j4")})
    setup = simulation_setup(robot)
    q0 = np.radians([30.0, 55.0, 24.0, 0.0])  # the SCARA study's printed initial state
    dq0 = np.array([-0.157, 0.0001, 0.157, 0.0195])
    errors = {}
    for backend in ("compiled", "python"):
        with pytest.raises(SingularConstraintError) as info:
            simulate(build_dynamics(robot, setup), q0, dq0, 1.0, step=1e-4, output_step=1e-2, backend=backend)
        errors[backend] = info.value
    assert str(errors["compiled"]) == str(errors["python"]) and errors["compiled"].time == errors["python"].time


@pytest.mark.parametrize("name", ["scara", "ur5", "friction_rig"])
def test_the_compiled_plant_steps_as_the_interpreted_stepper(name):
    """The simulated plant's compiled steps (friction implicit, LuGre exact) are the
    interpreted FrictionStepper's arithmetic: one second of a swinging, braked motion."""
    robot = load_robot(name)
    q0 = np.linspace(0.2, -0.3, robot.nv)
    plants = {c: TruthPlant(robot, q0=q0, compiled=c) for c in (True, False)}
    rng = np.random.default_rng(3)
    for k in range(1000):
        tau = 2.0 * np.sin(0.01 * k + np.arange(robot.nv)) + 0.1 * rng.standard_normal(robot.nv)
        for plant in plants.values():
            plant.step(tau, 1e-3)
    a, b = plants[True].full, plants[False].full
    assert np.abs(a.q - q0).max() > 0.05  # it moved
    for x, y in ((a.q, b.q), (a.dq, b.dq), (a.s, b.s)):
        assert x.shape == y.shape and np.allclose(x, y, rtol=0, atol=1e-9 * max(1.0, np.abs(y).max(initial=0.0)))


def test_the_compiled_elastic_plant_steps_as_the_interpreted_stepper():
    """The five-link chain (flexible base, RFE link; friction removed, as the plant refuses
    load-dependent friction): springs, dampers and the base supports stepped in C as in Python."""
    robot = load_robot("olkc5")
    robot = robot.with_friction(dict.fromkeys(robot.joint_names))
    plants = {c: TruthPlant(robot, compiled=c) for c in (True, False)}
    tau = np.linspace(0.5, -0.5, robot.actuation_matrix.shape[1])
    for _ in range(300):
        for plant in plants.values():
            plant.step(tau, 1e-3)
    a, b = plants[True].full, plants[False].full
    assert np.abs(a.q).max() > 1e-3  # it moved
    assert np.allclose(a.q, b.q, rtol=0, atol=1e-9) and np.allclose(a.dq, b.dq, rtol=0, atol=1e-8)
