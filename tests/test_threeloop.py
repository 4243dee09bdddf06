"""The three-loop planar closed chain (configs/threeloop.*): closure, reactions, drive torque, friction."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pinocchio as pin
import pytest

from mbctl.cli.commands.feedforward import override_friction
from mbctl.dynamics.constraints.analysis import analyse_constraints
from mbctl.dynamics.constraints.reactions import joint_reactions
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup

OMEGA = -0.1  # rad/s, the crank speed threeloop.toml drives


def threeloop(configs, friction="config", path=None, **setup_changes):
    robot = override_friction(load_robot(path or configs / "threeloop.toml"), friction)
    setup = dataclasses.replace(simulation_setup(robot), **setup_changes)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    return robot, setup, system, q0, dq0


def run(configs, friction="config", duration=0.6, output_step=0.02):
    robot, setup, system, q0, dq0 = threeloop(configs, friction)
    result = simulate(system, q0, dq0, duration, step=setup.step, output_step=output_step, backend="python")
    return robot, system, result


def on_chain(system, theta: float, q_guess: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The assembled state at crank angle ``theta`` moving at OMEGA (time theta/OMEGA on the drive)."""
    crank = system.robot.joint("crank_joint").idx_v
    q = q_guess.copy()
    q[crank] = theta
    dq = np.zeros(system.robot.nv)
    dq[crank] = OMEGA
    return system.assemble(theta / OMEGA, q, dq, keep=["crank_joint"])


def test_mechanism_has_one_degree_of_freedom_and_a_unique_drive(configs):
    """Grübler 3*7 - 2*10 = 1: six independent loop rows on seven joints, the drive removes the last DOF."""
    _, _, system, q0, _ = threeloop(configs)
    a = analyse_constraints(system, q0)
    assert (a.rows, a.rank, a.redundancy, a.mobility, a.mechanism_mobility) == (7, 7, 0, 0, 1)
    assert not a.not_unique


def test_loops_close_to_round_off_along_the_motion(configs):
    """Every cut joint stays closed (|Phi| at round-off) and the crank follows 0.1 rad/s."""
    _, _, result = run(configs, "none")
    assert np.nanmax(np.abs(result.phi)) < 1e-11
    crank = result.joint_names.index("crank_joint")
    assert result.q[:, crank] == pytest.approx(OMEGA * result.t, abs=1e-12)
    assert result.dq[:, crank] == pytest.approx(np.full(len(result.t), OMEGA), abs=1e-12)


def test_singular_configurations_bound_the_chosen_motion(configs):
    """The passive joints' loop Jacobian loses rank between the run's end (-115 deg) and -147.5 deg, not before."""
    robot, setup, system, q0, _ = threeloop(configs)
    passive = [j.idx_v for j in robot.joints if j.name != "crank_joint"]
    crank = robot.joint("crank_joint").idx_v
    ratios = []
    q = q0
    for deg in np.arange(0.0, -146.0, -5.0):
        q, dq = on_chain(system, np.radians(deg), q)
        A = system.constraints.evaluate(system.kinematics(q, dq), np.radians(deg) / OMEGA).jac[:6][:, passive]
        s = np.linalg.svd(A, compute_uv=False)
        ratios.append(s[-1] / s[0])
    end = np.radians(-115.0)
    assert q0[crank] == 0.0 and setup.duration * OMEGA == pytest.approx(-2.0)
    assert min(ratios[: int(round(np.degrees(-end) / 5)) + 1]) > 0.06  # well conditioned along the run
    assert ratios[-1] < 0.02  # near -145 deg the chain locks


def test_static_drive_torque_is_the_gradient_of_the_potential(configs):
    """At rest, frictionless: the drive torque equals dV/dtheta, V the gravity potential along the chain."""
    robot, _, system, q0, _ = threeloop(configs, "none", baumgarte=None)
    model, data = robot.model, robot.model.createData()

    def potential(theta: float) -> float:
        q, _ = on_chain(system, theta, q0)
        return pin.computePotentialEnergy(model, data, system.configuration(q))

    h = 1e-5
    dV = (potential(h) - potential(-h)) / (2 * h)
    crank = robot.joint("crank_joint").idx_v
    system.initialize(0.0, q0, np.zeros(robot.nv))
    state = system.evaluate(0.0, q0, np.zeros(robot.nv))
    assert np.abs(state.ddq).max() < 1e-12
    assert state.programmed_force[crank] == pytest.approx(dV, rel=1e-7)
    # moving at 0.1 rad/s the velocity-product terms add only O(omega^2) to it
    _, _, result = run(configs, "none", duration=0.02, output_step=0.02)
    assert result.tau_programmed[0, crank] == pytest.approx(dV, rel=1e-3)


