"""The cycle of a compiled law as one generated C call (:func:`mbctl.ctrl.cycle.build_cycle`).

Python keeps what is not arithmetic: it writes the measurement into the call's input buffer, points
the call at the two rows of the reference table around ``t`` (sampled at the loop's rate when the
run starts, so a cycle interpolates nothing in Python), reads the status, carries the memory on and
hands the command to the loop. A paced cycle's reference is interpolated between the table's rows
(exact in lock-step, where ``t`` is a multiple of the period).

The generated function is cached per thread by the robot's structure, the law, the estimator's
settings and the reaction (a study that changes masses, friction or gains compiles it once), and
:func:`prepare` builds it before a session opens its backend, so no compile runs while drives wait.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from mbctl.ctrl.compiled_laws import law_function, law_values
from mbctl.ctrl.controllers import TASK_SPACE
from mbctl.ctrl.cycle import SENT_CAPACITY, STATUS_BREACH, STATUS_DETECTED, CycleLayout, build_cycle
from mbctl.ctrl.estimation.estimator import step_function, step_values
from mbctl.ctrl.tracking import TrackingController
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.simulation.structure import robot_key
from mbctl.hardware.cycle import PythonCycle, StopRun, record
from mbctl.hardware.estimate import LoopEstimator
from mbctl.hardware.interface import JointState
from mbctl.hardware.loop_support import SafetyLimits, limit_breach
from mbctl.hardware.summary import RunSummary, reversal_threshold

__all__ = ["CompiledCycle", "compiled_cycle", "prepare"]

_KEPT = 8  # cycle functions kept per thread
_cycles = threading.local()


def _applicable(controller: object, estimator: object, delay: int = 0) -> bool:
    """A compiled joint-space law (its reference the loop's), a compiled estimator or none, a delay the cycle holds."""
    return (
        isinstance(controller, TrackingController) and controller.compiled and controller.law != TASK_SPACE
        and (estimator is None or (isinstance(estimator, LoopEstimator) and estimator.estimator.compiled))
        and delay < SENT_CAPACITY
    )  # fmt: skip


def _function(tracking: TrackingController, estimator: LoopEstimator | None, log_estimates: bool) -> tuple[CompiledFunction, CycleLayout, np.ndarray, np.ndarray] | None:
    """The compiled cycle, its layout and the law's and estimator's numbers (None: no compiler)."""
    robot = tracking.robot
    p_law, law_key = law_values(tracking.controller)
    p_est, est_key, settings = np.zeros(0), None, None
    if estimator is not None:
        settings = estimator.estimator.settings
        p_est, est_key = step_values(robot, settings, estimator.period_s)
    layout = CycleLayout.of(robot.nv, estimator is not None, log_estimates)
    reaction = settings.reaction if settings is not None else ""
    key = robot_key(robot, "cycle", law_key, est_key, reaction, tracking.lugre, tracking.measured_friction, log_estimates)
    kept = getattr(_cycles, "by_key", None)
    if kept is None:
        kept = _cycles.by_key = {}
    if key not in kept:
        estimate = step_function(robot, settings, estimator.period_s) if estimator is not None else None
        function = build_cycle(layout, law_function(tracking.controller), estimate, reaction, tracking.lugre, tracking.measured_friction)
        kept[key] = compile_function(function, optimise_large=True)
        while len(kept) > _KEPT:
            kept.pop(next(iter(kept)))
    f = kept[key]
    return (f.instance(), layout, p_law, p_est) if f.compiled else None


def prepare(controller: object, estimator: object, *, log_estimates: bool) -> None:
    """Generate and compile the cycle of ``controller`` (and ``estimator``) now, if the loop will use it."""
    if _applicable(controller, estimator):
        _function(controller, estimator, log_estimates)


def compiled_cycle(
    controller: object, limits: SafetyLimits, names: Sequence[str], reference: object, estimator: object,
    *, logs_estimates: bool, delay: int, sample_clock: bool, paced: bool, rate_hz: float, cycles: int,
) -> CompiledCycle | None:  # fmt: skip
    """The compiled cycle for this loop, or None where it does not apply (any controller other than a
    compiled joint-space law following its own reference, an interpreted estimator, no compiler)."""
    if not _applicable(controller, estimator, delay) or reference is None or reference != controller.reference:
        return None
    built = _function(controller, estimator, logs_estimates)
    if built is None:
        return None
    return CompiledCycle(*built, controller, limits, names, estimator,
                         delay=delay, sample_clock=sample_clock, paced=paced, rate_hz=rate_hz, cycles=cycles)  # fmt: skip


class CompiledCycle:
    """The :class:`~mbctl.hardware.cycle.Cycle` of a compiled law: one generated call per cycle
    (module docstring); build it with :func:`compiled_cycle`."""

    def __init__(
        self, f: CompiledFunction, layout: CycleLayout, p_law: np.ndarray, p_est: np.ndarray, tracking: TrackingController,
        limits: SafetyLimits, names: Sequence[str], estimator: LoopEstimator | None,
        *, delay: int, sample_clock: bool, paced: bool, rate_hz: float, cycles: int,
    ):  # fmt: skip
        self._f, self.layout, self.tracking, self.limits, self.names = f, layout, tracking, limits, list(names)
        self.estimator = estimator
        n = self.n = layout.n
        self._y, self._r, self._s, self._m = f.inputs[0], f.inputs[1], f.inputs[2], f.inputs[3]
        self._tau, self.row, self._m_next, self._status = f.outputs
        f.inputs[4][:], f.inputs[5][:] = p_law, p_est
        f.inputs[6][:] = np.concatenate([limits.lower, limits.upper, limits.velocity, limits.effort, reversal_threshold(limits.effort)])
        self._s[5] = delay
        self._sample_clock, self._paced, self._rate = sample_clock, paced, rate_hz
        # the reference at the loop's rate, one row per cycle and one beyond (paced cycles interpolate)
        self._table = np.ascontiguousarray(tracking.trajectory.sample(np.arange(cycles + 2) / rate_hz))
        self._last = len(self._table) - 2
        self._base, self._row_bytes = self._table.ctypes.data, 8 * self._table.shape[1]
        self._started = False
        self.stopping = self.detected = ""
        self.holding = False
        self.saturated = 0
        self._sent_part = layout.memory["sent"]
        self._fallback = PythonCycle(tracking, limits, names, len(self.row), tracking.reference, estimator,
                                     torque_mode=True, delay=delay, sample_clock=sample_clock, logs_estimates=layout.log_estimates)  # fmt: skip

    def warm_up(self, state: JointState) -> None:
        """The generated call once on the warm-up's measurement (its memory not kept), and the Python
        cycle's warm-up for the paths a failed read takes."""
        m = self._m.copy()
        self._start(0.0, state)
        self._call(0, 0.0, state, False)
        self._m[:] = m
        self._started = False
        self._fallback.warm_up(state)

    def _start(self, t: float, state: JointState) -> None:
        """The estimator's states from the run's first sample."""
        if self.estimator is not None:
            x, o = self.estimator.estimator.initial(state.q, state.dq)
            layout = self.layout
            layout.part(self._m, "x")[:], layout.part(self._m, "o")[:] = x, o
            layout.part(self._m, "t_est")[:] = state.t if self._sample_clock else t
        self._started = True

    def _call(self, k: int, t: float, state: JointState, tracking: bool) -> None:
        n, y, s = self.n, self._y, self._s
        y[:n], y[n : 2 * n], y[2 * n :] = state.q, state.dq, state.effort
        if self._paced:
            i = t * self._rate
            j = min(int(i), self._last)
            s[2] = min(i - j, 1.0)
        else:
            j = min(k, self._last)
            s[2] = 0.0
        self._f.point_input(1, self._base + j * self._row_bytes)
        s[0], s[1], s[3], s[4] = t, state.t if self._sample_clock else t, tracking, k
        self._f.eval()

    def step(self, k: int, t: float, state: JointState | None, tracking: bool) -> np.ndarray | None:
        if state is None:  # a failed read: the Python cycle logs it (nothing to estimate or control)
            self._fallback.step(k, t, None, False)
            self.row = self._fallback.row
            return None
        self.row = self._f.outputs[1]
        if not self._started:
            self._start(t, state)
        self._call(k, t, state, tracking)
        code, new_detection = self._status
        if code and code != STATUS_DETECTED:
            raise StopRun(self._reason(int(code), state))
        self._m[:] = self._m_next
        if new_detection:
            tau_ext = self.layout.part(self._m, "o")[2 * self.n : 3 * self.n]
            self.detected = self.estimator.describe_detection(t, tau_ext)
            if self.estimator.reaction == "stop":
                self.stopping = f"collision detected: {self.detected}; torque off"
            self.holding = self.estimator.reaction == "hold"
        return None if self.stopping else self._tau.copy()

    def _reason(self, code: int, state: JointState) -> str:
        if code == STATUS_BREACH:
            dq = self.layout.part(self._m_next, "x")[self.n : 2 * self.n] if self.estimator is not None else state.dq
            return f"limit breach: {limit_breach(self.names, self.limits, JointState(t=state.t, q=state.q, dq=dq, effort=state.effort))}"
        return f"controller returned an invalid torque vector {self._tau!r}"

    def finish(self, summary: RunSummary, names: Sequence[str]) -> None:
        part = lambda name: self.layout.part(self._m, name)  # noqa: E731
        record(summary, names, self.limits, part("sq_error"), float(part("max_error")[0]), int(part("tracked")[0]),
               part("step_sq"), part("reversals"), int(part("steps")[0]))  # fmt: skip
        summary.collision = self.detected
        self.saturated = int(part("saturated")[0])
        self.tracking.saturated_cycles += int(part("law_saturated")[0])
