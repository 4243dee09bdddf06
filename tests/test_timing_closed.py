"""Time-optimal timing beyond serial arms: the 3-RRR's redundant drives as unknowns of the LP, and the
SCARA's programmed path retimed."""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.ctrl.closed_chain import closed_chain_feedforward
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.timing import optimal_timing, spline_path, timing_limits
from mbctl.ctrl.timing.closed import RedundantDrives
from mbctl.ctrl.timing.dynamics import path_dynamics
from mbctl.ctrl.timing.programmed import path_from_constraints, path_on_loops
from mbctl.ctrl.timing.reachability import StageConstraints, reachability_profile
from mbctl.ctrl.timing.sampling import profile_duration
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import InputError


@pytest.fixture(scope="module")
def rrr3():
    robot = load_robot("rrr3")
    return robot, path_from_constraints(robot)


def test_rrr3_torques_within_limits_by_the_projects_distribution(rrr3):
    """The retimed 3-RRR motion stays on the loops and the drives realise it within 3 N·m: the project's own
    distribution (min-norm QP with the effort bounds) finds torques at every 1 kHz sample."""
    robot, path = rrr3
    res = optimal_timing(robot, path, timing_limits(robot), grid=300)
    assert res.held, res.message
    chain = closed_chain_feedforward(feedforward(robot, res.trajectory), mode="min-norm", compare=False)
    assert np.abs(chain.chosen.tau).max() <= 3.0 * (1 + 1e-6)
    assert np.abs(chain.chosen.tau).max() >= 3.0 * 0.99  # and the limits are used
    assert res.duration < 0.5  # faster than the config's own 0.5 s


def test_distributing_while_timing_beats_a_fixed_pseudo_inverse(rrr3):
    """With the drive torques free in the LP the 3-RRR is faster than with the pseudo-inverse distribution
    ``tau = (W^T)^+ f`` fixed (whose limits are rows in (a, b), timed by the passes)."""
    robot, path = rrr3
    grid = 200
    free = optimal_timing(robot, path, timing_limits(robot), grid=grid, verify=False)
    s = np.linspace(0, 1, grid + 1)
    pd = path_dynamics(robot, path, s)
    drives = RedundantDrives(robot, pd.q[0])
    Wt, Vt = drives.maps(pd.q)
    P = np.linalg.pinv(Wt)  # (n, na, d)
    fa, fb, f0 = (np.einsum("ndv,nv->nd", Vt, x) for x in (pd.tau_a, pd.tau_b, pd.tau_0))
    A, B, C0 = (np.einsum("nkd,nd->nk", P, x) for x in (fa, fb, f0))
    e = drives.effort
    con = StageConstraints(A=np.hstack([A, -A]), B=np.hstack([B, -B]), C=np.hstack([e - C0, e + C0]), b_max=np.full(grid + 1, np.inf), ds=s[1])
    fixed = profile_duration(s, reachability_profile(con))
    assert free.duration < 0.97 * fixed  # 0.1200 s against 0.1286 s at this grid


def test_scara_programmed_path_retimed_within_limits(robots):
    """The SCARA's tool circle (10 s in the config) retimed: same start and end, feed-forward torques within the
    margin-scaled limits at 1 kHz."""
    robot = robots["scara"]
    path = path_from_constraints(robot)
    limits = timing_limits(robot, torque_margin=0.9)
    res = optimal_timing(robot, path, limits, grid=400)
    assert res.held, res.message
    tau = feedforward(robot, res.trajectory).dynamics.tau
    assert np.max(np.abs(tau) / limits.torque) <= 1.001
    np.testing.assert_allclose(res.trajectory.q[[0, -1]], path(np.array([0.0, 1.0]))[0], atol=1e-12)


def test_closed_chain_refuses_jerk_limits(rrr3):
    """Jerk limits on a closed chain: an InputError naming jerk."""
    robot, path = rrr3
    with pytest.raises(InputError) as exc:
        optimal_timing(robot, path, timing_limits(robot, jerk={"a1": 100.0}), grid=50)
    assert exc.value.field == "jerk"


def test_cli_rrr3_from_constraints(cli, tmp_path):
    """``--from-constraints`` on the 3-RRR: exit 0, the drives named in the active limits."""
    r = cli("trajectory", "optimal", "rrr3", "--from-constraints", "--grid", "200", "--out", tmp_path / "t.csv")
    assert r.code == 0, r.err
    assert "torque:a" in r.out and (tmp_path / "t.csv").exists()


def test_threeloop_crank_torque_with_load_dependent_friction():
    """The three-loop mechanism (one crank, load-dependent Stribeck friction in its bearing) retimed under a 2 N·m
    crank limit: the project's closed-chain feed-forward needs at most that at every 1 kHz sample, and reaches it."""
    robot = load_robot("threeloop")
    res = optimal_timing(robot, path_from_constraints(robot), timing_limits(robot, torque={"crank_joint": 2.0}), grid=150)
    assert res.held, res.message
    tau = closed_chain_feedforward(feedforward(robot, res.trajectory), mode="min-norm", compare=False).chosen.tau
    assert 2.0 * 0.99 <= np.abs(tau).max() <= 2.0 * 1.001


def test_path_in_independent_coordinates_is_assembled_on_the_loops(rrr3):
    """A spline through waypoints of the drives a1, a2 (the 3-RRR's 2 DOF): the other joints are assembled on the
    loops, the retimed motion keeps on them and the project's distribution realises it within 3 N·m."""
    robot, route = rrr3
    q = route(np.array([0.0, 0.5, 1.0]))[0]
    idx = [robot.joint(n).idx_v for n in ("a1", "a2")]
    path = path_on_loops(robot, spline_path(q[:, idx], ("a1", "a2")), q[0])
    np.testing.assert_allclose(path(np.array([0.5]))[0][0], q[1], atol=1e-9)  # the same configuration at the waypoint
    res = optimal_timing(robot, path, timing_limits(robot), grid=200)
    assert res.held, res.message
    tau = closed_chain_feedforward(feedforward(robot, res.trajectory), mode="min-norm", compare=False).chosen.tau
    assert np.abs(tau).max() <= 3.0 * (1 + 1e-6)


def test_cli_independent_coordinates_need_as_many_as_dof(cli, tmp_path):
    """--joints naming fewer coordinates than the chain has DOF: one line naming --joints, nothing written."""
    r = cli("trajectory", "optimal", "rrr3", "--joints", "a1", "--waypoints", "0; 1", "--out", tmp_path / "t.csv")
    assert r.code == 2 and r.err.startswith("mbctl: error: --joints: ") and "2 DOF" in r.err
    assert not (tmp_path / "t.csv").exists()
