"""``mbctl trajectory optimal`` end to end: UR5 and SCARA, what it writes, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.limits import PLANNING_VELOCITY_MARGIN
from mbctl.ctrl.trajectory import read_trajectory

UR5 = "0,-1.4,1.4,-1.4,-1.57,0; 0.7,-0.9,0.6,-1.1,-1.3,0.6; 1.3,-1.5,1.5,-1.6,-1.5,1.0"
SCARA = "0,0,0,0; 0.8,0.5,-0.5,0.05; 1.2,1.0,-0.2,0.1"


@pytest.mark.parametrize(("name", "waypoints", "grid"), [("ur5", UR5, "300"), ("scara", SCARA, "300")])
def test_optimal_writes_a_trajectory_within_the_limits(cli, robots, tmp_path, name, waypoints, grid):
    """The CSV starts and ends at rest on the waypoints, and its feed-forward torques keep within 0.1 % of the
    margin-scaled limits."""
    out, png = tmp_path / "t.csv", tmp_path / "t.png"
    r = cli("trajectory", "optimal", name, "--waypoints", waypoints, "--grid", grid, "--torque-scaling", "0.9", "--out", out, "--plot", png)
    assert r.code == 0, r.err
    assert "active limits" in r.out and "worst |value| / limit" in r.out and png.stat().st_size > 0
    robot = robots[name]
    traj = read_trajectory(out, robot.joint_names)
    wp = np.array([[float(x) for x in row.split(",")] for row in waypoints.split(";")])
    np.testing.assert_allclose(traj.q[[0, -1]], wp[[0, -1]], atol=1e-9)
    assert np.abs(traj.dq[[0, -1]]).max() == 0.0
    limit = 0.9 * np.array([j.limits.effort for j in robot.joints])
    assert np.max(np.abs(feedforward(robot, traj).dynamics.tau) / limit) <= 1.001
    assert f"{traj.duration:.4f} s along the path" in r.out


def test_optimal_from_a_path_csv_with_overrides(cli, robots, tmp_path):
    """--path with a velocity override: the overridden joint keeps to its new limit times the default velocity margin."""
    robot = robots["ur5"]
    path = tmp_path / "p.csv"
    path.write_text("s," + ",".join(f"q.{n}" for n in robot.joint_names) + "\n0,0,-1.4,1.4,-1.4,-1.57,0\n0.5,0.5,-1,1,-1,-1.4,0.3\n1,1,-1.2,0.6,-1.2,-1.2,0.6\n")
    out = tmp_path / "t.csv"
    r = cli("trajectory", "optimal", "ur5", "--path", path, "--velocity-limit", "shoulder_pan_joint=0.5", "--grid", "200", "--out", out)
    assert r.code == 0, r.err
    dq = read_trajectory(out, robot.joint_names).dq
    assert np.abs(dq[:, 0]).max() == pytest.approx(0.5 * PLANNING_VELOCITY_MARGIN, rel=1e-3)


@pytest.mark.parametrize(
    ("args", "parts"),
    [
        (["--waypoints", UR5, "--velocity-limit", "nope=1"], ["--velocity-limit", "no joint 'nope'"]),
        (["--waypoints", UR5, "--torque-scaling", "-0.5"], ["--torque-scaling", "must be in (0, 1]"]),
        (["--waypoints", UR5, "--velocity-scaling", "0"], ["--velocity-scaling", "must be in (0, 1]"]),
        (["--waypoints", "0,0; 1,1"], ["--waypoints", "6 values"]),
        (["--path", "PATH"], ["p.csv", "q.shoulder_pan_joint", "missing column"]),
        (["--waypoints", UR5, "--grid", "1"], ["--grid", "must be in"]),
        (["--waypoints", UR5, "--velocity-limit", "1e-7"], ["--rate", "samples at 1000 Hz"]),
    ],
)
def test_bad_input_is_one_line_and_writes_nothing(cli, tmp_path, args, parts):
    """Unknown joints, a negative margin, wrong widths and wrong path columns: exit 2, one line, no file."""
    (tmp_path / "p.csv").write_text("s,q.a,q.b\n0,0,0\n1,1,1\n")
    args = [str(tmp_path / "p.csv") if a == "PATH" else a for a in args]
    r = cli("trajectory", "optimal", "ur5", *args, "--out", tmp_path / "t.csv")
    assert r.code == 2, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: ")
    for part in parts:
        assert part in lines[0], lines[0]
    assert not (tmp_path / "t.csv").exists()


def test_infeasible_path_exits_1(cli, tmp_path):
    """A torque limit below the holding torque: an error, no trajectory."""
    r = cli("trajectory", "optimal", "ur5", "--waypoints", UR5, "--torque-limit", "shoulder_lift_joint=1", "--out", tmp_path / "t.csv")
    assert r.code == 1 and "grid point" in r.err
    assert not (tmp_path / "t.csv").exists()
