"""External joint torques and collisions in a recorded log: the momentum observer offline.

The log is read by :func:`read_observer_log` (one function: the arm-identification reader of
:mod:`mbctl.identification.arm_log`, CSV or mbctl run log), repeated rows and rows whose time
does not increase are dropped, and :func:`mbctl.ctrl.estimation.offline.observe` runs over the
rest. :func:`observer_table` gives the output table's columns: ``t``, ``tau_ext.<joint>``,
``detected.<joint>`` (1/0) and ``detected`` (1 where any joint is).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mbctl.ctrl.estimation.offline import ObserverRun, observe
from mbctl.ctrl.estimation.settings import estimation_settings
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import DataError
from mbctl.identification.arm_log import ArmLog, read_arm_log
from mbctl.rosbag import BagOptions

__all__ = ["observe_log", "observer_table", "read_observer_log"]


def read_observer_log(path: str | Path, joint_names: tuple[str, ...], bag: BagOptions = BagOptions()) -> ArmLog:
    """The log at ``path`` (CSV, NPZ or ROS 2 bag read with ``bag``) for ``joint_names`` (``t``, ``q``, optional ``dq``, ``tau`` required)."""
    return read_arm_log(path, joint_names, need_torque=True, bag=bag)


def observe_log(
    robot: RobotModel, path: str | Path, *, threshold: float | dict[str, float] | None = None, velocity: str | None = None,
    bag: BagOptions = BagOptions(),
) -> ObserverRun:
    """The observer over the log at ``path`` with the robot's ``[control]`` settings (``threshold``,
    N·m or N, one number or by joint, replaces its thresholds; ``velocity`` its estimator: by
    default the log's velocity where it has one).

    Raises:
        DataError: Naming the file, for a log the reader refuses or one with unactuated DOF missing.
    """
    if any(not j.actuated for j in robot.joints):
        raise DataError("the observer needs every DOF of the robot in the log; this robot has unactuated DOF", file=path)
    log = read_observer_log(path, robot.joint_names, bag)
    settings = estimation_settings(robot, threshold=threshold)
    kind = velocity or ("measured" if log.dq is not None else settings.velocity)
    settings = type(settings)(**{**settings.__dict__, "velocity": kind})
    channels = [log.q, log.tau] + ([log.dq] if log.dq is not None else [])
    raw = np.column_stack(channels)
    keep = np.ones(len(raw), dtype=bool)
    keep[1:] = np.any(np.diff(raw, axis=0) != 0, axis=1)
    rows = np.flatnonzero(keep)
    rows = rows[np.r_[True, np.diff(log.t[rows]) > 0]]
    dq = None if log.dq is None else log.dq[rows]
    return observe(robot, log.t[rows], log.q[rows], dq, log.tau[rows], settings)


def observer_table(robot: RobotModel, run: ObserverRun) -> tuple[list[str], np.ndarray]:
    """``(columns, data)`` of the output table (module docstring)."""
    names = robot.joint_names
    columns = ["t", *(f"tau_ext.{j}" for j in names), *(f"detected.{j}" for j in names), "detected"]
    data = np.column_stack([run.t, run.tau_ext, run.detected.astype(float), run.detected.any(axis=1).astype(float)])
    return columns, data
