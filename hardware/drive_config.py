"""Servo units of the Dynamixel bus: a robot's ``[drives]`` spec checked against its actuated joints.

The TOML is described in :mod:`mbctl.config.drives`. :class:`DriveUnits` converts
between joint SI units and servo units; it is used by the host driver and
(inverted) by the emulator, nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from mbctl.config.drives import DrivesSpec
from mbctl.dynamics.model.per_joint import check_joint_names
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError
from mbctl.hardware.xseries import (
    BUS_WATCHDOG_UNIT_S,
    POSITION_COUNTS_PER_REV,
    RETURN_DELAY_UNIT_S,
    VELOCITY_UNIT_RAD_S,
)

T = TypeVar("T")

__all__ = ["BusConfig", "DriveUnits", "bus_config", "joint_drives"]


@dataclass(frozen=True)
class DriveUnits:
    """Per-joint servo parameters, arrays in the order of the actuated joints.

    Joint position ``q = direction*(counts - zero_count)*2*pi/4096/gear_ratio`` (rad),
    velocity ``dq = direction*units*0.229 rpm/gear_ratio`` (rad/s),
    effort ``tau = direction*units*current_unit*torque_constant*gear_ratio`` (N·m).
    """

    ids: np.ndarray
    torque_constant: np.ndarray
    gear_ratio: np.ndarray
    zero_count: np.ndarray
    direction: np.ndarray
    current_unit_A: np.ndarray
    current_limit_A: np.ndarray

    @property
    def _rad_per_count(self) -> np.ndarray:
        return 2 * math.pi / POSITION_COUNTS_PER_REV / self.gear_ratio

    def q_from_counts(self, counts: np.ndarray) -> np.ndarray:
        return self.direction * (counts - self.zero_count) * self._rad_per_count

    def counts_from_q(self, q: np.ndarray) -> np.ndarray:
        return np.rint(self.zero_count + self.direction * q / self._rad_per_count).astype(np.int64)

    def dq_from_units(self, units: np.ndarray) -> np.ndarray:
        return self.direction * units * VELOCITY_UNIT_RAD_S / self.gear_ratio

    def units_from_dq(self, dq: np.ndarray) -> np.ndarray:
        return np.rint(self.direction * dq * self.gear_ratio / VELOCITY_UNIT_RAD_S).astype(np.int64)

    def effort_from_units(self, units: np.ndarray) -> np.ndarray:
        return self.direction * units * self.current_unit_A * self.torque_constant * self.gear_ratio

    def units_from_effort(self, tau: np.ndarray) -> np.ndarray:
        """Current units for a joint effort, unrounded (the caller decides on saturation)."""
        return self.direction * tau / (self.current_unit_A * self.torque_constant * self.gear_ratio)

    @property
    def current_limit_units(self) -> np.ndarray:
        return np.floor(self.current_limit_A / self.current_unit_A).astype(np.int64)


@dataclass(frozen=True)
class BusConfig:
    """Bus settings and the servos of the actuated joints."""

    port: str | None
    baudrate: int
    latency_s: float
    return_delay_s: float
    bus_watchdog_s: float
    units: DriveUnits

    @property
    def return_delay_register(self) -> int:
        return int(round(self.return_delay_s / RETURN_DELAY_UNIT_S))

    @property
    def bus_watchdog_register(self) -> int:
        return int(round(self.bus_watchdog_s / BUS_WATCHDOG_UNIT_S))


def joint_drives(robot: RobotModel, drives: dict[str, T], file: Path | None, what: str) -> list[T]:
    """The ``[drives.joints]`` entries of the actuated joints, in their order.

    Raises:
        ConfigError: For an entry naming no actuated joint, or an actuated joint without ``what``.
    """
    check_joint_names(robot, drives, file=file, field="drives.joints", allowed=robot.actuated_names)
    for name in robot.actuated_names:
        if name not in drives:
            raise ConfigError(f"missing: every actuated joint needs {what}", file=file, field=f"drives.joints.{name}")
    return [drives[name] for name in robot.actuated_names]


def bus_config(robot: RobotModel, spec: DrivesSpec | None = None) -> BusConfig:
    """The bus of the robot's actuated joints, from ``spec`` (default: the robot's ``[drives]``).

    Raises:
        ConfigError: Naming the file and field, for a missing table, an unknown joint,
            or an actuated joint without a servo.
    """
    if spec is None:
        spec = robot.spec.drives if robot.spec is not None else None
    if spec is None:
        raise ConfigError("missing required table (the Dynamixel bus needs its servos)", file=robot.source, field="drives")
    if not isinstance(spec, DrivesSpec):
        raise ConfigError('bus = "canopen": these are CANopen drives (mbctl run --bus canopen)', file=spec.file, field="drives.bus")
    servos = joint_drives(robot, spec.servos, spec.file, "a servo")
    units = DriveUnits(
        ids=np.array([s.id for s in servos], dtype=int),
        **{key: np.array([getattr(s, key) for s in servos], dtype=float) for key in ("torque_constant", "gear_ratio", "zero_count", "direction", "current_unit_A", "current_limit_A")},
    )
    return BusConfig(
        port=spec.port,
        baudrate=spec.baudrate,
        latency_s=spec.latency_s,
        return_delay_s=spec.return_delay_s,
        bus_watchdog_s=spec.bus_watchdog_s,
        units=units,
    )
