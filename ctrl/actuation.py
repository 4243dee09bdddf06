"""The drives of a robot and how torques are shared: its ``[actuation]`` spec checked against it.

The TOML is described in :mod:`mbctl.config.actuation`, the distribution modes in
:mod:`mbctl.ctrl.redundancy`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.config.actuation import MODES, QP_SOLVERS
from mbctl.dynamics.model.per_joint import check_joint_names
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError

__all__ = ["MODES", "QP_SOLVERS", "ActuationSettings", "actuation_settings"]


@dataclass(frozen=True, eq=False)
class ActuationSettings:
    """What ``[actuation]`` says, checked against the robot.

    Attributes:
        joints: The drives, in the order of the torque vector ``tau``.
        mode: Default distribution mode (one of :data:`MODES`).
        non_redundant: Drives of mode ``"non-redundant"`` (empty when not given).
        effort: Torque limit of each drive (N·m or N; inf for none), shape (len(joints),).
        weights: Min-norm weight of each drive (> 0), shape (len(joints),).
        power_regularization: Speed floor ``omega_eps`` of min-power (rad/s or m/s).
        solver: QP solver of the limited problems.
        file: The robot TOML file, for errors.
        internal_forces: Reactions min-internal-force minimises: ``"all"`` (passive tree joints
            and cut joints) or ``"tree"`` (passive tree joints only).
    """

    joints: tuple[str, ...]
    mode: str = "min-norm"
    non_redundant: tuple[str, ...] = ()
    effort: np.ndarray | None = None
    weights: np.ndarray | None = None
    power_regularization: float = 1e-3
    solver: str = "qrqp"
    file: Path | None = None
    internal_forces: str = "all"

    def __post_init__(self) -> None:
        n = len(self.joints)
        if self.effort is None:
            object.__setattr__(self, "effort", np.full(n, math.inf))
        if self.weights is None:
            object.__setattr__(self, "weights", np.ones(n))


def _per_drive(robot: RobotModel, value: float | dict[str, float] | None, joints: tuple[str, ...], default: np.ndarray, file: Path | None, field: str) -> np.ndarray:
    """One number for every drive or a table naming some of them (positivity checked when parsed)."""
    out = default.copy()
    if value is None:
        return out
    if not isinstance(value, dict):
        out[:] = value
        return out
    check_joint_names(robot, value, file=file, field=field, allowed=joints)
    for i, name in enumerate(joints):
        out[i] = value.get(name, out[i])
    return out


def actuation_settings(robot: RobotModel) -> ActuationSettings:
    """The robot's ``[actuation]`` spec checked against it (defaults when there is none).

    Raises:
        ConfigError: Naming the file and field, for unknown joints, a passive joint
            named as a drive, an actuated joint left out, or a limit above a joint's.
    """
    actuated = robot.actuated_names
    limits = np.array([robot.joint(n).limits.effort for n in actuated])
    spec = robot.spec.actuation if robot.spec is not None else None
    if spec is None:
        return ActuationSettings(joints=actuated, effort=limits, file=robot.source)
    file = spec.file

    def error(key: str, reason: str) -> ConfigError:
        return ConfigError(reason, file=file, field=f"actuation.{key}")

    for key, names in (("joints", spec.joints or ()), ("non_redundant", spec.non_redundant)):
        for name in names:
            try:
                robot.joint(name)
            except ConfigError as exc:
                raise error(key, exc.reason) from None
    joints = spec.joints if spec.joints is not None else actuated
    for name in joints:
        if not robot.joint(name).actuated:
            raise error("joints", f"joint {name!r} is passive ([joints.{name}] actuated = false)")
    for name in actuated:
        if name not in joints:
            raise error("joints", f"joint {name!r} is actuated in the model but not listed; list it or set [joints.{name}] actuated = false")
    joint_limits = np.array([robot.joint(n).limits.effort for n in joints])
    effort = _per_drive(robot, spec.effort, joints, joint_limits, file, "actuation.effort")
    for i, name in enumerate(joints):
        if effort[i] > joint_limits[i]:
            raise error(f"effort.{name}" if isinstance(spec.effort, dict) else "effort", f"{effort[i]:g} is above the effort limit {joint_limits[i]:g} of joint {name}")
    for name in spec.non_redundant:
        if name not in joints:
            raise error("non_redundant", f"joint {name!r} is not one of the drives ({', '.join(joints)})")
    return ActuationSettings(
        joints=joints,
        mode=spec.mode,
        non_redundant=spec.non_redundant,
        effort=effort,
        weights=_per_drive(robot, spec.weights, joints, np.ones(len(joints)), file, "actuation.weights"),
        power_regularization=spec.power_regularization,
        solver=spec.solver,
        file=file,
        internal_forces=spec.internal_forces,
    )
