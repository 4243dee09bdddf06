"""The four-wheel mobile robot with a trolley (configs/mobile.*): redundant knife edges, unique and non-unique reactions."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.constraints.analysis import analyse_constraints
from mbctl.dynamics.constraints.reactions import joint_reactions
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup

# the reaction-solvability study's result for this robot
UNIQUE = {"A", "D", "E", "F", "G", "H", "drive", "W5"}
NOT_UNIQUE = {"B", "C", "W1", "W2", "W3", "W4"}
LOOPS = ("A", "B", "C", "D", "E", "F", "G", "H", "drive")
EDGES = ("W1", "W2", "W3", "W4", "W5")
T0 = 3.0  # s: inside the right turn, where every force is at work


@pytest.fixture(scope="module")
def mobile(configs):
    robot = load_robot(configs / "mobile.toml")
    return robot, simulation_setup(robot)


def system_at_turn(robot, setup, **overrides):
    """Dynamics (eliminating as asked) and a consistent state at T0: the initial configuration
    assembled onto d(T0), velocities corrected to every row (minimum-norm)."""
    system = build_dynamics(robot, setup, **overrides)
    q0, dq0 = initial_state(robot, setup, system)
    q, dq = system.assemble(T0, q0, dq0)
    system.initialize(T0, q, dq)
    return system, q, dq


def test_rows_ranks_and_redundancy_match_the_source(mobile):
    """n = 21; 17 holonomic rows of rank 17, 5 knife-edge rows of rank 4, rank 20, redundancy 2, mobility 1."""
    robot, setup = mobile
    system = build_dynamics(robot, setup)
    q0, _ = initial_state(robot, setup, system)
    a = analyse_constraints(system, q0)
    assert (a.coordinates, a.holonomic_rows, a.holonomic_rank, a.velocity_rows, a.velocity_rank) == (21, 17, 17, 5, 4)
    assert (a.rank, a.redundancy, a.mobility) == (20, 2, 1)
    assert set(a.not_unique) == NOT_UNIQUE
    assert UNIQUE <= set(a.unique)


def test_w3_and_w4_repeat_one_row(mobile):
    """W3 and W4 sit on the platform's y axis with normals along it: the same Pfaffian row."""
    robot, setup = mobile
    system, q, _ = system_at_turn(robot, setup)
    cv = system.constraints.evaluate(system.kinematics(q, np.zeros(robot.nv)), T0)
    rows = system.constraints.rows
    assert cv.jac[rows.index("W3.vy")] == pytest.approx(cv.jac[rows.index("W4.vy")], abs=1e-15)


def _reactions(system, q, dq):
    state = system.evaluate(T0, q, dq)
    r = joint_reactions(system, [T0], q[None], dq[None], state.ddq[None], state.lam[None])
    loops = {name: r.loop_wrench[0, i, :3] for i, name in enumerate(r.loop_names)}
    edges = {name: state.lam[system.constraints.slices[name]] for name in EDGES}
    return state, loops, edges


@pytest.mark.parametrize("eliminate", [("W4.vy", "W2.vy"), ("W4.vy", "W1.vy"), ("W3.vy", "B.x")])
def test_eliminating_other_rows_changes_only_the_non_unique_reactions(mobile, eliminate):
    """Against the default elimination (W3, W4): the same accelerations and unique reactions, other non-unique ones."""
    robot, setup = mobile
    base, q, dq = system_at_turn(robot, setup)
    other, _, _ = system_at_turn(robot, setup, eliminate=list(eliminate))
    s1, loops1, edges1 = _reactions(base, q, dq)
    s2, loops2, edges2 = _reactions(other, q, dq)
    assert s1.ddq == pytest.approx(s2.ddq, abs=1e-10)
    scale = max(np.abs(v).max() for v in loops1.values())
    assert scale > 0.01  # N: the turn loads the linkage
    for name in UNIQUE:
        a, b = (loops1[name], loops2[name]) if name in loops1 else (edges1[name], edges2[name])
        assert a == pytest.approx(b, abs=1e-8 * scale), name
    differ = [n for n in NOT_UNIQUE if not np.allclose(*((loops1[n], loops2[n]) if n in loops1 else (edges1[n], edges2[n])), atol=1e-6 * scale)]
    assert len(differ) >= 3 and {"B", "C"} & set(differ)  # the load shifts among pins B, C and the edges W1-W4


