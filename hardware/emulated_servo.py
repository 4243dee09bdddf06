"""One emulated X-series servo's control table (:mod:`mbctl.hardware.xseries`): its factory
values, the rules a write obeys (read-only and EEPROM registers, goals refused while the Bus
Watchdog has fired, a goal current above the Current Limit refused), and the error byte of its
status packets. The bus, the timing and the plant behind the servos are
:class:`mbctl.hardware.emulator.DriveEmulator`'s.
"""

from __future__ import annotations

import time

from mbctl.hardware.protocol2 import ALERT_BIT, ErrorCode
from mbctl.hardware.xseries import REGISTERS, TABLE_SIZE, OperatingMode

__all__ = ["MODEL_NUMBER_XM430_W350", "READ_ONLY", "EmulatedServo"]

R = REGISTERS
MODEL_NUMBER_XM430_W350 = 1020
READ_ONLY = {"model_number", "firmware_version", "hardware_error_status", "moving"} | {n for n in R if n.startswith("present_")}


class EmulatedServo:
    """Control table and internal state of one emulated servo."""

    def __init__(self, servo_id: int, current_limit_units: int):
        self.table = bytearray(TABLE_SIZE)
        self.set("model_number", MODEL_NUMBER_XM430_W350)
        self.set("firmware_version", 52)
        self.set("id", servo_id)
        self.set("baud_rate", 1)
        self.set("return_delay_time", 250)
        self.set("operating_mode", OperatingMode.POSITION)
        self.set("current_limit", current_limit_units)
        self.set("velocity_limit", 265)
        self.set("max_position_limit", 4095)
        self.set("status_return_level", 2)
        self.set("present_input_voltage", 120)
        self.set("present_temperature", 35)
        self.last_contact = time.monotonic()

    def get(self, name: str) -> int:
        reg = R[name]
        return reg.decode(self.table[reg.address : reg.address + reg.size])

    def set(self, name: str, value: int) -> None:
        reg = R[name]
        self.table[reg.address : reg.address + reg.size] = reg.encode(value)

    @property
    def id(self) -> int:
        return self.get("id")

    @property
    def torque_on(self) -> bool:
        return self.get("torque_enable") == 1

    def write(self, address: int, data: bytes) -> int:
        """Apply a write; return the status error number (0 if accepted)."""
        end = address + len(data)
        if address < 0 or end > TABLE_SIZE or not data:
            return ErrorCode.DATA_LENGTH
        touched = [n for n, r in R.items() if r.address < end and address < r.address + r.size]
        for name in touched:
            reg = R[name]
            if name in READ_ONLY:
                return ErrorCode.ACCESS
            if reg.eeprom and self.torque_on:
                return ErrorCode.ACCESS
            if name.startswith("goal_") and self.get("bus_watchdog") == -1:
                return ErrorCode.DATA_RANGE
            if name == "torque_enable" and data[reg.address - address] == 1 and self.get("hardware_error_status"):
                return ErrorCode.DATA_RANGE
        previous = bytes(self.table[address:end])
        self.table[address:end] = data
        if abs(self.get("goal_current")) > self.get("current_limit"):
            self.table[address:end] = previous  # refused like the firmware: data limit error
            return ErrorCode.DATA_LIMIT
        return ErrorCode.NONE

    def read(self, address: int, length: int) -> bytes | None:
        if address < 0 or length <= 0 or address + length > TABLE_SIZE:
            return None
        return bytes(self.table[address : address + length])

    def error_byte(self, error: int = 0) -> int:
        return error | (ALERT_BIT if self.get("hardware_error_status") else 0)
