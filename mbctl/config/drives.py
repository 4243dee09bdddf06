"""``[drives]``: the Dynamixel bus and each actuated joint's servo (SI units inside).

```toml
[drives]
bus = "dynamixel"            # the default; "canopen": CiA 402 drives (mbctl.config.canopen)
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

The servo register units these become are in :mod:`mbctl.hardware.drive_config`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mbctl.config.canopen import CanopenSpec, parse_canopen
from mbctl.tomlfields import Table

__all__ = ["BAUDRATES", "DrivesSpec", "ServoSpec", "parse_drives"]

BUS_KEYS = ("bus", "port", "baudrate", "latency_ms", "return_delay_us", "bus_watchdog_ms", "joints")
JOINT_KEYS = ("id", "torque_constant", "gear_ratio", "zero_count", "direction", "current_unit_mA", "current_limit_A")
BAUDRATES = (57600, 115200, 1000000, 2000000, 3000000, 4000000)


@dataclass(frozen=True)
class ServoSpec:
    """One joint's servo: bus ``id``, ``torque_constant`` (N·m/A), ``gear_ratio`` (servo turns per
    joint turn), ``zero_count`` (counts at q = 0), ``direction`` (±1), ``current_unit_A`` (A per
    current unit), ``current_limit_A`` (A)."""

    id: int
    torque_constant: float
    gear_ratio: float = 1.0
    zero_count: float = 2048.0
    direction: float = 1.0
    current_unit_A: float = 2.69e-3
    current_limit_A: float = 3.2


@dataclass(frozen=True)
class DrivesSpec:
    """The ``[drives]`` table, parsed: bus settings (s, bit/s) and servos by joint name."""

    servos: dict[str, ServoSpec] = field(default_factory=dict)
    port: str | None = None
    baudrate: int = 4000000
    latency_s: float = 16e-3
    return_delay_s: float = 0.0
    bus_watchdog_s: float = 0.1
    file: Path | None = None


def _servo(jt: Table) -> ServoSpec:
    jt.only(JOINT_KEYS)
    servo_id = jt.number("id")
    if servo_id != int(servo_id) or not 0 <= servo_id <= 252:
        raise jt.error("id", "must be an integer servo ID in 0..252")
    direction = jt.number("direction", 1.0)
    if direction not in (1.0, -1.0):
        raise jt.error("direction", "must be 1 or -1")
    positive = {key: jt.number(key, default) for key, default in (("torque_constant", None), ("gear_ratio", 1.0), ("current_unit_mA", 2.69), ("current_limit_A", 3.2))}
    for key, value in positive.items():
        if value is None:
            raise jt.error(key, "missing required field")
        if not value > 0:
            raise jt.error(key, "must be > 0")
    return ServoSpec(
        id=int(servo_id),
        torque_constant=positive["torque_constant"],
        gear_ratio=positive["gear_ratio"],
        zero_count=jt.number("zero_count", 2048.0),
        direction=direction,
        current_unit_A=positive["current_unit_mA"] * 1e-3,
        current_limit_A=positive["current_limit_A"],
    )


def parse_drives(t: Table) -> DrivesSpec | CanopenSpec:
    """Parse the ``[drives]`` table: a Dynamixel bus, or with ``bus = "canopen"`` CiA 402 drives
    (:mod:`mbctl.config.canopen`).

    Raises:
        ConfigError: Naming the file and field of a bad value or a repeated servo ID.
    """
    if t.string("bus", "dynamixel", choices=("dynamixel", "canopen")) == "canopen":
        return parse_canopen(t)
    t.only(BUS_KEYS)
    baud = t.number("baudrate", 4000000.0)
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
    servos = {name: _servo(jt) for name, jt in joints.tables()}
    ids = [s.id for s in servos.values()]
    if len(set(ids)) != len(ids):
        raise joints.error(None, f"servo IDs must be distinct, got {ids}")
    return DrivesSpec(
        servos=servos,
        port=t.string("port", None),
        baudrate=int(baud),
        latency_s=latency_ms * 1e-3,
        return_delay_s=return_delay_us * 1e-6,
        bus_watchdog_s=watchdog_ms * 1e-3,
        file=t.file,
    )
