"""Device side of Dynamixel Protocol 2.0 on a pseudo-terminal, backed by a simulated plant.

:class:`DriveEmulator` opens a pty and answers, on its slave end, like a bus of
X-series servos — one per actuated joint, with the IDs and units of the robot's
``[drives]`` table — so the host driver (:mod:`mbctl.hardware.dynamixel`, built on
ROBOTIS' ``dynamixel_sdk``) runs unchanged without hardware, in tests and in CI.

Implemented: ping, read, write, sync read, sync write (and broadcast), status
return level, byte stuffing and CRC, the Bus Watchdog (fires when no packet for a
servo arrives within its period while torque is on: output stops, the register
reads -1 and goal writes are refused with a data-range error until 0 is written),
Hardware Error Status (torque off, Alert bit in every status packet), access and
range errors, optional bus timing (bytes at the baud rate plus Return Delay
Time), and fault injection (dropped replies, corrupt CRC, delays, garbage bytes,
hardware errors, a disconnected port).

Timing: by default the plant follows the clock (the serving thread keeps it
within one ``step_s`` chunk of it). With ``lockstep_s`` set, time is virtual: the
plant advances by exactly ``lockstep_s`` when a sync read arrives, before the
reply, and at no other moment; Bus Watchdog and contact times are on that virtual
clock. A host that sends one sync write and one sync read per cycle then sees the
same deterministic run however loaded the machine is (the pty keeps the order of
the packets, so every write is applied before the next read).

Servo-internal control loops are simplified stand-ins, not ROBOTIS firmware:
current mode applies the goal current; velocity mode ``i = kv*(w_goal - w)``;
position mode ``i = kp*(x_goal - x) - kd*w`` (motor-side rad, A), all limited to
the Current Limit. Except for a joint with a servo model (``[joints.<name>.actuator]``,
:mod:`mbctl.dynamics.actuator`, e.g. identified by ``mbctl identify logs``): in
position mode its goal goes to the plant, which runs the servo's firmware P loop and
motor inside its integration steps, so the emulated servo moves like the modelled one
(its Present Current then reads 0).
"""

from __future__ import annotations

import math
import os
import random
import select
import threading
import time
import tty
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mbctl.errors import ConfigError
from mbctl.hardware.drive_config import BusConfig
from mbctl.hardware.emulated_servo import EmulatedServo
from mbctl.hardware.protocol2 import (
    BROADCAST_ID,
    ErrorCode,
    Instruction,
    Packet,
    PacketDecoder,
    encode_status,
)
from mbctl.hardware.xseries import (
    BUS_WATCHDOG_UNIT_S,
    REGISTERS,
    OperatingMode,
)

__all__ = ["TorquePlant", "Faults", "ServoLoopGains", "DriveEmulator", "EmulatorStats"]

R = REGISTERS


class TorquePlant(Protocol):
    """What the emulator drives: joint efforts in, joint positions and velocities out (SI)."""

    def step(self, tau: np.ndarray, dt: float) -> None:
        """Advance ``dt`` seconds holding the joint efforts ``tau`` (N·m or N)."""

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """Joint positions (rad, m) and velocities (rad/s, m/s) of the actuated joints."""

    # A plant may have ``brake()`` (holding brakes: every velocity zero; :class:`mbctl.hardware.sim.TruthPlant`),
    # which the CANopen emulator calls while no drive is enabled; one without only stops being stepped.
    # A plant with servo models (:class:`mbctl.hardware.sim.TruthPlant`) also has
    # ``servo_slots`` (the actuated joints with a servo) and takes ``step(tau, dt, goal)``
    # with the goal positions (rad, NaN: motor off) of those joints.


@dataclass
class Faults:
    """Fault injection, applied to replies (probabilities per reply, seeded).

    Attributes:
        drop_reply: Probability that a reply is not sent.
        corrupt_crc: Probability that a reply's CRC is wrong.
        garbage: Probability that random bytes precede a reply.
        delay_s: Extra delay before every reply (s).
        seed: Random seed.
    """

    drop_reply: float = 0.0
    corrupt_crc: float = 0.0
    garbage: float = 0.0
    delay_s: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class ServoLoopGains:
    """Gains of the emulated servo-internal loops (motor side: rad, rad/s, A)."""

    kp_A_per_rad: float = 20.0
    kd_A_s_per_rad: float = 0.5
    kv_A_s_per_rad: float = 1.0