def test_drive_power_balances_the_energy_rate(configs):
    """Frictionless: tau*omega = d(E_kin + V)/dt (energy from pinocchio, differentiated numerically)."""
    robot, system, result = run(configs, "none", duration=1.0, output_step=0.01)
    model, data = robot.model, robot.model.createData()
    energy = []
    for q, dq in zip(result.q, result.dq):
        qp = system.configuration(q)
        energy.append(pin.computeKineticEnergy(model, data, qp, dq) + pin.computePotentialEnergy(model, data, qp))
    energy = np.array(energy)
    rate = (energy[2:] - energy[:-2]) / (result.t[2:] - result.t[:-2])
    crank = result.joint_names.index("crank_joint")
    power = result.tau_programmed[1:-1, crank] * result.dq[1:-1, crank]
    assert np.abs(power).min() > 1e-3  # the drive does work throughout
    assert rate == pytest.approx(power, rel=1e-6, abs=1e-8)


def _crank_on_a_pinned_carriage(configs, tmp_path):
    """The same chain with the crank's ground joint cut as well: the crank turns on an x-y
    carriage, pinned at O1'' by a planar revolute loop constraint, whose multipliers are the
    crank bearing's force."""
    urdf = (configs / "threeloop.urdf").read_text()
    crank = re.search(r'  <joint name="crank_joint".*?</joint>\n', urdf, re.S).group(0)
    carriage = (
        '  <joint name="carriage_x" type="prismatic"><parent link="ground"/><child link="carriage_a"/>'
        '<origin xyz="-0.10 0 0"/><axis xyz="1 0 0"/><limit lower="-1" upper="1" effort="100" velocity="1"/></joint>\n'
        '  <link name="carriage_a"/>\n'
        '  <joint name="carriage_y" type="prismatic"><parent link="carriage_a"/><child link="carriage_b"/>'
        '<origin xyz="0 0 0"/><axis xyz="0 1 0"/><limit lower="-1" upper="1" effort="100" velocity="1"/></joint>\n'
        '  <link name="carriage_b"/>\n'
        + crank.replace('<parent link="ground"/>', '<parent link="carriage_b"/>').replace('xyz="-0.1 0.0 0"', 'xyz="0 0 0"')
        + '  <joint name="pivot_ground_joint" type="fixed"><parent link="ground"/><child link="pivot_ground"/>'
        '<origin xyz="-0.10 0 0"/></joint>\n  <link name="pivot_ground"/>\n'
        '  <joint name="pivot_crank_joint" type="fixed"><parent link="crank"/><child link="pivot_crank"/>'
        '<origin xyz="0 0 0"/></joint>\n  <link name="pivot_crank"/>\n'
    )
    (tmp_path / "threeloop.urdf").write_text(urdf.replace(crank, carriage))
    toml = (configs / "threeloop.toml").read_text()
    toml += '\n[joints.carriage_x]\nactuated = false\n[joints.carriage_y]\nactuated = false\n'
    toml = toml.replace(
        "[simulation]",
        '[[constraints]]\nname = "pivot"\nkind = "loop"\nframes = ["pivot_ground", "pivot_crank"]\njoint = "revolute"\nplane = "xy"\n\n[simulation]',
    )
    (tmp_path / "threeloop.toml").write_text(toml)
    return tmp_path / "threeloop.toml"


def test_crank_reaction_equals_the_multiplier_of_a_cut_crank_bearing(configs, tmp_path):
    """Crank bearing force from RNEA with the loop forces = the Lagrange multipliers of the
    same chain with the crank's ground joint cut too (a different spanning tree)."""
    robot, _, system, q0, _ = threeloop(configs, "none")
    alt = _crank_on_a_pinned_carriage(configs, tmp_path)
    robot2, _, system2, q20, _ = threeloop(configs, "none", path=alt)
    k = robot.joint_names.index("crank_joint")
    for theta in (0.0, -0.6, -1.5):
        q, dq = on_chain(system, theta, q0)
        q2 = np.zeros(robot2.nv)
        dq2 = np.zeros(robot2.nv)
        for j in robot.joints:
            q2[robot2.joint(j.name).idx_v] = q[j.idx_v]
            dq2[robot2.joint(j.name).idx_v] = dq[j.idx_v]
        t = theta / OMEGA
        system.initialize(t, q, dq)
        system2.initialize(t, q2, dq2)
        s1 = system.evaluate(t, q, dq)
        s2 = system2.evaluate(t, q2, dq2)
        r1 = joint_reactions(system, [t], q[None], dq[None], s1.ddq[None], s1.lam[None])
        r2 = joint_reactions(system2, [t], q2[None], dq2[None], s2.ddq[None], s2.lam[None])
        bearing = r1.joint_wrench[0, k, :2]  # ground on crank, crank axes
        cut = r2.loop_wrench[0, r2.loop_names.index("pivot"), :2]  # ground side on the crank, crank axes
        assert np.linalg.norm(bearing) > 10.0
        assert bearing == pytest.approx(cut, rel=1e-9, abs=1e-9)


