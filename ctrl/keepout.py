"""The Cartesian keep-out: a check of planned motions against the robot's ``[keepout]`` table.

A planned motion (a trajectory's samples, a sweep, a transit) is checked *before* it runs, with
forward kinematics at its samples, never in the control loop: every planner and the commissioning
call :func:`check_keepout`. The checked points are the origins of the checked frames
(:class:`~mbctl.config.keepout.KeepoutSpec`: every link frame that moves with a joint, or the ones
named), in the model's root frame (m). A point violates the keep-out when

    z < floor        or        lower < p < upper  (inside a box, on every axis)

**Which samples.** Forward kinematics at every sample would cost about 2 µs each (a UR5 in
pinocchio) plus Python around it; most samples are far from any limit. A frame origin moves at most
``sum_j R_j |dq_j|`` when the joints move by ``dq`` (m), with ``R_j`` the length of the chain of
placements from joint ``j`` to the frame (an upper bound of its distance from the joint's axis;
1 for a prismatic joint). So after a sample whose smallest clearance is ``c`` (m: the height above
the floor, the distance to a box), no sample whose accumulated ``sum_j R_j |dq_j|`` since then is
below ``c`` can violate, and the check goes straight to the next one that can. Every sample that
could violate is checked; the first one that does is the one reported, with the lowest point of that
excursion.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.config.keepout import KeepoutSpec
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError, InputError

__all__ = ["KeepoutError", "KeepoutViolation", "check_keepout", "check_trajectory", "keepout_violation"]


class KeepoutError(InputError):
    """A planned motion enters the keep-out (located at the robot's TOML and the ``[keepout]`` field)."""


@dataclass(frozen=True)
class KeepoutViolation:
    """The first excursion of a checked frame into the keep-out.

    Attributes:
        motion: The motion, in words (``the sweep of elbow_joint``).
        frame: The frame's name.
        t: Time of the first sample inside (s, the motion's own clock).
        point: That frame's origin there (m, root frame).
        worst_t, worst: The excursion's deepest sample: its time (s) and, for the floor, the height
            (m); for a box, the depth inside it (m).
        limit: ``"floor"`` or the box's name.
        field: The TOML field of the limit (``keepout.floor``, ``keepout.boxes[0]``).
        floor: The floor's height (m), for a floor violation.
        pose: True for a motion of one sample (a pose): the message gives no times.
    """

    motion: str
    frame: str
    t: float
    point: tuple[float, float, float]
    worst_t: float
    worst: float
    limit: str
    field: str
    floor: float | None = None
    pose: bool = False

    def message(self) -> str:
        """One line: the motion, the frame, the time and the height."""
        if self.limit == "floor":
            when = "" if self.pose else f" at t = {self.worst_t:.3f} s"
            since = "" if self.pose or self.t == self.worst_t else f" from t = {self.t:.3f} s"
            return f"{self.motion}: {self.frame} at height {self.worst:.3g} m{when}, below the floor ({self.floor:g} m){since}"
        x, y, z = self.point
        when = "" if self.pose else f" at t = {self.t:.3f} s"
        deepest = "" if self.pose or self.t == self.worst_t else f", {self.worst:.3g} m deep at t = {self.worst_t:.3f} s"
        return f"{self.motion}: {self.frame} inside {self.limit}{when}, at ({x:.3g}, {y:.3g}, {z:.3g}) m{deepest}"


class _Checker:
    """Forward kinematics of the checked frames and their clearances."""

    def __init__(self, robot: RobotModel, spec: KeepoutSpec):
        self.robot, self.spec = robot, spec
        model = robot.model
        self.data = model.createData()
        moving = [i for i, f in enumerate(model.frames) if f.parentJoint > 0 and f.type in (pin.FrameType.BODY, pin.FrameType.OP_FRAME)]
        if spec.frames is None:
            self.frames = moving
        else:
            names = {model.frames[i].name: i for i in range(len(model.frames))}
            for name in spec.frames:
                if name not in names:
                    raise ConfigError(f"no frame {name!r} in robot {robot.name}", file=spec.file, field="keepout.frames")
            self.frames = [names[n] for n in spec.frames]
        self.names = [model.frames[i].name for i in self.frames]
        self.weights = self._weights()
        self.lower = np.array([b.lower for b in spec.boxes]).reshape(-1, 3)
        self.upper = np.array([b.upper for b in spec.boxes]).reshape(-1, 3)

    def _weights(self) -> np.ndarray:
        """Per DOF, the most any checked frame's origin moves per unit of it (m/rad, 1 for prismatic)."""
        model = self.robot.model
        kind = {j.idx_v: j.kind for j in self.robot.joints}
        w = np.zeros(self.robot.nv)
        for i in self.frames:
            frame = model.frames[i]
            reach = float(np.linalg.norm(frame.placement.translation))
            joint = frame.parentJoint
            while joint > 0:
                v = model.joints[joint].idx_v
                w[v] = max(w[v], 1.0 if kind.get(v) == "prismatic" else reach)
                reach += float(np.linalg.norm(model.jointPlacements[joint].translation))
                joint = model.parents[joint]
        return w

    def points(self, config: np.ndarray) -> np.ndarray:
        """(frames, 3) origins at one pinocchio configuration (m)."""
        pin.framesForwardKinematics(self.robot.model, self.data, config)
        return np.array([self.data.oMf[i].translation for i in self.frames])

    def clearances(self, p: np.ndarray) -> np.ndarray:
        """(frames, limits) clearances (m; < 0 inside) of origins ``p``: the height above the floor
        (limit -1, the last column, where there is a floor) and the distance to each box (the depth
        inside it, negative)."""
        columns = []
        for b in range(len(self.lower)):
            outside = np.linalg.norm(np.maximum(np.maximum(self.lower[b] - p, p - self.upper[b]), 0.0), axis=1)
            depth = np.minimum(p - self.lower[b], self.upper[b] - p).min(axis=1)  # > 0 inside
            columns.append(np.where(outside > 0, outside, -depth))
        if self.spec.floor is not None:
            columns.append(p[:, 2] - self.spec.floor)
        return np.stack(columns, axis=1)


def keepout_violation(robot: RobotModel, t: np.ndarray, q: np.ndarray, motion: str) -> KeepoutViolation | None:
    """The first excursion into the robot's keep-out along a planned motion, or None.

    Args:
        t: (N,) sample times (s).
        q: (N, nv) DOF coordinates (rad, m) of every DOF, in pinocchio velocity order.
        motion: The motion in words, for the message.

    Raises:
        ConfigError: For a checked frame the model lacks.
    """
    spec = robot.spec.keepout if robot.spec is not None else None
    if spec is None or (spec.floor is None and not spec.boxes):
        return None
    checker = _Checker(robot, spec)
    q = np.atleast_2d(np.asarray(q, dtype=float))
    t = np.atleast_1d(np.asarray(t, dtype=float))
    configs = robot.configuration(q)
    travel = np.concatenate([[0.0], np.cumsum(np.abs(np.diff(q, axis=0)) @ checker.weights)])  # m: bound of any origin's path
    k = 0
    while k < len(q):
        c = checker.clearances(checker.points(configs[k]))
        frame, limit = np.unravel_index(int(c.argmin()), c.shape)
        if c[frame, limit] < 0:
            return _excursion(checker, t, configs, k, int(frame), int(limit), motion)
        k = max(k + 1, int(np.searchsorted(travel, travel[k] + c[frame, limit], side="left")))
    return None


def _excursion(checker: _Checker, t: np.ndarray, configs: np.ndarray, k: int, frame: int, limit: int, motion: str) -> KeepoutViolation:
    """The violation of ``frame`` against ``limit`` (a column of :meth:`_Checker.clearances`) that
    starts at sample ``k``, followed sample by sample to its deepest point."""
    spec = checker.spec
    point = checker.points(configs[k])[frame]
    worst, worst_k = 0.0, k
    for i in range(k, len(configs)):
        c = float(checker.clearances(checker.points(configs[i]))[frame, limit])
        if c >= 0:
            break
        if c < worst:
            worst, worst_k = c, i
    where = dict(motion=motion, frame=checker.names[frame], t=float(t[k]), point=tuple(map(float, point)), worst_t=float(t[worst_k]), pose=len(configs) == 1)
    if limit == len(spec.boxes):  # the floor's column
        return KeepoutViolation(**where, worst=worst + spec.floor, limit="floor", field="keepout.floor", floor=spec.floor)
    box = spec.boxes[limit]
    return KeepoutViolation(**where, worst=-worst, limit=box.name, field=box.field)


def check_keepout(robot: RobotModel, t: np.ndarray, q: np.ndarray, motion: str) -> None:
    """Raise :class:`KeepoutError` (one line: motion, frame, time, height) if the motion enters the keep-out.

    Args: as :func:`keepout_violation`.
    """
    found = keepout_violation(robot, t, q, motion)
    if found is not None:
        raise KeepoutError(found.message(), file=robot.spec.keepout.file, field=found.field)


def check_trajectory(robot: RobotModel, trajectory: Trajectory, motion: str) -> None:
    """:func:`check_keepout` along a trajectory that gives every DOF of ``robot``."""
    q, _, _ = trajectory.columns(robot.joint_names)
    check_keepout(robot, trajectory.t, q, motion)
