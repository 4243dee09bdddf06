"""The RPSUP closed-loop mechanism with a flexible coupler (configs/rpsup.toml)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pinocchio as pin
import pytest

from mbctl.config.robot import read_robot_spec
from mbctl.dynamics.constraints.analysis import analyse_constraints
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.kinds import FramePosition
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.constraints.targets import ExpressionTarget
from mbctl.dynamics.flexible.rfe import chord_deflection
from mbctl.dynamics.model.robot import build_robot, load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
from mbctl.dynamics.simulation.variants import Variant, available_variants, load_variant
from mbctl.errors import ConfigError

RIGID = ("psi11", "x12", "s_psi", "s_theta", "s_phi", "z21", "psi22")


def _start(robot, **changes):
    """System and initial state of ``robot`` as rpsup.toml sets them up (``changes`` to the setup)."""
    setup = dataclasses.replace(simulation_setup(robot), **changes)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    system.initialize(0.0, q0, dq0)
    return system, q0, dq0


@pytest.fixture(scope="module")
def rpsup(configs):
    return configs / "rpsup.toml"


@pytest.fixture(scope="module")
def starts(rpsup):
    """Every variant's system and initial state."""
    return {v.name: (load_variant(rpsup, v), *_start(load_variant(rpsup, v))) for v in available_variants(load_robot(rpsup))}


@pytest.fixture(scope="module")
def rigid_run(starts):
    """Rigid, frictionless: 0.2 s from rest at corner A, RK4 2e-4 s, every step recorded."""
    robot, system, q0, dq0 = starts["rigid-rigid-frictionless"]
    return simulate(system, q0, dq0, 0.2, step=2e-4, backend="python")


def test_coordinates_follow_the_study(starts):
    """Six base coordinates, psi11, x12, the S's three angles, the coupler's RFE coordinates, z21, psi22; two drives."""
    robot = starts["flexible-flexible-friction"][0]
    rfe = [f"coupler_sde{k}_{d}" for k in range(1, 5) for d in ("twist", "bend_y", "bend_z")]
    base = ["base_x", "base_y", "base_z", "base_rx", "base_ry", "base_rz"]
    assert robot.joint_names == (*base, *RIGID[:5], *rfe, *RIGID[5:])
    assert robot.actuated_names == ("psi11", "x12")
    assert len(starts) == 8


def test_loop_closes_at_the_initial_state_to_round_off(starts):
    """Every variant starts assembled at corner A, at rest: all rows (loop and program) vanish to 1e-12."""
    for robot, system, q0, dq0 in starts.values():
        cv = system._evaluate_constraints(system.kinematics(q0, dq0), 0.0)
        assert np.abs(cv.phi).max() < 1e-12
        assert not dq0.any()


def test_mobility_equals_the_programmed_rows(starts):
    """Rigid: 7 coordinates, 5 loop rows of rank 5 -> mobility 2 = 2 programmed rows, all 7 rows of rank 7; the
    flexible variants add only their elastic coordinates as free directions."""
    robot, system, q0, _ = starts["rigid-rigid-frictionless"]
    a = analyse_constraints(system, q0, 0.0, reactions=False)
    assert (a.coordinates, a.rows, a.programmed_rows, a.rank) == (7, 7, 2, 7)
    assert a.mechanism_mobility == a.programmed_rows == 2 and a.mobility == 0 and a.redundancy == 0
    robot, system, q0, _ = starts["flexible-flexible-friction"]
    a = analyse_constraints(system, q0, 0.0, reactions=False)
    assert a.mechanism_mobility - len(robot.elastic_names) == 2 and a.mobility == len(robot.elastic_names) == 18


def test_initial_state_is_a_static_equilibrium(starts, rpsup):
    """At the start all accelerations vanish (drives holding E at A with their static force); balancing only the
    elastic coordinates with the others held leaves the coupler far from equilibrium in the loop."""
    for name, (robot, system, q0, dq0) in starts.items():
        state = system.evaluate(0.0, q0, dq0, system.initial_state())
        assert np.abs(state.ddq).max() < 1e-3, name
    robot = load_variant(rpsup, Variant("rigid", "flexible", "none"))
    system, q0, dq0 = _start(robot, equilibrium=True)
    assert np.abs(system.evaluate(0.0, q0, dq0, system.initial_state()).ddq).max() > 1.0