@pytest.mark.parametrize("law", ["coulomb-viscous", "stribeck"])
def test_friction_torque_follows_the_crank_load(configs, law):
    """Crank friction = law(v) times the normal load rp*|f_r| of the crank's reaction (RNEA afterwards)."""
    robot, system, result = run(configs, law, duration=0.3, output_step=0.05)
    j = robot.joint("crank_joint")
    f = j.friction
    r = joint_reactions(system, result.t, result.q, result.dq, result.ddq, result.lam)
    k = r.joint_names.index("crank_joint")
    load = f.load.rp * np.linalg.norm(r.joint_wrench[:, k, :3] - np.outer(r.joint_wrench[:, k, 2], [0, 0, 1]), axis=1)
    v = result.dq[:, j.idx_v]
    eps = simulation_setup(robot).friction_smoothing
    p = f.law
    dry = p.fc if law == "coulomb-viscous" else p.fc + (p.fs - p.fc) * np.exp(-np.abs(v / p.vs) ** p.delta)
    expected = -(dry * load * np.tanh(v / eps) + p.fv * v)
    assert load.min() > 0.3  # N*m: tens of newtons on a 10 mm pin
    assert result.tau_applied[:, j.idx_v] == pytest.approx(expected, rel=1e-9)


def test_friction_adds_to_the_drive_torque_by_its_own_amount(configs):
    """Drive torque with Stribeck friction minus without = minus the friction torque (the motion is prescribed)."""
    _, _, plain = run(configs, "none", duration=0.2, output_step=0.05)
    robot, _, rough = run(configs, "config", duration=0.2, output_step=0.05)
    c = robot.joint("crank_joint").idx_v
    assert np.abs(rough.tau_applied[:, c]).min() > 0.01
    assert rough.tau_programmed[:, c] - plain.tau_programmed[:, c] == pytest.approx(-rough.tau_applied[:, c], rel=1e-6, abs=1e-9)


def test_cli_runs_the_friction_cases_and_compares_their_drive_torques(cli, tmp_path):
    """simulate --friction none / default with --plot-reactions, then mbctl plot of both runs: the
    stored drive torques differ by the stored friction torque."""
    none, rough = tmp_path / "none.npz", tmp_path / "rough.npz"
    r = cli("simulate", "threeloop", "--friction", "none", "--duration", "0.05", "--out", none, "--plot-reactions", tmp_path / "n.png")
    assert r.code == 0, r.err
    r = cli("simulate", "threeloop", "--duration", "0.05", "--out", rough)
    assert r.code == 0, r.err
    with np.load(none) as a, np.load(rough) as b:
        assert "loop_wrench" in a.files  # --plot-reactions implies --reactions
        c = list(a["joint_names"]).index("crank_joint")
        assert b["tau_programmed"][:, c] - a["tau_programmed"][:, c] == pytest.approx(-b["tau_applied"][:, c], rel=1e-6)
    r = cli("plot", none, rough, "--labels", "none,stribeck", "--out", tmp_path / "drive.png")
    assert r.code == 0, r.err
    assert (tmp_path / "n.png").stat().st_size > 0 and (tmp_path / "drive.png").stat().st_size > 0


def test_plot_refuses_a_run_without_a_drive(cli, tmp_path):
    """A free-swinging four-bar run has no programmed force to plot: one-line error naming the file, exit 2."""
    run = tmp_path / "fourbar.npz"
    assert cli("simulate", "fourbar", "--duration", "0.01", "--out", run).code == 0
    r = cli("plot", run, "--out", tmp_path / "x.png")
    assert r.code == 2 and "fourbar.npz" in r.err and "drive" in r.err
    assert not (tmp_path / "x.png").exists()
