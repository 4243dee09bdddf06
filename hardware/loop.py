"""The fixed-rate control loop: read -> control -> safety -> write -> log.

Timing: absolute deadlines ``t0 + k*period`` on ``time.perf_counter``; the loop
sleeps until ``spin_s`` before a deadline and busy-waits the rest (a plain
``sleep`` wakes ~80 µs late with multi-ms outliers on a loaded VM). A cycle that
starts after the next deadline is an overrun; missed deadlines are skipped, not
made up, so the rate does not drift (as ros2_control does).

Safety, checked every cycle, stops the run with a stated reason:

- position or velocity of a joint outside its limits (a limit breach);
- ``watchdog_failures`` consecutive failed reads (communication errors);
- a drive fault, an exception in the controller, SIGINT or SIGTERM.

Torque commands beyond a joint's effort limit are saturated to it and counted
(``saturated`` in the summary). Every exit path disables torque before anything
else and then closes the log, which holds every completed cycle.
"""

from __future__ import annotations

import math
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.interface import (
    CommunicationError,
    DriveFault,
    JointCommand,
    JointInterface,
    JointState,
)
from mbctl.hardware.runlog import RunLog

__all__ = ["Controller", "Reference", "SafetyLimits", "LoopConfig", "RunSummary", "run_loop", "log_columns"]


class Controller(Protocol):
    """Maps the time since start (s) and a measurement to actuator torques (N·m, N)."""

    def __call__(self, t: float, state: JointState) -> np.ndarray: ...


Reference = Callable[[float], tuple[np.ndarray, np.ndarray]]
"""Desired ``(q, dq)`` of the actuated joints at time t (s), for tracking errors."""


@dataclass(frozen=True)
class SafetyLimits:
    """Per actuated joint: position range (rad, m), speed and effort limits."""

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray

    @classmethod
    def of(cls, robot: RobotModel) -> SafetyLimits:
        """The URDF/TOML limits of the robot's actuated joints."""
        joints = [robot.joint(n) for n in robot.actuated_names]
        return cls(
            lower=np.array([j.limits.lower for j in joints]),
            upper=np.array([j.limits.upper for j in joints]),
            velocity=np.array([j.limits.velocity for j in joints]),
            effort=np.array([j.limits.effort for j in joints]),
        )


@dataclass(frozen=True)
class LoopConfig:
    """Loop settings.

    Attributes:
        rate_hz: Control rate (Hz).
        duration_s: Run length (s).
        paced: Follow the wall clock (False: lock-step, as fast as possible).
        watchdog_failures: Consecutive failed reads that stop the run.
        spin_s: Busy-wait window before each deadline (s).
    """

    rate_hz: float = 1000.0
    duration_s: float = 1.0
    paced: bool = True
    watchdog_failures: int = 3
    spin_s: float = 3e-4


@dataclass
class RunSummary:
    """What a run did; ``to_json`` gives the summary file's content."""

    cycles: int = 0
    overruns: int = 0
    period_p50_us: float = math.nan
    period_p99_us: float = math.nan
    period_error_p99_us: float = math.nan
    compute_p50_us: float = math.nan
    compute_p99_us: float = math.nan
    tracking_rms: dict[str, float] = field(default_factory=dict)
    max_abs_error: float = math.nan
    stop_reason: str = ""
    comm_errors: dict[str, int] = field(default_factory=dict)
    failed_reads: int = 0
    saturated: int = 0
    rate_hz: float = math.nan
    duration_s: float = 0.0

    def to_json(self) -> dict:
        return asdict(self)


def log_columns(joint_names: Sequence[str]) -> list[str]:
    """Columns of the run log: times, then one column per joint for each quantity."""
    cols = ["t", "period", "compute", "read_ok"]
    for group in ("q", "dq", "q_ref", "dq_ref", "tau", "effort"):
        cols += [f"{group}.{j}" for j in joint_names]
    return cols


class _Stop(Exception):
    def __init__(self, reason: str):
        self.reason = reason


