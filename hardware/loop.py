"""The fixed-rate control loop: read -> estimate -> control -> safety -> write -> log.

Timing: absolute deadlines ``t0 + k*period`` on a :class:`~mbctl.hardware.clock.LoopClock`
(the wall clock by default: sleep, then spin the last ``spin_s``). A cycle that
ends after the next deadline is an overrun; missed deadlines are skipped, not
made up, so the rate does not drift (as ros2_control does). The
:class:`~mbctl.hardware.overrun.OverrunPolicy` decides how many overruns stop the
run; any overrun makes a completed run *degraded*, and its stop reason says so
(``completed, degraded: 212 overruns (4.7 %)``).

Warm-up: before the first deadline the loop reads the backend once, calls the
controller and the reference at t = 0 and goes through the logging path once
(nothing is written to the backend or the log), so cycle 1 is not the first call
of anything. The controller therefore sees t = 0 twice. Then it turns torque on,
just before the first deadline.

Estimate (optional, :class:`Estimator`): the measurement goes through a state estimator
(velocity, external joint torques) before the controller and the limit checks see it; the
estimates are logged (``dq_hat``, ``tau_ext``). A detected collision stops the run with torque
off (reaction ``stop``), or hands the arm to the estimator's compliant hold for the rest of the
run (``hold``), or is only reported (``none``); each says so in the stop reason.

Chatter: the summary holds the RMS change of each joint's torque command from one cycle to
the next and how often a cycle reverses it, and a warning per joint whose command chatters
(:func:`chatter_warnings`).

Each cycle's phases are timed — read, control (estimation, safety checks and the controller),
write, log — and their p50/p99/max are in the summary; the log holds them per cycle.

Safety, checked every cycle, stops the run with a stated reason:

- position or velocity of a joint outside its limits (a limit breach);
- ``watchdog_failures`` consecutive failed reads (communication errors);
- a drive fault, an exception in the controller, SIGINT or SIGTERM;
- too many overruns (the overrun policy).

Torque commands beyond a joint's effort limit are saturated to it and counted
(``saturated`` in the summary). With ``LoopConfig.command`` set to position, the
controller's outputs are goal positions (rad, m) for drives that close their own
position loop (servos in position mode), written as such once they lie in the joints'
position ranges (a goal outside stops the run); the log's ``tau`` is NaN then.

The end: a stop disables the backend before anything else (its stop: torque off, CiA 402 quick stop);
a clean finish first holds the last reference for ``LoopConfig.end_hold_s`` (logged cycles), then
hands the arm to the backend's own safe state (:meth:`~mbctl.hardware.interface.JointInterface.hand_over`),
or holds until stopped where it has none (paced). The summary's ``end`` says which. The log is closed
last and holds every completed cycle.
"""

from __future__ import annotations

import collections
import contextlib
import math
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mbctl.hardware.clock import LoopClock, WallClock
from mbctl.hardware.interface import (
    CommandMode,
    CommunicationError,
    DriveFault,
    JointCommand,
    JointInterface,
    JointState,
)
from mbctl.hardware.loop_support import PHASES, SafetyLimits, limit_breach, log_columns, no_gc_pauses, run_footprint
from mbctl.hardware.overrun import OverrunMonitor, OverrunPolicy
from mbctl.hardware.realtime import DEFAULT_PRIORITY, realtime_priority
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.summary import RunSummary, chatter_warnings, reversal_threshold, spread

__all__ = ["Controller", "Estimator", "Reference", "SafetyLimits", "LoopConfig", "RunSummary", "PHASES", "chatter_warnings", "run_loop", "log_columns", "run_footprint"]

class Controller(Protocol):
    """Maps the time since start (s) and a measurement to actuator torques (N·m, N)."""

    def __call__(self, t: float, state: JointState) -> np.ndarray: ...


