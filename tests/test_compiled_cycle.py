"""The cycle as one generated call against the cycle in Python, the reference: every joint-space law,
both friction velocities, saturation, the three reactions to a collision, failed reads and a limit
breach, in lock-step runs whose logs and summaries must agree to round-off. (Every backend: the
lock-step half of tests/test_backend_matrix.py.)"""

from __future__ import annotations

import sys

import numpy as np
import pytest
from test_loop import Faulty

from mbctl.ctrl.controllers import build_controller
from mbctl.ctrl.tracking import TrackingController
from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.clock import VirtualClock
from mbctl.hardware.compiled_cycle import compiled_cycle
from mbctl.hardware.estimate import LoopEstimator
from mbctl.hardware.interface import CommunicationError, JointState
from mbctl.hardware.loop import LoopConfig, SafetyLimits, log_columns, run_loop
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.sample_timing import SampleTiming
from mbctl.hardware.session import SessionOptions, run_session
from mbctl.hardware.sim import SimPlant, truth_model

SCARA_MOVE = np.array([[0.0, 0.0, 0.0, 0.0], [0.3, 0.4, -0.2, 0.02]])
UR5_Q0 = np.array([0, -1.2, 1.4, -1.6, -1.57, 0])
LOGGED = ("t", "read_ok", "q", "dq", "q_ref", "dq_ref", "tau", "effort", "dq_hat", "tau_ext")


def _both(run) -> tuple[dict, dict]:
    """``run(compiled_cycle)`` -> (summary, log) for the compiled cycle and the Python one."""
    return run(True), run(False)


def _agree(compiled, python) -> None:
    (s_c, log_c), (s_p, log_p) = compiled, python
    assert s_c.cycle == "compiled" and s_p.cycle == "python"
    assert s_c.stop_reason == s_p.stop_reason and s_c.cycles == s_p.cycles and s_c.collision == s_p.collision
    assert s_c.saturated == s_p.saturated and s_c.end == s_p.end
    for key in LOGGED:
        if key in log_p.files:
            assert np.allclose(log_c[key], log_p[key], rtol=1e-9, atol=1e-9, equal_nan=True), key
    for name in ("tracking_rms", "torque_step_rms", "torque_step_reversals"):
        a, b = getattr(s_c, name), getattr(s_p, name)
        assert a.keys() == b.keys() and np.allclose(list(a.values()), list(b.values()), rtol=1e-7, atol=1e-12), name
    assert s_c.chatter == s_p.chatter


def _session(robot, traj, tmp_path, name, **options):
    def run(compiled: bool):
        path = tmp_path / f"{name}-{compiled}.npz"
        summary = run_session(robot, traj, SessionOptions(plant="sim", lockstep=True, compiled_cycle=compiled, **options), path)
        return summary, np.load(path)

    return run


@pytest.mark.parametrize("law", ["feedforward", "pd-gravity", "pd-feedforward", "computed-torque", "computed-torque measured"])
def test_every_law_logs_what_the_python_cycle_logs(configs, tmp_path, law):
    """The SCARA (Stribeck, LuGre and Coulomb-viscous joints; the observer on): same commands, estimates and counters."""
    text = (configs / "scara.toml").read_text()
    if law.endswith("measured"):
        text = text.replace("[control]", '[control]\nfriction_velocity = "measured"', 1)
        assert 'friction_velocity = "measured"' in text
    (tmp_path / "scara.urdf").write_text((configs / "scara.urdf").read_text())
    (tmp_path / "scara.toml").write_text(text)
    robot = load_robot(tmp_path / "scara.toml")
    traj = quintic_rest_to_rest(SCARA_MOVE, [0.4], 1000.0, robot.joint_names)
    compiled, python = _both(_session(robot, traj, tmp_path, "law", law=law.split()[0], duration_s=0.4))
    _agree(compiled, python)
    assert compiled[0].completed and np.abs(compiled[1]["tau"]).max() > 0.1


