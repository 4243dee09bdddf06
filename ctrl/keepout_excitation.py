"""Excitation trajectories clear of the keep-out: designed about a pose, their ranges narrowed until
the design stays out of the robot's ``[keepout]``.

The excitation design (:func:`mbctl.ctrl.excitation.design_excitation`) knows joint limits, not
where the links go: a UR5's design about the middle of its ranges (every joint at 0: the arm
stretched out flat) swings the forearm 0.34 m below its mounting plane. Here it is designed about a
pose ``c`` (the middle of the ranges by default) on a copy of the robot whose position ranges are
``[c - w, c + w]`` (within its own). ``w`` starts as wide as the ranges allow around ``c``, is made
:data:`SHRINK` times narrower until every corner of the box ``c ± w`` and :data:`SAMPLES` random poses
in it are clear of the keep-out (forward kinematics only: cheap), and then again after each design
that :mod:`mbctl.ctrl.keepout` refuses, at most :data:`ATTEMPTS` designs. A robot without a keep-out
gets one design: on its own ranges when no pose is given (as ``design_excitation`` alone), about
``c`` when one is.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np

from mbctl.ctrl.excitation import Excitation
from mbctl.ctrl.keepout import KeepoutError, KeepoutViolation, check_keepout, keepout_violation
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["ATTEMPTS", "SHRINK", "ClearExcitation", "excitation_clear_of_keepout", "narrowed"]

SHRINK = 0.6
"""Factor on the half ranges ``w`` after a design that enters the keep-out."""
ATTEMPTS = 8
"""Designs tried before giving up (the last at 0.6^7 = 2.8 % of the first half ranges)."""
SAMPLES = 256
"""Random poses (seeded) checked in a box before a design is made in it."""
UNBOUNDED_HALF = math.pi
"""Half range (rad, m) about the pose where a joint has no position limit (as the design's ±pi)."""


@dataclasses.dataclass(frozen=True)
class ClearExcitation:
    """An excitation clear of the keep-out.

    Attributes:
        excitation: The design (on the narrowed robot).
        about: The pose it was designed about (rad, m), every DOF.
        half_range: The half ranges ``w`` it was designed within (rad, m), every DOF (inf: the robot's own).
        attempts: Designs made.
    """

    excitation: Excitation
    about: np.ndarray
    half_range: np.ndarray
    attempts: int


def narrowed(robot: RobotModel, about: np.ndarray, half_range: np.ndarray) -> RobotModel:
    """A copy of ``robot`` whose position ranges are ``[about - w, about + w]`` within its own (rad, m)."""
    joints = []
    for j in robot.joints:
        c, w = float(about[j.idx_v]), float(half_range[j.idx_v])
        if math.isfinite(w):
            limits = dataclasses.replace(j.limits, lower=max(j.limits.lower, c - w), upper=min(j.limits.upper, c + w))
            j = dataclasses.replace(j, limits=limits)
        joints.append(j)
    return dataclasses.replace(robot, joints=tuple(joints))


def _middle(robot: RobotModel) -> np.ndarray:
    return np.array([0.5 * (j.limits.lower + j.limits.upper) if math.isfinite(j.limits.lower + j.limits.upper) else 0.0 for j in robot.joints])


def _clear_box(robot: RobotModel, centre: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``w`` made :data:`SHRINK` times narrower until the box's corners and :data:`SAMPLES` random poses
    in it are clear (at most :data:`ATTEMPTS` - 1 times: the designs need the rest)."""
    moving = np.flatnonzero(w > 0)
    corners = np.array(np.meshgrid(*[[-1.0, 1.0]] * len(moving))).reshape(len(moving), -1).T if len(moving) <= 10 else np.empty((0, len(moving)))
    unit = np.vstack([corners, np.random.default_rng(0).uniform(-1.0, 1.0, (SAMPLES, len(moving)))])
    for _ in range(ATTEMPTS - 1):
        poses = np.tile(centre, (len(unit), 1))
        poses[:, moving] += unit * w[moving]
        if keepout_violation(robot, np.arange(len(poses), dtype=float), poses, "a pose") is None:
            break
        w = SHRINK * w
    return w


def excitation_clear_of_keepout(
    robot: RobotModel,
    design: Callable[[RobotModel], Excitation],
    about: np.ndarray | None = None,
    *,
    motion: str = "the excitation",
    progress: Callable[[str], None] | None = None,
) -> ClearExcitation:
    """Design an excitation clear of ``robot``'s keep-out (module docstring).

    Args:
        design: Designs an excitation on the robot it is given (the narrowed copy), e.g.
            ``lambda r: design_excitation(r, harmonics=4, period=10.0)``.
        about: The pose to design about (rad, m), every DOF; None: the middle of the ranges.
        motion: The motion in words, for messages.
        progress: Called with a line after each design the keep-out refused.

    Raises:
        KeepoutError: If the pose itself is in the keep-out, or no design of :data:`ATTEMPTS` is clear of it.
        InputError, DataError: As ``design``.
    """
    spec = robot.spec.keepout if robot.spec is not None else None
    checks = spec is not None and (spec.floor is not None or bool(spec.boxes))
    if about is None and not checks:
        return ClearExcitation(design(robot), _middle(robot), np.full(robot.nv, np.inf), 1)
    centre = _middle(robot) if about is None else np.asarray(about, dtype=float)
    pose = f"the pose {motion} is designed about" if about is not None else f"the middle of the ranges, which {motion} is designed about without another pose"
    check_keepout(robot, np.zeros(1), centre[None, :], pose)
    lower = np.array([j.limits.lower for j in robot.joints])
    upper = np.array([j.limits.upper for j in robot.joints])
    w = np.minimum(centre - lower, upper - centre)
    w = np.where(np.isfinite(w), w, UNBOUNDED_HALF)
    if checks:
        w = _clear_box(robot, centre, w)
    found: KeepoutViolation | None = None
    for attempt in range(1, (ATTEMPTS if checks else 1) + 1):
        result = design(narrowed(robot, centre, w))
        found = keepout_violation(robot, result.trajectory.t, result.trajectory.columns(robot.joint_names)[0], motion) if checks else None
        if found is None:
            return ClearExcitation(result, centre, w, attempt)
        if progress is not None:
            progress(f"{found.message()}; designing again within {SHRINK:g} of the ranges")
        w = SHRINK * w
    assert found is not None
    raise KeepoutError(f"{found.message()} (the last of {ATTEMPTS} designs, within ±{np.max(w / SHRINK):.3g} of the pose)",
                       file=spec.file, field=found.field)
