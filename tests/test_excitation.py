"""Excitation design: Fourier series at rest at both ends, within every limit, a better
conditioned regressor than random motions of the same size, and the command line."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from mbctl.ctrl.excitation import _log_condition, design_excitation, excitation_condition, fourier_basis
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.trajectory import Trajectory, read_trajectory
from mbctl.dynamics.regressor import base_parameters, joint_torque_regressor, random_states
from mbctl.errors import InputError

SMALL = {"harmonics": 3, "period": 4.0, "rate_hz": 200.0, "grid": 36}


@pytest.fixture(scope="module")
def ur5_design(robots):
    return design_excitation(robots["ur5"], **SMALL, acceleration=8.0, seed=3)


def _random_fourier(robot, seed: int, harmonics: int, period: float, acceleration: float) -> Trajectory:
    """Random rest-to-rest Fourier motion of every joint, scaled to 90 % of its tightest limit."""
    rng = np.random.default_rng(seed)
    t = np.linspace(0.0, period, 801)
    P, V, A = fourier_basis(t, period, harmonics)
    q, dq, ddq = (np.zeros((len(t), robot.nv)) for _ in range(3))
    for j in robot.joints:
        z = np.concatenate([[0.0], rng.standard_normal(2 * harmonics - 2)])
        lim = j.limits
        scale = 0.9 * min(min(np.pi, lim.upper) / np.abs(P @ z).max(), lim.velocity / np.abs(V @ z).max(), acceleration / np.abs(A @ z).max())
        q[:, j.idx_v], dq[:, j.idx_v], ddq[:, j.idx_v] = scale * P @ z, scale * V @ z, scale * A @ z
    return Trajectory(t=t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)


def test_fourier_basis_starts_and_ends_at_rest_and_differentiates():
    """dq = d/dt q and ddq = d/dt dq (central differences), dq = ddq = 0 at t = 0 and T, q periodic."""
    T, L = 3.0, 4
    t = np.linspace(0.0, T, 30001)
    P, V, A = fourier_basis(t, T, L)
    z = np.random.default_rng(1).standard_normal(2 * L - 1)
    q, dq, ddq = P @ z, V @ z, A @ z
    h = t[1] - t[0]
    assert np.allclose((q[2:] - q[:-2]) / (2 * h), dq[1:-1], atol=1e-5)
    assert np.allclose((dq[2:] - dq[:-2]) / (2 * h), ddq[1:-1], atol=1e-4)
    assert abs(dq[0]) < 1e-12 and abs(ddq[0]) < 1e-12 and abs(dq[-1]) < 1e-12 and abs(ddq[-1]) < 1e-12
    assert q[0] == pytest.approx(q[-1], abs=1e-12)


def test_condition_gradient_matches_finite_differences():
    """The analytic gradient of log cond(W D^-1) agrees with central differences."""
    W = np.random.default_rng(0).standard_normal((12, 3, 5)) * np.array([1.0, 10.0, 0.1, 3.0, 1.0])
    f, G = _log_condition(W)
    assert f == pytest.approx(np.log(np.linalg.cond(W.reshape(-1, 5) / np.linalg.norm(W.reshape(-1, 5), axis=0))))
    h = 1e-6
    for idx in [(0, 0, 0), (3, 1, 2), (11, 2, 4), (5, 0, 1)]:
        Wp, Wm = W.copy(), W.copy()
        Wp[idx] += h
        Wm[idx] -= h
        assert G[idx] == pytest.approx((_log_condition(Wp)[0] - _log_condition(Wm)[0]) / (2 * h), rel=1e-5, abs=1e-8)


def test_held_joints_regroup_base_parameters(robots):
    """With joints held, the base columns are exactly as many as the rank of the held motion's regressor."""
    robot = robots["scara"]
    held = {2: 0.3, 3: 0.05}
    base = base_parameters(robot, rows=[0, 1], held=held)
    q, dq, ddq = random_states(robot, 300, seed=5)
    for i, position in held.items():
        q[:, i], dq[:, i], ddq[:, i] = position, 0.0, 0.0
    Y = joint_torque_regressor(robot, q, dq, ddq)[:, [0, 1]].reshape(-1, 10 * robot.nv)
    assert len(base) == np.linalg.matrix_rank(Y, tol=1e-8 * np.linalg.norm(Y, 2)) < len(base_parameters(robot, rows=[0, 1]))
    assert np.linalg.matrix_rank(Y[:, base.columns]) == len(base)


