"""The fixed-rate control loop: read -> estimate -> control -> safety -> write -> log.

Timing: absolute deadlines ``t0 + k*period`` on a :class:`~mbctl.hardware.clock.LoopClock`
(the wall clock by default: sleep, then spin the last ``spin_s``). A cycle that
ends after the next deadline is an overrun; missed deadlines are skipped, not
made up, so the rate does not drift (as ros2_control does). The
:class:`~mbctl.hardware.overrun.OverrunPolicy` decides how many overruns stop the
run; any overrun makes a completed run *degraded*, and its stop reason says so
(``completed, degraded: 212 overruns (4.7 %)``), as does a backend's own ``degraded`` account where
it has one (CANopen samples reused for missing TPDOs). A backend with ``paces_loop`` (its read waits for the
robot's next sample, as a Franka's does) paces the loop itself: no sleep, ``t`` is the robot's clock since
the first sample, and a cycle overran when the robot sent samples it never read (``missed_samples``).

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

The work between the read and the write is a :class:`~mbctl.hardware.cycle.Cycle`: one generated C
call for a compiled joint-space law (:mod:`mbctl.hardware.compiled_cycle`), else the same arithmetic
in Python (:class:`~mbctl.hardware.cycle.PythonCycle`); the summary's ``cycle`` says which.

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
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from mbctl.hardware.clock import LoopClock, WallClock
from mbctl.hardware.compiled_cycle import compiled_cycle
from mbctl.hardware.cycle import Controller, Cycle, Estimator, PythonCycle, Reference, StopRun
from mbctl.hardware.interface import (
    CommandMode,
    CommunicationError,
    DriveFault,
    JointCommand,
    JointInterface,
)
from mbctl.hardware.loop_support import PHASES, SafetyLimits, log_columns, no_gc_pauses, run_footprint
from mbctl.hardware.overrun import OverrunMonitor, OverrunPolicy
from mbctl.hardware.realtime import DEFAULT_PRIORITY, realtime_priority
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.sample_timing import SampleTiming
from mbctl.hardware.summary import RunSummary, chatter_warnings, spread

__all__ = ["Controller", "Estimator", "Reference", "SafetyLimits", "LoopConfig", "RunSummary", "PHASES", "chatter_warnings", "run_loop", "log_columns", "run_footprint"]

# a cycle's times (s) as float64 entries: its slot of the run's timings (period, compute, the phases), and
# the log row's (period and compute at entries 1 and 2, the phases last)
_TIMES, _HEAD_TIMES, _PHASES = struct.Struct(f"{2 + len(PHASES)}d"), struct.Struct("2d"), struct.Struct(f"{len(PHASES)}d")


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
        compiled_cycle: A compiled law's cycle runs as one generated call
            (:mod:`mbctl.hardware.compiled_cycle`; False: the same arithmetic in Python,
            :class:`~mbctl.hardware.cycle.PythonCycle`).
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
    compiled_cycle: bool = True


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
    period = 1.0 / config.rate_hz
    cycles_run = int(round(config.duration_s * config.rate_hz))
    cycles_total = cycles_run + int(round(config.end_hold_s * config.rate_hz))
    # a backend with no safe state of its own: a paced hold lasts until the user stops the run (in
    # lock-step no one is there to stop it: the run ends after its end hold, with the backend's stop)
    hold_on = config.paced and config.end == "hand-over" and not backend.hand_over_possible
    held_until = ""  # what ended an open-ended hold
    summary = RunSummary(rate_hz=config.rate_hz)
    # preallocated and filled now (not lists growing by a cycle): the memory stays flat over a long run
    kept_cycles = max(cycles_total, 1)  # an open-ended hold keeps no timings past the planned cycles
    # per cycle: period, compute, then the phases (s); one row per cycle, filled in one call (below)
    times = np.full((kept_cycles, 2 + len(PHASES)), np.nan)
    periods, computes, phases = times[:, 0], times[:, 1], times[:, 2:]
    consecutive_failures = 0
    first_failure = ""  # the failure that began a streak of failed reads: its cause
    monitor = OverrunMonitor(config.overrun)
    stopped = [False]  # set by a signal (a list, not an Event: checked every cycle, a list item costs least)
    stop_reason = ["completed"]
    cycle = _cycle(backend, controller, limits, config, log, reference, estimator, kept_cycles)
    # a backend whose read waits for the robot's next sample (a Franka's 1 kHz): the robot paces the loop and
    # its clock is the run's; a cycle is late when the robot sent samples the loop never read
    robot_paced, t_robot0, missed = config.paced and getattr(backend, "paces_loop", False), None, 0

    def on_signal(signum: int, _frame: object) -> None:
        stop_reason[0] = f"signal {signal.Signals(signum).name}"
        stopped[0] = True

    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[sig] = signal.signal(sig, on_signal)

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
            raise StopRun(f"warm-up read failed: {exc}") from None
        cycle.warm_up(warm)
        log.rehearse(cycle.row)
        try:
            backend.enable()  # only now: the robot is not left unpowered while the first calls run
        except (DriveFault, CommunicationError) as exc:
            raise StopRun(f"enabling torque failed: {exc}") from None

        # what every cycle uses, looked up once (the cycle's own work is a few microseconds: a lookup counts)
        now, step, paced, sample_timing, mode = clock.now, cycle.step, config.paced, cycle.timing, config.command
        pack_times = partial(_TIMES.pack_into, times)
        phases_at = 8 * (len(log.columns) - len(PHASES))  # where the row's phases begin (bytes)
        t0 = sample_timing.t0 = now()
        deadline = t0
        last_start = None
        last_log = math.nan
        while k < cycles_total or hold_on:
            if stopped[0]:
                if hold_on and k >= cycles_run:
                    held_until = stop_reason[0]
                    break
                raise StopRun(stop_reason[0])
            if paced and not robot_paced:
                clock.sleep_until(deadline)
            start = now()
            period_k = start - last_start if last_start is not None else math.nan
            last_start = start
            t = (start - t0) if paced else k * period

            try:
                state = backend.read()
                consecutive_failures = 0
            except DriveFault as exc:
                raise StopRun(f"drive fault: {exc}") from None
            except CommunicationError as exc:
                # a failed read is no sample: nothing steps the estimator or feeds the observer
                state = None
                summary.failed_reads += 1
                consecutive_failures += 1
                first_failure = str(exc) if consecutive_failures == 1 else first_failure
                if consecutive_failures >= config.watchdog_failures:
                    raise StopRun(_watchdog_reason(consecutive_failures, first_failure, str(exc))) from None
            read_end = now()
            if robot_paced and state is not None:
                t_robot0 = state.t if t_robot0 is None else t_robot0
                t = state.t - t_robot0

            command = step(k, t, state, k < cycles_run)  # the end hold is not tracking
            control_end = write_end = now()
            if command is not None:
                try:
                    backend.write(JointCommand(mode, command))
                except CommunicationError as exc:
                    raise StopRun(f"write failed: {exc}") from None
                write_end = now()
            compute, read = write_end - start, read_end - start
            control, write = (control_end - read_end, write_end - control_end) if state is not None else (math.nan, math.nan)
            slot = k
            if k >= kept_cycles:  # an open-ended hold past the planned cycles: the last slot again, its period kept
                slot = kept_cycles - 1
                period_k = periods[slot]
                if state is None:
                    control, write = phases[slot, 1], phases[slot, 2]
            # the cycle's times into its slot and its log row (numpy's item assignments would cost ten times more)
            pack_times(slot * _TIMES.size, period_k, compute, read, control, write, last_log)
            row = cycle.row
            _HEAD_TIMES.pack_into(row, 8, period_k, compute)
            _PHASES.pack_into(row, phases_at, read, control, write, last_log)
            log.append(row)
            k += 1
            last_log = now() - write_end
            if cycle.stopping:
                raise StopRun(cycle.stopping)

            deadline += period + sample_timing.shift  # the phase lock's move (sample_timing), 0 without one
            if paced:
                now_s = now()
                overran = now_s > deadline
                if robot_paced:
                    overran, missed = backend.missed_samples > missed, backend.missed_samples
                if overran:
                    summary.overruns += 1
                    deadline = t0 + math.ceil((now_s - t0) / period) * period
                limit = monitor.record(overran)
                if limit:
                    raise StopRun(limit)
        clean = True
        stop_reason[0] = "completed"
        degraded = [f"{summary.overruns} overruns ({100 * summary.overruns / k:.1f} %)"] if summary.overruns else []
        degraded += [backend.degraded] if getattr(backend, "degraded", "") else []  # the backend's own (CANopen: reused samples)
        if degraded:
            stop_reason[0] = f"completed, degraded: {'; '.join(degraded)}"
        if cycle.detected and cycle.holding:
            stop_reason[0] = f"collision detected: {cycle.detected}; held compliantly to the end"
        elif cycle.detected:
            stop_reason[0] = f"completed, degraded: collision detected: {cycle.detected} (reaction none)"
    except StopRun as stopped:
        stop_reason[0] = stopped.reason
    finally:
        summary.end = _end_run(backend, config, clean and not cycle.holding, cycles_total - cycles_run, held_until)
        scheduling.close()
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        log.close()

    summary.cycles = k
    summary.duration_s = k * period
    summary.stop_reason = stop_reason[0]
    kept = min(k, kept_cycles)
    _timing(summary, period, periods[:kept], computes[:kept], phases[:kept])
    cycle.finish(summary, backend.joint_names)
    summary.cycle = "python" if isinstance(cycle, PythonCycle) else "compiled"
    summary.sample_timing = cycle.timing.report()
    if estimator is not None:
        summary.observer_torque = describe_observer_torque(backend, cycle.measured_torque, cycle.timing)
    summary.comm_errors = dict(collections.Counter(comm_errors())) if comm_errors else {}
    summary.saturated = cycle.saturated + (saturation_count() if saturation_count else 0)
    return summary


def _cycle(
    backend: JointInterface, controller: Controller, limits: SafetyLimits, config: LoopConfig, log: RunLog, reference: Reference | None,
    estimator: Estimator | None, cycles: int,
) -> Cycle:  # fmt: skip
    """The compiled cycle where it applies (and ``config.compiled_cycle``), else the Python one."""
    names, torque_mode = backend.joint_names, config.command is CommandMode.TORQUE
    logs_estimates = estimator is not None and len(log.columns) == len(log_columns(names, estimation=True))
    timing = SampleTiming(1.0 / config.rate_hz, backend.sample_period_s, measured=config.paced and backend.sample_clock,
                          delay_cycles=backend.command_delay_cycles, latency_s=backend.command_latency_s, cycles=cycles)  # fmt: skip
    measured = observer_torque(backend, estimator)
    common = dict(sample_clock=backend.sample_clock, timing=timing, measured_torque=measured)
    if config.compiled_cycle and torque_mode:
        cycle = compiled_cycle(controller, limits, names, reference, estimator, logs_estimates=logs_estimates,
                               paced=config.paced, rate_hz=config.rate_hz, cycles=cycles, **common)  # fmt: skip
        if cycle is not None:
            return cycle
    return PythonCycle(controller, limits, names, len(log.columns), reference, estimator, torque_mode=torque_mode, logs_estimates=logs_estimates, **common)


def observer_torque(backend: JointInterface, estimator: Estimator | None) -> bool:
    """Whether the observer takes the drives' measured torque as the torque acting on the arm: the
    backend measures one (:attr:`~mbctl.hardware.interface.JointInterface.effort_source`) and the
    estimator's settings ask for it. Sets the estimator's friction share for that torque (0 behind the
    joint's friction, a joint torque sensor's; else 1)."""
    if estimator is None:
        return False
    settings = getattr(getattr(estimator, "estimator", None), "settings", None)
    measured = bool(backend.effort_source) and getattr(settings, "torque", "measured") == "measured"
    estimator.friction_share = 0.0 if measured and backend.effort_after_friction else 1.0
    return measured


def describe_observer_torque(backend: JointInterface, measured: bool, timing: SampleTiming) -> str:
    """The summary's account of the torque the observer took as acting on the arm."""
    if measured:
        side = "a joint torque sensor's, behind the friction (the model's friction left out)" if backend.effort_after_friction else "a drive torque"
        return f"measured: {backend.effort_source} ({side})"
    if timing.measured:
        return ("the commands, each from the update its sample's age says it reached (paced: the spread of the commands "
                "written just before and after widens the detection threshold)")
    cycles = 1 + backend.command_delay_cycles
    return f"the commands, each acting from the sample after the one it was computed on{f' plus {cycles - 1} cycle(s)' if cycles > 1 else ''}"


def _timing(summary: RunSummary, period: float, periods: np.ndarray, computes: np.ndarray, phases: np.ndarray) -> None:
    """The cycles' timings (s) into ``summary`` (µs): period and compute percentiles, the period's
    error and jitter, each phase's spread."""
    periods = periods[~np.isnan(periods)]
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
    summary.phases_us = {name: spread(phases[:, i] * 1e6) for i, name in enumerate(PHASES)}


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
