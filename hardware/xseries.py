"""Control table and units of ROBOTIS Dynamixel X-series servos (Protocol 2.0).

Addresses and sizes follow the X-series e-manual (XM430/XM540/XH430 share them).
Only the registers mbctl uses are listed; the emulator answers reads of any other
address in the 0..146 range with zeros.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = [
    "Register",
    "REGISTERS",
    "OperatingMode",
    "HardwareErrorBit",
    "describe_hardware_error",
    "STATE_BLOCK",
    "POSITION_COUNTS_PER_REV",
    "VELOCITY_UNIT_RAD_S",
    "BUS_WATCHDOG_UNIT_S",
    "RETURN_DELAY_UNIT_S",
    "TABLE_SIZE",
]

TABLE_SIZE = 147


@dataclass(frozen=True)
class Register:
    """One control-table entry: byte address, size in bytes, signedness, RAM/EEPROM."""

    address: int
    size: int
    signed: bool = False
    eeprom: bool = False

    def encode(self, value: int) -> bytes:
        return int(value).to_bytes(self.size, "little", signed=self.signed)

    def decode(self, data: bytes) -> int:
        return int.from_bytes(data[: self.size], "little", signed=self.signed)


REGISTERS = {
    "model_number": Register(0, 2, eeprom=True),
    "firmware_version": Register(6, 1, eeprom=True),
    "id": Register(7, 1, eeprom=True),
    "baud_rate": Register(8, 1, eeprom=True),
    "return_delay_time": Register(9, 1, eeprom=True),  # units of 2 µs
    "operating_mode": Register(11, 1, eeprom=True),
    "current_limit": Register(38, 2, eeprom=True),
    "velocity_limit": Register(44, 4, eeprom=True),
    "max_position_limit": Register(48, 4, eeprom=True),
    "min_position_limit": Register(52, 4, eeprom=True),
    "torque_enable": Register(64, 1),
    "status_return_level": Register(68, 1),
    "hardware_error_status": Register(70, 1),
    "bus_watchdog": Register(98, 1, signed=True),  # units of 20 ms; -1 once it has fired
    "goal_current": Register(102, 2, signed=True),
    "goal_velocity": Register(104, 4, signed=True),
    "goal_position": Register(116, 4, signed=True),
    "moving": Register(122, 1),
    "present_current": Register(126, 2, signed=True),
    "present_velocity": Register(128, 4, signed=True),
    "present_position": Register(132, 4, signed=True),
    "present_input_voltage": Register(144, 2),
    "present_temperature": Register(146, 1),
}

# present current, velocity and position are contiguous: one sync read serves the loop
STATE_BLOCK = (126, 10)

POSITION_COUNTS_PER_REV = 4096
VELOCITY_UNIT_RAD_S = 0.229 * 2 * math.pi / 60  # one velocity unit is 0.229 rev/min
BUS_WATCHDOG_UNIT_S = 0.020
RETURN_DELAY_UNIT_S = 2e-6


class OperatingMode:
    CURRENT = 0
    VELOCITY = 1
    POSITION = 3
    EXTENDED_POSITION = 4
    CURRENT_BASED_POSITION = 5
    PWM = 16


class HardwareErrorBit:
    INPUT_VOLTAGE = 0x01
    OVERHEATING = 0x04
    MOTOR_ENCODER = 0x08
    ELECTRICAL_SHOCK = 0x10
    OVERLOAD = 0x20


_ERROR_NAMES = {
    HardwareErrorBit.INPUT_VOLTAGE: "input voltage",
    HardwareErrorBit.OVERHEATING: "overheating",
    HardwareErrorBit.MOTOR_ENCODER: "motor encoder",
    HardwareErrorBit.ELECTRICAL_SHOCK: "electrical shock",
    HardwareErrorBit.OVERLOAD: "overload",
}


def describe_hardware_error(status: int) -> str:
    """Names of the bits set in a Hardware Error Status byte."""
    names = [name for bit, name in _ERROR_NAMES.items() if status & bit]
    return ", ".join(names) if names else "unknown"
