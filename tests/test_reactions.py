"""Reactions under constraints and the reaction-solvability analysis of redundant constraints."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.constraints.reactions import (
    joint_reactions,
    pair_matrix,
    reaction_solvability,
)
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)

# hand analysis of configs/parallelogram.toml: the redundant third crank admits an axial
# self-stress in the three parallel cranks (T_a + T_b + T_c = 0, sum T_i x_i = 0), which
# loads the crank pins and the coupler pins but nothing in the rod-slider dyad
NOT_UNIQUE = {"crank_a_joint", "coupler_joint", "crank_b_joint", "crank_c_joint", "loop_b", "loop_c"}
UNIQUE = {"rod_joint", "slider_joint", "loop_e"}


def test_solvability_of_a_hand_made_matrix():
    """Pairs X and Y repeat one row (p = 1): their reactions are not unique, Z's is."""
    C = np.array([[1.0, 2.0, 0.0], [1.0, 2.0, 0.0], [0.0, 0.0, 3.0], [0.0, 1.0, 1.0]])
    s = reaction_solvability(C, {"X": [0], "Y": [1], "Z": [2, 3]})
    assert (s.rank, s.redundancy) == (3, 1)
    assert s.unique == {"X": False, "Y": False, "Z": True}
    assert s.B["X"].shape == (3, 1) and np.abs(s.B["Z"]).max() < 1e-12
    # the null combination (1, -1) of rows X and Y: B_X = -B_Y
    assert s.B["X"] == pytest.approx(-s.B["Y"])


def test_independent_rows_have_unique_reactions():
    rng = np.random.default_rng(0)
    s = reaction_solvability(rng.normal(size=(3, 5)), {"a": [0], "b": [1, 2]})
    assert (s.rank, s.redundancy) == (3, 0) and all(s.unique.values())


def test_rank_tolerance_is_a_parameter():
    """Rows that differ by 1e-7 count as independent at rtol = 1e-9 and as dependent at 1e-5."""
    C = np.array([[1.0, 0.0], [1.0, 1e-7]])
    assert reaction_solvability(C, {"a": [0]}, rtol=1e-9).redundancy == 0
    assert reaction_solvability(C, {"a": [0]}, rtol=1e-5).redundancy == 1


def test_bad_groups_are_refused():
    with pytest.raises(ValueError, match="outside"):
        reaction_solvability(np.eye(2), {"a": [2]})


def parallelogram(configs, **overrides):
    robot = load_robot(configs / "parallelogram.toml")
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup, **overrides)
    q0, dq0 = initial_state(robot, setup, dyn)
    return robot, dyn, q0, dq0


def test_overconstrained_mechanism_flags_the_right_pairs(configs):
    """Parallelogram with a redundant crank plus a dyad: rank 5 of 6, p = 1; the self-stress pairs are flagged."""
    _, dyn, q0, dq0 = parallelogram(configs)
    dyn.initialize(0.0, q0, dq0)
    assert (dyn.rank, dyn.redundancy) == (5, 1)
    C, groups = pair_matrix(dyn, 0.0, q0)
    s = reaction_solvability(C, groups)
    assert s.redundancy == 1
    assert {k for k, v in s.unique.items() if not v} == NOT_UNIQUE
    assert {k for k, v in s.unique.items() if v} == UNIQUE


def test_elimination_choice_changes_only_unsolvable_reactions(configs):
    """Dropping loop_b.x or loop_c.y (Lagrange) or neither (Udwadia–Kalaba): identical motion, identical
    reactions in the solvable pairs, different ones in the unsolvable pairs."""
    runs = {}
    for label, kw in {
        "drop loop_b.x": {"solver": "lagrange", "eliminate": ["loop_b.x"]},
        "drop loop_c.y": {"solver": "lagrange", "eliminate": ["loop_c.y"]},
        "pseudo-inverse": {"solver": "udwadia-kalaba"},
    }.items():
        robot, dyn, q0, dq0 = parallelogram(configs, **kw)
        run = simulate(dyn, q0, dq0, 0.3, step=1e-3, output_step=0.01)
        reactions = joint_reactions(dyn, run.t, run.q, run.dq, run.ddq, run.lam)
        wrench = {name: reactions.joint_wrench[:, i] for i, name in enumerate(reactions.joint_names)}
        wrench.update({name: reactions.loop_wrench[:, i] for i, name in enumerate(reactions.loop_names)})
        runs[label] = (run, wrench)
    ref_run, ref = runs["drop loop_b.x"]
    assert ref_run.eliminated_rows == ("loop_b.x",)
    scale = max(np.abs(w).max() for w in ref.values())
    for label, (run, wrench) in runs.items():
        assert np.abs(run.q - ref_run.q).max() < 1e-10, label
        for pair in UNIQUE:
            assert np.abs(wrench[pair] - ref[pair]).max() < 1e-9 * scale, (label, pair)
        if label != "drop loop_b.x":
            for pair in NOT_UNIQUE:
                assert np.abs(wrench[pair] - ref[pair]).max() > 1e-2 * scale, (label, pair)
    # the eliminated row carries nothing
    assert np.abs(ref_run.lam[:, ref_run.row_names.index("loop_b.x")]).max() == 0.0


def test_frictionless_pins_transmit_no_axial_torque_and_the_ground_carries_the_rest(configs):
    """Free four-bar: every undriven, frictionless pin has zero moment about its axis; the two ground pins
    carry the weight plus the mass times the acceleration of the centre of mass."""
    robot = load_robot(configs / "fourbar.toml")
    setup = simulation_setup(robot)
    dyn = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, dyn)
    run = simulate(dyn, q0, dq0, 0.2, step=1e-3, output_step=0.05)
    r = joint_reactions(dyn, run.t, run.q, run.dq, run.ddq, run.lam)
    assert np.abs(r.joint_wrench[:, :, 5]).max() < 1e-9  # tz about every z axis
    assert np.abs(r.loop_wrench[:, :, 5]).max() < 1e-12  # planar pin: no moment
    data = robot.create_data()
    mass = sum(i.mass for i in robot.model.inertias)
    for k in range(len(run.t)):
        qp = dyn.configuration(run.q[k])
        pin.centerOfMass(robot.model, data, qp, run.dq[k], run.ddq[k])
        pin.forwardKinematics(robot.model, data, qp)
        ground = sum(data.oMi[robot.joint(n).id].rotation @ r.joint_wrench[k, i, :3] for i, n in enumerate(robot.joint_names) if n != "coupler_joint")
        expected = mass * (data.acom[0] - robot.model.gravity.linear)
        assert ground == pytest.approx(expected, abs=1e-9 * max(1.0, np.abs(expected).max()))


def test_nullspace_has_no_multipliers_for_reactions(configs):
    _, dyn, q0, dq0 = parallelogram(configs, solver="nullspace")
    ev = dyn.evaluate(0.0, q0, dq0)
    assert np.isnan(ev.lam).all()
    with pytest.raises(ValueError, match="NaN"):
        joint_reactions(dyn, [0.0], [q0], [dq0], [ev.ddq], [ev.lam])
