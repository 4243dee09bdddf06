"""The fixed-rate loop on the simulated plant: tracking, determinism, and every fault path."""

from __future__ import annotations

import json

import numpy as np
import pinocchio as pin
import pytest

from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.clock import VirtualClock
from mbctl.hardware.interface import CommandMode, CommunicationError, DriveFault, JointInterface
from mbctl.hardware.loop import PHASES, LoopConfig, SafetyLimits, log_columns, run_loop
from mbctl.hardware.overrun import OverrunMonitor, OverrunPolicy
from mbctl.hardware.plant_process import PlantProcess
from mbctl.hardware.runlog import RunLog, recover
from mbctl.hardware.sim import PlantConfig, SensorModel, SimPlant

WAYPOINTS = np.array([[0, 0, 0, 0], [0.6, 0.8, -0.4, 0.03], [0, 0, 0, 0.0]])


@pytest.fixture(scope="module")
def scara(configs):
    return load_robot(configs / "scara.toml")


class PDGravity:
    """tau = g(q) + Kp (q_ref - q) + Kd (dq_ref - dq) + friction feed-forward of the model (test controller)."""

    def __init__(self, robot, traj, kp=400.0, kd=40.0):
        self.robot, self.traj, self.kp, self.kd = robot, traj, kp, kd
        self.data = robot.create_data()

    def __call__(self, t, state):
        q_ref, dq_ref, ddq_ref = self.traj.at(t)
        qp = self.robot.configuration(state.q)
        M = pin.crba(self.robot.model, self.data, qp)
        M = np.triu(M) + np.triu(M, 1).T
        h = pin.nonLinearEffects(self.robot.model, self.data, qp, state.dq)
        return M @ (ddq_ref + self.kp * (q_ref - state.q) + self.kd * (dq_ref - state.dq)) + h

    def reference(self, t):
        q, dq, _ = self.traj.at(t)
        return q, dq


EXACT = SensorModel(encoder_counts=0, velocity="exact")


def lockstep_run(robot, tmp_path, name="run", controller=None, backend=None, duration=1.0, sensors=EXACT):
    traj = quintic_rest_to_rest(WAYPOINTS, [0.8, 0.8], 1000.0, robot.joint_names)
    controller = controller or PDGravity(robot.with_friction({n: None for n in robot.joint_names}), traj)
    backend = backend or SimPlant(robot.with_friction({n: None for n in robot.joint_names}), 1e-3, PlantConfig(sensors=sensors))
    log = RunLog(tmp_path / f"{name}.npz", log_columns(backend.joint_names))
    with backend:
        backend.enable()
        summary = run_loop(backend, controller, SafetyLimits.of(robot), LoopConfig(duration_s=duration, paced=False), log, PDGravity.reference.__get__(PDGravity(robot, traj)))
    return summary, np.load(tmp_path / f"{name}.npz"), backend


def test_computed_torque_tracks_on_the_exact_plant(scara, tmp_path):
    """With the plant equal to the model and exact sensors, the tracking error stays tiny."""
    summary, log, _ = lockstep_run(scara, tmp_path)
    assert summary.stop_reason == "completed" and summary.cycles == 1000
    assert summary.max_abs_error < 2e-4  # rad or m; first-order plant steps and a zero-order hold
    assert log["q"].shape == (1000, 4) and np.isfinite(log["tau"]).all()


def test_lockstep_runs_are_deterministic(scara, tmp_path):
    sensors = SensorModel(encoder_counts=4096, velocity="difference", effort_noise=0.01)
    a = lockstep_run(scara, tmp_path, "a", sensors=sensors)[1]
    b = lockstep_run(scara, tmp_path, "b", sensors=sensors)[1]
    assert np.array_equal(a["q"], b["q"]) and np.array_equal(a["effort"], b["effort"])


class Faulty(JointInterface):
    """Wraps a backend and fails on purpose from cycle `at` on."""

    def __init__(self, inner, at, kind):
        self.inner, self.at, self.kind, self.k = inner, at, kind, 0
        self.joint_names = inner.joint_names
        self.torque_off_at = None

    def open(self):
        self.inner.open()

    def close(self):
        self.inner.close()

    def enable(self):
        self.inner.enable()

    def disable(self):
        self.torque_off_at = self.k
        self.inner.disable()

    def read(self):
        self.k += 1
        if self.k > self.at and self.kind == "comm":
            raise CommunicationError("no_reply", "servo 1 did not answer sync read")
        if self.k > self.at and self.kind == "fault":
            raise DriveFault("j2", 0x20, "overload")
        return self.inner.read()

    def write(self, command):
        self.inner.write(command)


