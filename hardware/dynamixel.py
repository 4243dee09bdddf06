"""Joint drives on a Dynamixel Protocol 2.0 bus (X-series servos), through ROBOTIS' dynamixel_sdk.

One sync read (present current, velocity and position of every servo, 10 bytes
each) and one sync write (the goals of every servo) per cycle. Unit conversions
are those of the robot's ``[drives]`` table (:class:`mbctl.hardware.drive_config.DriveUnits`).

Failures are classified and counted in :attr:`DynamixelBus.comm_errors`:

- ``no_reply``: nothing came back before the reply timeout;
- ``timeout``: part of a reply came back, the rest did not;
- ``crc``: a complete reply with a wrong CRC;
- ``status``: the servo answered with an error number in its status packet;
- ``alert``: the Alert bit is set (a hardware error; raised as :class:`DriveFault`);
- ``port``, ``tx``: the serial port failed or the packet could not be sent.

SDK traits handled here: its reply timeout is ``bytes*t_byte + 2*16 ms + 2 ms``
(a hard-coded 16 ms USB latency timer), so a missing reply costs ~34 ms; the port
handler below uses ``latency_ms`` from the TOML instead (set it to the adapter's
latency timer, 1 ms for a low-latency FTDI, and the loop's watchdog budget to
match). The SDK busy-polls while waiting for a reply; the port handler below
waits in ``select`` instead.
"""

from __future__ import annotations

import select
import termios
import time
from collections import Counter
from collections.abc import Callable, Sequence

import numpy as np
import serial
from dynamixel_sdk import (
    COMM_RX_CORRUPT,
    COMM_RX_TIMEOUT,
    COMM_SUCCESS,
    PacketHandler,
    PortHandler,
)

from mbctl.errors import ConfigError
from mbctl.hardware.drive_config import BusConfig
from mbctl.hardware.interface import (
    CommandMode,
    CommunicationError,
    DriveFault,
    DriveTimeout,
    JointCommand,
    JointInterface,
    JointState,
)
from mbctl.hardware.protocol2 import ALERT_BIT
from mbctl.hardware.xseries import (
    REGISTERS,
    STATE_BLOCK,
    OperatingMode,
    describe_hardware_error,
)

__all__ = ["DynamixelBus", "LatencyPortHandler"]

R = REGISTERS
# what pyserial raises when the device vanishes (termios.error is not an OSError)
_PORT_ERRORS = (OSError, serial.SerialException, termios.error)
_MODES = {
    CommandMode.TORQUE: (OperatingMode.CURRENT, R["goal_current"]),
    CommandMode.VELOCITY: (OperatingMode.VELOCITY, R["goal_velocity"]),
    CommandMode.POSITION: (OperatingMode.POSITION, R["goal_position"]),
}


class LatencyPortHandler(PortHandler):
    """The SDK's port handler with the USB latency timer as a parameter.

    Reply timeout: ``bytes*t_byte + 2*latency + 2 ms`` instead of the SDK's fixed
    ``2*16 ms``; between empty reads it waits for data in the kernel instead of spinning.
    """

    def __init__(self, port_name: str, latency_s: float):
        super().__init__(port_name)
        self.latency_ms = latency_s * 1e3

    def readPort(self, length: int) -> bytes:  # noqa: N802 (SDK name)
        data = self.ser.read(length)
        if not data:
            # the SDK polls this in a tight loop; wait in the kernel for the next byte
            # instead (at most 1 ms, and never past the reply timeout), which frees the
            # CPU for the rest of the loop, other processes or an in-process emulator
            remaining_s = (self.packet_timeout - self.getTimeSinceStart()) * 1e-3
            if remaining_s > 0:
                select.select([self.ser.fileno()], [], [], min(remaining_s, 1e-3))
        return data

    def setPacketTimeout(self, packet_length: int) -> None:  # noqa: N802 (SDK name)
        self.packet_start_time = self.getCurrentTime()
        self.packet_timeout = self.tx_time_per_byte * packet_length + 2.0 * self.latency_ms + 2.0