def test_minimum_norm_multipliers_agree_on_the_unique_reactions(mobile):
    """Udwadia–Kalaba's minimum-norm multipliers (no row dropped) give the Lagrange solution's unique reactions."""
    robot, setup = mobile
    base, q, dq = system_at_turn(robot, setup)
    uk, _, _ = system_at_turn(robot, setup, solver="udwadia-kalaba")
    s1, loops1, edges1 = _reactions(base, q, dq)
    s2, loops2, edges2 = _reactions(uk, q, dq)
    assert s1.ddq == pytest.approx(s2.ddq, abs=1e-10)
    for name in UNIQUE:
        a, b = (loops1[name], loops2[name]) if name in loops1 else (edges1[name], edges2[name])
        assert a == pytest.approx(b, abs=1e-9), name
    assert edges2["W3"] == pytest.approx(edges2["W4"])  # minimum norm shares the repeated row equally


def test_body_wrenches_of_all_constraints_reproduce_the_motion(mobile):
    """RNEA with the pins', the drive's and the knife edges' body wrenches as external forces leaves no
    generalized force on any of the 21 free-body coordinates (nothing else acts in the plane)."""
    robot, setup = mobile
    system, q, dq = system_at_turn(robot, setup)
    state = system.evaluate(T0, q, dq)
    fext, _ = system.constraints.loop_forces(system.kinematics(q, dq), state.lam)
    tau = pin.rnea(robot.model, robot.model.createData(), system.configuration(q), dq, state.ddq, pin.StdVec_Force(fext))
    assert np.abs(state.ddq).max() > 1e-3
    assert np.abs(tau).max() < 1e-12


def test_short_manoeuvre_keeps_every_constraint(mobile):
    """0.6 s of the right turn (RK4, 5 ms): pins closed, knife edges not sliding, the stroke on d(t)."""
    robot, setup = mobile
    system, q, dq = system_at_turn(robot, setup)
    result = simulate(system, q, dq, 0.6, t0=T0, step=5e-3, output_step=0.1, backend="python")
    level = system.constraints.level
    assert np.abs(result.phi[:, level == 2]).max() < 1e-9
    assert np.abs(result.dphi[:, level == 1]).max() < 1e-9
    heading = result.q[:, robot.joint("platform_phi").idx_v]
    assert np.all(np.diff(heading) < 0)  # turning right (clockwise)
    speed = np.hypot(result.dq[:, robot.joint("platform_x").idx_v], result.dq[:, robot.joint("platform_y").idx_v])
    assert speed.min() > 0.05 and np.ptp(speed) < 0.05 * speed[0]  # rolling on, the drive's work changes it little


def test_kinetic_energy_changes_by_the_drive_work_only(mobile):
    """Pins and knife edges do no work: dE_kin/dt = drive force times stroke rate (dot d * lambda_drive, sign of Q_c = -A^T lambda)."""
    robot, setup = mobile
    system, q, dq = system_at_turn(robot, setup)
    state = system.evaluate(T0, q, dq)
    model = robot.model
    data = model.createData()
    qp = system.configuration(q)
    pin.crba(model, data, qp)
    M = np.triu(data.M) + np.triu(data.M, 1).T
    power = dq @ (M @ state.ddq + pin.nonLinearEffects(model, data, qp, dq) - pin.computeGeneralizedGravity(model, data, qp))
    rows = system.constraints.rows
    A = system.constraints.evaluate(system.kinematics(q, dq), T0).jac
    drive = rows.index("drive.y")
    assert abs(power) > 1e-5
    assert power == pytest.approx(-(A[drive] @ dq) * state.lam[drive], rel=1e-6)



def test_runs_with_different_eliminations_share_motion_and_unique_reactions(mobile):
    """End to end: 0.4 s of the turn with W3, W4 dropped and with W4, W1 dropped: the same motion and
    unique reactions along the run; pin B's reaction differs."""
    robot, setup = mobile
    runs = []
    for eliminate in (None, ["W4.vy", "W1.vy"]):
        system, q, dq = system_at_turn(robot, setup, **({"eliminate": eliminate} if eliminate else {}))
        result = simulate(system, q, dq, 0.4, t0=T0, step=5e-3, output_step=0.1, backend="python")
        r = joint_reactions(system, result.t, result.q, result.dq, result.ddq, result.lam)
        runs.append((result, r))
    (a, ra), (b, rb) = runs
    assert a.q == pytest.approx(b.q, abs=1e-10)
    for name in ("A", "D", "E", "F", "G", "H", "drive"):
        i = ra.loop_names.index(name)
        assert ra.loop_wrench[:, i] == pytest.approx(rb.loop_wrench[:, i], abs=1e-9), name
    w5 = a.row_names.index("W5.vy")
    assert a.lam[:, w5] == pytest.approx(b.lam[:, w5], abs=1e-9)
    i = ra.loop_names.index("B")
    assert np.abs(ra.loop_wrench[:, i] - rb.loop_wrench[:, i]).max() > 1e-4
