"""The work of one cycle between the read and the write, and its log row: the estimate step and the
collision check, the safety checks, the controller, the clip to the effort limits, the chatter and
tracking counters.

:class:`PythonCycle` does it in Python around any controller and estimator (the reference
implementation, and the one for goal positions, the MPC and interpreted runs);
:class:`~mbctl.hardware.compiled_cycle.CompiledCycle` does the same arithmetic in one generated C call
for a compiled law. The loop (:func:`~mbctl.hardware.loop.run_loop`) keeps the read, the write, the
pacing, the timings and the log.
"""

from __future__ import annotations

import collections
import math
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np

from mbctl.ctrl.cycle import MEASURED_SPAN, MIN_STEP, SENT_CAPACITY
from mbctl.hardware.interface import JointState
from mbctl.hardware.loop_support import HEAD, PHASES, SafetyLimits, limit_breach
from mbctl.hardware.sample_timing import SampleTiming
from mbctl.hardware.summary import RunSummary, chatter_warnings, reversal_threshold

__all__ = ["Controller", "Cycle", "Estimator", "PythonCycle", "Reference", "StopRun"]


class Controller(Protocol):
    """Maps the time since start (s) and a measurement to actuator torques (N·m, N)."""

    def __call__(self, t: float, state: JointState) -> np.ndarray: ...


class Estimator(Protocol):
    """The estimate step: turns a measurement into the state the controller sees.

    Attributes:
        dq_hat: Velocities of the last estimate (rad/s, m/s), logged.
        tau_ext: External joint torques of the last estimate (N·m, N), logged.
        threshold: The detection thresholds of the last estimate (N·m, N; inf: none).
        q_pred, dq_pred: The state predicted to the instant the next command acts.
        friction_share: 1 when the torque input is a drive torque that the model's friction opposes,
            0 for a joint torque sensor's (behind the friction).
        reaction: What a detection does: ``"stop"``, ``"hold"`` or ``"none"``.
    """

    dq_hat: np.ndarray
    tau_ext: np.ndarray
    threshold: np.ndarray
    q_pred: np.ndarray
    dq_pred: np.ndarray
    friction_share: float
    reaction: str

    def reset(self, t: float, state: JointState) -> None:
        """Start from this measurement (the warm-up's), taken at time ``t`` (s)."""

    def __call__(self, t: float, state: JointState, tau: np.ndarray, bound: np.ndarray | float = 0.0, horizon: float = 0.0,
                 tau_next: np.ndarray | None = None) -> JointState:  # fmt: skip
        """The estimated state after this measurement, taken at time ``t`` (s; the step is the time
        since the last measurement), given the torque that acted since then (N·m, N) and how far the
        torque that really acted may be from it; then the state predicted ``horizon`` seconds on under
        ``tau_next``."""

    def detection(self, t: float) -> str:
        """A description of the collision detected at the last call (``""``: none)."""

    def describe_detection(self, t: float, tau_ext: np.ndarray, threshold: np.ndarray) -> str:
        """The detection at ``t`` of ``tau_ext`` beyond ``threshold``, in one line."""

    def hold(self, q_hold: np.ndarray) -> np.ndarray:
        """Torques of the compliant hold (N·m, N) about the positions ``q_hold``, at the last estimate."""


Reference = Callable[[float], tuple[np.ndarray, np.ndarray]]
"""Desired ``(q, dq)`` of the actuated joints at time t (s), for tracking errors."""


class StopRun(Exception):
    """The run stops; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class Cycle(Protocol):
    """What the loop calls between the read and the write.

    Attributes:
        row: The log row of the last :meth:`step` (the loop fills in its period, compute and phases).
        stopping: After a step that detected a collision with reaction ``stop``, the stop reason
            (the cycle is logged, nothing is written); else ``""``.
        detected: The first collision detected (``""``: none), and ``holding`` whether the arm is in the
            compliant hold since.
        timing: The samples' and commands' instants.
        measured_torque: The observer takes the drives' measured torque as acting (else the commands).
    """

    row: np.ndarray
    timing: SampleTiming
    measured_torque: bool
    stopping: str
    detected: str
    holding: bool
    saturated: int

    def warm_up(self, state: JointState) -> None:
        """Every path of a cycle once on the warm-up's measurement, nothing kept."""

    def step(self, k: int, t: float, state: JointState | None, tracking: bool) -> np.ndarray | None:
        """Cycle ``k`` at ``t`` (s since the start) on a measurement (None: a failed read); returns the
        command to write (None: nothing to write) and fills :attr:`row`; ``tracking``: the cycle counts
        in the tracking errors. Raises :class:`StopRun` for a limit breach or a failed controller."""

    def finish(self, summary: RunSummary, names: Sequence[str]) -> None:
        """Tracking errors, torque step statistics and the collision into ``summary``."""