class Estimator(Protocol):
    """The estimate step: turns a measurement into the state the controller sees.

    Attributes:
        dq_hat: Velocities of the last estimate (rad/s, m/s), logged.
        tau_ext: External joint torques of the last estimate (N·m, N), logged.
        reaction: What a detection does: ``"stop"``, ``"hold"`` or ``"none"``.
    """

    dq_hat: np.ndarray
    tau_ext: np.ndarray
    reaction: str

    def reset(self, t: float, state: JointState) -> None:
        """Start from this measurement (the warm-up's), taken at time ``t`` (s)."""

    def __call__(self, t: float, state: JointState, tau_applied: np.ndarray) -> JointState:
        """The estimated state after this measurement, taken at time ``t`` (s; the step is the
        time since the last measurement), given the torques applied since then (N·m, N)."""

    def detection(self, t: float) -> str:
        """A description of the collision detected at the last call (``""``: none)."""

    def hold(self, q_hold: np.ndarray) -> np.ndarray:
        """Torques of the compliant hold (N·m, N) about the positions ``q_hold``, at the last estimate."""


Reference = Callable[[float], tuple[np.ndarray, np.ndarray]]
"""Desired ``(q, dq)`` of the actuated joints at time t (s), for tracking errors."""


@dataclass(frozen=True)
class LoopConfig:
    """Loop settings.

    Attributes:
        rate_hz: Control rate (Hz).
        duration_s: Run length (s).
        paced: Follow the wall clock (False: lock-step, as fast as possible).
        watchdog_failures: Consecutive failed reads that stop the run.
        spin_s: Busy-wait window before each deadline (s), for the wall clock.
        overrun: How many overruns stop a paced run.
        realtime_priority: ``SCHED_FIFO`` priority of a paced run (None: normal
            scheduling); granted or not, the summary's ``scheduling`` says what ran.
        command: What the controller's outputs are: drive torques (N·m, N), or goal
            positions (rad, m) of drives in position mode.
        end_hold_s: After a clean finish, how long the controller keeps holding the last
            reference (s) before the hand-over; logged, not counted in the tracking errors.
        end: Then ``"hand-over"`` (:meth:`~mbctl.hardware.interface.JointInterface.hand_over`: the
            drives' own safe state) or ``"torque-off"``.
    """

    rate_hz: float = 1000.0
    duration_s: float = 1.0
    paced: bool = True
    watchdog_failures: int = 3
    spin_s: float = 3e-4
    overrun: OverrunPolicy = OverrunPolicy()
    realtime_priority: int | None = DEFAULT_PRIORITY
    command: CommandMode = CommandMode.TORQUE
    end_hold_s: float = 0.0
    end: str = "hand-over"


