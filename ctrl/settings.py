"""Controller gains and saturation levels of a robot: its ``[control]`` spec checked against it.

The TOML is described in :mod:`mbctl.config.control`. A gain table must name every
actuated joint (unactuated DOF get no drive torque, so their gain is 0). Every part
is optional; building a controller that needs a missing part is an error naming it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.config.control import GAIN_KEYS, GainsSpec
from mbctl.ctrl.limits import effort_levels
from mbctl.dynamics.model.per_joint import per_joint_values
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError

__all__ = ["ControlSettings", "Gains", "control_settings"]


@dataclass(frozen=True, eq=False)
class Gains:
    """Diagonal gains, one entry per DOF (pinocchio velocity order).

    Attributes:
        kp: Position gains (1/s² for computed torque; N·m/rad or N/m for PD laws).
        kd: Velocity gains (1/s for computed torque; N·m·s/rad or N·s/m for PD laws).
    """

    kp: np.ndarray
    kd: np.ndarray


@dataclass(frozen=True, eq=False)
class ControlSettings:
    """What ``[control]`` says, checked against the robot.

    Attributes:
        effort: Saturation level of each DOF (N·m or N): the ``[control]`` value, else
            the joint's effort limit (inf when it has none); 0 for unactuated DOF.
        computed_torque: Gains of the computed-torque law, or None if not given.
        pd: Gains of the PD laws, or None if not given.
        file: The robot TOML file, for errors.
        friction_velocity: Velocity at which computed torque evaluates friction:
            ``"desired"`` (noise-free, the usual feed-forward practice) or
            ``"measured"`` (then the closed loop is exactly linearised on an exact model).
    """

    effort: np.ndarray
    computed_torque: Gains | None
    pd: Gains | None
    file: Path | None = None
    friction_velocity: str = "desired"

    def require(self, part: str) -> Gains:
        """The gains of ``part`` ("computed-torque" or "pd").

        Raises:
            ConfigError: If the file does not give them.
        """
        gains = self.computed_torque if part == "computed-torque" else self.pd
        if gains is None:
            raise ConfigError(
                "missing required table (the controller needs its gains kp and kd)", file=self.file, field=f"control.{part}"
            )
        return gains


def _gains(spec: GainsSpec, robot: RobotModel, file: Path | None, field: str) -> Gains:
    kp, kd = (per_joint_values(robot, getattr(spec, key), default=0.0, require_all=True, file=file, field=f"{field}.{key}") for key in GAIN_KEYS)
    return Gains(kp=kp, kd=kd)


def control_settings(robot: RobotModel) -> ControlSettings:
    """The robot's ``[control]`` spec checked against it (defaults when there is none).

    Raises:
        ConfigError: Naming the file and field, for unknown joints, a gain table that
            leaves out an actuated joint, or a saturation level above a joint's effort limit.
    """
    # the run's saturation levels (ctrl.limits, shared with the planners); a law gives no torque where there is no drive
    effort = np.where([j.actuated for j in robot.joints], effort_levels(robot), 0.0)
    spec = robot.spec.control if robot.spec is not None else None
    if spec is None:
        return ControlSettings(effort=effort, computed_torque=None, pd=None, file=robot.source)
    return ControlSettings(
        effort=effort,
        computed_torque=_gains(spec.computed_torque, robot, spec.file, "control.computed-torque") if spec.computed_torque else None,
        pd=_gains(spec.pd, robot, spec.file, "control.pd") if spec.pd else None,
        file=spec.file if spec.file is not None else robot.source,
        friction_velocity=spec.friction_velocity,
    )
