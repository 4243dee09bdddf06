"""The planners (``trajectory optimal``, ``trajectory ocp``) and the run's limits: poses outside a joint's
range and paths of zero length refused before solving, the ``[control] effort`` the run saturates at
planned to, and the run's shared limits (:mod:`mbctl.ctrl.limits`)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import mbctl
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.limits import PLANNING_MOVE_VELOCITY_MARGIN, PLANNING_TORQUE_MARGIN, position_excess, run_limits
from mbctl.ctrl.optimal import solve_point_to_point
from mbctl.ctrl.settings import control_settings
from mbctl.ctrl.timing import timing_limits
from mbctl.ctrl.trajectory import read_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError, InputError, OutsideLimits

START = "0,-1.6,1.6,-1.6,-1.6,0"
INSIDE = f"{START}; 5,-1.2,1.2,-1.2,-1.2,0.5"  # the pan joint's range is ±2π
MOVE = "0,-1.6,1.6,-1.5,-1.57,0; 0.6,-0.7,0.4,-1.0,-1.2,0.6"  # a short move whose timing is torque-limited on the lift joint


def _ur5_with_effort(configs, tmp_path, table: str):
    """ur5.toml with a ``[control] effort`` line (a super-table may follow its sub-tables in TOML)."""
    path = tmp_path / "ur5.toml"
    path.write_text((configs / "ur5.toml").read_text() + f"\n[control]\neffort = {table}\n")
    return path


@pytest.mark.parametrize(
    ("waypoints", "parts"),
    [
        (f"{START}; 50,-1.2,1.2,-1.2,-1.2,0.5", ["q.shoulder_pan_joint = 50 rad at waypoint 2 is above the upper limit 6.28319 rad"]),
        (f"{START}; 1,-1.2,-3.5,-1.2,-1.2,0.5", ["q.elbow_joint = -3.5 rad at waypoint 2 is below the lower limit -3.14159 rad"]),
        (f"{START}; {START}", ["zero length"]),
        # both waypoints inside, the spline between them not: its turning point is found exactly
        (f"{START}; 6.2,-1.2,1.2,-1.2,-1.2,0.5; 6.0,-1.2,1.2,-1.2,-1.2,0.5", ["q.shoulder_pan_joint = 6.903", "the spline turns there", "upper limit 6.28319 rad"]),
    ],
)
def test_optimal_refuses_a_path_outside_the_ranges_before_solving(cli, tmp_path, waypoints, parts):
    """A waypoint or the spline outside a joint's range, or no motion at all: exit 2, one line naming --waypoints
    (and the joint, value and limit), nothing written."""
    r = cli("trajectory", "optimal", "ur5", "--waypoints", waypoints, "--out", tmp_path / "t.csv")
    assert r.code == 2, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: --waypoints: "), lines
    assert all(p in lines[0] for p in parts), lines[0]
    assert not (tmp_path / "t.csv").exists()


def test_optimal_accepts_a_long_move_inside_the_ranges(cli, robots, tmp_path):
    """The control case: 5 rad on the pan joint (inside ±2π) is timed and written."""
    r = cli("trajectory", "optimal", "ur5", "--waypoints", INSIDE, "--grid", "200", "--out", tmp_path / "t.csv")
    assert r.code == 0, r.err
    assert read_trajectory(tmp_path / "t.csv", robots["ur5"].joint_names).q[-1, 0] == pytest.approx(5.0)


def test_optimal_names_the_path_file_of_a_sample_outside(cli, robots, tmp_path):
    """A --path sample beyond the elbow's ±π: the file, the joint, the value and the limit."""
    names = robots["ur5"].joint_names
    path = tmp_path / "p.csv"
    path.write_text("s," + ",".join(f"q.{n}" for n in names) + "\n0,0,-1.6,1.6,-1.6,-1.6,0\n1,0,-1.6,4,-1.6,-1.6,0\n")
    r = cli("trajectory", "optimal", "ur5", "--path", path, "--out", tmp_path / "t.csv")
    assert r.code == 2 and r.err.strip() == f"mbctl: error: {path}: q.elbow_joint = 4 rad at path point 2 is above the upper limit 3.14159 rad"


def test_library_entry_points_refuse_alike(robots):
    """mbctl.optimal_timing and solve_point_to_point raise OutsideLimits carrying the joint, value and limit, and
    refuse a move of zero length; the same poses inside the ranges are accepted (grid 50, not verified)."""
    robot = robots["ur5"]
    q0 = np.array([0, -1.6, 1.6, -1.6, -1.6, 0.0])
    far = q0 + [50, 0, 0, 0, 0, 0]
    with pytest.raises(OutsideLimits) as exc:
        mbctl.optimal_timing(robot, [q0, far])
    assert (exc.value.field, exc.value.joint, exc.value.value, exc.value.limit) == ("path", "shoulder_pan_joint", 50.0, pytest.approx(2 * math.pi))
    with pytest.raises(InputError, match="zero length"):
        mbctl.optimal_timing(robot, [q0, q0])
    with pytest.raises(OutsideLimits) as exc:
        solve_point_to_point(robot, q0, far)
    assert (exc.value.field, exc.value.joint) == ("to", "shoulder_pan_joint")
    with pytest.raises(InputError, match="zero length"):
        solve_point_to_point(robot, q0, q0)
    assert mbctl.optimal_timing(robot, [q0, q0 + [5, 0, 0, 0, 0, 0]], grid=50, verify=False).duration > 0