def test_csv_starts_and_ends_at_rest_and_is_consistent(robots, tmp_path, cli):
    """The written CSV: rest at both ends, periodic, dq the derivative of q and ddq of dq."""
    out = tmp_path / "exc.csv"
    r = cli("trajectory", "excitation", "scara", "--harmonics", "3", "--period", "3", "--rate", "1000", "--grid", "36", "--out", out)
    assert r.code == 0, r.err
    traj = read_trajectory(out, robots["scara"].joint_names)
    assert np.all(traj.dq[[0, -1]] == 0) and np.all(traj.ddq[[0, -1]] == 0)
    assert np.allclose(traj.q[0], traj.q[-1], atol=1e-12)
    h = traj.t[1] - traj.t[0]
    scale_dq = np.abs(traj.dq).max(axis=0)
    scale_ddq = np.abs(traj.ddq).max(axis=0)
    assert np.all(np.abs((traj.q[2:] - traj.q[:-2]) / (2 * h) - traj.dq[1:-1]) <= 1e-4 * scale_dq + 1e-9)
    assert np.all(np.abs((traj.dq[2:] - traj.dq[:-2]) / (2 * h) - traj.ddq[1:-1]) <= 1e-4 * scale_ddq + 1e-9)
    assert np.ptp(traj.q, axis=0).min() > 0.01  # every joint moves


def test_coefficients_are_swevers_series(robots, ur5_design):
    """q0, a, b reproduce the trajectory through q = q0 + sum a/(w l) sin(w l t) - b/(w l) cos(w l t); rest at t = 0."""
    t = ur5_design.trajectory.t[:, None, None]
    w = 2 * np.pi / ur5_design.period
    wl = w * np.arange(1, ur5_design.harmonics + 1)
    q = ur5_design.q0 + np.sum(ur5_design.a / wl * np.sin(wl * t) - ur5_design.b / wl * np.cos(wl * t), axis=2)
    assert np.allclose(q, ur5_design.trajectory.q, atol=1e-12)
    assert np.allclose(ur5_design.a.sum(axis=1), 0, atol=1e-12) and np.allclose(ur5_design.b @ wl, 0, atol=1e-9)


def test_every_limit_is_kept_at_every_sample(robots, ur5_design):
    """Positions, velocities, accelerations and the model's torques (friction included) stay within the limits."""
    robot, traj = robots["ur5"], ur5_design.trajectory
    for j in robot.joints:
        q, dq, ddq = traj.q[:, j.idx_v], traj.dq[:, j.idx_v], traj.ddq[:, j.idx_v]
        assert j.limits.lower <= q.min() and q.max() <= j.limits.upper
        assert np.abs(dq).max() <= j.limits.velocity
        assert np.abs(ddq).max() <= 8.0
    tau = feedforward(robot, traj).dynamics.tau
    assert np.all(np.abs(tau) <= [j.limits.effort for j in robot.joints])
    assert max(ur5_design.usage.values()) > 0.5  # the limits are used, not avoided


def test_torque_limits_bind(robots, ur5_design):
    """With effort limits below what the unconstrained design needs, the design keeps to them, and uses them."""
    robot = robots["ur5"]
    peak = np.abs(feedforward(robot, ur5_design.trajectory).dynamics.tau).max(axis=0)
    tight = np.array([j.limits.effort for j in robot.joints])
    tight[[0, 5]] = np.round(0.6 * peak[[0, 5]], 1)  # the pan axis is vertical: gravity does not load it
    joints = tuple(dataclasses.replace(j, limits=dataclasses.replace(j.limits, effort=float(e))) for j, e in zip(robot.joints, tight))
    weak = dataclasses.replace(robot, joints=joints)
    result = design_excitation(weak, **SMALL, acceleration=8.0, seed=3)
    dyn = feedforward(weak, result.trajectory).dynamics
    assert np.all(np.abs(dyn.tau) <= tight)
    # and bind: friction counts against the limit whichever its sign (and the margin is 10 %)
    assert ((np.abs(dyn.tau_rigid) + np.abs(dyn.tau_friction))[:, [0, 5]] / tight[[0, 5]]).max() > 0.75


def test_condition_number_beats_start_and_random_motions(robots, ur5_design):
    """The optimised condition number is below the random start's and below random Fourier motions of the same size."""
    robot = robots["ur5"]
    assert ur5_design.condition < 0.5 * ur5_design.condition_initial
    on_samples = excitation_condition(robot, ur5_design.trajectory)
    assert on_samples == pytest.approx(ur5_design.condition, rel=0.1)
    for seed in range(3):
        random = _random_fourier(robot, seed, SMALL["harmonics"], SMALL["period"], 8.0)
        assert on_samples < 0.5 * excitation_condition(robot, random)


