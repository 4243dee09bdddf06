"""The compiled core takes the robot's numbers at run time: one compilation per structure.

A system whose masses, friction, springs or stabilization gains changed reuses the core
of its structure, and its run equals a run on a core generated from it afresh (the same C,
the same inputs: bit for bit) and the interpreted reference (to round-off).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import pinocchio as pin
import pytest
from test_flexible import BEAM_URDF, beam_toml
from test_support import BLOCK_URDF, block_toml, feet

from mbctl.config.simulation import Baumgarte
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.dynamics.model.validate import SuspiciousModelWarning
from mbctl.dynamics.simulation import compiled, compiled_plant
from mbctl.dynamics.simulation.compiled import CompiledCore
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
from mbctl.dynamics.simulation.structure import parameter_values, parametrize


def _scaled(law, factor: float):
    """The law with every coefficient scaled (Stribeck's exponent kept)."""
    return dataclasses.replace(law, **{f.name: getattr(law, f.name) * (1.0 if f.name == "delta" else factor) for f in dataclasses.fields(law)})


def perturbed(robot: RobotModel, factor: float = 1.3) -> RobotModel:
    """``robot`` with other numbers and the same structure: masses, centres of mass and
    rotational inertias, rotor inertias, friction coefficients and RFE springs scaled."""
    model = pin.Model(robot.model)
    for i in range(1, model.njoints):
        Y = model.inertias[i]
        model.inertias[i] = pin.Inertia(Y.mass * factor, Y.lever / factor, Y.inertia * factor**2)
    model.armature = model.armature * factor
    joints = tuple(
        dataclasses.replace(j, friction=dataclasses.replace(j.friction, law=_scaled(j.friction.law, factor))) if j.friction else j for j in robot.joints
    )
    links = tuple(dataclasses.replace(link, stiffness=link.stiffness * factor**2, damping=link.damping * factor) for link in robot.rfe_links)
    return dataclasses.replace(robot, model=model, joints=joints, rfe_links=links)


@pytest.fixture
def generated(monkeypatch):
    """Counts the generations of a core's expressions, starting from an empty per-thread
    cache of compiled structures (what another process starts with)."""
    monkeypatch.setattr(compiled, "_cores", type(compiled._cores)())
    calls = []
    original = compiled._expressions

    def counted(system):
        calls.append(system)
        return original(system)

    monkeypatch.setattr(compiled, "_expressions", counted)
    return calls


def _system(robot: RobotModel, baumgarte: Baumgarte | None = None, duration: float = 0.05):
    setup = dataclasses.replace(simulation_setup(robot), duration=duration, step=1e-4, output_step=1e-3)
    if baumgarte is not None:
        setup = dataclasses.replace(setup, baumgarte=baumgarte)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    if not len(system.constraints.rows):
        dq0 = dq0 + 0.1  # set the springs swinging
    system.initialize(0.0, q0, dq0)
    return system, q0, dq0, setup


def _run(system, q0, dq0, setup, backend="compiled"):
    return simulate(system, q0, dq0, setup.duration, step=setup.step, output_step=setup.output_step, backend=backend)


def _robot(name: str, tmp_path) -> RobotModel:
    """A bundled robot, or a small elastic one: an RFE cantilever ("beam"), a block on elastic feet ("block")."""
    if name == "beam":
        (tmp_path / "beam.urdf").write_text(BEAM_URDF)
        (tmp_path / "beam.toml").write_text(beam_toml(3, "{ ratio = 0.02 }"))
        return load_robot(tmp_path / "beam.toml")
    if name == "block":
        (tmp_path / "block.urdf").write_text(BLOCK_URDF)
        (tmp_path / "block.toml").write_text(block_toml(feet()))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SuspiciousModelWarning)  # a 1 g rotor on a 40 kg block, on purpose
            return load_robot(tmp_path / "block.toml")
    return load_robot(name)


