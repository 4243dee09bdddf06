"""Device side of CiA 402 drives on a CAN bus (python-can), backed by a simulated plant.

:class:`Cia402Emulator` serves one drive per actuated joint, with the node IDs and units
of the robot's CANopen ``[drives]`` table, on a python-can bus: ``virtual`` (in this
process) or ``udp_multicast`` on loopback (``mbctl emulate --bus canopen``, in its own
process). The host driver (:mod:`mbctl.hardware.cia402.bus`) runs unchanged against it.

Implemented: an SDO server per drive (canopen's ``LocalNode``) on the objects of
:func:`~mbctl.hardware.cia402.objects.build_dictionary`; PDO mapping as the host writes it
(COB-IDs and mapping records read at NMT start); NMT start, stop, pre-operational and
reset; SYNC-driven synchronous PDOs; the 402 state machine (Shutdown, Switch On, Enable
Operation, Disable Voltage, Quick Stop, Fault Reset); CST and CSP with the torque actual value
(0x6077) the torque applied, a current loop's ripple included where asked; holding brakes; an
external push; heartbeats; EMCY on a fault (the power stages and the plant:
:mod:`mbctl.hardware.cia402.drive_plant`).

Fault injection (:class:`Cia402Faults`, seeded): TPDOs dropped, delayed by one cycle or
sent with a wrong length (by probability, or those of the next N SYNCs); heartbeats stopped;
state transitions refused; and by method, a fault code with its EMCY
(:meth:`Cia402Emulator.inject_fault`) or a drive leaving Operation Enabled without a fault
(:meth:`Cia402Emulator.leave_operation`, as a safe torque off input would).

Timing, paced (the default): the drives keep their own time, as real drives in synchronous mode do.
Their loop runs every ``step_s`` whatever the host does: the plant moves on while the host is late
or silent. A SYNC is stamped on arrival (the frame's receive time); the drives' loop locks to it as
a drive's does: the plant is sampled at that instant (a part step up to it, or, when the loop had
already stepped past it, the state interpolated between its last two steps), the targets of the
RPDOs received before it are latched and act from then on, the loop's next step is ``step_s`` after
it, and the TPDOs go out ``reply_delay_s`` after it. The plant's steps run between frames, not in
the reply path. With ``lockstep_s`` set, time is virtual instead: a SYNC that follows new RPDOs
applies them and advances the plant by exactly ``lockstep_s``, before its TPDOs, sent at once;
other SYNCs sample without advancing. A host that sends its RPDOs and then one SYNC per cycle
therefore sees, whatever the machine's load, the run of the same controller on the plant stepped
directly, one period per command.
"""

from __future__ import annotations

import collections
import math
import random
import struct
import threading
import time
from collections.abc import Callable

import can
import canopen
import numpy as np

