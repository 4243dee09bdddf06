"""The cycle in generated C (:mod:`mbctl.ctrl.cycle`): one call for a compiled joint-space law, two
around any other controller that follows a trajectory (the MPC, the task-space law), which Python calls
in between.

Python keeps what is not arithmetic: it writes the measurement into the call's input buffer, points
the call at the two rows of the reference table around ``t`` (sampled at the loop's rate when the
run starts, so a cycle interpolates nothing in Python), reads the status, carries the memory on and
hands the command to the loop. A paced cycle's reference is interpolated between the table's rows
(exact in lock-step, where ``t`` is a multiple of the period).

The generated functions are cached per thread by the robot's structure, the law, the estimator's
settings and the reaction (a study that changes masses, friction or gains compiles them once), and
:func:`prepare` builds them before a session opens its backend, so no compile runs while drives wait.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence

import numpy as np

from mbctl.ctrl.compiled_laws import law_function, law_values
from mbctl.ctrl.controllers import TASK_SPACE
from mbctl.ctrl.cycle import FOUND, MIN_STEP, STATUS_BREACH, STATUS_DETECTED, CycleLayout, S, build_cycle, build_cycle_around
from mbctl.ctrl.estimation.estimator import step_function, step_values
from mbctl.ctrl.tracking import TrackingController
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.simulation.structure import robot_key
from mbctl.hardware.cycle import PythonCycle, StopRun, record
from mbctl.hardware.estimate import LoopEstimator
from mbctl.hardware.interface import JointState
from mbctl.hardware.loop_support import SafetyLimits, limit_breach
from mbctl.hardware.sample_timing import SampleTiming
from mbctl.hardware.summary import RunSummary, reversal_threshold

__all__ = ["CompiledCycle", "compiled_cycle", "prepare"]

_KEPT = 8  # cycles kept per thread
_cycles = threading.local()


def _fused(controller: object) -> bool:
    """The controller is a compiled joint-space law: the whole cycle is one call."""
    return isinstance(controller, TrackingController) and controller.compiled and controller.law != TASK_SPACE


def _applicable(controller: object, estimator: object) -> bool:
    """A controller that follows its own trajectory, a compiled estimator or none."""
    return (
        isinstance(getattr(controller, "trajectory", None), Trajectory) and callable(getattr(controller, "reference", None))
        and (estimator is None or (isinstance(estimator, LoopEstimator) and estimator.estimator.compiled))
    )  # fmt: skip


def _kept(key: str, build: Callable[[], list]) -> list[CompiledFunction]:
    """The compiled functions ``build()`` gives, once per thread and key."""
    kept = getattr(_cycles, "by_key", None)
    if kept is None:
        kept = _cycles.by_key = {}
    if key not in kept:
        kept[key] = [compile_function(f, optimise_large=True) for f in build()]
        while len(kept) > _KEPT:
            kept.pop(next(iter(kept)))
    return kept[key]


def _functions(controller, estimator: LoopEstimator | None, log_estimates: bool) -> tuple[list[CompiledFunction], CycleLayout, np.ndarray, np.ndarray] | None:  # noqa: ANN001
    """The compiled cycle (one function, or the pair around the controller), its layout and the law's
    and estimator's numbers (None: no compiler)."""
    robot = controller.robot
    p_est, est_key, settings = np.zeros(0), None, None
    if estimator is not None:
        settings = estimator.estimator.settings
        p_est, est_key = step_values(robot, settings, estimator.period_s)
    layout = CycleLayout.of(robot.nv, estimator is not None, log_estimates)
    reaction = settings.reaction if settings is not None else ""

    def estimate():  # noqa: ANN202
        return step_function(robot, settings, estimator.period_s) if estimator is not None else None

    if _fused(controller):
        p_law, law_key = law_values(controller.controller)
        key = robot_key(robot, "cycle", law_key, est_key, reaction, controller.lugre, controller.measured_friction, log_estimates)
        build = lambda: [build_cycle(layout, law_function(controller.controller), estimate(), reaction, controller.lugre, controller.measured_friction)]  # noqa: E731
    else:
        p_law = np.zeros(0)
        key = robot_key(robot, "cycle around", est_key, reaction, log_estimates)
        build = lambda: list(build_cycle_around(layout, estimate(), reaction, robot.ident))  # noqa: E731
    functions = _kept(key, build)
    if not all(f.compiled for f in functions):
        return None
    return [f.instance() for f in functions], layout, p_law, p_est


def prepare(controller: object, estimator: object, *, log_estimates: bool) -> None:
    """Generate and compile the cycle of ``controller`` (and ``estimator``) now, if the loop will use it."""
    if _applicable(controller, estimator):
        _functions(controller, estimator, log_estimates)


