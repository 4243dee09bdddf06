"""Device side of CiA 402 drives on a CAN bus (python-can), backed by a simulated plant.

:class:`Cia402Emulator` serves one drive per actuated joint, with the node IDs and units
of the robot's CANopen ``[drives]`` table, on a python-can bus: ``virtual`` (in this
process) or ``udp_multicast`` on loopback (``mbctl emulate --bus canopen``, in its own
process). The host driver (:mod:`mbctl.hardware.cia402.bus`) runs unchanged against it.

Implemented: an SDO server per drive (canopen's ``LocalNode``) on the objects of
:func:`~mbctl.hardware.cia402.objects.build_dictionary`; PDO mapping as the host writes it
(COB-IDs and mapping records read at NMT start); NMT start, stop, pre-operational and
reset; SYNC-driven synchronous PDOs (RPDOs applied at the next SYNC, TPDOs sent on every
SYNC); the 402 state machine (Shutdown, Switch On, Enable Operation, Disable Voltage,
Quick Stop, Fault Reset); CST (the target torque, limited to max torque) and CSP (a PD
stand-in for the drive's position loop, motor side, limited to max torque); heartbeats;
EMCY on a fault; holding brakes: while no drive is in Operation Enabled (before the enable, after
a quick stop, a fault or the hand-over's disable operation) the arm stands still.

Fault injection (:class:`Cia402Faults`, seeded): TPDOs dropped, delayed by one cycle or
sent with a wrong length; heartbeats stopped; state transitions refused; and by method,
a fault code with its EMCY (:meth:`Cia402Emulator.inject_fault`) or a drive leaving
Operation Enabled without a fault (:meth:`Cia402Emulator.leave_operation`, as a safe
torque off input would).

Timing: by default the plant follows the clock: at every SYNC it is run up to the present
(chunks of ``step_s``) with the torques held, then sampled. With ``lockstep_s`` set, time
is virtual: a SYNC that follows new RPDOs applies them and advances the plant by exactly
``lockstep_s``, before its TPDOs; other SYNCs sample without advancing. A host that
sends its RPDOs and then one SYNC per cycle therefore sees, whatever the machine's load,
the run of the same controller on the plant stepped directly, one period per command.
"""

from __future__ import annotations

import math
import random
import struct
import threading
import time
from collections.abc import Callable

import can
import canopen
import numpy as np

from mbctl.hardware.cia402.canbus import open_can_bus
from mbctl.hardware.cia402.emulated_drive import Cia402Faults, Cia402Stats, CspGains, EmulatedDrive
from mbctl.hardware.cia402.objects import (
    CONTROLWORD,
    CYCLE_PERIOD,
    ERROR_CODE,
    HEARTBEAT_TIME,
    MAX_TORQUE,
    MODES,
    MODES_DISPLAY,
    POSITION_ACTUAL,
    RATED_TORQUE,
    STATUSWORD,
    SYNC_ID,
    TARGET_POSITION,
    TARGET_TORQUE,
    TORQUE_ACTUAL,
    VELOCITY_ACTUAL,
    Mode,
    State,
    build_dictionary,
)
from mbctl.hardware.cia402.units import CanopenConfig
from mbctl.hardware.emulator import TorquePlant
from mbctl.hardware.realtime import realtime_priority

__all__ = ["Cia402Faults", "Cia402Emulator", "CspGains", "Cia402Stats"]

_STATUSWORD = {s: s.value[1] | 0x0200 for s in State}  # bit 9: remote
_STATUSWORD[State.OPERATION_ENABLED] |= 0x10  # voltage enabled
MAX_CATCH_UP_S = 0.005  # s: a longer gap between SYNCs is skipped, not simulated at once (a burst would delay the TPDOs) ...
CATCH_UP_PERIODS = 3  # ... unless it is within this many communication cycles (0x1006): a late SYNC is simulated whole
_FMT = {(8, True): "b", (8, False): "B", (16, True): "h", (16, False): "H", (32, True): "l", (32, False): "L"}
_SIGNED = {MODES, MODES_DISPLAY, POSITION_ACTUAL, VELOCITY_ACTUAL, TARGET_TORQUE, TORQUE_ACTUAL, TARGET_POSITION}