def _sleep_until(deadline: float, spin_s: float) -> None:
    remaining = deadline - time.perf_counter()
    if remaining > spin_s:
        time.sleep(remaining - spin_s)
    while time.perf_counter() < deadline:
        pass


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
) -> RunSummary:
    """Run the loop on an opened backend with torque on; always ends with torque off.

    Args:
        backend: An opened, enabled joint interface.
        controller: Torque law called every cycle.
        limits: Safety limits of the actuated joints.
        config: Rate, duration, pacing, watchdog.
        log: Where every cycle goes; closed on return.
        reference: Desired joint trajectory, for tracking errors in the log and summary.
        comm_errors: Returns the backend's communication error counts.
        saturation_count: Returns how many commands the backend itself limited.
    """
    n = len(backend.joint_names)
    period = 1.0 / config.rate_hz
    cycles_total = int(round(config.duration_s * config.rate_hz))
    summary = RunSummary(rate_hz=config.rate_hz)
    row = np.zeros(len(log.columns))
    periods, computes = [], []
    sq_error = np.zeros(n)
    max_error = 0.0
    consecutive_failures = 0
    saturated = 0
    state: JointState | None = None
    stop = threading.Event()
    stop_reason = ["completed"]

    def on_signal(signum: int, _frame: object) -> None:
        stop_reason[0] = f"signal {signal.Signals(signum).name}"
        stop.set()

    previous_handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous_handlers[sig] = signal.signal(sig, on_signal)

    t0 = time.perf_counter()
    deadline = t0
    last_start = None
    k = 0
    try:
        while k < cycles_total:
            if stop.is_set():
                raise _Stop(stop_reason[0])
            if config.paced:
                _sleep_until(deadline, config.spin_s)
            start = time.perf_counter()
            if last_start is not None:
                periods.append(start - last_start)
            last_start = start
            t = (start - t0) if config.paced else k * period

            read_ok = True
            try:
                state = backend.read()
                consecutive_failures = 0
            except DriveFault as exc:
                raise _Stop(f"drive fault: {exc}") from None
            except CommunicationError as exc:
                read_ok = False
                summary.failed_reads += 1
                consecutive_failures += 1
                if consecutive_failures >= config.watchdog_failures:
                    raise _Stop(f"watchdog: {consecutive_failures} consecutive failed reads (last: {exc})") from None

            tau = np.zeros(n)
            if read_ok:
                breach = _limit_breach(backend.joint_names, limits, state)
                if breach:
                    raise _Stop(f"limit breach: {breach}")
                try:
                    tau = np.asarray(controller(t, state), dtype=float)
                except Exception as exc:  # noqa: BLE001  any controller failure must stop the robot
                    raise _Stop(f"exception in controller: {exc.__class__.__name__}: {exc}") from None
                if tau.shape != (n,) or not np.isfinite(tau).all():
                    raise _Stop(f"controller returned an invalid torque vector {tau!r}")
                over = np.abs(tau) > limits.effort
                if over.any():
                    saturated += int(over.sum())
                    tau = np.clip(tau, -limits.effort, limits.effort)
                try:
                    backend.write(JointCommand.torque(tau))
                except CommunicationError as exc:
                    raise _Stop(f"write failed: {exc}") from None
            compute = time.perf_counter() - start
            computes.append(compute)

            q_ref = dq_ref = np.full(n, np.nan)
            if reference is not None:
                q_ref, dq_ref = reference(t)
                if read_ok:
                    err = state.q - q_ref
                    sq_error += err**2
                    max_error = max(max_error, float(np.abs(err).max()))
            row[0], row[1], row[2], row[3] = t, periods[-1] if periods else np.nan, compute, float(read_ok)
            values = (state.q, state.dq) if (read_ok and state is not None) else (np.full(n, np.nan),) * 2
            row[4:] = np.concatenate([values[0], values[1], q_ref, dq_ref, tau, state.effort if read_ok else np.full(n, np.nan)])
            log.append(row)
            k += 1

            deadline += period
            if config.paced:
                now = time.perf_counter()
                if now > deadline:
                    summary.overruns += 1
                    deadline = t0 + math.ceil((now - t0) / period) * period
        stop_reason[0] = "completed"
    except _Stop as stopped:
        stop_reason[0] = stopped.reason
    finally:
        backend.disable()
        for sig, handler in previous_handlers.items():
            signal.signal(sig, handler)
        log.close()

    summary.cycles = k
    summary.duration_s = k * period
    summary.stop_reason = stop_reason[0]
    if periods:
        p = np.array(periods) * 1e6
        summary.period_p50_us = float(np.percentile(p, 50))
        summary.period_p99_us = float(np.percentile(p, 99))
        summary.period_error_p99_us = float(np.percentile(np.abs(p - period * 1e6), 99))
    if computes:
        c = np.array(computes) * 1e6
        summary.compute_p50_us = float(np.percentile(c, 50))
        summary.compute_p99_us = float(np.percentile(c, 99))
    good = k - summary.failed_reads
    if reference is not None and good > 0:
        summary.tracking_rms = {j: float(v) for j, v in zip(backend.joint_names, np.sqrt(sq_error / good))}
        summary.max_abs_error = max_error
    summary.comm_errors = dict(Counter(comm_errors())) if comm_errors else {}
    summary.saturated = saturated + (saturation_count() if saturation_count else 0)
    return summary


def _limit_breach(names: Sequence[str], limits: SafetyLimits, state: JointState) -> str:
    """Describe the first joint outside its position or velocity limits ('' if none)."""
    for i, name in enumerate(names):
        q, v = state.q[i], state.dq[i]
        if q < limits.lower[i] or q > limits.upper[i]:
            return f"q.{name} = {q:.4g} outside [{limits.lower[i]:.4g}, {limits.upper[i]:.4g}]"
        if abs(v) > limits.velocity[i]:
            return f"dq.{name} = {v:.4g} beyond the velocity limit {limits.velocity[i]:.4g}"
    return ""
