"""Velocity estimation: filter gains, the compiled step against the interpreted one, estimates
against the plant's exact velocity, and the chatter warning."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from mbctl.config.control import EndSpec
from mbctl.ctrl.estimation.estimator import StateEstimator
from mbctl.ctrl.estimation.filters import alpha_beta_gains, first_order_gain, observer_gains
from mbctl.ctrl.estimation.settings import estimation_settings
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.summary import chatter_warnings

UR5_MOVE = np.array([[0, -1.2, 1.4, -1.6, -1.57, 0], [0.4, -0.9, 1.1, -1.3, -1.2, 0.3]])


def _poles(L: np.ndarray, A: np.ndarray) -> np.ndarray:
    return np.linalg.eigvals((np.eye(len(L)) - np.outer(L, np.eye(len(L))[0])) @ A)


def test_filter_gains_place_the_poles_at_the_cutoff():
    """alpha-beta: a double pole, the three-state observer: a triple pole, both at exp(-2 pi f h)."""
    h, f = 1e-3, 25.0
    p = np.exp(-2 * np.pi * f * h)
    a, b = alpha_beta_gains(f, h)
    assert np.allclose(_poles(np.array([a, b]), np.array([[1.0, 1.0], [0.0, 1.0]])), p, atol=1e-6)
    trapezoid = np.array([[1.0, 1.0, 0.5], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])  # q, h v, h^2 d
    assert np.allclose(_poles(np.array(observer_gains(f, h)), trapezoid), p, atol=1e-4)
    assert first_order_gain(f, h) == pytest.approx(1 - p)


@pytest.mark.parametrize("kind", ["first-order", "alpha-beta", "model", "measured"])
def test_compiled_step_equals_the_interpreted_one(robots, kind):
    """The generated C and CasADi's interpreter give the same estimates and observer output."""
    robot = robots["ur5"]
    settings = dataclasses.replace(estimation_settings(robot), velocity=kind, threshold=np.full(6, 5.0))
    rng = np.random.default_rng(1)
    a, b = (StateEstimator(robot, 1e-3, settings, compiled=c) for c in (True, False))
    q0 = UR5_MOVE[0]
    for e in (a, b):
        e.reset(0.0, q0, np.zeros(6))
    for k in range(1, 40):
        q, dq, tau = q0 + 0.01 * rng.normal(size=6), rng.normal(size=6), 20 * rng.normal(size=6)
        wa, wb = a.update(k * 1e-3, q, dq, tau), b.update(k * 1e-3, q, dq, tau)
        assert wa == pytest.approx(wb, rel=1e-9, abs=1e-12)
        for x, y in ((a.dq_hat, b.dq_hat), (a.tau_ext, b.tau_ext), (a.hold_torque(q0), b.hold_torque(q0))):
            assert np.allclose(x, y, rtol=1e-9, atol=1e-9)
    assert a.compiled and not b.compiled


def test_a_measurement_read_twice_is_no_step(robots):
    """The same measurement time again (a plant that has not sampled since) leaves every estimate as it was."""
    robot = robots["ur5"]
    est = StateEstimator(robot, 1e-3, compiled=False)
    est.reset(0.0, UR5_MOVE[0], np.zeros(6))
    est.update(1e-3, UR5_MOVE[0] + 1e-4, np.zeros(6), np.full(6, 10.0))
    before = np.concatenate([est.dq_hat, est.tau_ext])
    assert np.abs(before).max() > 0
    est.update(1e-3, UR5_MOVE[0] + 3e-4, np.zeros(6), np.full(6, -50.0))
    assert np.array_equal(np.concatenate([est.dq_hat, est.tau_ext]), before)


def test_one_compiled_step_serves_robots_that_differ_in_their_numbers(robots):
    """Two UR5s with different forearm masses share one library, and each gets its own numbers:
    the same estimates as a step built with its numbers as constants."""
    import pinocchio as pin

    from mbctl.ctrl.estimation.model import EstimationModel
    from mbctl.ctrl.estimation.step import build_step
    from mbctl.dynamics.codegen import CompiledFunction

    robot = robots["ur5"]
    model = pin.Model(robot.model)
    jid = robot.joint("elbow_joint").id
    body = model.inertias[jid]
    model.inertias[jid] = pin.Inertia(1.5 * body.mass, body.lever, 1.5 * body.inertia)  # the same zeros: the same structure
    heavier = dataclasses.replace(robot, model=model)
    settings = dataclasses.replace(estimation_settings(robot), threshold=np.full(6, 5.0))
    a, b = (StateEstimator(r, 1e-3, settings) for r in (robot, heavier))
    assert a._f.library == b._f.library
    s = settings
    reference = CompiledFunction(build_step(EstimationModel(heavier), s.velocity, s.cutoff_hz, 1e-3, s.gain, s.threshold), None)
    b.reset(0.0, UR5_MOVE[0], np.zeros(6))
    reference.inputs[0][:], reference.inputs[1][:] = b._x, b._o
    rng = np.random.default_rng(2)
    for k in range(1, 20):
        q, tau = UR5_MOVE[0] + 0.01 * rng.normal(size=6), 20 * rng.normal(size=6)
        b.update(k * 1e-3, q, np.zeros(6), tau)
        x, o, _, dq_hat, tau_ext, *_ = reference(reference.inputs[0].copy(), reference.inputs[1].copy(), q, np.zeros(6), tau, 1e-3, np.zeros(6), 1.0, 0.0, tau)
        reference.inputs[0][:], reference.inputs[1][:] = x, o
        assert np.allclose(b.dq_hat, dq_hat, rtol=1e-9, atol=1e-9) and np.allclose(b.tau_ext, tau_ext, rtol=1e-9, atol=1e-9)


