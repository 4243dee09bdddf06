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
import struct
import threading
from collections.abc import Callable, Sequence
from functools import partial

import numpy as np

from mbctl.ctrl.compiled_laws import law_function, law_values
from mbctl.ctrl.controllers import TASK_SPACE
from mbctl.ctrl.cycle import FOUND, MIN_STEP, S_SIZE, STATUS_BREACH, STATUS_DETECTED, CycleLayout, S, build_cycle, build_cycle_around
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
# the order of mbctl.ctrl.cycle.S that CompiledCycle packs the scalar input in (checked when one is built)
_S_PACKED = ("t", "t_est", "w", "tracking", "k", "d", "horizon", "measured", "spread", "t_sample", "f", "lead", "period_r")
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

    Per cycle, Python only copies the measurement into the call's input, packs the cycle's scalars in one
    call, points the call at its reference row, calls and checks the status: the memory ``m`` is carried
    on by two entries into each generated function that swap the buffers of ``m`` and ``m_next``
    (ping-pong, no copy), and for a compiled law where nothing is measured (lock-step, no sample clock)
    the sample timing's constant answers are packed without asking it (:mod:`mbctl.hardware.sample_timing`).

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
        if S != _S_PACKED:
            raise RuntimeError(f"the cycle's scalar input changed ({S}): update CompiledCycle's packing")
        self.functions, self.layout, self.controller, self.limits, self.names = functions, layout, controller, limits, list(names)
        self.estimator, self.timing, self.measured_torque = estimator, timing, measured_torque
        self.n = n = layout.n
        self._fused = len(functions) == 1
        first, last = functions[0], functions[-1]
        limit_values = np.concatenate([limits.lower, limits.upper, limits.velocity, limits.effort, reversal_threshold(limits.effort)])
        if self._fused:
            first.inputs[4][:], first.inputs[5][:], first.inputs[6][:] = p_law, p_est, limit_values
            self._y, self._s, m, m_at = first.inputs[0], first.inputs[2], first.inputs[3], 3
        else:
            first.inputs[3][:], first.inputs[4][:], last.inputs[6][:] = p_est, limit_values, limit_values
            self._y, self._s, m, m_at = first.inputs[0], first.inputs[1], first.inputs[2], 2
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
        self._tau, self.row, m_next, status = last.outputs
        self._row = self.row
        # ping-pong: entry p reads the memory in buffer p and writes m_next into the other; a carried cycle flips p
        self._memory, self._parity = (m, m_next), 0
        pointers = [(m.ctypes.data, m_next.ctypes.data), (m_next.ctypes.data, m.ctypes.data)]
        self._calls = [first.entry({m_at: read}).call for read, _ in pointers] if not self._fused else None
        last_entries = [last.entry({m_at: read} if self._fused else None, {2: write}) for read, write in pointers]
        self._calls_last = [e.call for e in last_entries]
        self._r_pointers = [e.arguments for e in last_entries]  # input 1 (r) of the (last) call: the reference rows
        self._y_q, self._y_dq, self._y_effort = self._y[:n], self._y[n : 2 * n], self._y[2 * n :]
        self._status = memoryview(status)  # floats without numpy scalars
        # the scalar input s in one call (the order of mbctl.ctrl.cycle.S), with its constant entries bound
        self._measured_f = float(measured_torque)
        self._spread = float(timing.measured)
        self._f = estimator.friction_share if estimator is not None else 1.0
        self._period_r = timing.sample_period_s
        self._min_step = MIN_STEP * timing.sample_period_s
        self._pack_s = partial(struct.Struct(f"{S_SIZE}d").pack_into, self._s, 0)
        self._sample_clock, self._paced, self._rate = sample_clock, paced, rate_hz
        self._estimating = estimator is not None
        # the reference at the loop's rate, one row per cycle and one beyond (paced cycles interpolate)
        self._table = np.ascontiguousarray(controller.trajectory.sample(np.arange(cycles + 2) / rate_hz))
        self._last_row = len(self._table) - 2
        self._base, self._row_bytes = self._table.ctypes.data, 8 * self._table.shape[1]
        self._started = False
        self._quick = False  # started, one generated call, nothing measured: step's short path
        self._t_est = math.nan  # the estimator's clock at the last new sample
        self._t_previous = 0.0  # the loop-clock instant of the sample before it
        self.stopping = self.detected = ""
        self.holding = False
        self.saturated = 0
        self._python = PythonCycle(controller, limits, names, len(self.row), controller.reference, estimator, torque_mode=True, timing=timing,
                                   measured_torque=measured_torque, sample_clock=sample_clock, logs_estimates=layout.log_estimates)  # fmt: skip

    @property
    def _m(self) -> np.ndarray:
        """The memory the next call reads."""
        return self._memory[self._parity]

    @property
    def _m_next(self) -> np.ndarray:
        """The memory the last call wrote (carried on only if the cycle went on)."""
        return self._memory[1 - self._parity]

    def warm_up(self, state: JointState) -> None:
        """The generated calls (and the controller between them) once on the warm-up's measurement, their
        memory not kept (written into the other buffer, not carried on), and the Python cycle's path of
        a failed read."""
        m = self._m.copy()  # the run's first sample starts the estimator's states in it: restored
        self._call(0, 0.0, state, False)
        self._m[:] = m
        self._started = self._quick = False
        self._t_est = math.nan
        self._python.step(0, 0.0, None, False)
        self.timing.reset()

    def _start(self, t: float, state: JointState) -> None:
        """The estimator's states from the run's first sample."""
        t_est = state.t if self._sample_clock else t
        if self._estimating:
            x, o = self.estimator.estimator.initial(state.q, state.dq)
            layout, m = self.layout, self._m
            layout.part(m, "x")[:], layout.part(m, "o")[:] = x, o
            layout.part(m, "t_est")[:] = t_est
            layout.part(m, "pred")[:] = np.concatenate([state.q, state.dq])
            layout.part(m, "threshold")[:] = self.estimator.estimator.settings.threshold
        self._t_est, self._t_previous = t_est, self.timing.t_sample
        self._started = self.timing.acting()
        # nothing measured: from now on the sample is at t and a command acts at once (sample_timing), so
        # step packs those constants without asking the timing, and nothing reads its command queue
        self._quick = self._started and self._fused and not self.timing.measured
        if self._quick:
            entries = tuple(zip(self._calls_last, self._r_pointers))
            self._constants = (self._y_q, self._y_dq, self._y_effort, self._pack_s, entries, self._paced, self._rate, self._last_row, self._base,
                               self._row_bytes, self.timing.delay_cycles, self._measured_f, self._spread, self._f, self._period_r, self._sample_clock,
                               self.timing, self._status, self._tau.copy)  # fmt: skip

    def _reference_row(self, k: int, t_law: float) -> float:
        """Points the (last) call at the reference rows around ``t_law`` (cycle ``k`` in lock-step);
        returns the weight of the second row."""
        if self._paced:
            i = t_law * self._rate
            j = max(min(int(i), self._last_row), 0)
            w = min(max(i - j, 0.0), 1.0)
        else:
            j, w = min(k, self._last_row), 0.0
        self._r_pointers[self._parity][1] = self._base + j * self._row_bytes
        return w

    def _call(self, k: int, t: float, state: JointState, tracking: bool) -> None:
        """The generated call(s) of cycle ``k``; around a controller, the controller in between."""
        n, timing, p = self.n, self.timing, self._parity
        self._y_q[...], self._y_dq[...], self._y_effort[...] = state.q, state.dq, state.effort
        t_est = state.t if self._sample_clock else t
        timing.sample(t, t_est, state.t_host)
        if not self._started:  # from the first sample at which the loop's commands act (timing.acting)
            self._start(t, state)
        t_sample, horizon = timing.t_sample, timing.horizon
        t_law = t_sample + horizon if self._estimating else t
        w = self._reference_row(k, t_law)
        self._pack_s(t, t_est, w, tracking, k, timing.acted(self._t_previous), horizon, self._measured_f, self._spread, t_sample,
                     self._f, t_law - t_sample, self._period_r)
        if t_est - self._t_est > self._min_step:  # a step of the estimator (ctrl.cycle.MIN_STEP)
            self._t_est, self._t_previous = t_est, t_sample
        if self._fused:
            self._evaluate(self._calls_last[p])
            return
        self._evaluate(self._calls[p])
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
        self._evaluate(self._calls_last[p])

    def _evaluate(self, call: Callable[[], int]) -> None:
        if call():
            raise RuntimeError(f"{self.functions[0].library}: evaluation failed")

    def step(self, k: int, t: float, state: JointState | None, tracking: bool) -> np.ndarray | None:
        if state is None:  # a failed read: the Python cycle logs it (nothing to estimate or control)
            self._python.step(k, t, None, False)
            self.row = self._python.row
            return None
        self.row = self._row
        if self._quick:
            # _call's work where nothing is measured (see _start): the sample at t, horizon and lead 0,
            # the backend's fixed command delay; inline, with the run's constants in one tuple, as it is
            # every cycle of a lock-step run
            (y_q, y_dq, y_effort, pack, entries, paced, rate, last_row, base, row_bytes, d, measured, spread, f, period_r, sample_clock, timing,
             status, command) = self._constants  # fmt: skip
            y_q[...] = state.q
            y_dq[...] = state.dq
            y_effort[...] = state.effort
            p = self._parity
            call, pointers = entries[p]
            if paced:  # _reference_row's
                i = t * rate
                j = max(min(int(i), last_row), 0)
                w = min(max(i - j, 0.0), 1.0)
            else:
                j, w = (k if k < last_row else last_row), 0.0
            pointers[1] = base + j * row_bytes
            pack(t, state.t if sample_clock else t, w, tracking, k, d, 0.0, measured, spread, t, f, 0.0, period_r)
            timing.t_sample = t
            if call():
                raise RuntimeError(f"{self.functions[0].library}: evaluation failed")
            if status[0] or status[1] or self.stopping:
                return self._event(t, state)
            self._parity = p ^ 1  # m_next carried on: the next call reads it where this one wrote it
            return command()
        self._call(k, t, state, tracking)
        status = self._status
        if status[0] or status[1] or self.stopping:
            return self._event(t, state)
        self._parity ^= 1
        self.timing.written()
        return self._tau.copy()

    def _event(self, t: float, state: JointState) -> np.ndarray | None:
        """The end of a step whose status is not plain: a stop, or a collision detected."""
        code, new_detection = self._status[0], self._status[1]
        if code and code != STATUS_DETECTED:
            raise StopRun(self._reason(int(code), state))
        self._parity ^= 1
        if new_detection:
            part = lambda name: self.layout.part(self._m, name)  # noqa: E731
            self.detected = self.estimator.describe_detection(t, part("o")[2 * self.n : 3 * self.n], part("threshold"))
            if self.estimator.reaction == "stop":
                self.stopping = f"collision detected: {self.detected}; torque off"
            self.holding = self.estimator.reaction == "hold"
        if self.stopping:
            return None
        if not self._quick:
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
