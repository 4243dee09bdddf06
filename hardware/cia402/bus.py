"""CiA 402 joint drives on CANopen, through python-can (bus access) and canopen (SDO, PDO mapping, NMT).

Start-up (:meth:`Cia402Bus.open`, by SDO through the canopen library): NMT pre-operational,
device type 402 checked, motor rated torque (0x6076) checked against the TOML, mode of
operation (CST 10 or CSP 8), max torque, SYNC COB-ID and cycle period, heartbeat producer
time, the PDO layout of :mod:`mbctl.hardware.cia402.objects` mapped (RPDO1, TPDO1, TPDO2,
synchronous; the other PDOs disabled), then NMT operational. :meth:`Cia402Bus.enable` walks
every drive's 402 state machine to Operation Enabled by SDO (Shutdown, Switch On, Enable
Operation, each checked on the statusword), with the targets set to the present state first.

Each cycle the loop's own thread does the exchange, with no helper thread: :meth:`read`
drains what arrived since the last cycle (EMCY, heartbeats), sends one SYNC and waits for
every drive's TPDO1 and TPDO2; :meth:`write` sends one RPDO per drive (controlword and
target), which the drives apply at the next SYNC.

Timing policy (:mod:`mbctl.hardware.cia402.timing`): a cycle with a TPDO missing ``pdo_timeout_s``
after the SYNC returns the last complete sample again, counted, until a limit stops the run; a drive
whose TPDOs are missing and whose heartbeat is past its timeout stops it at once (it is gone). A
TPDO after its deadline is ``late``: counted, and dropped when the next cycle's sample is complete
without it (PDOs carry no cycle counter: one that comes first after the next SYNC passes for its own).

Every fault stops the loop (which then calls :meth:`disable`):

- TPDOs missing as above (``no_reply``), of the wrong length (``frame``), an error frame (``frame``);
- no heartbeat from a drive for ``heartbeat_timeout_s`` (``heartbeat``), or a heartbeat
  saying the drive left NMT operational;
- an EMCY message, a statusword with the Fault bit, or a statusword that left Operation
  Enabled (:class:`DriveStateFault`, a :class:`~mbctl.hardware.interface.DriveFault`).

:meth:`disable` (a stop) sends quick stop (controlword 0x0002, target torque 0) to every
drive by RPDO, followed by a SYNC, twice: each drive stops as its quick stop option code
(0x605A) says. :meth:`hand_over` (a clean finish, after the loop's hold) sends disable operation
(controlword 0x0007) the same way: each drive leaves Operation Enabled as its disable operation
option code (0x605C) says (slow down on its ramp, then the power stage off). Either way a drive
with a holding brake engages it once its power stage is off (the emulated drives do).

Sample times: the drives sample their TPDOs at the SYNC, so :attr:`JointState.t` is the instant
the SYNC was sent, on ``clock`` (paced) or in SYNC periods (lock-step). Effort: where torque actual
value (0x6077) is mapped, :attr:`effort_source` names it: the drives' own measure of the torque they
applied, which the momentum observer then takes instead of the commands.

Heartbeat ages are measured on ``clock`` (s), or, without one (lock-step runs), in SYNC
periods of ``cycle_s``.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence

import can
import canopen
import numpy as np

from mbctl.errors import ConfigError
from mbctl.hardware.cia402.canbus import open_can_bus, sdo_log_held
from mbctl.hardware.cia402.objects import (
    CONTROLWORD,
    CYCLE_PERIOD,
    DEVICE_TYPE,
    HEARTBEAT_TIME,
    MAX_TORQUE,
    MODES,
    NMT_OPERATIONAL,
    NMT_STATES,
    POSITION_ACTUAL,
    RATED_TORQUE,
    RPDO_MAP,
    STATUSWORD,
    SYNC_COB_ID,
    SYNC_ID,
    TARGET_POSITION,
    TARGET_TORQUE,
    TPDO1,
    TPDO1_MAP,
    TPDO2,
    TPDO2_MAP,
    Command,
    Mode,
    State,
    build_dictionary,
    describe_emcy,
    describe_state,
    rpdo_struct,
    state_of,
)
from mbctl.hardware.cia402.timing import SamplePolicy, effort_source
from mbctl.hardware.cia402.units import CanopenConfig
from mbctl.hardware.interface import (
    CommandMode,
    CommunicationError,
    DriveFault,
    HardwareError,
    JointCommand,
    JointInterface,
    JointState,
)

__all__ = ["Cia402Bus", "DriveStateFault"]

_CAN_ERRORS = (can.CanError, OSError)
_SDO_ERRORS = (canopen.SdoAbortedError, canopen.SdoCommunicationError)


class DriveStateFault(DriveFault):
    """A drive in Fault, one that sent an EMCY, left Operation Enabled or refused a transition.

    Attributes:
        joint: The joint of the drive.
        status: Its statusword, or the EMCY error code.
    """

    def __init__(self, joint: str, status: int, message: str):
        self.joint = joint
        self.status = status
        HardwareError.__init__(self, f"drive of joint {joint}: {message}")


class Cia402Bus(JointInterface):
    """Actuated joints driven by CiA 402 drives on one CAN bus.

    Args:
        joint_names: Actuated joints, in the robot's order.
        config: The ``[drives]`` settings.
        interface, channel: Override ``config.interface`` / ``config.channel``.
        mode: What :meth:`write` commands: torque (CST) or position (CSP); must match ``config.mode``.
        cycle_s: SYNC period (s): the control period.
        pdo_timeout_s: How long after the SYNC the TPDOs may arrive (s); default
            ``config.pdo_timeout_s``, else 0.9 of the cycle.
        clock: Time source of heartbeat and sample ages (s); None: count SYNC periods (lock-step).
            The timing policy's limits are ``config.tpdo_missing_max`` and ``config.sample_timeout_s``.
        sdo_timeout_s: Reply timeout of one SDO exchange (start-up only).
        transition_timeout_s: How long a drive may take for one state transition.

    Attributes:
        comm_errors: Counts by kind: faults, and the timing policy's ``missing``, ``late``, ``reused``.
        reply_s: The last cycle's time from its SYNC to its last TPDO (s; NaN when one was missing).
        effort_source: ``"torque actual value 0x6077"`` (mapped in TPDO1): the torques applied.
    """

    def __init__(
        self,
        joint_names: Sequence[str],
        config: CanopenConfig,
        *,
        interface: str | None = None,
        channel: str | None = None,
        mode: CommandMode = CommandMode.TORQUE,
        cycle_s: float = 1e-3,
        pdo_timeout_s: float | None = None,
        clock: Callable[[], float] | None = None,
        sdo_timeout_s: float = 0.3,
        transition_timeout_s: float = 0.5,
    ):
        wanted = {CommandMode.TORQUE: Mode.CST, CommandMode.POSITION: Mode.CSP}.get(mode)
        if wanted is not config.mode:
            need = "cst" if mode is CommandMode.TORQUE else "csp"
            raise ConfigError(f'the drives run in {config.mode.name}; {mode.value} commands need mode = "{need}"', file=config.file, field="drives.mode")
        self.joint_names = tuple(joint_names)
        self.config = config
        self.units = config.units
        self.mode = mode
        self.interface = interface or config.interface
        self.channel = channel if channel is not None else config.channel
        self.cycle_s = cycle_s
        self.pdo_timeout_s = pdo_timeout_s or config.pdo_timeout_s or 0.9 * cycle_s
        self.clock = clock
        self.effort_source = effort_source((TPDO1_MAP, TPDO2_MAP))
        self.effort_after_friction = False  # a drive torque (current times torque constant): friction still opposes it
        # paced, the drives act on an RPDO at the SYNC after it; the lock-step emulator applies it before stepping
        self.command_delay_cycles = 0 if clock is None else 1
        self.sdo_timeout_s = sdo_timeout_s
        self.transition_timeout_s = transition_timeout_s
        self.comm_errors: Counter[str] = Counter()
        self.policy = SamplePolicy(config.tpdo_missing_max, config.sample_timeout_s, cycle_s, self.comm_errors)
        self.saturated = 0  # torque commands limited to the drives' max torque
        self._ids = [int(i) for i in self.units.node_ids]
        n = len(self._ids)
        self._bus: can.BusABC | None = None
        self._network: canopen.Network | None = None
        self._nodes: list[canopen.RemoteNode] = []
        self._rpdo = rpdo_struct(config.mode)
        self._rx = [can.Message(arbitration_id=0x200 + i, data=bytearray(self._rpdo.size), is_extended_id=False) for i in self._ids]
        self._sync = can.Message(arbitration_id=SYNC_ID, data=b"", is_extended_id=False)
        self._tpdo = {0x180 + i: (k, 1) for k, i in enumerate(self._ids)} | {0x280 + i: (k, 2) for k, i in enumerate(self._ids)}
        self._emcy = {0x80 + i: k for k, i in enumerate(self._ids)}
        self._heartbeat = {0x700 + i: k for k, i in enumerate(self._ids)}
        self._status, self._position, self._torque, self._velocity = [0] * n, [0] * n, [0] * n, [0] * n
        self._got = [0] * (2 * n)
        self.reply_s = math.nan
        self._last_heartbeat = [0.0] * n
        self._targets = [0] * n  # last targets sent (per mille or increments): quick stop holds them in CSP
        self._syncs = 0
        self._handed_over = False
        self._operational = False
        self._enabled = False
        self._controlword = int(Command.SHUTDOWN)
        self._limit = self.units.max_torque_permille.astype(float)

    # -- helpers --------------------------------------------------------------------------
    def _fail(self, kind: str, message: str) -> CommunicationError:
        self.comm_errors[kind] += 1
        return CommunicationError(kind, message)

    def _who(self, k: int) -> str:
        return f"node {self._ids[k]} ({self.joint_names[k]})"

    def _now(self) -> float:
        return self.clock() if self.clock is not None else self._syncs * self.cycle_s

    def _send(self, msg: can.Message) -> None:
        try:
            self._bus.send(msg)
        except _CAN_ERRORS as exc:
            raise self._fail("tx", f"{self.interface} {self.channel}: cannot send 0x{msg.arbitration_id:03x}: {exc}") from None

    @contextlib.contextmanager
    def _sdo_phase(self) -> Iterator[None]:
        """canopen's listener thread, for SDO replies; stopped again before any cycle. SDO failures
        raise one-line errors (:meth:`_sdo`), so canopen's own log records of them are held back."""
        notifier = can.Notifier(self._bus, self._network.listeners, timeout=0.005)
        try:
            with sdo_log_held():
                yield
        finally:
            notifier.stop()

    def _sdo(self, k: int, index: int, value: int | None = None, subindex: int | None = None) -> int:
        """Read (``value`` None) or write one object of drive ``k`` by SDO."""
        node = self._nodes[k]
        try:
            var = node.sdo[index] if subindex is None else node.sdo[index][subindex]
            if value is None:
                return int(var.raw)
            var.raw = int(value)
            return int(value)
        except _SDO_ERRORS as exc:
            action = "read" if value is None else f"write of {value}"
            raise self._fail("sdo", f"{self._who(k)}: SDO {action} to 0x{index:04x}: {exc}") from None
        except KeyError:
            raise ConfigError(f"the object dictionary of {self._who(k)} has no object 0x{index:04x}", file=self.config.eds, field="drives.eds") from None

    def _map_pdos(self, k: int) -> None:
        """RPDO1, TPDO1 and TPDO2 as in :mod:`~mbctl.hardware.cia402.objects`, synchronous; the rest off."""
        node, nid = self._nodes[k], self._ids[k]
        layouts = {("rpdo", 1): RPDO_MAP[self.config.mode], ("tpdo", 1): TPDO1_MAP, ("tpdo", 2): TPDO2_MAP}
        try:
            for kind, base in (("rpdo", 0x100), ("tpdo", 0x80)):
                pdos = getattr(node, kind)
                for n in range(1, 5):
                    pdo = pdos[n]
                    pdo.clear()
                    pdo.cob_id = base + 0x100 * n + nid
                    layout = layouts.get((kind, n))
                    pdo.enabled = layout is not None
                    if layout is not None:
                        for index, bits in layout:
                            pdo.add_variable(index, 0, bits)
                        pdo.trans_type = 1  # synchronous, every SYNC
                    pdo.save()
        except _SDO_ERRORS as exc:
            raise self._fail("sdo", f"{self._who(k)}: PDO mapping refused: {exc}") from None

    # -- JointInterface ---------------------------------------------------------------------
    def open(self) -> None:
        """Connect, configure every drive by SDO (see the module's docstring), NMT operational; torque off.
        A failure closes the bus again."""
        self._bus = open_can_bus(self.interface, self.channel, self.config.bitrate)
        try:
            self._configure()
        except BaseException:
            self.close()
            raise

    def _configure(self) -> None:
        self._network = canopen.Network(self._bus)
        for nid in self._ids:
            od = canopen.import_od(str(self.config.eds), nid) if self.config.eds is not None else build_dictionary(nid)
            node = canopen.RemoteNode(nid, od)
            node.sdo.RESPONSE_TIMEOUT = self.sdo_timeout_s
            self._nodes.append(self._network.add_node(node))
        u = self.units
        with self._sdo_phase():
            self._network.nmt.state = "PRE-OPERATIONAL"
            for k, name in enumerate(self.joint_names):
                device = self._sdo(k, DEVICE_TYPE)
                if device & 0xFFFF != 402:
                    raise HardwareError(f"{self._who(k)} is not a CiA 402 drive (device type 0x{device:08x})")
                rated_mNm = self._sdo(k, RATED_TORQUE)
                if not np.isclose(rated_mNm, u.rated_torque_Nm[k] * 1e3, rtol=5e-3):
                    raise ConfigError(f"{self._who(k)} reports a motor rated torque (0x6076) of {rated_mNm} mN·m", file=self.config.file, field=f"drives.joints.{name}.rated_torque_mNm")
                self._sdo(k, MODES, int(self.config.mode))
                self._sdo(k, MAX_TORQUE, int(u.max_torque_permille[k]))
                self._sdo(k, SYNC_COB_ID, SYNC_ID)
                self._sdo(k, CYCLE_PERIOD, round(self.cycle_s * 1e6))
                self._sdo(k, HEARTBEAT_TIME, max(1, round(self.config.heartbeat_s * 1e3)))
                self._map_pdos(k)
            self._network.nmt.state = "OPERATIONAL"
        self._operational = True
        self._last_heartbeat = [self._now()] * len(self._ids)

    def close(self) -> None:
        self._operational = False
        if self._bus is not None:
            try:
                self._bus.shutdown()
            except _CAN_ERRORS:
                pass
            self._bus = None

    def enable(self) -> None:
        """Targets set to the present state (bumpless), then every drive to Operation Enabled by SDO.

        Raises:
            DriveStateFault: A drive in Fault, or one that refused a transition.
        """
        csp = self.config.mode is Mode.CSP
        with self._sdo_phase():
            for k in range(len(self._ids)):
                statusword = self._sdo(k, STATUSWORD)
                if state_of(statusword) in (State.FAULT, State.FAULT_REACTION_ACTIVE):
                    raise DriveStateFault(self.joint_names[k], statusword, f"is in Fault ({describe_state(statusword)}); remove the cause, then reset it (controlword bit 7)")
                self._targets[k] = self._sdo(k, TARGET_POSITION, self._sdo(k, POSITION_ACTUAL)) if csp else self._sdo(k, TARGET_TORQUE, 0)
            for command, state in ((Command.SHUTDOWN, State.READY_TO_SWITCH_ON), (Command.SWITCH_ON, State.SWITCHED_ON), (Command.ENABLE_OPERATION, State.OPERATION_ENABLED)):
                for k in range(len(self._ids)):
                    self._sdo(k, CONTROLWORD, int(command))
                for k in range(len(self._ids)):
                    self._await_state(k, command, state)
        self._controlword = int(Command.ENABLE_OPERATION)
        self._enabled = True
        self._handed_over = False
        self._last_heartbeat = [self._now()] * len(self._ids)

    def _await_state(self, k: int, command: Command, state: State) -> None:
        end = time.monotonic() + self.transition_timeout_s
        while True:
            statusword = self._sdo(k, STATUSWORD)
            if state_of(statusword) is state:
                return
            if time.monotonic() > end:
                raise DriveStateFault(self.joint_names[k], statusword, f"refused {command.name.lower().replace('_', ' ')}: still {describe_state(statusword)}, not {state.label}")
            time.sleep(1e-3)

    sample_clock = True
    disable_action = "quick stop (controlword 0x0002): each drive stops as its quick stop option code 0x605A says, its brake holding where fitted"
    """What :meth:`disable` does, for the run summary."""

    def disable(self) -> None:
        """Quick stop to every drive (RPDO, then SYNC), twice; never raises. After :meth:`hand_over`,
        nothing: the drives stay as it left them."""
        if not self._handed_over:
            self._send_all(Command.QUICK_STOP)

    def hand_over(self) -> str:
        """Disable operation to every drive (RPDO, then SYNC), twice; never raises."""
        if not self._send_all(Command.DISABLE_OPERATION):
            self.disable()
            return "torque off: the bus was gone before the hand-over"
        self._handed_over = True
        return "disable operation (controlword 0x0007): each drive stops as its disable operation option code 0x605C says, its brake holding where fitted"

    def _send_all(self, command: Command) -> bool:
        """``command`` to every drive by RPDO (zero torque in CST, the last targets in CSP), then a
        SYNC, twice; False if the bus is not open."""
        self._enabled = False
        self._controlword = int(command)
        if self._bus is None or not self._operational:
            return False
        hold = self.config.mode is Mode.CSP
        for _ in range(2):
            for k, msg in enumerate(self._rx):
                self._rpdo.pack_into(msg.data, 0, int(command), self._targets[k] if hold else 0)
                try:
                    self._bus.send(msg)
                except _CAN_ERRORS:
                    pass
            try:
                self._bus.send(self._sync)
            except _CAN_ERRORS:
                pass
        return True

    def _dispatch(self, msg: can.Message, in_cycle: bool) -> int:
        """Take one received frame; returns 1 for an awaited TPDO of this cycle."""
        cob = msg.arbitration_id
        slot = self._tpdo.get(cob)
        if slot is not None:
            k, which = slot
            data = msg.data
            fresh = in_cycle and not self._got[2 * k + which - 1]
            if not fresh:  # after its deadline: counted; within a cycle the later copy is the newer one
                self.comm_errors["late"] += 1
                if not in_cycle:
                    return 0
            layout = TPDO1 if which == 1 else TPDO2
            if len(data) != layout.size:
                raise self._fail("frame", f"{self._who(k)}: TPDO{which} of {len(data)} bytes, expected {layout.size}")
            if which == 1:
                self._status[k], self._position[k], self._torque[k] = layout.unpack(data)
            else:
                (self._velocity[k],) = layout.unpack(data)
            self._got[2 * k + which - 1] = 1
            return int(fresh)
        if msg.is_error_frame:
            raise self._fail("frame", f"error frame on {self.interface} {self.channel}")
        k = self._emcy.get(cob)
        if k is not None and len(msg.data) >= 2:
            code = msg.data[0] | msg.data[1] << 8
            if code:  # 0: error reset
                self.comm_errors["emcy"] += 1
                raise DriveStateFault(self.joint_names[k], code, f"EMCY 0x{code:04x} ({describe_emcy(code)})")
            return 0
        k = self._heartbeat.get(cob)
        if k is not None and msg.data:
            state = msg.data[0] & 0x7F
            if state != NMT_OPERATIONAL and self._operational:
                raise DriveStateFault(self.joint_names[k], state, f"left NMT operational: heartbeat says {NMT_STATES.get(state, hex(state))}")
            self._last_heartbeat[k] = self._now()
        return 0

    sensing = "CiA 402 drives: position actual (0x6064) and the drives' own velocity actual (0x606C)"
    """How the drives are measured, for the run summary."""

    def read(self) -> JointState:
        """One SYNC; every drive's TPDO1 and TPDO2 in SI units, or, with some missing, the last
        complete sample again (the timing policy of the module's docstring)."""
        bus = self._bus
        try:
            msg = bus.recv(0.0)
            while msg is not None:  # what arrived since the last cycle: EMCY, heartbeats, late TPDOs
                self._dispatch(msg, in_cycle=False)
                msg = bus.recv(0.0)
            got = self._got
            for i in range(len(got)):
                got[i] = 0
            self._syncs += 1
            sampled = self._now()  # the drives sample at the SYNC; stamped before a thread switch at the send can delay it
            self._send(self._sync)
            sent = time.perf_counter()
            remaining = len(got)
            deadline = sent + self.pdo_timeout_s
            while remaining:
                msg = bus.recv(max(0.0, deadline - time.perf_counter()))
                if msg is None:
                    break
                remaining -= self._dispatch(msg, in_cycle=True)
            self.reply_s = math.nan if remaining else time.perf_counter() - sent
        except _CAN_ERRORS as exc:
            raise self._fail("port", f"{self.interface} {self.channel}: {exc}") from None
        now = self._now()
        for k, statusword in enumerate(self._status):
            if statusword & 0x08:
                raise DriveStateFault(self.joint_names[k], statusword, f"in Fault ({describe_state(statusword)})")
            if self._enabled and statusword & 0x6F != 0x27:
                raise DriveStateFault(self.joint_names[k], statusword, f"left Operation Enabled: {describe_state(statusword)}")
            age = now - self._last_heartbeat[k]
            if age > self.config.heartbeat_timeout_s + 1e-9:
                silent = remaining and not (got[2 * k] and got[2 * k + 1])
                raise self._fail("no_reply" if silent else "heartbeat", f"{self._who(k)}: {'no TPDO and ' if silent else ''}no heartbeat for {age * 1e3:.3g} ms (timeout {self.config.heartbeat_timeout_s * 1e3:.3g} ms)")
        if remaining:
            missing = [i for i, g in enumerate(got) if not g]
            k, which = missing[0] // 2, missing[0] % 2 + 1
            more = f" (and {len(missing) - 1} more TPDOs)" if len(missing) > 1 else ""
            return self.policy.missing(now, f"{self._who(k)}: TPDO{which}{more} missing {self.pdo_timeout_s * 1e3:.3g} ms after the SYNC", len(missing))
        u = self.units
        return self.policy.fresh(JointState(
            t=sampled, t_host=sampled if self.clock is time.perf_counter else math.nan,
            q=u.q_from_counts(np.array(self._position, dtype=float)),
            dq=u.dq_from_counts(np.array(self._velocity, dtype=float)),
            effort=u.effort_from_permille(np.array(self._torque, dtype=float)),
        ))  # fmt: skip

    @property
    def degraded(self) -> str:
        """What the timing policy let through, for the stop reason of a completed run (``""``: nothing)."""
        return self.policy.degraded

    def write(self, command: JointCommand) -> None:
        """One RPDO per drive: controlword and target torque (per mille) or target position (increments)."""
        if command.mode is not self.mode:
            raise ValueError(f"this bus was opened in {self.mode.value} mode, got a {command.mode.value} command")
        u = self.units
        if self.mode is CommandMode.TORQUE:
            permille = u.permille_from_effort(command.value)
            over = np.abs(permille) > self._limit
            if over.any():
                self.saturated += int(over.sum())
                permille = np.clip(permille, -self._limit, self._limit)
            targets = np.rint(permille).astype(np.int64).tolist()
        else:
            targets = u.counts_from_q(command.value).tolist()
        self._targets = targets
        cw, pack = self._controlword, self._rpdo.pack_into
        for msg, target in zip(self._rx, targets):
            pack(msg.data, 0, cw, target)
            self._send(msg)