def test_condition_number_is_that_of_the_normalised_base_regressor(robots, ur5_design):
    """excitation_condition = cond of [Y_b | dq, sgn dq, 1] with unit columns, built here from the regressor."""
    robot, traj = robots["ur5"], ur5_design.trajectory
    Y = base_parameters(robot).reduce(joint_torque_regressor(robot, traj.q, traj.dq, traj.ddq))
    F = np.zeros((len(traj), robot.nv, 3 * robot.nv))
    for j in range(robot.nv):
        F[:, j, 3 * j : 3 * j + 3] = np.column_stack([traj.dq[:, j], np.sign(traj.dq[:, j]), np.ones(len(traj))])
    W = np.concatenate([Y, F], axis=2).reshape(-1, Y.shape[2] + F.shape[2])
    expected = np.linalg.cond(W / np.linalg.norm(W, axis=0))
    assert excitation_condition(robot, traj) == pytest.approx(expected, rel=1e-9)
    rigid = np.linalg.cond(W[:, : Y.shape[2]] / np.linalg.norm(W[:, : Y.shape[2]], axis=0))
    assert excitation_condition(robot, traj, friction=False) == pytest.approx(rigid, rel=1e-9)


def test_same_seed_same_trajectory_other_seed_differs(robots):
    """The design is deterministic for a seed."""
    robot = robots["tree5"]
    a, b = (design_excitation(robot, **SMALL, seed=1) for _ in range(2))
    c = design_excitation(robot, **SMALL, seed=2)
    assert np.array_equal(a.trajectory.q, b.trajectory.q) and a.condition == b.condition
    assert not np.allclose(a.trajectory.q, c.trajectory.q)


def test_more_starts_never_do_worse(robots):
    """The best of several random starts includes the first: its condition number is not higher."""
    robot = robots["tree5"]
    one = design_excitation(robot, **SMALL, seed=4)
    three = design_excitation(robot, **SMALL, seed=4, starts=3)
    assert three.condition <= one.condition and three.starts == 3


def test_held_joints_stay_put(robots):
    """Joints left out of ``joints`` stay at mid range, at rest; the excited ones move."""
    robot = robots["scara"]
    result = design_excitation(robot, **SMALL, joints=["j1", "j2"])
    traj = result.trajectory
    assert result.held == {"j3": 0.0, "j4": 0.0}
    assert np.all(traj.q[:, 2:] == 0.0) and np.all(traj.dq[:, 2:] == 0.0)
    assert np.ptp(traj.q[:, :2], axis=0).min() > 0.1
    assert result.joint_names == ("j1", "j2")


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"harmonics": 0}, "harmonics"),
        ({"harmonics": 1}, "harmonics"),
        ({"period": 0.0}, "period"),
        ({"period": -2.0}, "period"),
        ({"joints": ["elbow"]}, "joints"),
        ({"margin": 0.7}, "margin"),
        ({"starts": 0}, "starts"),
    ],
)
def test_bad_options_are_refused(robots, options, field):
    """Bad options raise InputError naming the option."""
    with pytest.raises(InputError) as info:
        design_excitation(robots["ur5"], **{**SMALL, **options})
    assert info.value.field == field


def test_cli_refuses_bad_options_in_one_line_and_writes_nothing(tmp_path, cli):
    """Exit 2, one line naming the option, no file; an existing output stays as it was."""
    out = tmp_path / "exc.csv"
    base = ["trajectory", "excitation", "ur5", "--about", "shoulder_lift_joint=-1.5708", "--rate", "100", "--out", out]
    for args, option in [
        (["--harmonics", "0", "--period", "4"], "--harmonics"),
        (["--harmonics", "3", "--period", "0"], "--period"),
        (["--harmonics", "3", "--base-frequency", "-1"], "--base-frequency"),
        (["--harmonics", "3", "--period", "4", "--joints", "shoulder_pan_joint,nope"], "--joints"),
    ]:
        r = cli(*base, *args)
        assert r.code == 2, r.err
        lines = r.err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("mbctl: error:") and option in lines[0]
        assert not out.exists()
    out.write_text("keep\n")
    r = cli(*base, "--harmonics", "1", "--period", "4")
    assert r.code == 2 and out.read_text() == "keep\n"


def test_cli_writes_the_csv_whole(robots, tmp_path, cli):
    """A valid call writes the CSV (replacing the old file, no temporary left) and reports the condition numbers."""
    out = tmp_path / "exc.csv"
    out.write_text("old\n")
    r = cli(
        "trajectory", "excitation", "ur5", "--harmonics", "3", "--period", "4", "--rate", "100", "--grid", "36",
        "--joints", "shoulder_pan_joint,shoulder_lift_joint,elbow_joint", "--about", "shoulder_lift_joint=-1.5708", "--out", out,
    )
    assert r.code == 0, r.err
    assert "condition number" in r.out and "held: wrist_1_joint = 0" in r.out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["exc.csv"]
    traj = read_trajectory(out, robots["ur5"].joint_names)
    assert len(traj) == 401 and traj.duration == pytest.approx(4.0)