@pytest.mark.parametrize("controller", ["mpc", "task-space"])
def test_a_controller_called_between_two_generated_calls_logs_the_same(configs, tmp_path, controller):
    """The MPC (UR5) and the task-space law (Panda) run in Python between the generated estimate and
    the generated rest of the cycle: called once per cycle and at the warm-up, as the Python cycle does."""
    if controller == "mpc":
        robot = load_robot("ur5")
        traj = quintic_rest_to_rest(np.array([UR5_Q0, UR5_Q0 + 0.2]), [0.3], 1000.0, robot.joint_names)
    else:
        robot = load_robot(configs / "panda.toml")
        start = np.array([0, -0.3, 0, -2.2, 0, 2.0, 0.8, 0.02, 0.02])
        traj = quintic_rest_to_rest(np.array([start, start + [0.2, 0.2, -0.2, 0.2, 0.2, 0.2, -0.2, 0, 0]]), [0.3], 1000.0, robot.joint_names)
    compiled, python = _both(_session(robot, traj, tmp_path, controller, law=controller))
    _agree(compiled, python)
    assert compiled[0].completed


def test_saturated_commands_are_clipped_and_counted_alike(configs, tmp_path):
    """A move too fast for the SCARA's drives: both cycles clip the same commands to the effort limits."""
    robot = load_robot(configs / "scara.toml")
    traj = quintic_rest_to_rest(np.array([[0.0] * 4, [0.1, 0.1, -0.1, 0.01]]), [0.08], 1000.0, robot.joint_names)
    compiled, python = _both(_session(robot, traj, tmp_path, "fast", duration_s=0.2))
    _agree(compiled, python)
    effort = SafetyLimits.of(robot).effort
    assert compiled[0].saturated > 0 and (np.abs(compiled[1]["tau"]) <= effort + 1e-12).all()


@pytest.mark.parametrize("reaction", ["stop", "hold", "none"])
def test_collision_reactions_agree(tmp_path, reaction):
    """A push on a moving UR5's forearm: the same detection, message, reaction and log."""
    text = load_robot("ur5").source.read_text().replace('reaction = "stop"', f'reaction = "{reaction}"')
    text += '\n[plant.contact]\nframe = "wrist_1_link"\nforce = [0.0, 0.0, -20.0]\nstart = 0.15\nduration = 0.1\n'
    (tmp_path / "ur5.toml").write_text(text)
    robot = load_robot(tmp_path / "ur5.toml")
    traj = quintic_rest_to_rest(np.array([UR5_Q0, UR5_Q0 + 0.3]), [0.4], 1000.0, robot.joint_names)
    compiled, python = _both(_session(robot, traj, tmp_path, reaction))
    _agree(compiled, python)
    assert "collision detected: tau_ext.shoulder_lift_joint" in compiled[0].stop_reason


class Flaky(Faulty):
    """A backend whose every ``every``-th read fails (a missed reply), around the simulated plant."""

    def __init__(self, inner: SimPlant, every: int):
        super().__init__(inner, at=0, kind="comm")
        self.every = every

    def read(self):
        self.k += 1
        if self.k % self.every == 0:
            raise CommunicationError("no_reply", "drive 2 did not answer")
        return self.inner.read()


@pytest.mark.parametrize("case", ["failed reads", "limit breach"])
def test_failed_reads_and_a_limit_breach_agree(configs, tmp_path, case):
    """Every 7th read fails (no sample: the estimator waits for the next), or j1 leaves a range made
    narrow on purpose: the same log and the same stop reason."""
    robot = load_robot(configs / "scara.toml")
    traj = quintic_rest_to_rest(SCARA_MOVE, [0.4], 1000.0, robot.joint_names)
    limits = SafetyLimits.of(robot)
    if case == "limit breach":
        upper = limits.upper.copy()
        upper[0] = 0.2
        limits = SafetyLimits(lower=limits.lower, upper=upper, velocity=limits.velocity, effort=limits.effort)

    def run(compiled: bool):
        tracking = TrackingController(build_controller(robot, "computed-torque"), traj)
        estimator = LoopEstimator(robot, 1e-3)
        truth, config = truth_model(robot)
        backend = Flaky(SimPlant(truth, 1e-3, config), every=7 if case == "failed reads" else 10**9)
        path = tmp_path / f"{compiled}.npz"
        with backend:
            summary = run_loop(backend, tracking, limits, LoopConfig(duration_s=0.4, paced=False, compiled_cycle=compiled),
                               RunLog(path, log_columns(robot.actuated_names, estimation=True)), tracking.reference, estimator=estimator)  # fmt: skip
        return summary, np.load(path)

    compiled, python = _both(run)
    _agree(compiled, python)
    if case == "failed reads":
        assert compiled[0].completed and compiled[0].failed_reads > 30 and np.isnan(compiled[1]["q"]).any()
    else:
        assert compiled[0].stop_reason.startswith("limit breach: q.j1 = ")