@dataclass
class EmulatorStats:
    """What the emulator sent; ``DriveEmulator.decoder.stats`` counts what it received."""

    replies: int = 0
    dropped: int = 0
    corrupted: int = 0
    garbage_sent: int = 0
    watchdog_fired: int = 0


class DriveEmulator:
    """A bus of emulated X-series servos on a pseudo-terminal.

    Args:
        bus: Servo IDs and units (the robot's ``[drives]`` table).
        plant: Joint dynamics behind the servos.
        faults: Fault injection settings.
        timing: Delay replies like a real bus (bytes at the baud rate plus each
            servo's Return Delay Time).
        gains: Emulated servo-loop gains.
        step_s: Plant chunk (s): the emulated servos sample and update their outputs
            this often.
        clock: Time source (s) when not in lock-step.
        lockstep_s: Lock-step: advance the plant by this much (s) on every sync read,
            and only then (None: follow the clock).
    """

    def __init__(
        self,
        bus: BusConfig,
        plant: TorquePlant,
        *,
        faults: Faults | None = None,
        timing: bool = False,
        gains: ServoLoopGains | None = None,
        step_s: float = 5e-4,
        clock: Callable[[], float] = time.monotonic,
        lockstep_s: float | None = None,
    ):
        if lockstep_s is not None and not lockstep_s > 0:
            raise ValueError(f"lock-step period must be > 0 s, got {lockstep_s}")
        self.bus = bus
        self.units = bus.units
        self.plant = plant
        self.faults = faults or Faults()
        self.timing = timing
        self.gains = gains or ServoLoopGains()
        self.step_s = step_s
        self.clock = clock
        self.lockstep_s = lockstep_s
        self.servos = [EmulatedServo(int(i), int(lim)) for i, lim in zip(self.units.ids, self.units.current_limit_units)]
        self._by_id = {s.id: k for k, s in enumerate(self.servos)}
        self._rng = random.Random(self.faults.seed)
        self.decoder = PacketDecoder()
        self.stats = EmulatorStats()
        self._lock = threading.RLock()
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._master = self._slave = -1
        self.port_name = ""
        self._t_plant = self._start_time()
        self._last_current = np.zeros(len(self.servos))
        self._servo_slots = tuple(getattr(plant, "servo_slots", ()))
        for k, model in zip(self._servo_slots, getattr(plant, "servo_models", ())):
            # the goal register is converted with [drives]; the servo model turns with its own gear
            if not math.isclose(abs(float(self.units.gear_ratio[k])), abs(model.firmware.gear_ratio)):
                raise ConfigError(
                    f"servo ID {int(self.units.ids[k])}: [drives] gear_ratio {float(self.units.gear_ratio[k]):g} differs from its actuator table's {model.firmware.gear_ratio:g}",
                    field="drives.joints",
                )
        self._update_present()

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> DriveEmulator:
        """Open the pty and serve it from a background thread; ``port_name`` is the device path."""
        self._master, self._slave = os.openpty()
        tty.setraw(self._slave)
        self.port_name = os.ttyname(self._slave)
        self._t_plant = self._start_time()
        for s in self.servos:
            s.last_contact = self._t_plant
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="dxl-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        for fd in (self._master, self._slave):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._master = self._slave = -1

    def __enter__(self) -> DriveEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def disconnect(self) -> None:
        """Simulate an unplugged adapter: the pty goes away under the host."""
        self.stop()

    def inject_hardware_error(self, joint_index: int, bits: int) -> None:
        """Raise Hardware Error Status bits on a servo: its torque goes off, Alert is set."""
        with self._lock:
            servo = self.servos[joint_index]
            servo.set("hardware_error_status", bits)
            servo.set("torque_enable", 0)

    def servo(self, joint_index: int) -> EmulatedServo:
        return self.servos[joint_index]

    # -- simulation ------------------------------------------------------------------------
    def _start_time(self) -> float:
        return 0.0 if self.lockstep_s is not None else self.clock()

    def _now(self) -> float:
        """The emulator's time (s): the plant's own in lock-step, else the clock."""
        return self._t_plant if self.lockstep_s is not None else self.clock()

    def _advance_lockstep(self) -> None:
        """One lock-step period in equal chunks of at most ``step_s`` (the same ones every time)."""
        assert self.lockstep_s is not None
        chunks = max(1, math.ceil(self.lockstep_s / self.step_s - 1e-9))
        h = self.lockstep_s / chunks
        for _ in range(chunks):
            self._check_watchdogs(self._t_plant)
            self._step_plant(h)
        self._check_watchdogs(self._t_plant)
        self._update_present()

    def _step_plant(self, dt: float) -> None:
        """One chunk: the servos' output currents held, servo models driven by their goals."""
        current = self._currents_A()
        tau = self.units.direction * current * self.units.torque_constant * self.units.gear_ratio
        if self._servo_slots:
            self.plant.step(tau, dt, self._servo_goals())  # type: ignore[call-arg]
        else:
            self.plant.step(tau, dt)
        self._t_plant += dt
        self._last_current = current

    def _modelled(self, k: int, s: EmulatedServo) -> bool:
        """Whether servo ``k`` is in position mode with torque on and a servo model in the plant."""
        return k in self._servo_slots and s.torque_on and s.get("operating_mode") == OperatingMode.POSITION

    def _servo_goals(self) -> np.ndarray:
        """Goal positions (joint rad) of the modelled servos; NaN for the others (motor off)."""
        counts = np.array([s.get("goal_position") for s in self.servos])
        q = self.units.q_from_counts(counts)
        modelled = np.array([self._modelled(k, s) for k, s in enumerate(self.servos)])
        return np.where(modelled, q, np.nan)

    def _motor_state(self) -> tuple[np.ndarray, np.ndarray]:
        q, dq = self.plant.state()
        u = self.units
        return u.direction * q * u.gear_ratio, u.direction * dq * u.gear_ratio  # motor rad, rad/s

    def _currents_A(self) -> np.ndarray:
        x, w = self._motor_state()
        u, g = self.units, self.gains
        out = np.zeros(len(self.servos))
        for k, s in enumerate(self.servos):
            if not s.torque_on or self._modelled(k, s):
                continue
            mode = s.get("operating_mode")
            if mode == OperatingMode.CURRENT:
                i = s.get("goal_current") * u.current_unit_A[k]
            elif mode == OperatingMode.VELOCITY:
                i = g.kv_A_s_per_rad * (u.dq_from_units(np.array([s.get("goal_velocity")]))[0] * u.gear_ratio[k] * u.direction[k] - w[k])
            else:
                goal_x = (s.get("goal_position") - u.zero_count[k]) * 2 * np.pi / 4096
                i = g.kp_A_per_rad * (goal_x - x[k]) - g.kd_A_s_per_rad * w[k]
            out[k] = np.clip(i, -u.current_limit_A[k], u.current_limit_A[k])
        return out

    def advance(self, now: float | None = None, max_chunks: int | None = None) -> None:
        """Run the plant towards ``now`` (default: the emulator's time) in chunks of at most ``step_s``.

        Each chunk holds the servos' output currents, then refreshes the present
        values: like a servo's internal loop, sampling runs on its own clock, and
        replies carry the latest sample. ``max_chunks`` bounds the work of one call.
        """
        now = self._now() if now is None else now
        with self._lock:
            self._check_watchdogs(now)
            chunks = 0
            while now - self._t_plant > 1e-9 and (max_chunks is None or chunks < max_chunks):
                self._step_plant(min(self.step_s, now - self._t_plant))
                chunks += 1
            self._update_present()

    def _update_present(self) -> None:
        q, dq = self.plant.state()
        current = self._last_current
        counts = self.units.counts_from_q(q)
        vel = self.units.units_from_dq(dq)
        cur = np.rint(current / self.units.current_unit_A).astype(int)
        for k, s in enumerate(self.servos):
            s.set("present_position", int(counts[k]))
            s.set("present_velocity", int(vel[k]))
            s.set("present_current", int(cur[k]))
            s.set("moving", int(abs(vel[k]) > 0))

    def _check_watchdogs(self, now: float) -> None:
        for s in self.servos:
            period = s.get("bus_watchdog")
            if period > 0 and s.torque_on and now - s.last_contact > period * BUS_WATCHDOG_UNIT_S:
                s.set("bus_watchdog", -1)
                s.set("goal_current", 0)
                s.set("goal_velocity", 0)
                s.set("goal_position", s.get("present_position"))
                s.set("torque_enable", 0)
                self.stats.watchdog_fired += 1

    # -- protocol ------------------------------------------------------------------------
    def _serve(self) -> None:
        """Answer packets at once; between them, keep the plant within one chunk of the clock."""
        if self.lockstep_s is not None:
            self._serve_lockstep()
            return
        while not self._stop.is_set():
            behind = self.clock() - self._t_plant
            try:
                ready, _, _ = select.select([self._master], [], [], max(0.0, self.step_s - behind))
                data = os.read(self._master, 4096) if ready else b""
            except OSError:
                return
            for packet in self.decoder.feed(data):
                self._handle(packet)
            if self.clock() - self._t_plant >= self.step_s or not data:
                self.advance(max_chunks=1)

    def _serve_lockstep(self) -> None:
        """Answer packets; the plant moves only on sync reads."""
        while not self._stop.is_set():
            try:
                ready, _, _ = select.select([self._master], [], [], 0.05)
                data = os.read(self._master, 4096) if ready else b""
            except OSError:
                return
            for packet in self.decoder.feed(data):
                self._handle(packet)

    def _contact(self, servo: EmulatedServo) -> None:
        servo.last_contact = self._now()

    def _handle(self, p: Packet) -> None:
        with self._lock:
            if p.instruction == Instruction.SYNC_WRITE:
                self._sync_write(p.params)
            elif p.instruction == Instruction.SYNC_READ:
                self._sync_read(p.params)
            elif p.id == BROADCAST_ID and p.instruction == Instruction.PING:
                for s in self.servos:
                    self._reply(s, ErrorCode.NONE, R["model_number"].encode(s.get("model_number")) + bytes([52]))
            elif p.id == BROADCAST_ID and p.instruction == Instruction.WRITE and len(p.params) > 2:
                address = p.params[0] | p.params[1] << 8
                for s in self.servos:
                    self._contact(s)
                    s.write(address, p.params[2:])
            elif p.id in self._by_id:
                self._unicast(self.servos[self._by_id[p.id]], p)

    def _unicast(self, s: EmulatedServo, p: Packet) -> None:
        self._contact(s)
        level = s.get("status_return_level")
        if p.instruction == Instruction.PING:
            self._reply(s, ErrorCode.NONE, R["model_number"].encode(s.get("model_number")) + bytes([52]))
        elif p.instruction == Instruction.READ:
            if len(p.params) != 4:
                error, data = ErrorCode.DATA_LENGTH, b""
            else:
                address, length = p.params[0] | p.params[1] << 8, p.params[2] | p.params[3] << 8
                data = s.read(address, length)
                error, data = (ErrorCode.NONE, data) if data is not None else (ErrorCode.DATA_RANGE, b"")
            if level >= 1:
                self._reply(s, error, data)
        elif p.instruction == Instruction.WRITE:
            if len(p.params) < 3:
                error = ErrorCode.DATA_LENGTH
            else:
                error = s.write(p.params[0] | p.params[1] << 8, p.params[2:])
            if level >= 2:
                self._reply(s, error)
        elif level >= 2:
            self._reply(s, ErrorCode.INSTRUCTION)

    def _sync_write(self, params: bytes) -> None:
        if len(params) < 4:
            return
        address, length = params[0] | params[1] << 8, params[2] | params[3] << 8
        body = params[4:]
        if length == 0 or len(body) % (length + 1):
            return
        for k in range(0, len(body), length + 1):
            index = self._by_id.get(body[k])
            if index is not None:
                servo = self.servos[index]
                self._contact(servo)
                servo.write(address, body[k + 1 : k + 1 + length])

    def _sync_read(self, params: bytes) -> None:
        if len(params) < 5:
            return
        if self.lockstep_s is not None:
            self._advance_lockstep()
        address, length = params[0] | params[1] << 8, params[2] | params[3] << 8
        for servo_id in params[4:]:
            index = self._by_id.get(servo_id)
            if index is None:
                continue
            s = self.servos[index]
            self._contact(s)
            data = s.read(address, length)
            if data is None:
                self._reply(s, ErrorCode.DATA_RANGE)
            else:
                self._reply(s, ErrorCode.NONE, data)

    def _reply(self, s: EmulatedServo, error: int, params: bytes = b"") -> None:
        f, rng = self.faults, self._rng
        if f.drop_reply and rng.random() < f.drop_reply:
            self.stats.dropped += 1
            return
        packet = bytearray(encode_status(s.id, s.error_byte(error), params))
        if f.corrupt_crc and rng.random() < f.corrupt_crc:
            packet[-1] ^= 0x5A
            self.stats.corrupted += 1
        if f.garbage and rng.random() < f.garbage:
            noise = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
            packet[:0] = noise.replace(b"\xff", b"\x00")  # garbage, but never a header
            self.stats.garbage_sent += 1
        delay = f.delay_s
        if self.timing:
            delay += s.get("return_delay_time") * 2e-6 + len(packet) * 10 / self.bus.baudrate
        if delay > 0:
            time.sleep(delay)
        try:
            os.write(self._master, bytes(packet))
            self.stats.replies += 1
        except OSError:
            pass