class PythonCycle:
    """The cycle in Python around any controller and estimator (see the module docstring).

    With an estimator, the law sees the state predicted to the instant its command will act and the
    reference at that instant (:mod:`mbctl.hardware.sample_timing`); the log and the tracking errors
    compare each sample with the reference at its own instant.

    Args:
        controller: Torques (or goal positions) from the time and the state.
        limits: Safety limits of the actuated joints.
        names: The actuated joints, in the backend's order.
        columns: How many columns the log has (:func:`~mbctl.hardware.loop_support.log_columns`).
        reference: Desired positions and velocities, for the tracking errors (None: none).
        estimator: The estimate step (None: the controller sees the measurement).
        torque_mode: The outputs are torques (False: goal positions, which must lie in the ranges).
        timing: The samples' and commands' instants (:class:`~mbctl.hardware.sample_timing.SampleTiming`).
        measured_torque: The observer takes the drives' measured torque (``state.effort``) as acting,
            else the command the timing says acted.
        sample_clock: Estimates step by the backend's sample instants (``state.t``), else by ``t``.
        logs_estimates: The log has the ``dq_hat`` and ``tau_ext`` columns.
    """

    def __init__(
        self,
        controller: Controller,
        limits: SafetyLimits,
        names: Sequence[str],
        columns: int,
        reference: Reference | None,
        estimator: Estimator | None,
        *,
        torque_mode: bool,
        timing: SampleTiming,
        measured_torque: bool,
        sample_clock: bool,
        logs_estimates: bool,
    ):
        self.controller, self.limits, self.names = controller, limits, list(names)
        self.reference, self.estimator, self.torque_mode = reference, estimator, torque_mode
        n = self.n = len(names)
        self.row = np.zeros(columns)
        self._nan = np.full(n, np.nan)
        self._logs_estimates = logs_estimates
        self._sample_clock = sample_clock
        self.timing, self.measured_torque = timing, measured_torque
        # the commands written the last SENT_CAPACITY cycles, oldest first (a law may hand out its own buffer: copies)
        self._sent = collections.deque([np.zeros(n)] * SENT_CAPACITY, maxlen=SENT_CAPACITY)
        self._t_est = math.nan  # the estimator's clock at its last step
        self._t_previous = 0.0  # the loop-clock instant of the sample before the last new one
        self._pred_q, self._pred_dq, self._pred_h = np.zeros(n), np.zeros(n), 0.0
        self._started = False  # the estimator starts from the run's first sample
        self.stopping = self.detected = ""
        self.holding = False
        self._q_hold: np.ndarray | None = None
        self.saturated = 0
        self.ratio_max = 0.0  # the largest |tau_ext| / threshold of the run
        self._sq_error, self._max_error, self._tracked = np.zeros(n), 0.0, 0
        # torque steps, accumulated in place: sum of squares and reversals per joint
        self._tau_last, self._step_last, self._step, self._back = np.zeros(n), np.zeros(n), np.zeros(n), np.zeros(n)
        self._step_sq, self._reversals = np.zeros(n), np.zeros(n)
        self._reverse_by = reversal_threshold(limits.effort)
        self._steps = 0

    def _sample_time(self, t: float, state: JointState) -> float:
        return state.t if self._sample_clock else t

    def warm_up(self, state: JointState) -> None:
        saturated = self.saturated
        self.timing.sample(0.0, self._sample_time(0.0, state))
        if self.estimator is not None:
            ts = self._sample_time(0.0, state)
            self.estimator.reset(ts, state)
            state = self.estimator(ts, state, np.zeros(self.n))
        self._control(0.0, state, state)
        self.saturated = saturated
        self._fill_row(0.0, state, np.zeros(self.n))
        self.timing.reset()

    def step(self, k: int, t: float, state: JointState | None, tracking: bool) -> np.ndarray | None:
        measured, tau = state, None
        if state is not None:
            self.timing.sample(t, self._sample_time(t, state), state.t_host)
        t_law, law_state = t, state
        if state is not None and self.estimator is not None:
            state = self._estimate(t, state)
            timing = self.timing
            t_law = timing.t_sample + timing.horizon
            q_law = self._pred_q + (timing.horizon - self._pred_h) * self._pred_dq  # a sample read again: its prediction carried on
            law_state = JointState(t=state.t, q=q_law, dq=self._pred_dq, effort=state.effort)
        if state is not None and not self.stopping:
            tau = self._control(t_law, state, law_state)
            if self.torque_mode:
                self._count_step(k, tau)
            self._sent.append(tau.copy())
            self.timing.written()
        logged = self._nan if self.stopping or not self.torque_mode else (tau if tau is not None else np.zeros(self.n))
        q_ref = self._fill_row(t, measured, logged)
        if self.reference is not None and state is not None and tracking:
            err = state.q - q_ref
            self._sq_error += err**2
            self._max_error = max(self._max_error, float(np.abs(err).max()))
            self._tracked += 1
        return tau

    def _estimate(self, t: float, state: JointState) -> JointState:
        """The estimate step and the detection's reaction (the run's first sample starts the estimator)."""
        estimator, timing, sent = self.estimator, self.timing, self._sent
        ts = self._sample_time(t, state)
        if not self._started:  # from the first sample at which the loop's commands act (timing.acting)
            estimator.reset(ts, state)
            self._started, self._t_est, self._t_previous = timing.acting(), ts, timing.t_sample
            self._pred_q[:], self._pred_dq[:], self._pred_h = state.q, state.dq, 0.0
        stepped = ts - self._t_est > MIN_STEP * timing.sample_period_s
        if not stepped:
            ts = self._t_est  # too close to the last sample to be a step (ctrl.cycle.MIN_STEP)
        if self.measured_torque:
            tau, bound = state.effort, 0.0
            if timing.measured and ts - self._t_est > MEASURED_SPAN * timing.sample_period_s:
                # the effort is the torque of the robot's last update; a longer interval held earlier ones too,
                # each one of the commands written (their distance to the effort bounds the error)
                bound = np.max([np.abs(c - tau) for c in sent], axis=0)
        else:
            d = timing.acted(self._t_previous)
            tau, bound = sent[-1 - d], 0.0
            if timing.measured:  # the neighbours may have acted instead: their spread widens the threshold
                bound = np.max([np.abs(sent[-1 - j] - tau) for j in (d - 1, d + 1) if 0 <= j < SENT_CAPACITY], axis=0)
        state = estimator(ts, state, tau, bound, timing.horizon, sent[-1])
        if stepped:
            self._t_est, self._t_previous = ts, timing.t_sample
            self._pred_q[:], self._pred_dq[:], self._pred_h = estimator.q_pred, estimator.dq_pred, timing.horizon
            self.ratio_max = max(self.ratio_max, float(np.max(np.abs(estimator.tau_ext) / estimator.threshold)))
        if not self.detected:
            self.detected = estimator.detection(t)
            if self.detected and estimator.reaction == "stop":
                self.stopping = f"collision detected: {self.detected}; torque off"
            if self.detected and estimator.reaction == "hold":
                self._q_hold, self.holding = state.q.copy(), True
        return state

    def _control(self, t: float, state: JointState, law_state: JointState) -> np.ndarray:
        """Safety checks on ``state``, then the controller's torques at ``t`` for ``law_state``, limited to
        the effort limits (goal positions must lie in the joints' ranges)."""
        limits = self.limits
        breach = limit_breach(self.names, limits, state)
        if breach:
            raise StopRun(f"limit breach: {breach}")
        try:
            # after a detection with reaction "hold": the estimator's compliant hold, checked and limited alike
            tau = np.asarray(self.controller(t, law_state) if self._q_hold is None else self.estimator.hold(self._q_hold), dtype=float)
        except Exception as exc:  # noqa: BLE001  any controller failure must stop the robot
            raise StopRun(f"exception in controller: {exc.__class__.__name__}: {exc}") from None
        if tau.shape != (self.n,) or not np.isfinite(tau).all():
            raise StopRun(f"controller returned an invalid {'torque' if self.torque_mode else 'goal position'} vector {tau!r}")
        if not self.torque_mode:  # goal positions: a servo would drive there, so a goal off the range stops the run
            off = (tau < limits.lower) | (tau > limits.upper)
            if off.any():
                i = int(np.argmax(off))
                raise StopRun(f"goal position of {self.names[i]} = {tau[i]:.4g} outside [{limits.lower[i]:.4g}, {limits.upper[i]:.4g}]")
            return tau
        over = np.abs(tau) > limits.effort
        if over.any():
            self.saturated += int(over.sum())
            tau = np.clip(tau, -limits.effort, limits.effort)
        return tau

    def _fill_row(self, t: float, state: JointState | None, tau: np.ndarray) -> np.ndarray:
        n, row, nan_n = self.n, self.row, self._nan
        t_sample = self.timing.t_sample if state is not None else np.nan
        q_ref = dq_ref = nan_n
        if self.reference is not None:
            q_ref, dq_ref = self.reference(t_sample if state is not None else t)
        at = len(HEAD)
        row[:at] = t, np.nan, np.nan, float(state is not None), t_sample
        values = (state.q, state.dq, q_ref, dq_ref, tau, state.effort) if state is not None else (nan_n, nan_n, q_ref, dq_ref, tau, nan_n)
        row[at : at + 6 * n] = np.concatenate(values)
        if self._logs_estimates:
            row[at + 6 * n : at + 7 * n] = self.estimator.dq_hat if state is not None else nan_n
            row[at + 7 * n : at + 8 * n] = self.estimator.tau_ext if state is not None else nan_n
        row[len(row) - len(PHASES) :] = np.nan
        return q_ref

    def _count_step(self, k: int, tau: np.ndarray) -> None:
        """The torque step of this cycle into the chatter statistics (from the second cycle on)."""
        if k >= 1:
            step, back = self._step, self._back
            np.subtract(tau, self._tau_last, out=step)
            np.add(self._step_sq, step * step, out=self._step_sq)
            if k >= 2:
                np.minimum(np.abs(step), np.abs(self._step_last), out=back)
                np.add(self._reversals, (step * self._step_last < 0) & (back > self._reverse_by), out=self._reversals)
            self._step_last[:] = step
            self._steps += 1
        self._tau_last[:] = tau

    def finish(self, summary: RunSummary, names: Sequence[str]) -> None:
        record(summary, names, self.limits, self._sq_error, self._max_error, self._tracked, self._step_sq, self._reversals, self._steps)
        summary.collision = self.detected
        detects = self.estimator is not None and np.isfinite(self.estimator.threshold).any()
        summary.tau_ext_ratio_max = self.ratio_max if detects else math.nan


def record(
    summary: RunSummary, names: Sequence[str], limits: SafetyLimits, sq_error: np.ndarray, max_error: float, tracked: int,
    step_sq: np.ndarray, reversals: np.ndarray, steps: int,
) -> None:  # fmt: skip
    """A cycle's sums into ``summary``: tracking RMS and the largest error (rad, m), the torque steps'
    RMS (N·m, N) and reversal fractions per joint, and the chatter warnings."""
    if tracked > 0:
        summary.tracking_rms = {j: float(v) for j, v in zip(names, np.sqrt(sq_error / tracked))}
        summary.max_abs_error = float(max_error)
    if steps:
        rms = np.sqrt(step_sq / steps)
        fraction = reversals / max(steps - 1, 1)
        summary.torque_step_rms = {j: float(v) for j, v in zip(names, rms)}
        summary.torque_step_reversals = {j: float(v) for j, v in zip(names, fraction)}
        summary.chatter = chatter_warnings(names, fraction, limits.effort)