@pytest.mark.parametrize("name", ["fourbar", "scara", "beam", "block"])
def test_other_numbers_reuse_the_core_and_match_a_fresh_one(name, tmp_path, generated, monkeypatch):
    """Loop closure with Baumgarte (four-bar), LuGre and load-dependent friction with programmed
    constraints (SCARA), RFE springs and dampers (beam), a flexible base (block)."""
    robot = _robot(name, tmp_path)
    nominal = _system(robot)
    first = _run(*nominal)
    assert len(generated) == 1
    other_robot = perturbed(robot)
    baumgarte = nominal[3].baumgarte and dataclasses.replace(nominal[3].baumgarte, alpha=nominal[3].baumgarte.alpha * 1.7)
    other = _system(other_robot, baumgarte)
    core = CompiledCore(other[0])
    assert core.reused and core.key == CompiledCore(nominal[0]).key
    assert len(core.p) == len(CompiledCore(nominal[0]).p) and not np.array_equal(core.p, CompiledCore(nominal[0]).p)
    reused = _run(*other)
    assert len(generated) == 1  # nothing generated for the new numbers ...

    def motion(r):  # velocities and constraint forces (a fully constrained SCARA moves the same whatever its masses)
        return np.hstack([r.dq, r.tau_c, r.state])

    scale = max(1.0, np.abs(motion(first)).max())
    assert np.abs(motion(first) - motion(reused)).max() > 1e-6 * scale  # ... yet they reached the dynamics

    monkeypatch.setattr(compiled, "_cores", type(compiled._cores)())
    fresh = _run(*_system(other_robot, baumgarte))
    assert len(generated) == 2
    np.testing.assert_array_equal(reused.q, fresh.q)
    np.testing.assert_array_equal(motion(reused), motion(fresh))

    reference = _run(*_system(other_robot, baumgarte), backend="python")
    assert np.abs(motion(reused) - motion(reference)).max() < 1e-9 * scale


def test_the_parameter_vector_lists_each_number_once_in_a_fixed_order(robots):
    """Values and symbols in the same order; structural zeros (centre of mass on an axis,
    products of inertia) are constants, not inputs."""
    system = _system(robots["scara"])[0]
    symbolic, values = parametrize(system), parametrize(system, symbolic=False)
    assert symbolic.vector.names == values.vector.names
    assert len(set(values.vector.names)) == len(values.vector.names)
    np.testing.assert_array_equal(parameter_values(system), values.vector.array)
    assert symbolic.vector.symbols.numel() == len(values.vector.names)
    assert all(v != 0.0 for name, v in zip(values.vector.names, values.vector.values) if ".I_" in name or ".mc_" in name)
    law = robots["scara"].joints[0].friction.law
    for field in dataclasses.fields(law):
        name = f"{robots['scara'].joints[0].name}.friction.{field.name}"
        assert values.vector.values[values.vector.names.index(name)] == getattr(law, field.name)


def test_another_structure_gets_its_own_core(generated):
    """Another solver, or another zero pattern of the inertias, is another structure."""
    fourbar = load_robot("fourbar")
    system = _system(fourbar)[0]
    base = CompiledCore(system)
    other = build_dynamics(fourbar, dataclasses.replace(simulation_setup(fourbar), solver="lagrange"))
    other.initialize(0.0, *initial_state(fourbar, simulation_setup(fourbar), other))
    assert CompiledCore(other).key != base.key
    model = pin.Model(fourbar.model)
    Y = model.inertias[2]
    model.inertias[2] = pin.Inertia(Y.mass, Y.lever + np.array([0.0, 0.0, 0.01]), Y.inertia)  # a centre of mass off the plane
    shifted = _system(dataclasses.replace(fourbar, model=model))[0]
    assert CompiledCore(shifted).key != base.key