class DynamixelBus(JointInterface):
    """Actuated joints driven by X-series servos on one serial bus.

    Args:
        joint_names: Actuated joints, in the robot's order.
        bus: The ``[drives]`` settings.
        port: Serial device; overrides ``bus.port``.
        mode: What :meth:`write` commands: torque (servo current mode), velocity or position.
        clock: Time source for :attr:`JointState.t` (s).
    """

    effort_source = "present current x torque constant x gear ratio"

    def __init__(
        self,
        joint_names: Sequence[str],
        bus: BusConfig,
        *,
        port: str | None = None,
        mode: CommandMode = CommandMode.TORQUE,
        clock: Callable[[], float] = time.monotonic,
    ):
        self.joint_names = tuple(joint_names)
        self.bus = bus
        self.units = bus.units
        self.port_name = port or bus.port
        if not self.port_name:
            raise ConfigError("no serial port: set drives.port in the robot TOML or pass --port", field="drives.port")
        self.mode = mode
        self.clock = clock
        self.comm_errors: Counter[str] = Counter()
        self.saturated = 0  # torque commands limited to the servos' Current Limit
        self._ids = [int(i) for i in self.units.ids]
        self._port: LatencyPortHandler | None = None
        self._ph = PacketHandler(2.0)
        self._enabled = False
        self._handed_over = False

    # -- helpers --------------------------------------------------------------------------
    def _fail(self, kind: str, message: str) -> CommunicationError:
        self.comm_errors[kind] += 1
        return DriveTimeout(message) if kind == "timeout" else CommunicationError(kind, message)

    def _joint(self, servo_id: int) -> str:
        return self.joint_names[self._ids.index(servo_id)]

    def _check(self, servo_id: int, result: int, error: int, what: str, started: float) -> None:
        """Raise the classified error of one exchange, if any."""
        if result == COMM_SUCCESS:
            if error & ALERT_BIT:
                self.comm_errors["alert"] += 1
                raise DriveFault(self._joint(servo_id), *self._hardware_error(servo_id))
            if error & 0x7F:
                raise self._fail("status", f"servo {servo_id} ({self._joint(servo_id)}) answered {what} with error {error & 0x7F}")
            return
        if result == COMM_RX_TIMEOUT:
            raise self._fail("no_reply", f"servo {servo_id} ({self._joint(servo_id)}) did not answer {what}")
        if result == COMM_RX_CORRUPT:
            waited_ms = (time.perf_counter() - started) * 1e3
            kind = "timeout" if waited_ms >= self._port.packet_timeout else "crc"
            raise self._fail(kind, f"servo {servo_id} ({self._joint(servo_id)}): corrupt or incomplete reply to {what}")
        raise self._fail("tx", f"{what}: {self._ph.getTxRxResult(result)}")

    def _hardware_error(self, servo_id: int) -> tuple[int, str]:
        try:
            status, result, _ = self._ph.read1ByteTxRx(self._port, servo_id, R["hardware_error_status"].address)
        except _PORT_ERRORS:
            return 0, "status unreadable"
        if result != COMM_SUCCESS:
            return 0, "status unreadable"
        return status, describe_hardware_error(status)

    def _write_each(self, name: str, values: Sequence[int]) -> None:
        """Write one register of every servo, checking each reply (set-up only, not per cycle)."""
        reg = R[name]
        for servo_id, value in zip(self._ids, values):
            started = time.perf_counter()
            try:
                if reg.size == 1:
                    result, error = self._ph.write1ByteTxRx(self._port, servo_id, reg.address, int(value) & 0xFF)
                elif reg.size == 2:
                    result, error = self._ph.write2ByteTxRx(self._port, servo_id, reg.address, int(value) & 0xFFFF)
                else:
                    result, error = self._ph.write4ByteTxRx(self._port, servo_id, reg.address, int(value) & 0xFFFFFFFF)
            except _PORT_ERRORS as exc:
                raise self._fail("port", f"{self.port_name}: {exc}") from None
            self._check(servo_id, result, error, f"write of {name}", started)

    def _sync_write(self, reg_name: str, values: Sequence[int]) -> None:
        reg = R[reg_name]
        param = b"".join(bytes([i]) + reg.encode(int(v)) for i, v in zip(self._ids, values))
        try:
            result = self._ph.syncWriteTxOnly(self._port, reg.address, reg.size, list(param), len(param))
        except _PORT_ERRORS as exc:
            raise self._fail("port", f"{self.port_name}: {exc}") from None
        if result != COMM_SUCCESS:
            raise self._fail("tx", f"sync write of {reg_name}: {self._ph.getTxRxResult(result)}")

    # -- JointInterface ---------------------------------------------------------------------
    def open(self) -> None:
        """Open the port, find every servo, set operating mode and Return Delay Time; torque off."""
        self._port = LatencyPortHandler(self.port_name, self.bus.latency_s)
        try:
            self._port.baudrate = self.bus.baudrate
            if not self._port.openPort():
                raise self._fail("port", f"cannot open {self.port_name} at {self.bus.baudrate} bit/s")
        except _PORT_ERRORS as exc:
            raise self._fail("port", f"cannot open {self.port_name}: {exc}") from None
        for servo_id in self._ids:
            started = time.perf_counter()
            try:
                _, result, error = self._ph.ping(self._port, servo_id)
            except _PORT_ERRORS as exc:
                raise self._fail("port", f"{self.port_name}: {exc}") from None
            self._check(servo_id, result, error, "ping", started)
        n = len(self._ids)
        self._write_each("torque_enable", [0] * n)
        self._write_each("operating_mode", [_MODES[self.mode][0]] * n)
        self._write_each("return_delay_time", [self.bus.return_delay_register] * n)
        self._write_each("bus_watchdog", [0] * n)  # clears a watchdog that fired earlier

    def close(self) -> None:
        if self._port is not None and self._port.is_open:
            try:
                self._port.closePort()
            except _PORT_ERRORS:
                pass

    def enable(self) -> None:
        """Bumpless torque on: goals set to the present state, Bus Watchdog armed."""
        state = self.read()
        n = len(self._ids)
        self._sync_write("goal_position", self.units.counts_from_q(state.q))
        self._sync_write("goal_velocity", [0] * n)
        self._sync_write("goal_current", [0] * n)
        self._write_each("torque_enable", [1] * n)
        self._write_each("bus_watchdog", [self.bus.bus_watchdog_register] * n)
        self._enabled = True
        self._handed_over = False

    def disable(self) -> None:
        """Torque off on every servo (broadcast, twice); never raises. After :meth:`hand_over`,
        nothing: the servos keep holding."""
        if self._port is None or not self._port.is_open or self._handed_over:
            return
        for _ in range(2):
            try:
                self._sync_write("torque_enable", [0] * len(self._ids))
            except CommunicationError:
                pass
        self._enabled = False

    def hand_over(self) -> str:
        """The servos' own position hold: goals at the present positions, the Bus Watchdog off (it
        would stop them once the host is gone), position mode, torque on. The servos have no
        brakes; the switch of mode needs torque off for the few ms of three writes. Never raises:
        a failure ends with torque off, and says so."""
        if not self._enabled:
            self.disable()
            return "torque off"
        n = len(self._ids)
        try:
            state = self.read()
            self._write_each("bus_watchdog", [0] * n)
            self._sync_write("goal_position", self.units.counts_from_q(state.q))
            if self.mode is not CommandMode.POSITION:
                self._write_each("torque_enable", [0] * n)
                self._write_each("operating_mode", [_MODES[CommandMode.POSITION][0]] * n)
                self._write_each("torque_enable", [1] * n)
        except CommunicationError as exc:
            self.disable()
            return f"torque off: the hand-over to the servos' position hold failed ({exc})"
        self._handed_over = True
        return "the servos hold their last positions in their own position loop (position mode, torque on; they have no brakes)"

    sensing = "Dynamixel servos: present position (4096 counts per servo turn) and the servos' own present velocity"
    """How the servos are measured, for the run summary."""

    def read(self) -> JointState:
        """One sync read of present current, velocity and position."""
        address, length = STATE_BLOCK
        started = time.perf_counter()
        try:
            result = self._ph.syncReadTx(self._port, address, length, self._ids, len(self._ids), False)
            if result != COMM_SUCCESS:
                raise self._fail("tx", f"sync read: {self._ph.getTxRxResult(result)}")
            raw = []
            for servo_id in self._ids:
                data, result, error = self._ph.readRx(self._port, servo_id, length)
                self._check(servo_id, result, error, "sync read", started)
                raw.append(bytes(data))
        except _PORT_ERRORS as exc:
            raise self._fail("port", f"{self.port_name}: {exc}") from None
        finally:
            self._port.is_using = False  # a reply that never came leaves the SDK's port marked busy
        t = self.clock()
        current = np.array([R["present_current"].decode(d[0:2]) for d in raw], dtype=float)
        velocity = np.array([R["present_velocity"].decode(d[2:6]) for d in raw], dtype=float)
        position = np.array([R["present_position"].decode(d[6:10]) for d in raw], dtype=float)
        u = self.units
        return JointState(t=t, q=u.q_from_counts(position), dq=u.dq_from_units(velocity), effort=u.effort_from_units(current))

    def write(self, command: JointCommand) -> None:
        """One sync write of the goals of every servo (in the bus's command mode)."""
        if command.mode is not self.mode:
            raise ValueError(f"this bus was opened in {self.mode.value} mode, got a {command.mode.value} command")
        u = self.units
        if self.mode is CommandMode.TORQUE:
            units = u.units_from_effort(command.value)
            limit = u.current_limit_units
            over = np.abs(units) > limit
            self.saturated += int(over.sum())
            values = np.rint(np.clip(units, -limit, limit)).astype(np.int64)
            self._sync_write("goal_current", values)
        elif self.mode is CommandMode.VELOCITY:
            self._sync_write("goal_velocity", u.units_from_dq(command.value))
        else:
            self._sync_write("goal_position", u.counts_from_q(command.value))
