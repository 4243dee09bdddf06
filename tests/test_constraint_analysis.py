"""Constraint analysis (rows, ranks, redundancy, mobility, unique reactions) and ``mbctl constraints``."""

from __future__ import annotations

import json

import pytest

from mbctl.dynamics.constraints.analysis import analyse_constraints
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup


def analysis(configs, name):
    robot = load_robot(configs / f"{name}.toml")
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, _ = initial_state(robot, setup, system)
    return analyse_constraints(system, q0), robot


def test_fourbar_has_two_independent_rows_and_one_dof(configs):
    """Planar four-bar, Grübler 3*3 - 2*4 = 1: a planar cut pin gives 2 rows of rank 2 on 3 coordinates."""
    a, _ = analysis(configs, "fourbar")
    assert (a.rows, a.holonomic_rank, a.velocity_rows, a.rank, a.redundancy, a.mobility) == (2, 2, 0, 2, 0, 1)
    assert not a.not_unique and not a.dependent_rows


def test_parallelogram_redundancy_and_reactions_match_the_hand_analysis(configs):
    """Redundant third crank: 6 rows of rank 5 (p = 1, mobility 1); the axial self-stress of the three
    parallel cranks loads crank and coupler pins only, not the rod-slider dyad."""
    a, _ = analysis(configs, "parallelogram")
    assert (a.rows, a.rank, a.redundancy, a.mobility) == (6, 5, 1, 1)
    assert len(a.dependent_rows) == 1
    assert set(a.not_unique) == {"crank_a_joint", "coupler_joint", "crank_b_joint", "crank_c_joint", "loop_b", "loop_c"}
    assert {"rod_joint", "slider_joint", "loop_e"} <= set(a.unique)


def test_programmed_rows_count_against_mobility_but_not_the_mechanisms(configs):
    """SCARA: four programmed rows fix its 4 DOF (mobility 0), the bare arm keeps all 4."""
    a, _ = analysis(configs, "scara")
    assert (a.rank, a.mobility, a.mechanism_mobility) == (4, 0, 4)
    assert all(e.programmed for e in a.constraints)


def test_a_dependent_velocity_row_is_found_among_holonomic_ones(configs):
    """Mobile robot: rank 20 < 17 + 4, so a knife-edge row depends on the pins' rows as well as W3 = W4."""
    a, _ = analysis(configs, "mobile")
    assert a.rank < a.holonomic_rank + a.velocity_rank
    assert a.redundancy == a.rows - a.rank == 2
    assert {e.name: e.rank for e in a.constraints}["H"] == 2


def test_entries_cover_every_row_and_joint(configs):
    """Three-loop chain, counted by hand: three planar pins (2 in-plane rows each, rank 2) and the
    crank drive (1 row) make 7 rows; 7 tree joints; Gruebler 3*7 - 2*10 = 1 DOF, taken by the drive."""
    a, robot = analysis(configs, "threeloop")
    assert [(e.name, len(e.rows), e.rank) for e in a.constraints] == [("cut_2p_crank", 2, 2), ("cut_4s_2p", 2, 2), ("cut_4s_3s", 2, 2), ("drive", 1, 1)]
    assert a.rows == 7 and a.mechanism_mobility == 1 and a.mobility == 0
    assert [e.name for e in a.joints] == list(robot.joint_names) and len(a.joints) == 7


def test_cli_prints_and_writes_the_analysis(cli, tmp_path):
    """`mbctl constraints mobile --json` prints the ranks and writes the same numbers as JSON."""
    out = tmp_path / "mobile.json"
    r = cli("constraints", "mobile", "--json", out)
    assert r.code == 0, r.err
    assert "rank 20" in r.out and "redundancy 2" in r.out and "mobility 1" in r.out
    data = json.loads(out.read_text())
    assert (data["rank"], data["redundancy"], data["holonomic_rank"], data["velocity_rank"]) == (20, 2, 17, 4)
    assert {c["name"] for c in data["constraints"] if not c["unique"]} == {"B", "C", "W1", "W2", "W3", "W4"}


def test_cli_lists_joints_on_request(cli):
    r = cli("constraints", "parallelogram", "--joints")
    assert r.code == 0, r.err
    assert "crank_b_joint" in r.out and "NOT unique" in r.out


@pytest.mark.parametrize(("args", "field"), [(("--rtol", "2"), "--rtol"), (("--json", "out.txt"), "out.txt")])
def test_cli_refuses_bad_options(cli, tmp_path, args, field):
    """A bad tolerance or output suffix: one-line error naming it, exit 2, nothing written."""
    r = cli("constraints", "fourbar", *(a if a != "out.txt" else tmp_path / a for a in args))
    assert r.code == 2 and field in r.err and len(r.err.strip().splitlines()) == 1
    assert not (tmp_path / "out.txt").exists()


def test_analysis_holds_off_the_initial_state(configs):
    """A configuration in the middle of the three-loop chain's motion: still full rank, no redundancy."""
    robot = load_robot(configs / "threeloop.toml")
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    q0[robot.joint("crank_joint").idx_v] = -1.0
    q, _ = system.assemble(10.0, q0, dq0, keep=["crank_joint"])
    a = analyse_constraints(system, q, t=10.0)
    assert (a.rank, a.redundancy, a.mobility) == (7, 0, 0)
