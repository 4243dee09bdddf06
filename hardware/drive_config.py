"""The ``[drives]`` table of a robot TOML: bus settings and each joint's servo and units.

```toml
[drives]
port = "/dev/ttyUSB0"        # serial device (the CLI's --port overrides it)
baudrate = 4000000           # bit/s; the SDK accepts up to 4 Mbit/s
latency_ms = 16.0            # USB adapter latency timer assumed in the reply timeout (SDK default 16)
return_delay_us = 0.0        # Return Delay Time written to every servo (multiple of 2 µs)
bus_watchdog_ms = 100.0      # servo Bus Watchdog (multiple of 20 ms; 0 disables)

[drives.joints.j1]
id = 1                       # servo ID on the bus
torque_constant = 1.78       # N·m per A at the servo output shaft
gear_ratio = 1.0             # servo turns per joint turn (external gearing)
zero_count = 2048            # servo position (counts) at joint position 0
direction = 1                # +1 or -1: sign between servo and joint motion
current_unit_mA = 2.69       # mA per current unit (model dependent: XM430/XM540 2.69)
current_limit_A = 3.2        # the servo's Current Limit, A
```

:class:`DriveUnits` converts between joint SI units and servo units; it is used by
the host driver and (inverted) by the emulator, nowhere else.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mbctl.hardware.xseries import (
    BUS_WATCHDOG_UNIT_S,
    POSITION_COUNTS_PER_REV,
    RETURN_DELAY_UNIT_S,
    VELOCITY_UNIT_RAD_S,
)
from mbctl.tomlfields import Table

__all__ = ["BusConfig", "DriveUnits", "parse_drives"]

BUS_KEYS = ("port", "baudrate", "latency_ms", "return_delay_us", "bus_watchdog_ms", "joints")
JOINT_KEYS = ("id", "torque_constant", "gear_ratio", "zero_count", "direction", "current_unit_mA", "current_limit_A")
BAUDRATES = (57600, 115200, 1000000, 2000000, 3000000, 4000000)


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


def parse_drives(root: Table, actuated: Sequence[str]) -> BusConfig:
    """Parse ``[drives]`` for the given actuated joints.

    Raises:
        ConfigError: Naming the file and field for a missing table, joint or bad value.
    """
    t = root.table("drives")
    t.only(BUS_KEYS)
    baud = int(t.number("baudrate", 4000000))
    if baud not in BAUDRATES:
        raise t.error("baudrate", f"must be one of {', '.join(map(str, BAUDRATES))} bit/s")
    return_delay_us = t.number("return_delay_us", 0.0)
    if not 0 <= return_delay_us <= 508 or return_delay_us % 2:
        raise t.error("return_delay_us", "must be an even number of µs in 0..508")
    watchdog_ms = t.number("bus_watchdog_ms", 100.0)
    if not 0 <= watchdog_ms <= 2540 or watchdog_ms % 20:
        raise t.error("bus_watchdog_ms", "must be a multiple of 20 ms in 0..2540 (0 disables it)")
    latency_ms = t.number("latency_ms", 16.0)
    if not 0 < latency_ms <= 100:
        raise t.error("latency_ms", "must be in (0, 100] ms")
    joints = t.table("joints")
    joints.only(actuated)
    rows = []
    for name in actuated:
        if name not in joints:
            raise joints.error(name, "missing: every actuated joint needs a servo")
        jt = joints.table(name)
        jt.only(JOINT_KEYS)
        servo_id = jt.number("id")
        if servo_id != int(servo_id) or not 0 <= servo_id <= 252:
            raise jt.error("id", "must be an integer servo ID in 0..252")
        direction = jt.number("direction", 1.0)
        if direction not in (1.0, -1.0):
            raise jt.error("direction", "must be 1 or -1")
        row = dict(
            ids=int(servo_id),
            torque_constant=jt.number("torque_constant"),
            gear_ratio=jt.number("gear_ratio", 1.0),
            zero_count=jt.number("zero_count", 2048.0),
            direction=direction,
            current_unit_A=jt.number("current_unit_mA", 2.69) * 1e-3,
            current_limit_A=jt.number("current_limit_A", 3.2),
        )
        for key in ("torque_constant", "gear_ratio", "current_unit_A", "current_limit_A"):
            if not row[key] > 0:
                field = {"current_unit_A": "current_unit_mA"}.get(key, key)
                raise jt.error(field, "must be > 0")
        rows.append(row)
    ids = [r["ids"] for r in rows]
    if len(set(ids)) != len(ids):
        raise joints.error(None, f"servo IDs must be distinct, got {ids}")
    units = DriveUnits(**{k: np.array([r[k] for r in rows], dtype=float) for k in rows[0]})
    units = DriveUnits(**{**units.__dict__, "ids": units.ids.astype(int)})
    port = t.string("port", None)
    return BusConfig(
        port=port,
        baudrate=baud,
        latency_s=latency_ms * 1e-3,
        return_delay_s=return_delay_us * 1e-6,
        bus_watchdog_s=watchdog_ms * 1e-3,
        units=units,
    )
