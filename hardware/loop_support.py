"""The loop's parts that are not the cycle: safety limits and their check, the log's columns, a
run's footprint, and the garbage collector held off during a paced run."""

from __future__ import annotations

import contextlib
import gc
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from mbctl.ctrl.limits import run_limits
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.interface import JointState

__all__ = ["HEAD", "PHASES", "ESTIMATE_GROUPS", "SafetyLimits", "limit_breach", "log_columns", "run_footprint", "no_gc_pauses"]

HEAD = ("t", "period", "compute", "read_ok", "t_sample")
"""The log's columns before the joints' groups (:func:`log_columns`)."""
PHASES = ("read", "control", "write", "log")
"""The timed phases of a cycle, in order."""
ESTIMATE_GROUPS = ("dq_hat", "tau_ext")
"""Log groups of a run with an estimator."""


@dataclass(frozen=True)
class SafetyLimits:
    """Per actuated joint: position range (rad, m), speed and effort limits."""

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray

    @classmethod
    def of(cls, robot: RobotModel) -> SafetyLimits:
        """The limits of a run on the robot's actuated joints: the URDF/TOML ranges and speeds and the
        effort levels the laws saturate at (:func:`~mbctl.ctrl.limits.run_limits`, the ones the
        planners plan to)."""
        lim = run_limits(robot).select(robot.actuated_names)
        return cls(lower=lim.lower, upper=lim.upper, velocity=lim.velocity, effort=lim.effort)


def log_columns(joint_names: Sequence[str], estimation: bool = False) -> list[str]:
    """Columns of the run log: times, one column per joint for each quantity, phase durations.

    ``t`` (s since the start), ``period`` and ``compute`` (s), ``read_ok`` (1/0), ``t_sample``
    (the instant the sample was measured, on the loop's clock: ``t`` less its age, s), then
    ``q``, ``dq``, ``q_ref``, ``dq_ref`` (the reference at ``t_sample``), ``tau``, ``effort`` per joint (with ``estimation``
    also ``dq_hat`` and ``tau_ext``: the estimated velocity and external torque), then
    ``phase.read``, ``phase.control``, ``phase.write`` (s, NaN when skipped) and
    ``phase.log``: the time spent logging the *previous* cycle (NaN in the first row).
    """
    cols = list(HEAD)
    for group in ("q", "dq", "q_ref", "dq_ref", "tau", "effort") + (ESTIMATE_GROUPS if estimation else ()):
        cols += [f"{group}.{j}" for j in joint_names]
    return cols + [f"phase.{p}" for p in PHASES]


def run_footprint(duration_s: float, rate_hz: float, joints: int, estimation: bool = False) -> tuple[float, float, float]:
    """Cycles of a run of ``duration_s`` s at ``rate_hz`` Hz on ``joints`` joints, the memory it holds
    and the disk it writes at most (bytes), before it starts.

    Memory: the loop's per-cycle timings (period, compute, phases), the reference sampled at the loop's
    rate for a compiled cycle (``q, dq, ddq``) and the log read back whole by the plots and task-space
    figures after the run (``8 (2 + phases + 3 joints + columns)`` bytes a cycle; closing the log itself
    holds a block of rows, :mod:`mbctl.hardware.runlog`). Disk: the raw ``.partial`` file
    and the NPZ while both exist (``16 columns`` bytes a cycle).
    """
    product = duration_s * rate_hz
    cycles = float(round(product)) if math.isfinite(product) else math.inf
    columns = len(HEAD) + (6 + 2 * estimation) * joints + len(PHASES)
    return cycles, cycles * 8.0 * (2 + len(PHASES) + 3 * joints + columns), cycles * 16.0 * columns


@contextlib.contextmanager
def no_gc_pauses() -> Iterator[None]:
    """No cyclic garbage collection inside the loop: a full collection can take milliseconds.

    The loop allocates only short-lived arrays freed by reference counting, so memory
    stays flat; objects alive before the loop are frozen out of later collections.
    """
    was_enabled = gc.isenabled()
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()


def limit_breach(names: Sequence[str], limits: SafetyLimits, state: JointState) -> str:
    """Describe the first joint outside its position or velocity limits ('' if none)."""
    for i, name in enumerate(names):
        q, v = state.q[i], state.dq[i]
        if q < limits.lower[i] or q > limits.upper[i]:
            return f"q.{name} = {q:.4g} outside [{limits.lower[i]:.4g}, {limits.upper[i]:.4g}]"
        if abs(v) > limits.velocity[i]:
            return f"dq.{name} = {v:.4g} beyond the velocity limit {limits.velocity[i]:.4g}"
    return ""