from mbctl.dynamics.external import ExternalWrench
from mbctl.hardware.cia402.canbus import open_can_bus
from mbctl.hardware.cia402.drive_plant import DrivePlant
from mbctl.hardware.cia402.emulated_drive import Cia402Faults, Cia402Stats, CspGains, EmulatedDrive
from mbctl.hardware.cia402.objects import (
    CONTROLWORD,
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
MAX_CATCH_UP_S = 0.1  # s: a stall of the serving thread longer than this is skipped (counted), not simulated at once
REPLY_DELAY_S = 2.5e-4  # s: a drive's TPDOs after the SYNC (its loop's sample, then the CAN controller's queue)
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
        step_s: The drives' loop period on their own clock (s), paced; the plant's chunk in CSP lock-step.
        clock: Time source (s) when not in lock-step.
        lockstep_s: Lock-step: advance the plant by this much (s) on a SYNC that follows
            new set-points, and only then (None: the drives keep their own time).
        realtime_priority: ``SCHED_FIFO`` priority of the serving thread, if the OS grants it
            (None: the starting thread's policy). In a paced host's own process the thread needs it:
            at normal priority on a busy machine it woke up to 6 ms after a SYNC.
        reply_delay_s: Paced: the TPDOs go out this long after the SYNC (s).
        effort_noise_permille: The current loop's ripple (standard deviation, per mille of rated torque).
        contact: An external push on the arm, its window counted from the first SYNC with every drive
            enabled (the host loop's first cycle).
        seed: Seed of the ripple.
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
        reply_delay_s: float = REPLY_DELAY_S,
        effort_noise_permille: float = 0.0,
        contact: ExternalWrench | None = None,
        seed: int = 0,
    ):
        if lockstep_s is not None and not lockstep_s > 0:
            raise ValueError(f"lock-step period must be > 0 s, got {lockstep_s}")
        if not (effort_noise_permille >= 0 and reply_delay_s >= 0):
            raise ValueError(f"need effort noise >= 0 and reply delay >= 0; got {effort_noise_permille}, {reply_delay_s}")
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
        self.reply_delay_s = reply_delay_s
        self.effort_noise_permille = effort_noise_permille
        self.contact = contact
        self.seed = seed
        self.stats = Cia402Stats()
        self.drives: list[EmulatedDrive] = []
        self.power: DrivePlant | None = None
        self._rng = random.Random(self.faults.seed)
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._bus: can.BusABC | None = None
        self._network: canopen.Network | None = None
        self._delayed: list[can.Message] = []
        self._replies: collections.deque[tuple[float, list[can.Message]]] = collections.deque()
        self._new_setpoints = False
        self._next_heartbeat = math.inf

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self, serve: bool = True) -> Cia402Emulator:
        """Open the bus and serve it from a background thread (``serve`` False: no thread; a test then
        hands the frames to :meth:`handle` and runs the due jobs with :meth:`poll` on its own clock)."""
        self._bus = open_can_bus(self.interface, self.channel, self.config.bitrate)
        try:
            self._serve_nodes(serve)
        except BaseException:
            self._bus.shutdown()  # python-can warns at exit about a bus left open
            self._bus = None
            raise
        return self

    def _serve_nodes(self, serve: bool) -> None:
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
        self.power = DrivePlant(self.plant, u, self.drives, self.gains, noise_permille=self.effort_noise_permille, seed=self.seed, contact=self.contact)
        self.power.start_loop(self.clock(), self.step_s)
        self._stop.clear()
        if serve:
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
            self.power.changed()
            self._send(0x80 + d.node_id, struct.pack("<HB5x", code, 0x01))
            self.stats.emcys += 1

    def leave_operation(self, joint_index: int) -> None:
        """Drive ``joint_index`` drops to Switch On Disabled without a fault (a safe torque off input opened)."""
        with self._lock:
            d = self.drives[joint_index]
            d.state, d.torque_permille = State.SWITCH_ON_DISABLED, 0.0
            self.power.changed()

    def state(self, joint_index: int) -> State:
        return self.drives[joint_index].state

    # -- object dictionary -------------------------------------------------------------------
    def _object(self, d: EmulatedDrive, index: int) -> int | None:
        """Live values read by SDO (None: the stored value)."""
        if index == STATUSWORD:
            return _STATUSWORD[d.state]
        if index in (POSITION_ACTUAL, VELOCITY_ACTUAL, TORQUE_ACTUAL):
            return self._samples(self.power.state())[self.drives.index(d)][index]
        return {ERROR_CODE: d.error_code, MODES_DISPLAY: d.mode, MODES: d.mode, CONTROLWORD: d.controlword,
                TARGET_TORQUE: d.target_torque, TARGET_POSITION: d.target_position, MAX_TORQUE: d.max_torque}.get(index)

    def _written(self, d: EmulatedDrive, index: int, od: object, data: bytes) -> None:
        value = od.decode_raw(data)
        self.power.changed()
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
            d.next_heartbeat = 0.0  # at once
            self._next_heartbeat = 0.0

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
        self.power.changed()

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
    def _advance_lockstep(self) -> None:
        """One lock-step period: one step of the plant in CST, equal chunks of at most ``step_s`` in CSP."""
        if self.power.braked:
            self.power.step(self.lockstep_s)
            return
        chunks = 1 if all(d.mode == Mode.CST for d in self.drives) else max(1, math.ceil(self.lockstep_s / self.step_s - 1e-9))
        for _ in range(chunks):
            self.power.step(self.lockstep_s / chunks)

    def _samples(self, at: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[dict[int, int]]:
        """Every drive's mappable objects for the state ``at`` (positions, velocities, applied torques)."""
        q, dq, applied = at
        counts, velocity = (self.units.counts_from_q(q) + 2**31) % 2**32 - 2**31, self.units.counts_from_dq(dq)
        return [
            {STATUSWORD: _STATUSWORD[d.state], POSITION_ACTUAL: int(counts[k]), VELOCITY_ACTUAL: int(velocity[k]),
             TORQUE_ACTUAL: int(round(applied[k])), MODES_DISPLAY: d.mode, ERROR_CODE: d.error_code}  # fmt: skip
            for k, d in enumerate(self.drives)
        ]

    # -- protocol ------------------------------------------------------------------------
    def _send(self, cob: int, data: bytes) -> None:
        self._send_msg(can.Message(arbitration_id=cob, data=data, is_extended_id=False))

    def _send_msg(self, msg: can.Message) -> None:
        try:
            self._bus.send(msg)
        except (can.CanError, OSError):
            pass

    def _serve(self) -> None:
        """Lock-step: answer frames as they come; paced: frames and the due jobs (:meth:`poll`)."""
        with realtime_priority(self.realtime_priority):
            if self.lockstep_s is None:
                return self._answer_paced()
            while not self._stop.is_set():
                try:
                    msg = self._bus.recv(0.01)
                except (can.CanError, OSError):
                    return
                if msg is not None and not msg.is_error_frame:
                    with self._lock:
                        self.handle(msg)

    def _answer_paced(self) -> None:
        """Frames first, as they arrive; between them, the due jobs (:meth:`poll`)."""
        while not self._stop.is_set():
            due = min(self.power.next_step, self._replies[0][0] if self._replies else math.inf, self._next_heartbeat)
            try:
                msg = self._bus.recv(max(0.0, min(due - self.clock(), 0.01)))
            except (can.CanError, OSError):
                return
            with self._lock:
                if msg is None:
                    self.poll()
                elif not msg.is_error_frame:
                    self.handle(msg)

    def poll(self) -> None:
        """Paced: one due job of the drives at ``clock()``: the oldest reply, else one step of their
        loop; and the heartbeats. (Run by the serving thread; a test without one calls it itself.)"""
        now = self.clock()
        if self._replies and self._replies[0][0] <= now + 1e-9:
            self._reply(*self._replies.popleft(), now)
        elif self.power.next_step <= now + 1e-9:
            if now - self.power.next_step > MAX_CATCH_UP_S:  # the thread was stopped: the gap is skipped
                self.power.skip_to(now)
            else:
                self.power.loop_step()
        if self._next_heartbeat <= now:
            self._heartbeats(now)

    def _reply(self, due: float, frames: list[can.Message], now: float) -> None:
        self.stats.reply_lag_max_s = max(self.stats.reply_lag_max_s, now - due)
        for msg in frames:
            self._send_msg(msg)

    def handle(self, msg: can.Message) -> None:
        """Take one received frame."""
        cob, data = msg.arbitration_id, bytes(msg.data)
        if cob == 0 and len(data) >= 2:
            for d in self.drives:
                if data[1] in (0, d.node_id):
                    self._nmt(d, data[0])
        elif cob == SYNC_ID:
            # a drive samples when the SYNC arrives; this thread may take it up later (the host's
            # interpreter lock, the scheduler), so the SYNC's time is the frame's receive stamp
            self._sync(min(max(0.0, time.time() - msg.timestamp), MAX_CATCH_UP_S) if msg.timestamp else 0.0)
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
        self.power.changed()

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
            self.power.changed()

    def _sync(self, age_s: float = 0.0) -> None:
        """One SYNC, received ``age_s`` seconds ago: the TPDOs held back at the last one go out first."""
        self.stats.syncs += 1
        for msg in self._delayed:
            self._send_msg(msg)
        self._delayed = []
        if self.lockstep_s is not None:
            self.power.synced()
            self._apply_rpdos()
            if self._new_setpoints:
                self._advance_lockstep()
            self._new_setpoints = False
            self._heartbeats(self.stats.syncs * self.lockstep_s)
            for msg in self._tpdos(self.power.state()):
                self._send_msg(msg)
            return
        arrived = self.clock() - age_s
        # an earlier SYNC's TPDOs still unsent (a stalled thread) would pass for this one's: never sent
        self.stats.unsent += sum(len(frames) for _, frames in self._replies)
        self._replies.clear()
        if arrived - self.power.plant_t > MAX_CATCH_UP_S:  # a stall of this thread: the gap is skipped
            self.power.skip_to(arrived - self.step_s)
        sampled = self.power.sampled_at(arrived)
        self.power.synced()
        self._apply_rpdos()  # the latched targets act from the SYNC on
        # sent by poll(), which runs when no frame waits: a later SYNC already here drops them first
        self._replies.append((arrived + self.reply_delay_s, self._tpdos(sampled)))

    def _tpdos(self, at: tuple[np.ndarray, np.ndarray, np.ndarray]) -> list[can.Message]:
        """The TPDOs of this SYNC for the sampled state ``at``, the fault injection applied (delayed
        ones kept for the next SYNC)."""
        f, rng = self.faults, self._rng
        drop_all, delay_all = f.drop_syncs > 0, f.delay_syncs > 0
        f.drop_syncs, f.delay_syncs = max(0, f.drop_syncs - 1), max(0, f.delay_syncs - 1)
        frames = []
        for d, sample in zip(self.drives, self._samples(at)):
            if d.nmt != 0x05:
                continue
            for cob, layout, indices in d.tpdo:
                data = layout.pack(*(sample.get(i, 0) for i in indices))
                if self._affected(d):
                    if drop_all or (f.drop_tpdo and rng.random() < f.drop_tpdo):
                        self.stats.dropped += 1
                        continue
                    if f.corrupt_tpdo and rng.random() < f.corrupt_tpdo:
                        data = data[:-1]
                        self.stats.corrupted += 1
                    if delay_all or (f.delay_tpdo and rng.random() < f.delay_tpdo):
                        self._delayed.append(can.Message(arbitration_id=cob, data=data, is_extended_id=False))
                        self.stats.delayed += 1
                        continue
                frames.append(can.Message(arbitration_id=cob, data=data, is_extended_id=False))
                self.stats.tpdos += 1
        return frames

    def _heartbeats(self, now: float) -> None:
        """Heartbeats due at ``now`` (s, virtual in lock-step)."""
        upcoming = math.inf
        for d in self.drives:
            if not d.heartbeat_ms:
                continue
            if now + 1e-9 >= d.next_heartbeat:
                d.next_heartbeat = now + d.heartbeat_ms * 1e-3
                if not (self.faults.stop_heartbeat and self._affected(d)):
                    self._send(0x700 + d.node_id, bytes([d.nmt]))
                    self.stats.heartbeats += 1
            upcoming = min(upcoming, d.next_heartbeat)
        self._next_heartbeat = upcoming
