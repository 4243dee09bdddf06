"""The robot description's ``[control]`` table: controller gains and saturation levels.

```toml
[control]
effort = { shoulder_pan_joint = 100.0 }   # optional: saturation level (N·m or N), one number
                                         # or a table naming some joints; each <= the
                                         # joint's effort limit; default: the effort limit
friction_velocity = "desired"            # computed torque compensates friction at the desired
                                         # velocity (default; immune to velocity noise) or at
                                         # the "measured" one (exact linearisation)
[control.computed-torque]                # error dynamics e'' + kd*e' + kp*e = 0, e = q_d - q
kp = 400.0                               # 1/s²: one number for every joint,
kd = 40.0                                # 1/s    or a table by joint name
[control.pd]                             # PD + gravity and PD + feed-forward
kp = { j1 = 800.0, j2 = 400.0, j3 = 100.0, j4 = 5.0e4 }   # N·m/rad (N/m)
kd = { j1 = 40.0, j2 = 20.0, j3 = 5.0, j4 = 2.0e3 }        # N·m·s/rad (N·s/m)
```

A gain table must name every actuated joint (unactuated DOF get no drive torque,
so their gain is 0). Gains must be > 0. Every part is optional here; building a
controller that needs a missing part is an error naming it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError
from mbctl.tomlfields import Table

__all__ = ["ControlSettings", "Gains", "control_settings", "CONTROL_KEYS"]

CONTROL_KEYS = ("effort", "friction_velocity", "computed-torque", "pd", "task-space")  # task-space: mbctl.ctrl.task_space
FRICTION_VELOCITIES = ("desired", "measured")
GAIN_KEYS = ("kp", "kd")


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


def _per_joint(t: Table, key: str, robot: RobotModel, default: float, require_all: bool = True) -> np.ndarray:
    """A number for every actuated joint, or a table by joint name (naming every
    actuated joint when ``require_all``); ``default`` elsewhere."""
    out = np.full(robot.nv, default)
    value = t.get(key)
    if isinstance(value, dict):
        sub = t.table(key)
        sub.only(robot.joint_names)
        for j in robot.joints:
            if j.name in sub:
                out[j.idx_v] = sub.number(j.name)
            elif j.actuated and require_all:
                raise sub.error(j.name, "missing value for this actuated joint")
        return out
    number = t.number(key)
    for j in robot.joints:
        if j.actuated:
            out[j.idx_v] = number
    return out


def _gains(t: Table, robot: RobotModel) -> Gains:
    t.only(GAIN_KEYS)
    values = {}
    for key in GAIN_KEYS:
        values[key] = v = _per_joint(t, key, robot, 0.0)
        for j in robot.joints:
            if j.actuated and not v[j.idx_v] > 0:
                field = key if not isinstance(t.get(key), dict) else f"{key}.{j.name}"
                raise t.error(field, f"must be > 0, got {v[j.idx_v]:g}")
    return Gains(kp=values["kp"], kd=values["kd"])


def control_settings(robot: RobotModel) -> ControlSettings:
    """Parse and check the robot's ``[control]`` table (defaults when there is none).

    Raises:
        ConfigError: Naming the file and field, for unknown fields or joints,
            non-positive gains, or a saturation level above a joint's effort limit.
    """
    limits = np.array([j.limits.effort if j.actuated else 0.0 for j in robot.joints])
    if robot.config is None or "control" not in robot.config:
        return ControlSettings(effort=limits, computed_torque=None, pd=None, file=robot.source)
    t = robot.config.table("control")
    t.only(CONTROL_KEYS)
    effort = limits.copy()
    if "effort" in t:
        given = _per_joint(t, "effort", robot, math.nan, require_all=False)
        dict_form = isinstance(t.get("effort"), dict)
        for j in robot.joints:
            value = given[j.idx_v]
            if math.isnan(value) or not j.actuated:
                continue
            field = f"effort.{j.name}" if dict_form else "effort"
            if not value > 0:
                raise t.error(field, f"must be > 0, got {value:g}")
            if value > j.limits.effort:
                raise t.error(field, f"{value:g} is above the effort limit {j.limits.effort:g} of joint {j.name}")
            effort[j.idx_v] = value
    return ControlSettings(
        effort=effort,
        computed_torque=_gains(t.table("computed-torque"), robot) if "computed-torque" in t else None,
        pd=_gains(t.table("pd"), robot) if "pd" in t else None,
        file=robot.source,
        friction_velocity=t.string("friction_velocity", "desired", choices=FRICTION_VELOCITIES),
    )