class _Stop(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def run_loop(
    backend: JointInterface,
    controller: Controller,
    limits: SafetyLimits,
    config: LoopConfig,
    log: RunLog,
    reference: Reference | None = None,
    *,
    comm_errors: Callable[[], dict[str, int]] | None = None,
    saturation_count: Callable[[], int] | None = None,
    clock: LoopClock | None = None,
    estimator: Estimator | None = None,
) -> RunSummary:
    """Run the loop on an opened backend: warm up, torque on, cycles, the end hold; a stop ends with
    torque off, a clean finish with the backend's hand-over (``config.end``).

    Args:
        backend: An opened joint interface (torque is turned on after the warm-up).
        controller: Torque law called every cycle (and once more, at t = 0, to warm up).
        limits: Safety limits of the actuated joints.
        config: Rate, duration, pacing, watchdog, overrun policy, the end of the run.
        log: Where every cycle goes; closed on return.
        reference: Desired joint trajectory, for tracking errors in the log and summary.
        comm_errors: Returns the backend's communication error counts.
        saturation_count: Returns how many commands the backend itself limited.
        clock: Time source for deadlines and phase timings (default: the wall clock).
        estimator: The estimate step between read and control (None: the controller sees the
            measurement); its estimates are logged when the log has their columns.
    """
    clock = clock or WallClock(config.spin_s)
    n = len(backend.joint_names)
    nan_n = np.full(n, np.nan)
    torque_mode = config.command is CommandMode.TORQUE
    period = 1.0 / config.rate_hz
    cycles_run = int(round(config.duration_s * config.rate_hz))
    cycles_total = cycles_run + int(round(config.end_hold_s * config.rate_hz))
    # a backend with no safe state of its own: a paced hold lasts until the user stops the run (in
    # lock-step no one is there to stop it: the run ends after its end hold, with the backend's stop)
    hold_on = config.paced and config.end == "hand-over" and not backend.hand_over_possible
    held_until = ""  # what ended an open-ended hold
    summary = RunSummary(rate_hz=config.rate_hz)
    row = np.zeros(len(log.columns))
    # preallocated and filled now (not lists growing by a cycle): the memory stays flat over a long run
    kept_cycles = max(cycles_total, 1)  # an open-ended hold keeps no timings past the planned cycles
    periods, computes = np.full(kept_cycles, np.nan), np.full(kept_cycles, np.nan)
    phases = np.full((kept_cycles, len(PHASES)), np.nan)
    sq_error = np.zeros(n)
    max_error = 0.0
    tracked = 0
    consecutive_failures = 0
    first_failure = ""  # the failure that began a streak of failed reads: its cause
    saturated = 0
    monitor = OverrunMonitor(config.overrun)
    stop = threading.Event()
    stop_reason = ["completed"]
    # torque steps, accumulated in place: sum of squares and reversals per joint
    tau_last, step_last, step, back = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
    step_sq, reversals = np.zeros(n), np.zeros(n)
    reverse_by = reversal_threshold(limits.effort)
    steps_counted = 0
    estimating = estimator is not None
    started = False  # the estimator starts from the run's first sample (no step, no residual before a second)
    # the torques the drives applied between the last two samples: the command written 1 + delay cycles ago
    sent = collections.deque([np.zeros(n)] * (backend.command_delay_cycles + 1), maxlen=backend.command_delay_cycles + 1)
    logs_estimates = estimating and len(log.columns) == len(log_columns(backend.joint_names, estimation=True))
    holding: np.ndarray | None = None  # the position held after a detection with reaction "hold"
    detected = ""
    # estimates step by the backend's sample instants where it has a sample clock (a paced loop's
    # wake-ups jitter against them), else by the loop's time
    sample_time = (lambda t, state: state.t) if backend.sample_clock else (lambda t, state: t)

    def on_signal(signum: int, _frame: object) -> None:
        stop_reason[0] = f"signal {signal.Signals(signum).name}"
        stop.set()

    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[sig] = signal.signal(sig, on_signal)

    def control(t: float, state: JointState) -> np.ndarray:
        """Safety checks, then the controller's torques limited to the effort limits (goal positions
        must lie in the joints' ranges)."""
        nonlocal saturated
        breach = limit_breach(backend.joint_names, limits, state)
        if breach:
            raise _Stop(f"limit breach: {breach}")
        try:
            # after a detection with reaction "hold": the estimator's compliant hold, checked and limited alike
            tau = np.asarray(controller(t, state) if holding is None else estimator.hold(holding), dtype=float)
        except Exception as exc:  # noqa: BLE001  any controller failure must stop the robot
            raise _Stop(f"exception in controller: {exc.__class__.__name__}: {exc}") from None
        if tau.shape != (n,) or not np.isfinite(tau).all():
            raise _Stop(f"controller returned an invalid {'torque' if torque_mode else 'goal position'} vector {tau!r}")
        if not torque_mode:  # goal positions: a servo would drive there, so a goal off the range stops the run
            off = (tau < limits.lower) | (tau > limits.upper)
            if off.any():
                i = int(np.argmax(off))
                raise _Stop(f"goal position of {backend.joint_names[i]} = {tau[i]:.4g} outside [{limits.lower[i]:.4g}, {limits.upper[i]:.4g}]")
            return tau
        over = np.abs(tau) > limits.effort
        if over.any():
            saturated += int(over.sum())
            tau = np.clip(tau, -limits.effort, limits.effort)
        return tau

    def estimate(t: float, state: JointState) -> tuple[JointState, str]:
        """The estimate step and the detection's reaction (the run's first sample starts the
        estimator); returns the state the controller sees and a stop reason ('' to go on)."""
        nonlocal started, detected, holding
        ts = sample_time(t, state)
        if not started:
            estimator.reset(ts, state)
            started = True
        state = estimator(ts, state, sent[0])
        if not detected:
            detected = estimator.detection(t)
            if detected and estimator.reaction == "stop":
                return state, f"collision detected: {detected}; torque off"
            if detected and estimator.reaction == "hold":
                holding = state.q.copy()
        return state, ""

    def fill_row(t: float, period_s: float, compute: float, state: JointState | None, tau: np.ndarray, timings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        q_ref = dq_ref = nan_n
        if reference is not None:
            q_ref, dq_ref = reference(t)
        row[0], row[1], row[2], row[3] = t, period_s, compute, float(state is not None)
        values = (state.q, state.dq, q_ref, dq_ref, tau, state.effort) if state is not None else (nan_n, nan_n, q_ref, dq_ref, tau, nan_n)
        row[4 : 4 + 6 * n] = np.concatenate(values)
        if logs_estimates:
            row[4 + 6 * n : 4 + 7 * n] = estimator.dq_hat if state is not None else nan_n
            row[4 + 7 * n : 4 + 8 * n] = estimator.tau_ext if state is not None else nan_n
        row[len(row) - len(PHASES) :] = timings
        return q_ref, dq_ref

    def count_step(tau: np.ndarray) -> None:
        """The torque step of this cycle into the chatter statistics (from the second cycle on)."""
        nonlocal steps_counted
        if k >= 1:
            np.subtract(tau, tau_last, out=step)
            np.add(step_sq, step * step, out=step_sq)
            if k >= 2:
                np.minimum(np.abs(step), np.abs(step_last), out=back)
                np.add(reversals, (step * step_last < 0) & (back > reverse_by), out=reversals)
            step_last[:] = step
            steps_counted += 1
        tau_last[:] = tau

    k = 0
    clean = False
    scheduling = contextlib.ExitStack()
    try:
        summary.scheduling = scheduling.enter_context(realtime_priority(config.realtime_priority if config.paced else None))
        if config.paced:
            scheduling.enter_context(no_gc_pauses())
        # warm-up: every path of a cycle once, before the first deadline and without a write
        try:
            warm = backend.read()
        except (DriveFault, CommunicationError) as exc:
            raise _Stop(f"warm-up read failed: {exc}") from None
        saturated_before = saturated
        if estimating:
            estimator.reset(sample_time(0.0, warm), warm)
            warm = estimator(sample_time(0.0, warm), warm, np.zeros(n))
        control(0.0, warm)
        saturated = saturated_before
        fill_row(0.0, math.nan, math.nan, warm, np.zeros(n), np.full(len(PHASES), np.nan))
        log.rehearse(row)
        try:
            backend.enable()  # only now: the robot is not left unpowered while the first calls run
        except (DriveFault, CommunicationError) as exc:
            raise _Stop(f"enabling torque failed: {exc}") from None

        t0 = clock.now()
        deadline = t0
        last_start = None
        last_log = math.nan
        while k < cycles_total or hold_on:
            if stop.is_set():
                if hold_on and k >= cycles_run:
                    held_until = stop_reason[0]
                    break
                raise _Stop(stop_reason[0])
            if config.paced:
                clock.sleep_until(deadline)
            start = clock.now()
            if last_start is not None and k < kept_cycles:
                periods[k] = start - last_start
            last_start = start
            t = (start - t0) if config.paced else k * period

            try:
                state = backend.read()
                consecutive_failures = 0
            except DriveFault as exc:
                raise _Stop(f"drive fault: {exc}") from None
            except CommunicationError as exc:
                # a failed read is no sample: nothing steps the estimator or feeds the observer
                state = None
                summary.failed_reads += 1
                consecutive_failures += 1
                first_failure = str(exc) if consecutive_failures == 1 else first_failure
                if consecutive_failures >= config.watchdog_failures:
                    raise _Stop(_watchdog_reason(consecutive_failures, first_failure, str(exc))) from None
            read_end = clock.now()

            tau = np.zeros(n)
            control_end = write_end = read_end
            measured = state
            stopping = ""  # a detection that stops the run: this cycle is logged, nothing is written
            if state is not None and estimating:
                state, stopping = estimate(t, state)
            if state is not None and not stopping:
                tau = control(t, state)
                if torque_mode:
                    count_step(tau)
                control_end = clock.now()
                try:
                    backend.write(JointCommand(config.command, tau))
                except CommunicationError as exc:
                    raise _Stop(f"write failed: {exc}") from None
                if estimating:
                    sent.append(tau.copy())  # a law may hand out its own output buffer
                write_end = clock.now()
            compute = write_end - start
            timing = phases[min(k, kept_cycles - 1)]
            computes[min(k, kept_cycles - 1)] = compute
            timing[0] = read_end - start
            if state is not None:
                timing[1], timing[2] = control_end - read_end, write_end - control_end
            timing[3] = last_log

            q_ref, _ = fill_row(t, periods[min(k, kept_cycles - 1)], compute, measured, tau if torque_mode and not stopping else nan_n, timing)
            if reference is not None and state is not None and k < cycles_run:  # the end hold is not tracking
                err = state.q - q_ref
                sq_error += err**2
                max_error = max(max_error, float(np.abs(err).max()))
                tracked += 1
            log.append(row)
            k += 1
            last_log = clock.now() - write_end
            if stopping:
                raise _Stop(stopping)

            deadline += period
            if config.paced:
                now = clock.now()
                overran = now > deadline
                if overran:
                    summary.overruns += 1
                    deadline = t0 + math.ceil((now - t0) / period) * period
                limit = monitor.record(overran)
                if limit:
                    raise _Stop(limit)
        clean = True
        stop_reason[0] = "completed"
        if summary.overruns:
            stop_reason[0] = f"completed, degraded: {summary.overruns} overruns ({100 * summary.overruns / k:.1f} %)"
        if detected and holding is not None:
            stop_reason[0] = f"collision detected: {detected}; held compliantly to the end"
        elif detected:
            stop_reason[0] = f"completed, degraded: collision detected: {detected} (reaction none)"
    except _Stop as stopped:
        stop_reason[0] = stopped.reason
    finally:
        summary.end = _end_run(backend, config, clean and holding is None, cycles_total - cycles_run, held_until)
        scheduling.close()
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        log.close()

    summary.cycles = k
    summary.duration_s = k * period
    summary.stop_reason = stop_reason[0]
    kept = min(k, kept_cycles)
    periods, computes = periods[:kept][~np.isnan(periods[:kept])], computes[:kept]
    if periods.size:
        p = periods * 1e6
        error = np.abs(p - period * 1e6)
        summary.period_p50_us = float(np.percentile(p, 50))
        summary.period_p99_us = float(np.percentile(p, 99))
        summary.period_error_p99_us = float(np.percentile(error, 99))
        summary.period_error_max_us = float(error.max())
        summary.period_jitter_us = float(p.std())
    if computes.size:
        c = computes * 1e6
        summary.compute_p50_us = float(np.percentile(c, 50))
        summary.compute_p99_us = float(np.percentile(c, 99))
    summary.phases_us = {name: spread(phases[:kept, i] * 1e6) for i, name in enumerate(PHASES)}
    if reference is not None and tracked > 0:
        summary.tracking_rms = {j: float(v) for j, v in zip(backend.joint_names, np.sqrt(sq_error / tracked))}
        summary.max_abs_error = max_error
    if steps_counted:
        names = backend.joint_names
        rms = np.sqrt(step_sq / steps_counted)
        fraction = reversals / max(steps_counted - 1, 1)
        summary.torque_step_rms = {j: float(v) for j, v in zip(names, rms)}
        summary.torque_step_reversals = {j: float(v) for j, v in zip(names, fraction)}
        summary.chatter = chatter_warnings(names, fraction, limits.effort)
    summary.collision = detected
    summary.comm_errors = dict(collections.Counter(comm_errors())) if comm_errors else {}
    summary.saturated = saturated + (saturation_count() if saturation_count else 0)
    return summary


def _watchdog_reason(failures: int, first: str, last: str) -> str:
    """The stop reason of the watchdog: the first failure of the streak (its cause) and, if it differs,
    the last."""
    if failures == 1 or first == last:
        return f"watchdog: {failures} consecutive failed reads (last: {last})"
    return f"watchdog: {failures} consecutive failed reads (first: {first}; last: {last})"


def _end_run(backend: JointInterface, config: LoopConfig, clean: bool, hold_cycles: int, held_until: str) -> str:
    """Hand the arm over after a clean finish (``config.end``), else the backend's stop at once;
    returns the summary's account of it. ``held_until``: what ended an open-ended hold."""
    if not clean:
        backend.disable()
        return f"stopped: {backend.disable_action}"
    if held_until:
        backend.disable()
        return f"held the last reference until {held_until} (no safe state to hand the arm to), then {backend.disable_action}"
    held = f"held the last reference for {hold_cycles / config.rate_hz:.3g} s, then " if hold_cycles else ""
    if config.end == "hand-over" and not backend.hand_over_possible:  # lock-step
        backend.disable()
        return held + f"{backend.disable_action} (no safe state to hand the arm to; lock-step)"
    if config.end == "torque-off":
        backend.disable()
        return held + f"{backend.disable_action} (asked for: [control.end] then = \"torque-off\")"
    return held + backend.hand_over()
