"""The robot description's ``[actuation]`` table: which joints are driven and how torques are shared.

```toml
[actuation]
joints = ["a1", "a2", "a3"]      # the drives (default: the joints marked actuated); every
                                 # joint the model marks actuated must be listed
mode = "min-internal-force"      # min-norm | min-internal-force | min-power | non-redundant
non_redundant = ["a1", "a2"]     # the drives of mode "non-redundant" (as many as the DOF);
                                 # the others turn freely (zero torque) in that mode
effort = 3.0                     # torque limit |tau_i| <= effort_i, N·m (N): one number for every
                                 # drive or a table naming some; default: the joint's effort limit
weights = { a3 = 2.0 }           # min-norm weights w_i > 0 (default 1): minimize sum w_i tau_i^2
power_regularization = 1e-3      # rad/s (m/s): speed floor of min-power, see mbctl.ctrl.redundancy
solver = "qrqp"                  # QP solver: qrqp (active set, compiled to C) | qpoases (interpreted)
```

The distribution modes are explained in :mod:`mbctl.ctrl.redundancy`. Every field is
optional; ``non_redundant`` is needed only when that mode is used.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError
from mbctl.tomlfields import Table

__all__ = ["ActuationSettings", "actuation_settings", "MODES", "QP_SOLVERS", "ACTUATION_KEYS"]

MODES = ("min-norm", "min-internal-force", "min-power", "non-redundant")
QP_SOLVERS = ("qrqp", "qpoases")
ACTUATION_KEYS = ("joints", "mode", "non_redundant", "effort", "weights", "power_regularization", "solver")


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
    """

    joints: tuple[str, ...]
    mode: str = "min-norm"
    non_redundant: tuple[str, ...] = ()
    effort: np.ndarray | None = None
    weights: np.ndarray | None = None
    power_regularization: float = 1e-3
    solver: str = "qrqp"
    file: Path | None = None

    def __post_init__(self) -> None:
        n = len(self.joints)
        if self.effort is None:
            object.__setattr__(self, "effort", np.full(n, math.inf))
        if self.weights is None:
            object.__setattr__(self, "weights", np.ones(n))


def _names(t: Table, key: str, robot: RobotModel) -> tuple[str, ...]:
    value = t.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise t.error(key, f"must be a non-empty list of joint names, got {value!r}")
    for name in value:
        try:
            robot.joint(name)
        except ConfigError as exc:
            raise t.error(key, exc.reason) from None
        if value.count(name) > 1:
            raise t.error(key, f"joint {name!r} is listed twice")
    return tuple(value)


def _per_drive(t: Table, key: str, joints: tuple[str, ...], default: np.ndarray, unit: str) -> np.ndarray:
    """One number for every drive or a table naming some of them; each > 0."""
    out = default.copy()
    if key not in t:
        return out
    if isinstance(t.get(key), dict):
        sub = t.table(key)
        sub.only(joints)
        for i, name in enumerate(joints):
            if name in sub:
                out[i] = sub.number(name)
                if not out[i] > 0:
                    raise sub.error(name, f"must be > 0{unit}, got {out[i]:g}")
        return out
    value = t.number(key)
    if not value > 0:
        raise t.error(key, f"must be > 0{unit}, got {value:g}")
    out[:] = value
    return out


def actuation_settings(robot: RobotModel) -> ActuationSettings:
    """Parse and check the robot's ``[actuation]`` table (defaults when there is none).

    Raises:
        ConfigError: Naming the file and field, for unknown fields or joints, a passive
            joint named as a drive, an actuated joint left out, bad modes or numbers.
    """
    actuated = robot.actuated_names
    limits = np.array([robot.joint(n).limits.effort for n in actuated])
    if robot.config is None or "actuation" not in robot.config:
        return ActuationSettings(joints=actuated, effort=limits, file=robot.source)
    t = robot.config.table("actuation")
    t.only(ACTUATION_KEYS)
    joints = _names(t, "joints", robot) if "joints" in t else actuated
    for name in joints:
        if not robot.joint(name).actuated:
            raise t.error("joints", f"joint {name!r} is passive ([joints.{name}] actuated = false)")
    for name in actuated:
        if name not in joints:
            raise t.error(
                "joints", f"joint {name!r} is actuated in the model but not listed; list it or set [joints.{name}] actuated = false"
            )
    joint_limits = np.array([robot.joint(n).limits.effort for n in joints])
    effort = _per_drive(t, "effort", joints, joint_limits, " N·m (N)")
    for i, name in enumerate(joints):
        if effort[i] > joint_limits[i]:
            field = f"effort.{name}" if isinstance(t.get("effort"), dict) else "effort"
            raise t.error(field, f"{effort[i]:g} is above the effort limit {joint_limits[i]:g} of joint {name}")
    non_redundant: tuple[str, ...] = ()
    if "non_redundant" in t:
        non_redundant = _names(t, "non_redundant", robot)
        for name in non_redundant:
            if name not in joints:
                raise t.error("non_redundant", f"joint {name!r} is not one of the drives ({', '.join(joints)})")
    mode = t.string("mode", "min-norm", choices=MODES)
    if mode == "non-redundant" and not non_redundant:
        raise t.error("non_redundant", "missing required field (mode non-redundant needs the drives it uses)")
    regularization = t.number("power_regularization", 1e-3)
    if not regularization > 0:
        raise t.error("power_regularization", f"must be > 0 rad/s (m/s), got {regularization:g}")
    return ActuationSettings(
        joints=joints,
        mode=mode,
        non_redundant=non_redundant,
        effort=effort,
        weights=_per_drive(t, "weights", joints, np.ones(len(joints)), ""),
        power_regularization=regularization,
        solver=t.string("solver", "qrqp", choices=QP_SOLVERS),
        file=robot.source,
    )
