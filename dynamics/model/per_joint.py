"""Values given per joint in a robot description, resolved against the robot into per-DOF arrays."""

from __future__ import annotations

import difflib
from pathlib import Path

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError

__all__ = ["check_joint_names", "per_joint_values"]


def check_joint_names(robot: RobotModel, names, *, file: Path | None, field: str, allowed: tuple[str, ...] | None = None) -> None:
    """Refuse names that are not joints of the robot (or not among ``allowed``), naming ``field.<name>``."""
    allowed = robot.joint_names if allowed is None else allowed
    for name in names:
        if name not in allowed:
            close = difflib.get_close_matches(name, list(allowed), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"unknown joint (expected one of: {', '.join(allowed)}){hint}", file=file, field=f"{field}.{name}")


def per_joint_values(robot: RobotModel, value: float | dict[str, float], *, default: float, require_all: bool, file: Path | None, field: str) -> np.ndarray:
    """One entry per DOF (velocity order): ``value`` for every actuated joint, or the
    table's entry by joint name; ``default`` elsewhere.

    Raises:
        ConfigError: At ``field.<joint>``, for an unknown joint, or an actuated joint
            the table leaves out when ``require_all``.
    """
    out = np.full(robot.nv, default, dtype=float)
    if not isinstance(value, dict):
        for j in robot.joints:
            if j.actuated:
                out[j.idx_v] = value
        return out
    check_joint_names(robot, value, file=file, field=field)
    for j in robot.joints:
        if j.name in value:
            out[j.idx_v] = value[j.name]
        elif j.actuated and require_all:
            raise ConfigError("missing value for this actuated joint", file=file, field=f"{field}.{j.name}")
    return out
