"""``mbctl trajectory ocp`` end to end: what it writes against the feed-forward and the best quintic, and bad input."""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.trajectory import Trajectory, quintic_rest_to_rest, read_trajectory

SCARA = ("0,0,0,0", "1,1,1,0.1")
UR5 = ("0,-1.5,1.2,-1.2,-1.57,0", "1.0,-0.8,0.4,-0.8,-1.0,0.8")


def _worst(robot, traj: Trajectory) -> float:
    """Worst feed-forward torque or speed over its limit."""
    effort = np.array([j.limits.effort for j in robot.joints])
    speed = np.array([j.limits.velocity for j in robot.joints])
    return max(float(np.max(np.abs(feedforward(robot, traj).dynamics.tau) / effort)), float(np.max(np.abs(traj.dq) / speed)))


def _fastest_quintic(robot, q0: np.ndarray, q1: np.ndarray) -> float:
    """Shortest duration (s) of a quintic rest-to-rest move within the torque and speed limits (bisection)."""
    lo, hi = 0.01, 10.0
    for _ in range(30):
        mid = 0.5 * (lo + hi)
        lo, hi = (lo, mid) if _worst(robot, quintic_rest_to_rest(np.array([q0, q1]), [mid], 1000.0, robot.joint_names)) <= 1.0 else (mid, hi)
    return hi


def _check(cli, robot, tmp_path, start: str, end: str, *extra: str) -> Trajectory:
    out, png = tmp_path / "t.csv", tmp_path / "t.png"
    r = cli("trajectory", "ocp", robot.name, "--from", start, "--to", end, *extra, "--out", out, "--plot", png)
    assert r.code == 0, r.err
    assert "worst |value| / limit at 1000 Hz" in r.out and png.stat().st_size > 0
    traj = read_trajectory(out, robot.joint_names)
    q0, q1 = (np.array([float(x) for x in s.split(",")]) for s in (start, end))
    np.testing.assert_allclose(traj.q[[0, -1]], [q0, q1], atol=1e-7)
    assert np.abs(traj.dq[[0, -1]]).max() < 1e-7
    assert _worst(robot, traj) <= 1.001
    return traj


def test_time_optimal_scara_keeps_the_limits_and_beats_the_best_quintic(cli, robots, tmp_path):
    robot = robots["scara"]
    traj = _check(cli, robot, tmp_path, *SCARA, "--knots", "20")
    best = _fastest_quintic(robot, *(np.array([float(x) for x in s.split(",")]) for s in SCARA))
    assert traj.duration < 0.9 * best


def test_energy_optimal_scara_uses_less_effort_than_the_quintic(cli, robots, tmp_path):
    robot = robots["scara"]
    traj = _check(cli, robot, tmp_path, *SCARA, "--objective", "energy", "--duration", "1.0", "--knots", "30")
    q0, q1 = (np.array([float(x) for x in s.split(",")]) for s in SCARA)
    quintic = quintic_rest_to_rest(np.array([q0, q1]), [1.0], 1000.0, robot.joint_names)
    effort = [float(np.sum(feedforward(robot, t).dynamics.tau ** 2) / 1000.0) for t in (traj, quintic)]
    assert effort[0] < effort[1]


@pytest.mark.slow
def test_time_optimal_ur5(cli, robots, tmp_path):
    robot = robots["ur5"]
    traj = _check(cli, robot, tmp_path, *UR5)
    assert traj.duration < _fastest_quintic(robot, *(np.array([float(x) for x in s.split(",")]) for s in UR5))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--from", "0,0", "--to", SCARA[1]), "--from: needs 4 finite values"),
        (("--from", SCARA[0], "--to", SCARA[1], "--duration", "1"), "--duration: a time-optimal motion"),
        (("--from", SCARA[0], "--to", SCARA[1], "--objective", "energy"), "--duration: the energy-optimal motion needs"),
        (("--from", SCARA[0], "--to", SCARA[1], "--knots", "1"), "--knots: must be an integer"),
        (("--from", SCARA[0], "--to", "9,0,0,0"), "--to: q.j1 = 9 rad in the end pose is above the upper limit 2.9 rad"),
        (("--from", "0,-3,0,0", "--to", SCARA[1]), "--from: q.j2 = -3 rad in the start pose is below the lower limit -2.5 rad"),
        (("--from", SCARA[0], "--to", SCARA[0]), "--to: is the start pose: a move of zero length"),
        (("--from", SCARA[0], "--to", SCARA[1], "--torque-scaling", "1.5"), "--torque-scaling: must be in (0, 1]"),
        (("--from", SCARA[0], "--to", SCARA[1], "--velocity-scaling", "0"), "--velocity-scaling: must be in (0, 1]"),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(cli, tmp_path, args, message):
    out = tmp_path / "t.csv"
    r = cli("trajectory", "ocp", "scara", *args, "--out", out)
    assert r.code == 2 and f"mbctl: error: {message}" in r.err
    assert not out.exists()