def test_drive_forces_at_rest_are_the_potential_energy_gradient(starts):
    """Virtual work: the programmed multipliers at rest equal -dV/de, V the potential energy of the assembled
    mechanism with E at e (central differences, each side assembled anew)."""
    robot, system, q0, dq0 = starts["rigid-rigid-frictionless"]
    lam = system.evaluate(0.0, q0, dq0, system.initial_state()).lam[-2:]
    loop = next(c for c in system.constraints if isinstance(c, LoopClosure))
    e0 = np.array([0.179821, -0.04])
    data = robot.create_data()

    def energy(e):
        target = ExpressionTarget([repr(float(e[0])), repr(float(e[1]))])
        held = ConstrainedDynamics(robot, [loop, FramePosition(robot, "E", "E", ["x", "z"], target)])
        q, _ = held.assemble(0.0, q0, dq0)
        return pin.computePotentialEnergy(robot.model, data, robot.configuration(q))

    h = 1e-5
    grad = [(energy(e0 + h * d) - energy(e0 - h * d)) / (2 * h) for d in np.eye(2)]
    assert np.allclose(lam, -np.array(grad), rtol=1e-6, atol=1e-8)


def test_short_run_keeps_loop_and_program(rigid_run):
    """0.2 s of the rigid run: loop and programmed rows stay below 1e-10 m; E follows the rectangle's first edge."""
    assert rigid_run.violation().max() < 1e-10
    e = rigid_run.target[:, -2:] + rigid_run.phi[:, -2:]
    assert e[-1, 0] > e[0, 0] + 1e-3 and np.allclose(e[:, 1], -0.04, atol=1e-10)


def test_energy_balance_of_the_rigid_mechanism(rigid_run, starts):
    """Without friction or springs, T + V changes by the work of the drives (the programmed-constraint force):
    the loop's reactions do no work."""
    robot = starts["rigid-rigid-frictionless"][0]
    data = robot.create_data()
    r = rigid_run
    E = np.array(
        [
            pin.computeKineticEnergy(robot.model, data, robot.configuration(q), dq) + pin.computePotentialEnergy(robot.model, data, robot.configuration(q))
            for q, dq in zip(r.q, r.dq)
        ]
    )
    power = np.einsum("ij,ij->i", r.tau_programmed, r.dq)
    work = np.concatenate([[0.0], np.cumsum(0.5 * (power[1:] + power[:-1]) * np.diff(r.t))])
    assert np.abs(E[-1] - E[0]) > 1e-3
    assert np.abs((E - E[0]) - work).max() < 1e-5 * np.abs(E - E[0]).max()


def test_stiff_coupler_follows_the_rigid_one(rpsup):
    """The flexible coupler with E and G times 1e4: at rest its sag from the chord, and the departure of the
    mechanism's coordinates from the rigid coupler's, are 1e-4 of the real coupler's (linear elasticity), the
    drive forces the rigid coupler's; over 0.2 s (ROS2, 1 ms) it moves as the rigid one to the integrator's error (which halves with
    the step)."""
    spec = read_robot_spec(rpsup)

    def scaled(k):
        return dataclasses.replace(spec, flexible=tuple(dataclasses.replace(f, E=f.E * k, G=f.G * k) for f in spec.flexible))

    robots = {
        "rigid": build_robot(spec, rigid_base=True, rigid_links=True),
        "real": build_robot(spec, rigid_base=True),
        "stiff": build_robot(scaled(1e4), rigid_base=True),
    }
    out = {}
    for name, robot in robots.items():
        robot = robot.with_friction({j.name: None for j in robot.joints})
        system, q0, dq0 = _start(robot)
        idx = [robot.joint(n).idx_v for n in RIGID]
        drives = system.evaluate(0.0, q0, dq0, system.initial_state()).programmed_force[idx[:2]]
        sag = chord_deflection(robot, "coupler", q0).peak[0] if robot.rfe_links else 0.0
        run = simulate(system, q0, dq0, 0.2, integrator="ros2", step=1e-3, backend="python") if name != "real" else None
        out[name] = (q0[idx], drives, sag, run and run.q[:, idx], run and run.tau_programmed[:, idx[:2]])
    assert out["stiff"][2] == pytest.approx(1e-4 * out["real"][2], rel=1e-3) and out["real"][2] > 1e-6
    real, stiff = (np.abs(out[n][0] - out["rigid"][0]).max() for n in ("real", "stiff"))
    assert stiff < 2e-4 * real and real > 1e-6  # the S's angles take up the coupler's end slopes
    # the URDF's coupler inertia is rounded to 6 digits; the RFE masses come from the section exactly
    assert np.allclose(out["stiff"][1], out["rigid"][1], rtol=1e-6)
    assert np.abs(out["stiff"][3] - out["rigid"][3]).max() < 1e-5
    assert np.abs(out["stiff"][4] - out["rigid"][4]).max() < 5e-3 * np.abs(out["rigid"][4]).max()


