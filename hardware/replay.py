"""Goal positions sent to servos in their own position mode, every measurement logged.

What a servo identification needs from hardware (:mod:`mbctl.identification.servo`): the
goals sent and the positions measured, at a constant step. :func:`replay_positions`
sends one goal per period to a backend opened in position mode and writes a run log
in the loop's format (:func:`mbctl.hardware.loop.log_columns`; ``q_ref`` holds the goal
sent after the row's measurement, ``tau`` and ``dq_ref`` are NaN), so the log reads back
with :func:`mbctl.identification.servo.read_run_log`. A row of NaN goals turns the
torque off for that period (the pendulum swings freely: what separates back-EMF from
viscous friction); the next finite goals turn it on again.

Row ``k`` (time ``k * period_s``): the measurement taken after goal ``k - 1`` was held for
one period (row 0: the measurement before the first goal), then goal ``k``.
"""

from __future__ import annotations

import numpy as np

from mbctl.hardware.clock import LoopClock, WallClock
from mbctl.hardware.interface import JointCommand, JointInterface
from mbctl.hardware.loop import log_columns
from mbctl.hardware.loop_support import HEAD
from mbctl.hardware.runlog import RunLog

__all__ = ["replay_positions"]


def replay_positions(backend: JointInterface, goals: np.ndarray, period_s: float, log: RunLog, *, clock: LoopClock | None = None, paced: bool = True) -> int:
    """Send ``goals`` (rad, (N, joints)) one per ``period_s`` to an opened position-mode
    ``backend``; log every measurement. Torque is on while a row's goals are finite (a row
    of NaN: off) and off on return.

    Unpaced (a lock-step plant or emulated bus) the next period starts when the backend
    answers; paced, on absolute deadlines of ``clock`` (default: the wall clock).

    Returns:
        Rows logged (N).
    """
    goals = np.asarray(goals, dtype=float)
    n = len(backend.joint_names)
    if goals.ndim != 2 or goals.shape[1] != n:
        raise ValueError(f"goals need shape (N, {n}), got {goals.shape}")
    if list(log.columns) != log_columns(backend.joint_names):
        raise ValueError("the log's columns are not the loop's for these joints")
    clock = clock or WallClock()
    row = np.full(len(log.columns), np.nan)
    nan_n = np.full(n, np.nan)
    off = np.isnan(goals).all(axis=1)
    if (np.isnan(goals).any(axis=1) & ~off).any():
        raise ValueError("a row of goals is either all finite (torque on) or all NaN (torque off)")
    start = clock.now()
    enabled = False
    try:
        for k, goal in enumerate(goals):
            if paced and k:
                clock.sleep_until(start + k * period_s)
            state = backend.read()
            if off[k]:
                if enabled:
                    backend.disable()
                    enabled = False
            else:
                if not enabled:
                    backend.enable()
                    enabled = True
                backend.write(JointCommand.position(goal))
            row[: len(HEAD)] = (k * period_s, period_s, np.nan, 1.0, k * period_s)
            row[len(HEAD) : len(HEAD) + 6 * n] = np.concatenate([state.q, state.dq, goal, nan_n, nan_n, state.effort if len(state.effort) == n else nan_n])
            log.append(row)
    finally:
        backend.disable()
        log.close()
    return len(goals)