class Exploding(PDGravity):
    def __call__(self, t, state):
        if t > 0.2:
            raise RuntimeError("boom")
        return super().__call__(t, state)


@pytest.mark.parametrize(
    "case, reason",
    [
        ("comm", "watchdog: 3 consecutive failed reads"),
        ("fault", "drive fault: drive of joint j2: hardware error 0x20 (overload)"),
        ("exception", "exception in controller: RuntimeError: boom"),
        ("limit", "limit breach: q.j1"),
    ],
)
def test_faults_stop_with_torque_off_and_a_complete_log(scara, tmp_path, case, reason):
    frictionless = scara.with_friction({n: None for n in scara.joint_names})
    traj = quintic_rest_to_rest(WAYPOINTS, [0.8, 0.8], 1000.0, scara.joint_names)
    plant = SimPlant(frictionless, 1e-3, PlantConfig(sensors=SensorModel(encoder_counts=0, velocity="exact")))
    controller = PDGravity(frictionless, traj)
    if case == "exception":
        controller = Exploding(frictionless, traj)
    if case == "limit":
        far = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [3.5, 0, 0, 0.0]]), [2.5], 1000.0, scara.joint_names)
        controller = PDGravity(frictionless, far)  # j1 heads past its 2.9 rad limit
    backend = Faulty(plant, at=300 if case in ("comm", "fault") else 10**9, kind=case)
    summary, log, _ = lockstep_run(scara, tmp_path, controller=controller, backend=backend, duration=3.0)
    assert summary.stop_reason.startswith(reason), summary.stop_reason
    assert backend.torque_off_at is not None and backend.torque_off_at - summary.cycles <= 2
    assert not plant._enabled
    assert log["t"].shape[0] == summary.cycles  # every completed cycle is in the log
    if case == "comm":
        # the warm-up read is the backend's first: reads 301..303 fail, the third stops the loop unlogged
        assert summary.cycles == 301 and summary.failed_reads == 3


def test_a_crashed_run_leaves_a_recoverable_log(tmp_path):
    log = RunLog(tmp_path / "crash.npz", ["t", "q.a", "q.b"])
    for k in range(120):
        log.append(np.array([k * 1e-3, k, -k]))
    log._file.flush()  # what the process had written when it died
    recovered = np.load(recover(tmp_path / "crash.npz.partial"))
    assert recovered["q"].shape == (120, 2) and recovered["t"][-1] == pytest.approx(0.119)


@pytest.mark.slow
def test_paced_run_follows_the_wall_clock(scara, tmp_path):
    """Paced for 2 s at 1 kHz against the plant in its own process: every cycle logged, timing filled in.

    No timing threshold here (shared machines are noisy): benchmarks/loop.py measures it.
    """
    frictionless = scara.with_friction({n: None for n in scara.joint_names})
    traj = quintic_rest_to_rest(WAYPOINTS, [1.0, 1.0], 1000.0, scara.joint_names)
    plant = PlantProcess(frictionless, 1e-3, PlantConfig(substeps=4))
    controller = PDGravity(frictionless, traj)
    log = RunLog(tmp_path / "paced.npz", log_columns(plant.joint_names))
    with plant:  # held until the loop turns torque on, after its warm-up
        config = LoopConfig(duration_s=2.0, paced=True, overrun=OverrunPolicy.unlimited())
        s = run_loop(plant, controller, SafetyLimits.of(scara), config, log, controller.reference)
    print(json.dumps(s.to_json(), indent=1))
    assert s.completed and s.cycles == 2000  # possibly degraded: overruns are counted, not judged here
    assert np.load(tmp_path / "paced.npz")["t"][-1] >= 1.99  # wall-clock seconds since the start
    assert all(np.isfinite([s.period_p50_us, s.period_p99_us, s.compute_p99_us]))
    timing = plant.timing()  # the plant stepped on its own clock and reported it
    assert timing["steps"] > 0 and timing["real_time_factor"] > 0 and np.isfinite(timing["step_p99_us"])


# ---- virtual time: warm-up, phase timings and overruns, exactly --------------------------------


class Costly(JointInterface):
    """A lock-step plant whose read and write take virtual time; counts calls.

    ``read_cost(i)`` is the cost (s) of the i-th read, 0 being the warm-up read.
    """

    def __init__(self, inner, clock, read_cost, write_cost=1e-4):
        self.inner, self.clock, self.read_cost, self.write_cost = inner, clock, read_cost, write_cost
        self.joint_names = inner.joint_names
        self.reads = self.writes = 0
        self.enabled = False

    def open(self):
        self.inner.open()

    def close(self):
        self.inner.close()

    def enable(self):
        self.enabled = True
        self.inner.enable()

    def disable(self):
        self.enabled = False
        self.inner.disable()

    def read(self):
        self.clock.advance(self.read_cost(self.reads))
        self.reads += 1
        return self.inner.read()

    def write(self, command):
        self.clock.advance(self.write_cost)
        self.writes += 1
        self.inner.write(command)