def test_position_excess_reports_the_farthest_pose():
    """One entry per joint outside, the pose farthest out and the limit it passes; none inside."""
    robot = load_robot("scara")  # j1 in [-2.9, 2.9] rad, j4 in [-0.2, 0.2] m
    q = np.array([[0, 0, 0, 0], [3.0, 0, 0, -0.3], [3.5, 0, 0, 0.1]])
    out = position_excess(robot, q)
    assert [(e.joint, e.value, e.limit, e.index, e.unit) for e in out] == [("j1", 3.5, 2.9, 2, "rad"), ("j4", -0.3, -0.2, 1, "m")]
    assert position_excess(robot, q[:1]) == []


def test_run_limits_are_what_the_control_laws_saturate_at(configs, tmp_path):
    """[control] effort sets the run's torque limit of the joints it names (the joint's own elsewhere), and the
    laws' saturation and the timing's default torque limits are that same number."""
    robot = load_robot(_ur5_with_effort(configs, tmp_path, "{ shoulder_lift_joint = 80.0 }"))
    urdf = np.array([j.limits.effort for j in robot.joints])
    lim = run_limits(robot)
    np.testing.assert_array_equal(lim.effort, np.where(np.arange(6) == 1, 80.0, urdf))
    np.testing.assert_array_equal(control_settings(robot).effort, lim.effort)
    np.testing.assert_array_equal(timing_limits(robot).torque, lim.effort)
    np.testing.assert_array_equal(run_limits(load_robot("ur5")).effort, urdf)  # without [control] effort: the URDF's
    assert lim.select(["elbow_joint", "shoulder_lift_joint"]).effort.tolist() == [urdf[2], 80.0]


def test_a_control_effort_above_the_joint_limit_is_refused(configs, tmp_path):
    """A saturation level above the URDF's effort limit: the file and field named, for the planners too."""
    robot = load_robot(_ur5_with_effort(configs, tmp_path, "{ shoulder_lift_joint = 200.0 }"))
    with pytest.raises(ConfigError, match="above the effort limit 150") as exc:
        timing_limits(robot)
    assert exc.value.field == "control.effort.shoulder_lift_joint"


def test_optimal_plans_to_the_control_effort(cli, configs, tmp_path):
    """With [control] effort 80 N·m on the lift joint the default timing rides 0.9 x 80 N·m there (feed-forward of
    the full model); the bundled UR5's timing of the same move asks more than 80 N·m, so the level is what binds."""
    peaks = {}
    for name, config in (("bundled", "ur5"), ("limited", _ur5_with_effort(configs, tmp_path, "{ shoulder_lift_joint = 80.0 }"))):
        out = tmp_path / f"{name}.csv"
        r = cli("trajectory", "optimal", config, "--waypoints", MOVE, "--grid", "300", "--out", out)
        assert r.code == 0, r.err
        robot = load_robot(config)
        peaks[name] = float(np.abs(feedforward(robot, read_trajectory(out, robot.joint_names)).dynamics.tau[:, 1]).max())
    assert peaks["bundled"] > 100.0
    assert 0.99 * PLANNING_TORQUE_MARGIN * 80.0 <= peaks["limited"] <= 1.001 * PLANNING_TORQUE_MARGIN * 80.0


def test_ocp_plans_to_the_control_effort(cli, configs, tmp_path):
    """The SCARA with [control] effort 30 N·m on j1: the time-optimal motion keeps j1 within 0.9 x 30 N·m and rides
    it; without the level the same motion asks more."""
    (tmp_path / "scara.urdf").write_text((configs / "scara.urdf").read_text())
    limited = tmp_path / "scara.toml"
    limited.write_text((configs / "scara.toml").read_text().replace("[control]\n", "[control]\neffort = { j1 = 30.0 }\n", 1))
    peaks = {}
    for name, config in (("bundled", "scara"), ("limited", limited)):
        out = tmp_path / f"{name}.csv"
        r = cli("trajectory", "ocp", config, "--from", "0,0,0,0", "--to", "1,1,1,0.1", "--knots", "20", "--out", out)
        assert r.code == 0, r.err
        assert f"torque scaling {PLANNING_TORQUE_MARGIN:g}, velocity scaling {PLANNING_MOVE_VELOCITY_MARGIN:g}" in r.out
        robot = load_robot(config)
        peaks[name] = float(np.abs(feedforward(robot, read_trajectory(out, robot.joint_names)).dynamics.tau[:, 0]).max())
    assert peaks["bundled"] > 30.0
    assert 0.99 * PLANNING_TORQUE_MARGIN * 30.0 <= peaks["limited"] <= 1.001 * PLANNING_TORQUE_MARGIN * 30.0


def test_the_run_loop_is_given_the_same_limits(configs, tmp_path, monkeypatch):
    """`mbctl run`'s loop clips at the [control] effort the planners plan to (run_limits), not the URDF's effort."""
    import mbctl.hardware.session as session

    seen = {}
    monkeypatch.setattr(session, "run_loop", lambda backend, controller, limits, *a, **k: seen.setdefault("limits", limits))
    robot = load_robot(_ur5_with_effort(configs, tmp_path, "{ shoulder_lift_joint = 80.0 }"))
    session.enable_and_run(None, None, robot, None, None)
    lim = run_limits(robot)
    for field in ("lower", "upper", "velocity", "effort"):
        np.testing.assert_array_equal(getattr(seen["limits"], field), getattr(lim, field))
    assert seen["limits"].effort[1] == 80.0