def _low_torque_ur5(tmp_path):
    """The bundled UR5 with every torque limit at 1 N·m: gravity alone asks more, so no motion meets the limits."""
    from mbctl.bundled import bundled_config

    path = tmp_path / "lowtau.toml"
    path.write_text(bundled_config("ur5").read_text() + "\n[control]\neffort = 1.0\n")  # as the issue made it
    return path


def test_a_solve_without_a_motion_writes_nothing_and_exits_1(cli, tmp_path):
    """Limits out of reach: exit 1 with IPOPT's status and how far its iterate is from a motion, nothing at --out (or anywhere)."""
    out = tmp_path / "oc.csv"
    r = cli("trajectory", "ocp", _low_torque_ur5(tmp_path), "--from", UR5[0], "--to", UR5[1], "--knots", "3", "--out", out, "--plot", tmp_path / "oc.png")
    assert r.code == 1, r.err
    line = r.err.strip().splitlines()[-1]
    assert line.startswith("mbctl: error: no motion found: IPOPT stopped at ") and "times a torque limit (the limits may be out of reach)" in line, line
    assert line.endswith(f"nothing written to {out}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["lowtau.toml"]


def test_best_effort_keeps_the_iterate_elsewhere(cli, tmp_path):
    """--best-effort PATH: the failed solve's iterate goes there (it misses --to), still nothing at --out, exit 1."""
    out, kept = tmp_path / "oc.csv", tmp_path / "iterate.csv"
    r = cli("trajectory", "ocp", _low_torque_ur5(tmp_path), "--from", UR5[0], "--to", UR5[1], "--knots", "3", "--out", out, "--best-effort", kept)
    assert r.code == 1 and r.err.strip().endswith(f"its last iterate is in {kept}"), r.err
    assert not out.exists()
    iterate = read_trajectory(kept, ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint"))
    assert np.abs(iterate.q[-1] - np.array([float(x) for x in UR5[1].split(",")])).max() > 0.1  # not a motion to --to


def test_best_effort_must_not_be_the_output(cli, tmp_path):
    """--best-effort naming --out is refused before solving; on a solve that converges it writes nothing (the valid case)."""
    out = tmp_path / "t.csv"
    r = cli("trajectory", "ocp", "scara", "--from", SCARA[0], "--to", SCARA[1], "--out", out, "--best-effort", out)
    assert r.code == 2 and "mbctl: error: --best-effort: must not be --out" in r.err and not out.exists()
    r = cli("trajectory", "ocp", "scara", "--from", SCARA[0], "--to", SCARA[1], "--knots", "10", "--out", out, "--best-effort", tmp_path / "b.csv")
    assert r.code == 0, r.err
    assert out.is_file() and not (tmp_path / "b.csv").exists()


def test_a_failed_tightening_keeps_the_converged_motion(robots, monkeypatch):
    """When the re-solve with tightened torque limits does not converge, the converged motion before it is kept (not held: it
    exceeded a limit between the knots), never the failed iterate; without the failure the same problem is held in two solves."""
    import dataclasses

    from mbctl.ctrl.optimal import solve_point_to_point
    from mbctl.ctrl.optimal.problem import OptimalControlProblem

    robot, q1 = robots["scara"], np.array([1.0, 1.0, 1.0, 0.1])
    assert solve_point_to_point(robot, np.zeros(4), q1, knots=10).rounds == 2  # the first solve exceeds a limit between knots
    real, solves = OptimalControlProblem.solve, []

    def first_only(self, guess=None, **options):
        solves.append(real(self, guess, **options))
        return solves[-1] if len(solves) == 1 else dataclasses.replace(solves[-1], success=False, status="Maximum_Iterations_Exceeded")

    monkeypatch.setattr(OptimalControlProblem, "solve", first_only)
    result = solve_point_to_point(robot, np.zeros(4), q1, knots=10)
    assert len(solves) == 2 and result.solution is solves[0] and not result.held
    np.testing.assert_allclose(result.trajectory.q[-1], q1, atol=1e-7)
    assert result.worst["torque"] > 1.0 + result.tolerance