class Cia402Emulator:
    """CiA 402 drives on a python-can bus, backed by a simulated plant.

    Args:
        config: Node IDs and units (the robot's CANopen ``[drives]`` table).
        plant: Joint dynamics behind the drives.
        interface, channel: The bus (``virtual`` or ``udp_multicast``).
        faults: Fault injection settings.
        gains: The CSP position loop.
        step_s: Plant chunk (s) when following the clock, and in CSP.
        clock: Time source (s) when not in lock-step.
        lockstep_s: Lock-step: advance the plant by this much (s) on a SYNC that follows
            new set-points, and only then (None: follow the clock).
        realtime_priority: ``SCHED_FIFO`` priority of the serving thread, if the OS grants it
            (None: the starting thread's policy). In a paced host's own process the thread needs it:
            at normal priority on a busy machine it woke up to 6 ms after a SYNC.
    """

    def __init__(
        self,
        config: CanopenConfig,
        plant: TorquePlant,
        *,
        interface: str = "virtual",
        channel: str | None = None,
        faults: Cia402Faults | None = None,
        gains: CspGains | None = None,
        step_s: float = 5e-4,
        clock: Callable[[], float] = time.monotonic,
        lockstep_s: float | None = None,
        realtime_priority: int | None = None,
    ):
        if lockstep_s is not None and not lockstep_s > 0:
            raise ValueError(f"lock-step period must be > 0 s, got {lockstep_s}")
        self.config = config
        self.units = config.units
        self.plant = plant
        self.interface = interface
        self.channel = channel if channel is not None else config.channel
        self.faults = faults or Cia402Faults()
        self.gains = gains or CspGains()
        self.step_s = step_s
        self.clock = clock
        self.lockstep_s = lockstep_s
        self.realtime_priority = realtime_priority
        self.stats = Cia402Stats()
        self.drives: list[EmulatedDrive] = []
        self._rng = random.Random(self.faults.seed)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bus: can.BusABC | None = None
        self._network: canopen.Network | None = None
        self._delayed: list[can.Message] = []
        self._new_setpoints = False
        self._t = 0.0
        self._catch_up_s = MAX_CATCH_UP_S

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Cia402Emulator:
        """Open the bus and serve it from a background thread."""
        self._bus = open_can_bus(self.interface, self.channel, self.config.bitrate)
        try:
            self._serve_nodes()
        except BaseException:
            self._bus.shutdown()  # python-can warns at exit about a bus left open
            self._bus = None
            raise
        return self

    def _serve_nodes(self) -> None:
        """The drives' object dictionaries on the bus, and the serving thread."""
        self._network = canopen.Network(self._bus)
        u = self.units
        for k, nid in enumerate(int(i) for i in u.node_ids):
            node = canopen.LocalNode(nid, build_dictionary(nid))
            self._network.add_node(node)
            # the drive's own NMT and heartbeat below (on virtual time in lock-step), not canopen's threads
            self._network.unsubscribe(0, node.nmt.on_command)
            node._write_callbacks.remove(node.nmt.on_write)
            node.sdo.download(RATED_TORQUE, 0, struct.pack("<L", round(u.rated_torque_Nm[k] * 1e3)))
            drive = EmulatedDrive(nid, node)
            node.add_read_callback(lambda index, subindex, od, d=drive: self._object(d, index))
            node.add_write_callback(lambda index, subindex, od, data, d=drive: self._written(d, index, od, data))
            self.drives.append(drive)
        self._t = 0.0 if self.lockstep_s is not None else self.clock()
        self._stop.clear()
        self._thread = threading.Thread(target=self._serve, name="cia402-emulator", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        if self._bus is not None:
            self._bus.shutdown()
            self._bus = None

    def __enter__(self) -> Cia402Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def inject_fault(self, joint_index: int, code: int = 0x2310) -> None:
        """A fault in drive ``joint_index``: error code ``code`` (0x603F), EMCY sent, torque off, state Fault."""
        with self._lock:
            d = self.drives[joint_index]
            d.error_code, d.state, d.torque_permille = code, State.FAULT, 0.0
            self._send(0x80 + d.node_id, struct.pack("<HB5x", code, 0x01))
            self.stats.emcys += 1

    def leave_operation(self, joint_index: int) -> None:
        """Drive ``joint_index`` drops to Switch On Disabled without a fault (a safe torque off input opened)."""
        with self._lock:
            d = self.drives[joint_index]
            d.state, d.torque_permille = State.SWITCH_ON_DISABLED, 0.0

    def state(self, joint_index: int) -> State:
        return self.drives[joint_index].state

    # -- object dictionary -------------------------------------------------------------------
    def _object(self, d: EmulatedDrive, index: int) -> int | None:
        """Live values read by SDO (None: the stored value)."""
        if index == STATUSWORD:
            return _STATUSWORD[d.state]
        if index in (POSITION_ACTUAL, VELOCITY_ACTUAL, TORQUE_ACTUAL):
            return self._sample(d)[index]
        return {ERROR_CODE: d.error_code, MODES_DISPLAY: d.mode, MODES: d.mode, CONTROLWORD: d.controlword,
                TARGET_TORQUE: d.target_torque, TARGET_POSITION: d.target_position, MAX_TORQUE: d.max_torque}.get(index)

    def _written(self, d: EmulatedDrive, index: int, od: object, data: bytes) -> None:
        value = od.decode_raw(data)
        if index == CONTROLWORD:
            self._command(d, value)
        elif index == MODES:
            d.mode = value
        elif index == TARGET_TORQUE:
            d.target_torque = value
        elif index == TARGET_POSITION:
            d.target_position = value
        elif index == MAX_TORQUE:
            d.max_torque = value
        elif index == HEARTBEAT_TIME:
            d.heartbeat_ms = value
            d.next_heartbeat = self._t
        elif index == CYCLE_PERIOD:
            self._catch_up_s = max(MAX_CATCH_UP_S, CATCH_UP_PERIODS * value * 1e-6)

    def _affected(self, d: EmulatedDrive) -> bool:
        return self.faults.nodes is None or d.node_id in self.faults.nodes

    def _command(self, d: EmulatedDrive, cw: int) -> None:
        """The 402 state machine's transitions for controlword ``cw``."""
        rising_reset = cw & 0x80 and not d.controlword & 0x80
        d.controlword = cw
        if self.faults.refuse_transitions and self._affected(d):
            return
        s = d.state
        if s is State.FAULT:
            if rising_reset:
                d.state, d.error_code = State.SWITCH_ON_DISABLED, 0
            return
        if cw & 0x02 == 0:  # disable voltage
            d.state = State.SWITCH_ON_DISABLED
        elif cw & 0x04 == 0:  # quick stop (the emulated drives stop at once)
            d.state = State.SWITCH_ON_DISABLED
        elif cw & 0x8F == 0x06 and s in (State.SWITCH_ON_DISABLED, State.SWITCHED_ON, State.OPERATION_ENABLED):
            d.state = State.READY_TO_SWITCH_ON
        elif cw & 0x8F == 0x07 and s in (State.READY_TO_SWITCH_ON, State.OPERATION_ENABLED):
            d.state = State.SWITCHED_ON
        elif cw & 0x8F == 0x0F and s in (State.SWITCHED_ON, State.QUICK_STOP_ACTIVE):
            d.state = State.OPERATION_ENABLED
        if d.state is not State.OPERATION_ENABLED:
            d.torque_permille = 0.0

    def _pdo_layouts(self, d: EmulatedDrive) -> None:
        """The PDOs the host mapped by SDO (valid COB-IDs only)."""
        d.rpdo, d.tpdo = {}, []
        for comm, mapping, receive in ((0x1400, 0x1600, True), (0x1800, 0x1A00, False)):
            for n in range(4):
                cob = struct.unpack("<L", d.node.get_data(comm + n, 1))[0]
                count = d.node.get_data(mapping + n, 0)[0]
                if cob & 0x80000000 or not count:
                    continue
                entries = [struct.unpack("<L", d.node.get_data(mapping + n, sub))[0] for sub in range(1, count + 1)]
                indices = tuple(e >> 16 for e in entries)
                layout = struct.Struct("<" + "".join(_FMT[(e & 0xFF, e >> 16 in _SIGNED)] for e in entries))
                if receive:
                    d.rpdo[cob & 0x7FF] = (layout, indices)
                else:
                    d.tpdo.append((cob & 0x7FF, layout, indices))

    # -- simulation ------------------------------------------------------------------------
    def _motor_state(self) -> tuple[np.ndarray, np.ndarray]:
        q, dq = self.plant.state()
        u = self.units
        return u.direction * q * u.gear_ratio, u.direction * dq * u.gear_ratio  # motor rad, rad/s

    def _torques_permille(self) -> np.ndarray:
        """Each drive's torque for the next chunk (per mille of rated torque)."""
        x = w = None
        out = np.zeros(len(self.drives))
        u = self.units
        for k, d in enumerate(self.drives):
            if d.state is not State.OPERATION_ENABLED or d.nmt != 0x05:
                continue
            if d.mode == Mode.CSP:
                if x is None:
                    x, w = self._motor_state()
                goal = (d.target_position - u.zero_count[k]) * 2 * math.pi / u.counts_per_rev[k]
                torque = self.gains.kp_Nm_per_rad * (goal - x[k]) - self.gains.kd_Nm_s_per_rad * w[k]
                out[k] = torque / u.rated_torque_Nm[k] * 1e3
            elif d.mode == Mode.CST:
                out[k] = d.target_torque
            out[k] = min(max(out[k], -d.max_torque), d.max_torque)
        return out

    def _step(self, dt: float) -> None:
        permille = self._torques_permille()
        for d, p in zip(self.drives, permille):
            d.torque_permille = float(p)
        self.plant.step(self.units.effort_from_permille(permille), dt)
        self._t += dt

    def _braked(self) -> bool:
        """Every drive's power stage off: their holding brakes hold the arm (the plant stands still)."""
        if any(d.state is State.OPERATION_ENABLED and d.nmt == 0x05 for d in self.drives):
            return False
        brake = getattr(self.plant, "brake", None)
        if brake is not None:
            brake()
        return True

    def _advance_to(self, t: float) -> None:
        """Run the plant up to ``t`` (s) in chunks of at most ``step_s``. After a pause of the SYNCs
        longer than ``MAX_CATCH_UP_S`` or :data:`CATCH_UP_PERIODS` cycles (start-up by SDO, a stalled
        host) the plant skips the gap; a SYNC a little late (a host's wake-up) is simulated whole, or
        the plant would fall behind the host's clock
        instead of running it all at once (counted in ``stats.slipped_s``)."""
        if self._braked():
            self._t = t
            return
        if t - self._t > self._catch_up_s:
            self.stats.slipped_s += t - self._t - self.step_s
            self._t = t - self.step_s
        while t - self._t > 1e-9:
            self._step(min(self.step_s, t - self._t))

    def _advance_lockstep(self) -> None:
        """One lock-step period: one step of the plant in CST, equal chunks of at most ``step_s`` in CSP."""
        if self._braked():
            return
        chunks = 1 if all(d.mode == Mode.CST for d in self.drives) else max(1, math.ceil(self.lockstep_s / self.step_s - 1e-9))
        for _ in range(chunks):
            self._step(self.lockstep_s / chunks)

    def _sample(self, d: EmulatedDrive) -> dict[int, int]:
        k = self.drives.index(d)
        q, dq = self.plant.state()
        u = self.units
        counts = int(u.counts_from_q(q)[k])
        return {
            STATUSWORD: _STATUSWORD[d.state],
            POSITION_ACTUAL: (counts + 2**31) % 2**32 - 2**31,
            VELOCITY_ACTUAL: int(u.counts_from_dq(dq)[k]),
            TORQUE_ACTUAL: int(round(d.torque_permille)),
            MODES_DISPLAY: d.mode,
            ERROR_CODE: d.error_code,
        }

    # -- protocol ------------------------------------------------------------------------
    def _send(self, cob: int, data: bytes) -> None:
        try:
            self._bus.send(can.Message(arbitration_id=cob, data=data, is_extended_id=False))
        except (can.CanError, OSError):
            pass

    def _serve(self) -> None:
        """Answer frames at once; between them, send heartbeats that fall due on the clock."""
        with realtime_priority(self.realtime_priority):
            self._answer()

    def _answer(self) -> None:
        while not self._stop.is_set():
            try:
                msg = self._bus.recv(0.01)
            except (can.CanError, OSError):
                return
            with self._lock:
                if msg is not None and not msg.is_error_frame:
                    self._handle(msg)
                if self.lockstep_s is None:
                    self._heartbeats(self.clock())

    def _handle(self, msg: can.Message) -> None:
        cob, data = msg.arbitration_id, bytes(msg.data)
        if cob == 0 and len(data) >= 2:
            for d in self.drives:
                if data[1] in (0, d.node_id):
                    self._nmt(d, data[0])
        elif cob == SYNC_ID:
            # a drive samples when the SYNC arrives; this thread may take it up later (the host's
            # interpreter lock, the scheduler), so the plant is sampled at the frame's time stamp
            self._sync(max(0.0, time.time() - msg.timestamp) if msg.timestamp else 0.0)
        elif 0x600 < cob <= 0x67F:
            self._network.notify(cob, data, msg.timestamp)
        else:
            for d in self.drives:
                if d.nmt == 0x05 and cob in d.rpdo:
                    d.pending = data
                    self._new_setpoints = True

    def _nmt(self, d: EmulatedDrive, command: int) -> None:
        if command == 0x01:
            self._pdo_layouts(d)
            d.nmt = 0x05
            return
        d.nmt = {0x02: 0x04, 0x80: 0x7F, 0x81: 0x7F, 0x82: 0x7F}.get(command, d.nmt)
        if d.state is State.OPERATION_ENABLED:  # leaving operational stops the drive (CiA 402 0x6007: disable)
            d.state, d.torque_permille = State.SWITCH_ON_DISABLED, 0.0

    def _apply_rpdos(self) -> None:
        for d in self.drives:
            if d.pending is None:
                continue
            for data_cob, (layout, indices) in d.rpdo.items():
                if len(d.pending) != layout.size:
                    continue
                for index, value in zip(indices, layout.unpack(d.pending)):
                    if index == CONTROLWORD:
                        self._command(d, value)
                    elif index == TARGET_TORQUE:
                        d.target_torque = value
                    elif index == TARGET_POSITION:
                        d.target_position = value
            d.pending = None

    def _sync(self, age_s: float = 0.0) -> None:
        """One SYNC, received ``age_s`` seconds ago."""
        self.stats.syncs += 1
        if self.lockstep_s is not None:
            self._apply_rpdos()
            if self._new_setpoints:
                self._advance_lockstep()
            self._new_setpoints = False
            now = self.stats.syncs * self.lockstep_s
        else:
            now = self.clock() - min(age_s, self._catch_up_s)
            self._advance_to(now)
            self._apply_rpdos()
        self._heartbeats(now)
        for msg in self._delayed:
            self._bus.send(msg)
        self._delayed = []
        f, rng = self.faults, self._rng
        for d in self.drives:
            if d.nmt != 0x05:
                continue
            sample = self._sample(d)
            for cob, layout, indices in d.tpdo:
                data = layout.pack(*(sample.get(i, 0) for i in indices))
                if self._affected(d):
                    if f.drop_tpdo and rng.random() < f.drop_tpdo:
                        self.stats.dropped += 1
                        continue
                    if f.corrupt_tpdo and rng.random() < f.corrupt_tpdo:
                        data = data[:-1]
                        self.stats.corrupted += 1
                    if f.delay_tpdo and rng.random() < f.delay_tpdo:
                        self._delayed.append(can.Message(arbitration_id=cob, data=data, is_extended_id=False))
                        self.stats.delayed += 1
                        continue
                self._send(cob, data)
                self.stats.tpdos += 1

    def _heartbeats(self, now: float) -> None:
        """Heartbeats due at ``now`` (s, virtual in lock-step)."""
        for d in self.drives:
            if not d.heartbeat_ms or now + 1e-9 < d.next_heartbeat:
                continue
            d.next_heartbeat = now + d.heartbeat_ms * 1e-3
            if self.faults.stop_heartbeat and self._affected(d):
                continue
            self._send(0x700 + d.node_id, bytes([d.nmt]))
            self.stats.heartbeats += 1