def virtual_run(robot, tmp_path, read_cost, duration=1.0, policy=None, control_cost=3e-4):
    """Paced run on virtual time: read, control and write costs as given, everything else free."""
    frictionless = robot.with_friction({n: None for n in robot.joint_names})
    traj = quintic_rest_to_rest(WAYPOINTS, [0.8, 0.8], 1000.0, robot.joint_names)
    clock = VirtualClock(100.0)
    backend = Costly(SimPlant(frictionless, 1e-3, PlantConfig(sensors=EXACT)), clock, read_cost)
    law = PDGravity(frictionless, traj)
    calls = []

    def controller(t, state):
        calls.append((t, backend.reads, backend.writes, backend.enabled))
        clock.advance(control_cost)
        return law(t, state)

    log = RunLog(tmp_path / "virtual.npz", log_columns(backend.joint_names))
    with backend:
        backend.enable()
        config = LoopConfig(duration_s=duration, paced=True, overrun=policy or OverrunPolicy())
        summary = run_loop(backend, controller, SafetyLimits.of(robot), config, log, law.reference, clock=clock)
    return summary, np.load(tmp_path / "virtual.npz"), backend, calls


def test_warm_up_calls_everything_once_before_the_first_cycle(scara, tmp_path):
    """The controller's first call follows one read and precedes every write; it is not logged."""
    summary, log, backend, calls = virtual_run(scara, tmp_path, lambda i: 2e-4, duration=0.05)
    assert summary.stop_reason == "completed" and summary.cycles == 50
    assert calls[0] == (0.0, 1, 0, True) and calls[1] == (0.0, 2, 0, True)  # warm-up, then cycle 1 at t = 0
    assert len(calls) == 51 and backend.reads == 51 and backend.writes == 50
    assert log["t"].shape == (50,) and log["t"][0] == 0.0


def test_phase_timings_are_the_costs_of_each_phase(scara, tmp_path):
    """On virtual time the phases take exactly their costs and the period is exact."""
    summary, log, _, _ = virtual_run(scara, tmp_path, lambda i: 2e-4, duration=0.2)
    assert summary.clean and summary.overruns == 0 and summary.cycles == 200
    expected = {"read": 200.0, "control": 300.0, "write": 100.0, "log": 0.0}
    for phase in PHASES:
        for stat in ("p50", "p99", "max"):
            assert summary.phases_us[phase][stat] == pytest.approx(expected[phase], abs=1e-6), (phase, stat)
    assert summary.compute_p99_us == pytest.approx(600.0, abs=1e-6)
    assert summary.period_error_max_us < 1e-6 and summary.period_jitter_us < 1e-6
    assert log["phase"].shape == (200, 4) and np.isnan(log["phase"][0, 3])  # no previous cycle to have logged


def test_a_few_overruns_complete_degraded(scara, tmp_path):
    """Three slow cycles, spread out: the run completes, says it is degraded, and is not clean."""
    summary, log, _, _ = virtual_run(scara, tmp_path, lambda i: 1.5e-3 if i in (100, 400, 700) else 2e-4)
    assert summary.stop_reason == "completed, degraded: 3 overruns (0.3 %)"
    assert summary.completed and not summary.clean and summary.cycles == 1000
    assert summary.to_json()["clean"] is False
    late = np.flatnonzero(np.diff(log["t"]) > 1.5e-3) + 1  # a skipped deadline after each slow cycle
    assert late.tolist() == [100, 400, 700]


@pytest.mark.parametrize(
    "slow, cycles, reason",
    [
        (lambda i: i >= 200, 204, "overrun limit: 5 consecutive overruns (limit 5)"),
        (lambda i: i > 0 and i % 15 == 0, 90, "overrun limit: 6 of the last 90 cycles overran (limit 5 %)"),
    ],
)
def test_too_many_overruns_stop_with_torque_off(scara, tmp_path, slow, cycles, reason):
    """Consecutive overruns, or too large a fraction of a window, stop the run at the exact cycle."""
    summary, log, backend, _ = virtual_run(scara, tmp_path, lambda i: 1.5e-3 if slow(i) else 2e-4)
    assert summary.stop_reason == reason
    assert summary.cycles == cycles and log["t"].shape == (cycles,)
    assert not backend.enabled and not summary.completed


