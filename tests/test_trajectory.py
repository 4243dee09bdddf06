"""Trajectory generators and the trajectory CSV format."""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.ctrl.trajectory import (
    Trajectory,
    constant_acceleration,
    limit_violations,
    quintic_rest_to_rest,
    read_trajectory,
    write_trajectory,
)
from mbctl.errors import DataError

NAMES = ("a", "b")
WAYPOINTS = np.array([[0.0, 1.0], [0.5, -1.0], [0.2, 0.0]])


def test_quintic_passes_waypoints_at_rest():
    """Positions hit every waypoint with zero velocity and acceleration there."""
    traj = quintic_rest_to_rest(WAYPOINTS, [1.0, 2.0], 1000.0, NAMES)
    assert len(traj) == 3001 and traj.t[-1] == 3.0
    for k, wp in zip((0, 1000, 3000), WAYPOINTS):
        assert np.allclose(traj.q[k], wp, atol=1e-15)
        assert np.allclose(traj.dq[k], 0, atol=1e-12) and np.allclose(traj.ddq[k], 0, atol=1e-12)
    # the peak speed of a quintic is 15/8 * distance / duration
    assert np.abs(traj.dq[:1000, 1]).max() == pytest.approx(15 / 8 * 2.0, rel=1e-5)


def test_quintic_positions_are_the_same_bits_on_every_machine():
    """q is made of correctly rounded products and sums only: equal, to the bit, to the same blend in
    plain Python floats (numpy's s**3 ran the CPU's SIMD power, which differs between hosts in the
    last bits and so changed a trajectory file's length and the size docs/bad-input.md quotes)."""
    traj = quintic_rest_to_rest(WAYPOINTS[:2], [1.0], 50.0, NAMES)
    expected = []
    for t in traj.t:
        s = min(max(float(t) / 1.0, 0.0), 1.0)
        blend = s * s * s * (10 - 15 * s + 6 * s * s)
        expected.append([float(w0 + (w1 - w0) * blend) for w0, w1 in zip(WAYPOINTS[0], WAYPOINTS[1])])
    assert traj.q.tolist() == expected


def test_quintic_derivatives_are_consistent():
    """dq and ddq are the time derivatives of q (central differences on a fine grid)."""
    traj = quintic_rest_to_rest(WAYPOINTS, [1.0, 2.0], 20000.0, NAMES)
    dt = traj.t[1] - traj.t[0]
    inner = np.ones(len(traj), bool)
    inner[[0, 20000, -1]] = False  # ends, and the waypoint where the jerk jumps
    assert np.allclose(np.gradient(traj.q, dt, axis=0)[inner], traj.dq[inner], rtol=0, atol=1e-7)
    assert np.allclose(np.gradient(traj.dq, dt, axis=0)[inner], traj.ddq[inner], rtol=0, atol=1e-6)


def test_constant_acceleration_from_rest():
    traj = constant_acceleration(np.array([0.1, 0.0]), np.array([0.2, -1.0]), 2.0, 100.0, NAMES)
    assert np.allclose(traj.q[-1], [0.1 + 0.4, -2.0]) and np.allclose(traj.dq[-1], [0.4, -2.0])
    assert np.allclose(traj.ddq, [0.2, -1.0]) and np.allclose(traj.dq[0], 0.0)


def test_csv_round_trip_is_exact(tmp_path):
    traj = quintic_rest_to_rest(WAYPOINTS, [0.3, 0.4], 997.0, NAMES)
    write_trajectory(tmp_path / "t.csv", traj)
    back = read_trajectory(tmp_path / "t.csv", NAMES)
    for field in ("t", "q", "dq", "ddq"):
        assert np.array_equal(getattr(back, field), getattr(traj, field))
    assert read_trajectory(tmp_path / "t.csv", ("b",)).q[:, 0].tolist() == traj.q[:, 1].tolist()


def test_bad_csv_files_name_file_and_column(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("t,q.a,dq.a,ddq.a\n0,0,0,0\n0.1,0.1,nan,0\n")
    with pytest.raises(DataError, match=r"t.csv: dq.a: non-finite value on line 3"):
        read_trajectory(path, ("a",))
    path.write_text("t,q.a,dq.a,ddq.a\n0,0,0,0\n")
    with pytest.raises(DataError, match=r"t.csv: q.b: missing column"):
        read_trajectory(path, ("a", "b"))
    path.write_text("t,q.a,dq.a,ddq.a\n0,0,0,0\n0,1,0,0\n")
    with pytest.raises(DataError, match=r"t: times must be strictly increasing \(line 3\)"):
        read_trajectory(path, ("a",))
    path.write_text("t,q.a,dq.a,ddq.a\n\n0,0,0,0\n\n0,1,0,0\n")  # blank lines do not shift line numbers
    with pytest.raises(DataError, match=r"t: times must be strictly increasing \(line 5\)"):
        read_trajectory(path, ("a",))
    path.write_text("t,q.a,dq.a,ddq.a\n0,0,0,0\n1,x,0,0\n")
    with pytest.raises(DataError, match=r"q.a: line 3: 'x' is not a number"):
        read_trajectory(path, ("a",))
    with pytest.raises(DataError, match="file not found"):
        read_trajectory(tmp_path / "missing.csv", ("a",))


def test_invalid_trajectories_are_refused():
    with pytest.raises(DataError, match="durations"):
        quintic_rest_to_rest(WAYPOINTS, [1.0, 0.0], 100.0, NAMES)
    with pytest.raises(DataError, match="strictly increasing"):
        Trajectory(np.array([0.0, 0.0]), NAMES, np.zeros((2, 2)), np.zeros((2, 2)), np.zeros((2, 2)))


def test_limit_violations_are_described(robots):
    robot = robots["scara"]
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [3.2, 0, 0, 0.0]]), [1.0], 100.0, robot.joint_names)
    messages = limit_violations(robot, traj)
    assert len(messages) == 2
    assert "q.j1 spans [0, 3.2] rad, outside the limits [-2.9, 2.9] rad" in messages[0]
    assert "dq.j1 reaches 6 rad/s, above the limit 3 rad/s" in messages[1]