class Late(VirtualClock):
    """A virtual clock that wakes 0.3 ms after each deadline (a paced cycle's instant falls between two
    rows of the reference)."""

    def sleep_until(self, deadline: float) -> None:
        self.t = max(self.t, deadline + 3e-4)


def test_a_paced_cycle_without_a_sample_clock_logs_the_same(configs, tmp_path):
    """Paced on a virtual clock against a backend with no sample clock (nothing measured: the compiled
    cycle's short path), the reference interpolated between its rows: the same log and counters."""
    robot = load_robot(configs / "scara.toml")
    traj = quintic_rest_to_rest(SCARA_MOVE, [0.3], 1000.0, robot.joint_names)

    def run(compiled: bool):
        tracking = TrackingController(build_controller(robot, "computed-torque"), traj)
        truth, config = truth_model(robot)
        clock = Late(0.0)
        # the simulated plant behind a serial-like bus: no sample clock
        backend, path = Faulty(SimPlant(truth, 1e-3, config), at=10**9, kind="comm"), tmp_path / f"{compiled}.npz"
        loop = LoopConfig(duration_s=0.3, paced=True, realtime_priority=None, compiled_cycle=compiled)
        with backend:
            summary = run_loop(backend, tracking, SafetyLimits.of(robot), loop, RunLog(path, log_columns(robot.actuated_names, estimation=True)),
                               tracking.reference, clock=clock, estimator=LoopEstimator(robot, 1e-3))  # fmt: skip
        return summary, np.load(path)

    compiled, python = _both(run)
    _agree(compiled, python)
    assert compiled[0].completed and not compiled[0].sample_timing
    assert np.allclose(compiled[1]["t"] % 1e-3, 3e-4)  # every cycle between two rows


def test_a_lock_step_cycle_runs_no_python_function(robots):
    """Once the estimator has started, a lock-step step of a compiled law is the copies, the packing of
    its scalars and the generated call: no Python function runs inside it (sys.setprofile's record)."""
    robot = robots["scara"]
    traj = quintic_rest_to_rest(SCARA_MOVE, [0.3], 1000.0, robot.joint_names)
    tracking, estimator = TrackingController(build_controller(robot, "computed-torque"), traj), LoopEstimator(robot, 1e-3)
    timing = SampleTiming(1e-3, None, measured=False, delay_cycles=0)
    cycle = compiled_cycle(tracking, SafetyLimits.of(robot), robot.joint_names, tracking.reference, estimator, logs_estimates=True, timing=timing,
                           measured_torque=True, sample_clock=True, paced=False, rate_hz=1000.0, cycles=10)  # fmt: skip
    assert cycle is not None
    state = JointState(t=0.0, q=traj.q[0], dq=traj.dq[0], effort=np.zeros(robot.nv))
    cycle.warm_up(state)
    cycle.step(0, 0.0, state, True)
    calls, state = [], JointState(t=1e-3, q=traj.q[1], dq=traj.dq[1], effort=np.zeros(robot.nv))
    sys.setprofile(lambda frame, event, arg: calls.append(frame.f_code.co_name) if event == "call" else None)
    try:
        tau = cycle.step(1, 1e-3, state, True)
    finally:
        sys.setprofile(None)
    assert calls == ["step"] and tau.shape == (robot.nv,)