def test_overrun_policy_limits():
    """The window counts only its last cycles; an unlimited policy never stops; bad values are refused."""
    monitor = OverrunMonitor(OverrunPolicy(window=10, max_fraction=0.2, max_consecutive=0))
    pattern = [True, False, False, False, False, False, False, False, False, False, True, True]
    assert [monitor.record(x) for x in pattern] == [""] * 12  # the first overrun left the window
    assert monitor.record(True) == "overrun limit: 3 of the last 10 cycles overran (limit 20 %)"
    free = OverrunMonitor(OverrunPolicy.unlimited())
    assert all(free.record(True) == "" for _ in range(1000))
    with pytest.raises(ValueError, match=r"max overrun fraction must be within \[0, 1\], got 1.5"):
        OverrunPolicy(max_fraction=1.5)


def test_a_goal_position_off_the_joint_range_stops_with_torque_off(tmp_path):
    """Position mode (a servo's firmware closes the loop): goals inside the range are sent, the
    first goal beyond the upper limit (3.2 rad) stops the run, naming joint and goal, torque off."""
    bench = load_robot("xl330-pendulum")
    plant = SimPlant(bench, 5e-3, PlantConfig(sensors=EXACT))
    log = RunLog(tmp_path / "goals.npz", log_columns(plant.joint_names))
    ramp = lambda t, state: np.array([2.0 * t])  # noqa: E731  crosses 3.2 rad at t = 1.6 s
    with plant:
        plant.enable()
        summary = run_loop(plant, ramp, SafetyLimits.of(bench), LoopConfig(rate_hz=200.0, duration_s=3.0, paced=False, command=CommandMode.POSITION), log)
    assert summary.stop_reason.startswith("goal position of servo = 3.2"), summary.stop_reason
    assert summary.cycles == 321 and not plant._enabled  # cycle 321 (t = 1.605 s) sends the first goal beyond it


class SpyEstimator:
    """An estimate step that records the measurement times it is given and passes the state on."""

    reaction = "none"

    def __init__(self, n):
        self.dq_hat, self.tau_ext, self.times = np.zeros(n), np.zeros(n), []
        self.q_pred, self.dq_pred, self.threshold, self.friction_share = np.zeros(n), np.zeros(n), np.full(n, np.inf), 1.0

    def reset(self, t, state):
        self.times.append(("reset", t))

    def __call__(self, t, state, tau, bound=0.0, horizon=0.0, tau_next=None):
        self.times.append(("step", t))
        self.q_pred, self.dq_pred = state.q, state.dq
        return state

    def detection(self, t):
        return ""

    def hold(self, q_hold):
        return np.zeros_like(q_hold)


class LateSamples(Costly):
    """The lock-step plant whose measurements carry times on a clock of their own (7.75 s ahead of
    the loop's), declared a sample clock or not."""

    def __init__(self, inner, clock, sample_clock):
        super().__init__(inner, clock, lambda i: 1e-4)
        self.sample_clock = sample_clock

    def read(self):
        state = super().read()
        return type(state)(t=state.t + 7.75, q=state.q, dq=state.dq, effort=state.effort)


@pytest.mark.parametrize("sample_clock", [True, False])
def test_the_estimate_steps_by_the_sample_times_of_a_plant_clock_else_the_loop_time(scara, tmp_path, sample_clock):
    """A backend with a sample clock (a simulated plant) has its measurements estimated at their own
    times (a paced loop's wake-ups jitter, the plant's samples do not: stepping by the wake-ups made
    the UR5's observer read 20 N·m in free motion); a bus's host read times are not used (emulated in
    lock-step they are not the plant's time), the loop time is."""
    frictionless = scara.with_friction({n: None for n in scara.joint_names})
    traj = quintic_rest_to_rest(WAYPOINTS, [0.8, 0.8], 1000.0, scara.joint_names)
    clock = VirtualClock(100.0)
    backend = LateSamples(SimPlant(frictionless, 1e-3, PlantConfig(sensors=EXACT)), clock, sample_clock)
    law, spy = PDGravity(frictionless, traj), SpyEstimator(4)
    log = RunLog(tmp_path / "spy.npz", log_columns(backend.joint_names))
    with backend:
        backend.enable()
        config = LoopConfig(duration_s=0.02, paced=True)
        summary = run_loop(backend, law, SafetyLimits.of(scara), config, log, law.reference, clock=clock, estimator=spy)
    assert summary.stop_reason == "completed" and summary.cycles == 20
    steps = np.array([t for kind, t in spy.times if kind == "step"])
    assert spy.times[0][0] == "reset" and len(steps) == 21  # warm-up, then every cycle
    loop_times = np.concatenate([[0.0], 1e-3 * np.arange(20)])  # warm-up and cycle 1 see the plant at rest at 0
    assert np.allclose(steps, loop_times + (7.75 if sample_clock else 0.0), atol=1e-9)