def test_chord_deflection_of_one_bent_element(starts):
    """Bending sde 2 (at 0.15 m) by 0.01 rad: points beyond it leave the chord through the ends as the hand
    calculation says, and the computed tip is the coupler_tip frame."""
    robot = starts["rigid-flexible-frictionless"][0]
    q = np.zeros(robot.nv)
    q[robot.joint("coupler_sde2_bend_z").idx_v] = 0.01
    d = chord_deflection(robot, "coupler", q)
    assert np.allclose(d.s, [0.0, 0.05, 0.15, 0.25, 0.35, 0.4])
    # small angle: offset 0.01*(s - 0.15) beyond sde 2; the chord's offset 0.01*0.25*s/0.4
    offset = 0.01 * np.maximum(d.s - 0.15, 0.0)
    expected = np.abs(offset - offset[-1] * d.s / 0.4)
    assert np.allclose(d.w[0], expected, atol=2e-7)
    data = robot.create_data()
    pin.framesForwardKinematics(robot.model, data, robot.configuration(q))
    tip = data.oMf[robot.model.getFrameId("coupler_tip")].translation
    chord = data.oMf[robot.model.getFrameId("coupler")].translation
    assert np.linalg.norm(tip - chord) == pytest.approx(np.hypot(0.15 + 0.25 * np.cos(0.01), 0.25 * np.sin(0.01)), abs=1e-12)


def test_simulate_prints_the_mobility_before_integrating(cli, rpsup, tmp_path):
    """mbctl simulate rpsup: rows, rank, redundancy and mobility come before the run's report."""
    res = cli("simulate", rpsup, "--duration", "0.0005", "--backend", "python", "--out", tmp_path / "run.npz")
    assert res.code == 0, res.err
    analysis = res.out.index("7 constraint rows (5 material, 2 programmed), rank 7, redundancy 0")
    assert "mobility (coordinates - rank of the material rows): 20 (18 elastic, 2 of the rigid mechanism)" in res.out
    assert analysis < res.out.index("s simulated")


@pytest.mark.parametrize(
    ("value", "extra", "reason"),
    [('"yes"', "assemble = true", 'must be true, false or "constrained"'), ('"constrained"', "assemble = false", "set assemble = true")],
)
def test_bad_equilibrium_is_a_located_error(tmp_path, configs, value, extra, reason):
    """simulation.initial.equilibrium takes true, false or "constrained" (which needs an assembled start)."""
    text = (configs / "rpsup.toml").read_text().replace('urdf = "rpsup.urdf"', f'urdf = "{configs / "rpsup.urdf"}"')
    text = text.replace('assemble = true, equilibrium = "constrained"', f"{extra}, equilibrium = {value}")
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as exc:
        load_robot(path)
    assert "simulation.initial.equilibrium" in str(exc.value) and reason in str(exc.value)


def test_constrained_equilibrium_without_constraints_is_the_held_equilibrium(configs):
    """With no constraint rows and the drives held, the constrained statics (Newton on the force balance with
    multipliers) lands where the modal module's held-joint equilibrium does (olkc5's base and arm)."""
    from mbctl.dynamics.flexible.elastic import ElasticForces
    from mbctl.dynamics.flexible.modal import static_equilibrium

    robot = load_robot(configs / "olkc5.toml")
    q = np.zeros(robot.nv)
    q[[robot.joint(n).idx_v for n in ("j2", "j3")]] = (-0.3, 0.75)
    system = ConstrainedDynamics(robot, [], forces=[ElasticForces(robot)])
    ours = system.equilibrate(0.0, q, keep=robot.actuated_names)
    theirs = static_equilibrium(robot, q)
    assert np.abs(ours - q).max() > 1e-4  # the base and the arm did sag
    assert np.allclose(ours, theirs, atol=1e-10)
