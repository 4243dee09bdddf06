"""The limits ``mbctl run`` holds a robot to, shared by the run and the planners that feed it.

A closed-loop run stops when a joint leaves its position range or passes its speed limit, and
every control law saturates its torques at the ``[control] effort`` level (the joint's own effort
limit where ``[control]`` gives none). :func:`run_limits` gives those numbers once, from the
robot's model and spec; ``mbctl trajectory optimal`` and ``mbctl trajectory ocp`` plan to them, so
a plan never asks for a torque the run would clip.

A plan that rides a limit exactly is followed with small tracking errors on either side of it, and
the run stops at the limit itself. The planners' commands therefore leave a margin by default:
:data:`PLANNING_TORQUE_MARGIN` of every torque limit (headroom for the feedback) and
:data:`PLANNING_VELOCITY_MARGIN` of every speed limit (the tracking overshoots a profile that rides
the speed limit by a fraction of a percent).

:func:`position_excess` and :func:`check_positions` compare poses (waypoints, path samples, start
and end of a move) with the position ranges: the planners refuse a pose outside, naming the joint,
the value and the limit; ``mbctl trajectory quintic`` warns with the same comparison.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mbctl.dynamics.model.per_joint import per_joint_values
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError, OutsideLimits

__all__ = [
    "PLANNING_MOVE_VELOCITY_MARGIN", "PLANNING_TORQUE_MARGIN", "PLANNING_VELOCITY_MARGIN", "PositionExcess", "RunLimits", "check_positions", "effort_levels",
    "position_excess", "run_limits",
]  # fmt: skip

PLANNING_TORQUE_MARGIN = 0.9
"""Fraction of every torque limit the planners' commands use by default (10 % left for the feedback)."""
PLANNING_VELOCITY_MARGIN = 0.95
"""Fraction of every speed limit the time-optimal timing along a path uses by default (5 % left for tracking overshoot)."""
PLANNING_MOVE_VELOCITY_MARGIN = 0.9
"""The same for a minimum-time move (``trajectory ocp``): it reaches its speed limit at full torque and
leaves it so, and computed torque on the UR5 overshot a plan at 0.95 of the limit by 6 % (wrist_3:
3.225 rad/s against 3.2)."""


def effort_levels(robot: RobotModel) -> np.ndarray:
    """The torque each actuated DOF is saturated at (N·m or N), shape (nv,): the ``[control] effort``
    value, else the joint's effort limit (inf when it has none); inf for DOF without a drive.

    Raises:
        ConfigError: Naming the file and field, for an unknown joint or a level above a joint's
            effort limit.
    """
    levels = np.array([j.limits.effort if j.actuated else math.inf for j in robot.joints])
    spec = robot.spec.control if robot.spec is not None else None
    if spec is None or spec.effort is None:
        return levels
    given = per_joint_values(robot, spec.effort, default=math.nan, require_all=False, file=spec.file, field="control.effort")
    for j in robot.joints:
        value = given[j.idx_v]
        if math.isnan(value) or not j.actuated:
            continue
        if value > j.limits.effort:
            field = f"control.effort.{j.name}" if isinstance(spec.effort, dict) else "control.effort"
            raise ConfigError(f"{value:g} is above the effort limit {j.limits.effort:g} of joint {j.name}", file=spec.file, field=field)
        levels[j.idx_v] = value
    return levels


@dataclass(frozen=True, eq=False)
class RunLimits:
    """What a run holds each DOF to, arrays in the order of ``joint_names``.

    Attributes:
        joint_names: The DOF the arrays describe.
        lower, upper: Position range (rad or m; ±inf for none): the run stops outside it.
        velocity: Speed limit ``|dq|`` (rad/s or m/s; inf for none): the run stops above it.
        effort: Torque limit ``|tau|`` (N·m or N; inf for none or no drive): commands are clipped to it.
    """

    joint_names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray

    def select(self, names: Sequence[str]) -> RunLimits:
        """The limits of the DOF ``names``, in that order (e.g. the actuated joints, for the loop)."""
        idx = [self.joint_names.index(n) for n in names]
        return RunLimits(tuple(names), self.lower[idx], self.upper[idx], self.velocity[idx], self.effort[idx])


def run_limits(robot: RobotModel) -> RunLimits:
    """The limits of a closed-loop run on ``robot``, per DOF (velocity order): the URDF/TOML position
    range and speed limit, and the :func:`effort_levels` the control laws saturate at.

    Raises:
        ConfigError: For a bad ``[control] effort`` (see :func:`effort_levels`).
    """
    lim = [j.limits for j in robot.joints]
    return RunLimits(
        joint_names=robot.joint_names, lower=np.array([x.lower for x in lim]), upper=np.array([x.upper for x in lim]),
        velocity=np.array([x.velocity for x in lim]), effort=effort_levels(robot),
    )  # fmt: skip


@dataclass(frozen=True)
class PositionExcess:
    """One joint's positions outside its range over a set of poses.

    Attributes:
        joint: The joint's name.
        value: The pose's position farthest outside (rad or m).
        limit: The limit it passes (rad or m).
        index: The row of that pose.
        low, high: The range of the joint's positions over all the poses (rad or m).
        unit: ``"rad"`` or ``"m"``.
    """

    joint: str
    value: float
    limit: float
    index: int
    low: float
    high: float
    unit: str

    def describe(self, where: str) -> str:
        """``"50 rad at waypoint 2 is above the upper limit 6.283 rad"``; ``where`` names the pose."""
        side = "above the upper" if self.value > self.limit else "below the lower"
        return f"{self.value:.6g} {self.unit} {where} is {side} limit {self.limit:.6g} {self.unit}"


def position_excess(robot: RobotModel, q: np.ndarray, names: Sequence[str] | None = None) -> list[PositionExcess]:
    """Every joint of ``names`` (default: every DOF) whose positions ``q`` (K, len(names)) leave its
    range, in the order of ``names``; the distance outside decides the pose reported."""
    names = robot.joint_names if names is None else tuple(names)
    q = np.atleast_2d(np.asarray(q, dtype=float))
    out = []
    for k, name in enumerate(names):
        j = robot.joint(name)
        col = q[:, k]
        below, above = j.limits.lower - col, col - j.limits.upper
        worst = np.maximum(below, above)
        i = int(np.argmax(worst))
        if worst[i] > 0:
            limit = j.limits.lower if below[i] > 0 else j.limits.upper
            unit = "rad" if j.kind == "revolute" else "m"
            out.append(PositionExcess(name, float(col[i]), float(limit), i, float(col.min()), float(col.max()), unit))
    return out


def check_positions(robot: RobotModel, q: np.ndarray, names: Sequence[str] | None = None, *, pose: str = "pose {}", field: str | None = None) -> None:
    """Refuse poses ``q`` (K, len(names)) that leave a joint's position range.

    Args:
        pose: How the message names the pose of row ``i``: ``pose.format(i + 1)`` (e.g. ``"at waypoint {}"``).
        field: The field the error names (the joint is then named in the reason); default ``q.<joint>``.

    Raises:
        OutsideLimits: For the first joint (in ``names`` order) outside its range: its value and the limit.
    """
    excess = position_excess(robot, q, names)
    if excess:
        e = excess[0]
        reason = e.describe(pose.format(e.index + 1))
        if field is not None:
            reason = f"q.{e.joint} = {reason}"
        raise OutsideLimits(reason, field=field or f"q.{e.joint}", joint=e.joint, value=e.value, limit=e.limit)