def _ur5_copy(tmp_path, plant: str, control: str = "") -> str:
    text = load_robot("ur5").source.read_text()
    start = text.index("[control.collision]")
    text = text[:start] + text[text.index("[control.pd]"):]  # observe, never stop: coarse encoders make the observer noisy
    text = text.replace("[control.computed-torque]", f"[control]\n{control}\n[control.computed-torque]", 1) + f"\n[plant]\n{plant}\n"
    path = tmp_path / "ur5.toml"
    path.write_text(text)
    return str(path)


@pytest.fixture(scope="module")
def ur5_move(tmp_path_factory):
    path = tmp_path_factory.mktemp("move") / "move.csv"
    write_trajectory(path, quintic_rest_to_rest(UR5_MOVE, [1.2], 1000.0, load_robot("ur5").joint_names))
    return path


def _run(cli, robot, traj, tmp_path, name="run"):
    r = cli("run", robot, "--trajectory", traj, "--lockstep", "--log", tmp_path / f"{name}.npz", "--summary", tmp_path / f"{name}.json")
    return r, json.loads((tmp_path / f"{name}.json").read_text()), np.load(tmp_path / f"{name}.npz")


@pytest.mark.slow
@pytest.mark.parametrize("kind", ["model", "alpha-beta"])
def test_estimate_follows_the_exact_velocity_from_coarse_encoders(cli, tmp_path, ur5_move, kind):
    """From 4096-count encoders the estimate is within a few percent of the plant's exact velocity
    (the log's dq: the plant reports it exactly), five times closer than a raw difference."""
    robot = _ur5_copy(tmp_path, 'encoder_counts = 16384\nvelocity = "exact"', f'velocity = "{kind}"\nvelocity_cutoff_hz = 40.0')
    r, summary, log = _run(cli, robot, ur5_move, tmp_path)
    assert r.code == 0, r.out + r.err
    moving = summary["cycles"] - round(EndSpec.hold_s * 1000)  # the move, without the end hold at rest
    exact, estimate, q = log["dq"][:moving], log["dq_hat"][:moving], log["q"][:moving]
    raw = np.diff(q, axis=0) / 1e-3  # what a difference of the same encoders gives
    err = np.sqrt(((estimate - exact) ** 2).mean(axis=0))
    raw_err = np.sqrt(((raw - exact[1:]) ** 2).mean(axis=0))
    peak = np.abs(exact).max(axis=0)
    assert (err < 0.045 * peak).all(), err / peak  # 0.040 on the elbow with the UR5's rotor inertia (0.039 without)
    assert (err < 0.2 * raw_err).all(), (err, raw_err)


@pytest.mark.slow
def test_chatter_is_reported_on_coarse_encoders_and_not_on_the_defaults(cli, tmp_path, ur5_move):
    """A differenced 4096-count encoder used as is makes computed torque chatter: warned, and
    the RMS step is large; the bundled UR5 (drive-table encoders, model observer) is smooth."""
    robot = _ur5_copy(tmp_path, 'encoder_counts = 4096\nvelocity = "difference"', 'velocity = "measured"')
    r, summary, log = _run(cli, robot, ur5_move, tmp_path, "coarse")
    assert summary["chatter"] and "chatters" in r.err and "shoulder_lift_joint" in r.err
    assert summary["torque_step_rms"]["shoulder_lift_joint"] > 10.0
    effort = np.array([j.limits.effort for j in load_robot("ur5").joints])  # the loop's in-place counts = the log's commands
    assert np.allclose(list(summary["torque_step_reversals"].values()), _reversals(log["tau"], effort), rtol=1e-12)
    r, summary, _ = _run(cli, "ur5", ur5_move, tmp_path, "default")
    assert r.code == 0 and summary["chatter"] == [] and "chatters" not in r.err
    assert max(summary["torque_step_rms"].values()) < 1.0 and summary["saturated"] == 0
    assert "drive table" in summary["sensing"] and "model-based" in summary["estimation"]


def _reversals(tau: np.ndarray, effort: np.ndarray) -> np.ndarray:
    """The fraction of cycles (rows) whose step goes back on the previous one by more than 0.2 % of ``effort``."""
    steps = np.diff(tau, axis=0)
    back = np.minimum(np.abs(steps[1:]), np.abs(steps[:-1]))
    return ((steps[1:] * steps[:-1] < 0) & (back > 0.002 * effort)).mean(axis=0)


def test_chatter_warning_tells_noise_from_a_smooth_command():
    """Steps of alternating sign warn; a steep but smooth ramp, tiny noise, or a bang-bang switch
    (full torque to full reverse, a few cycles of ringing) on a finely sawing ramp does not."""
    names, effort = ["a", "b", "c", "d"], np.array([100.0, 100.0, 100.0, 100.0])
    rng = np.random.default_rng(0)
    switch = np.where(np.arange(1000) < 500, 90.0, -90.0) + np.linspace(0, 5, 1000) + 0.01 * (-1.0) ** np.arange(1000)
    switch[500:504] += [-60.0, 80.0, -30.0, 10.0]
    tau = np.column_stack([rng.normal(0, 2.0, 1000), np.linspace(0, 90, 1000), rng.normal(0, 0.01, 1000), switch])
    warnings = chatter_warnings(names, _reversals(tau, effort), effort)
    assert len(warnings) == 1 and warnings[0].startswith("a:")