def test_a_key_that_misses_a_change_is_caught_by_the_check(generated, monkeypatch):
    """Were the structure key to miss something, the check against the interpreted
    evaluation at the initial state regenerates the core: the run stays right."""
    fourbar = load_robot("fourbar")
    nominal = _system(fourbar)
    CompiledCore(nominal[0])
    monkeypatch.setattr(compiled, "structure_key", lambda system, names: "one key for everything")
    model = pin.Model(fourbar.model)
    model.gravity.linear = -model.gravity.linear  # compiled in, so another structure, under the same key here
    flipped = dataclasses.replace(fourbar, model=model)
    result = _run(*_system(flipped))
    reference = _run(*_system(flipped), backend="python")
    assert len(generated) == 2
    assert np.abs(result.dq - reference.dq).max() < 1e-9 * max(1.0, np.abs(reference.dq).max())


@pytest.mark.parametrize("name", ["scara", "beam", "block"])
def test_the_simulated_plant_reuses_its_steps_for_other_numbers(name, tmp_path, monkeypatch):
    """The plant's compiled steps (friction with LuGre states, RFE springs, a flexible base) for a
    robot with other numbers: no new compilation, and the interpreted stepper's motion."""
    from mbctl.hardware.sim import TruthPlant

    monkeypatch.setattr(compiled_plant, "_plants", type(compiled_plant._plants)())
    robot = _robot(name, tmp_path)
    other = perturbed(robot)
    first = compiled_plant.plant_stepper(robot, 5)
    again = compiled_plant.plant_stepper(other, 5)
    assert again.reused and again.library == first.library
    assert not np.array_equal(again.inputs[-1], first.inputs[-1])  # each bound to its robot's numbers
    tau = np.linspace(0.5, -0.5, len(robot.actuated_names))
    motions = []
    for model, on in ((other, True), (other, False), (robot, True)):
        plant = TruthPlant(model, 1e-3, np.full(model.nv, 0.01), compiled=on, period_s=5e-3)  # springs deflected
        for _ in range(40):
            plant.step(tau, 5e-3)
        motions.append(np.concatenate([plant.full.q, plant.full.dq, plant.full.s]))
    scale = max(1.0, np.abs(motions[1]).max())
    assert np.abs(motions[0] - motions[1]).max() < 1e-9 * scale  # compiled, reused = interpreted
    assert np.abs(motions[0] - motions[2]).max() > 1e-6 * scale  # and the numbers matter


@pytest.mark.parametrize("law", ["computed-torque", "feedforward", "pd-gravity", "pd-feedforward"])
def test_a_law_compiles_once_for_other_numbers_and_gains(law, monkeypatch):
    """A joint-space law of a robot with other masses, friction (load-dependent, LuGre) and
    gains reuses the compiled law, and gives the interpreted CasADi function's torques."""
    from mbctl.ctrl import compiled_laws
    from mbctl.ctrl.controllers import build_controller
    from mbctl.ctrl.settings import control_settings

    monkeypatch.setattr(compiled_laws, "_compiled", type(compiled_laws._compiled)())
    robot = load_robot("scara")
    settings = control_settings(robot)
    other = perturbed(robot)
    scaled = dataclasses.replace(
        settings,
        computed_torque=settings.computed_torque and dataclasses.replace(settings.computed_torque, kp=settings.computed_torque.kp * 2.0),
        pd=settings.pd and dataclasses.replace(settings.pd, kd=settings.pd.kd * 0.5),
        effort=settings.effort * 0.7,
    )
    first = build_controller(robot, law, settings=settings).compile()
    controller = build_controller(other, law, settings=scaled)
    again = controller.compile()
    assert again.reused and again.library == first.library
    rng = np.random.default_rng(3)
    for _ in range(5):
        args = [rng.normal(scale=0.5, size=robot.nv) for _ in range(6)]
        expected = [np.asarray(x).ravel() for x in controller.function(*args)]
        got = again(*args)
        for e, g in zip(expected, got):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-12)
        assert np.abs(first(*args)[1] - got[1]).max() > 1e-6  # the numbers and gains reached the law