def compiled_cycle(
    controller: object, limits: SafetyLimits, names: Sequence[str], reference: object, estimator: object,
    *, logs_estimates: bool, timing: SampleTiming, measured_torque: bool, sample_clock: bool, paced: bool, rate_hz: float, cycles: int,
) -> CompiledCycle | None:  # fmt: skip
    """The compiled cycle for this loop, or None where it does not apply (a controller without a
    trajectory of its own to follow, an interpreted estimator, no compiler)."""
    if not _applicable(controller, estimator) or reference is None or reference != controller.reference:
        return None
    built = _functions(controller, estimator, logs_estimates)
    if built is None:
        return None
    return CompiledCycle(*built, controller, limits, names, estimator, timing=timing, measured_torque=measured_torque,
                         sample_clock=sample_clock, paced=paced, rate_hz=rate_hz, cycles=cycles)  # fmt: skip


class CompiledCycle:
    """The :class:`~mbctl.hardware.cycle.Cycle` in generated C (module docstring); build it with
    :func:`compiled_cycle`. Python computes the cycle's instants (:class:`~mbctl.hardware.sample_timing.SampleTiming`):
    which command acted, the prediction horizon, the law's instant and its reference rows.

    Attributes:
        functions: The generated calls on their buffers: the whole cycle
            (:func:`mbctl.ctrl.cycle.build_cycle`), or the two around the controller
            (:func:`mbctl.ctrl.cycle.build_cycle_around`).
    """

    def __init__(
        self, functions: list[CompiledFunction], layout: CycleLayout, p_law: np.ndarray, p_est: np.ndarray, controller,  # noqa: ANN001
        limits: SafetyLimits, names: Sequence[str], estimator: LoopEstimator | None,
        *, timing: SampleTiming, measured_torque: bool, sample_clock: bool, paced: bool, rate_hz: float, cycles: int,
    ):  # fmt: skip
        self.functions, self.layout, self.controller, self.limits, self.names = functions, layout, controller, limits, list(names)
        self.estimator, self.timing, self.measured_torque = estimator, timing, measured_torque
        self.n = n = layout.n
        self._fused = len(functions) == 1
        first, last = functions[0], functions[-1]
        self._first, self._last = first, last
        limit_values = np.concatenate([limits.lower, limits.upper, limits.velocity, limits.effort, reversal_threshold(limits.effort)])
        if self._fused:
            first.inputs[4][:], first.inputs[5][:], first.inputs[6][:] = p_law, p_est, limit_values
            self._y, self._s, self._m = first.inputs[0], first.inputs[2], first.inputs[3]
            self._m_in = self._m
        else:
            first.inputs[3][:], first.inputs[4][:], last.inputs[6][:] = p_est, limit_values, limit_values
            self._y, self._s, self._m = first.inputs[0], first.inputs[1], first.inputs[2]
            # the second call reads the first's inputs and outputs where they are
            for i, buffer in ((0, self._y), (2, self._s), (3, first.outputs[1]), (4, first.outputs[0])):
                last.point_input(i, buffer.ctypes.data)
            self._found, self._tau_in = first.outputs[0], last.inputs[5]
            at, offset = {}, 0
            for key, per_joint in FOUND:
                at[key], offset = offset, offset + (n if per_joint else 1)
            self._dq_hat = self._found[at["dq_hat"] : at["dq_hat"] + n]
            self._q_law, self._dq_law = self._found[at["q_law"] : at["q_law"] + n], self._found[at["dq_law"] : at["dq_law"] + n]
            self._flags = (at["stopping"], at["holding"], at["breach"])
        self._tau, self.row, self._m_next, self._status = last.outputs
        self._at = {name: i for i, name in enumerate(S)}
        self._s[self._at["measured"]] = float(measured_torque)
        self._s[self._at["spread"]] = float(timing.measured)
        self._s[self._at["period_r"]] = timing.sample_period_s
        self._s[self._at["f"]] = estimator.friction_share if estimator is not None else 1.0
        self._sample_clock, self._paced, self._rate = sample_clock, paced, rate_hz
        self._estimating = estimator is not None
        # the reference at the loop's rate, one row per cycle and one beyond (paced cycles interpolate)
        self._table = np.ascontiguousarray(controller.trajectory.sample(np.arange(cycles + 2) / rate_hz))
        self._last_row = len(self._table) - 2
        self._base, self._row_bytes = self._table.ctypes.data, 8 * self._table.shape[1]
        self._started = False
        self._t_est = math.nan  # the estimator's clock at the last new sample
        self._t_previous = 0.0  # the loop-clock instant of the sample before it
        self.stopping = self.detected = ""
        self.holding = False
        self.saturated = 0
        self._python = PythonCycle(controller, limits, names, len(self.row), controller.reference, estimator, torque_mode=True, timing=timing,
                                   measured_torque=measured_torque, sample_clock=sample_clock, logs_estimates=layout.log_estimates)  # fmt: skip

    def warm_up(self, state: JointState) -> None:
        """The generated calls (and the controller between them) once on the warm-up's measurement, their
        memory not kept, and the Python cycle's path of a failed read."""
        m = self._m.copy()
        self._call(0, 0.0, state, False)
        self._m[:] = m
        self._started = False
        self._t_est = math.nan
        self._python.step(0, 0.0, None, False)
        self.timing.reset()

    def _start(self, t: float, state: JointState) -> None:
        """The estimator's states from the run's first sample."""
        t_est = state.t if self._sample_clock else t
        if self._estimating:
            x, o = self.estimator.estimator.initial(state.q, state.dq)
            layout = self.layout
            layout.part(self._m, "x")[:], layout.part(self._m, "o")[:] = x, o
            layout.part(self._m, "t_est")[:] = t_est
            layout.part(self._m, "pred")[:] = np.concatenate([state.q, state.dq])
            layout.part(self._m, "threshold")[:] = self.estimator.estimator.settings.threshold
        self._t_est, self._t_previous = t_est, self.timing.t_sample
        self._started = self.timing.acting()

    def _call(self, k: int, t: float, state: JointState, tracking: bool) -> None:
        """The generated call(s) of cycle ``k``; around a controller, the controller in between."""
        n, y, s, at, timing = self.n, self._y, self._s, self._at, self.timing
        y[:n], y[n : 2 * n], y[2 * n :] = state.q, state.dq, state.effort
        t_est = state.t if self._sample_clock else t
        timing.sample(t, t_est, state.t_host)
        if not self._started:  # from the first sample at which the loop's commands act (timing.acting)
            self._start(t, state)
        t_law = timing.t_sample + timing.horizon if self._estimating else t
        if self._paced:
            i = t_law * self._rate
            j = max(min(int(i), self._last_row), 0)
            s[2] = min(max(i - j, 0.0), 1.0)
        else:
            j = min(k, self._last_row)
            s[2] = 0.0
        self._last.point_input(1, self._base + j * self._row_bytes)
        s[0], s[1], s[3], s[4] = t, t_est, tracking, k
        s[at["d"]] = timing.acted(self._t_previous)
        s[at["horizon"]], s[at["t_sample"]], s[at["lead"]] = timing.horizon, timing.t_sample, t_law - timing.t_sample
        if t_est - self._t_est > MIN_STEP * timing.sample_period_s:  # a step of the estimator (ctrl.cycle.MIN_STEP)
            self._t_est, self._t_previous = t_est, timing.t_sample
        if self._fused:
            self._first.eval()
            return
        self._first.eval()
        found, (i_stop, i_hold, i_breach) = self._found, self._flags
        stopping, holding, breach = found[i_stop], found[i_hold], found[i_breach]
        if breach and not stopping:
            raise StopRun(self._breach(state, self._dq_hat))
        if not stopping and not holding:
            try:
                tau = np.asarray(self.controller(t_law, JointState(t=state.t, q=self._q_law, dq=self._dq_law, effort=state.effort)), dtype=float)
            except Exception as exc:  # noqa: BLE001  any controller failure must stop the robot
                raise StopRun(f"exception in controller: {exc.__class__.__name__}: {exc}") from None
            if tau.shape != (n,):
                raise StopRun(f"controller returned an invalid torque vector {tau!r}")
            self._tau_in[:] = tau
        self._last.eval()

    def step(self, k: int, t: float, state: JointState | None, tracking: bool) -> np.ndarray | None:
        if state is None:  # a failed read: the Python cycle logs it (nothing to estimate or control)
            self._python.step(k, t, None, False)
            self.row = self._python.row
            return None
        self.row = self._last.outputs[1]
        self._call(k, t, state, tracking)
        code, new_detection = self._status
        if code and code != STATUS_DETECTED:
            raise StopRun(self._reason(int(code), state))
        self._m[:] = self._m_next
        if new_detection:
            part = lambda name: self.layout.part(self._m, name)  # noqa: E731
            self.detected = self.estimator.describe_detection(t, part("o")[2 * self.n : 3 * self.n], part("threshold"))
            if self.estimator.reaction == "stop":
                self.stopping = f"collision detected: {self.detected}; torque off"
            self.holding = self.estimator.reaction == "hold"
        if self.stopping:
            return None
        self.timing.written()
        return self._tau.copy()

    def _breach(self, state: JointState, dq: np.ndarray) -> str:
        return f"limit breach: {limit_breach(self.names, self.limits, JointState(t=state.t, q=state.q, dq=dq, effort=state.effort))}"

    def _reason(self, code: int, state: JointState) -> str:
        if code == STATUS_BREACH:
            return self._breach(state, self.layout.part(self._m_next, "x")[self.n : 2 * self.n] if self._estimating else state.dq)
        return f"controller returned an invalid torque vector {self._tau_in if not self._fused else self._tau!r}"

    def finish(self, summary: RunSummary, names: Sequence[str]) -> None:
        part = lambda name: self.layout.part(self._m, name)  # noqa: E731
        record(summary, names, self.limits, part("sq_error"), float(part("max_error")[0]), int(part("tracked")[0]),
               part("step_sq"), part("reversals"), int(part("steps")[0]))  # fmt: skip
        summary.collision = self.detected
        detects = self._estimating and np.isfinite(part("threshold")).any()
        summary.tau_ext_ratio_max = float(part("ratio_max")[0]) if detects else math.nan
        self.saturated = int(part("saturated")[0])
        if self._fused:
            self.controller.saturated_cycles += int(part("law_saturated")[0])
