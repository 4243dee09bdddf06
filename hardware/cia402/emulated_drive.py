"""The emulated CiA 402 drives' state and settings: one drive's NMT and 402 state, set-points and
PDO layouts; the fault injection, the CSP loop's gains and the emulator's counts
(:class:`~mbctl.hardware.cia402.emulator.Cia402Emulator`)."""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import canopen

from mbctl.hardware.cia402.objects import State

__all__ = ["Cia402Faults", "CspGains", "Cia402Stats", "EmulatedDrive"]


@dataclass
class Cia402Faults:
    """Fault injection (probabilities per TPDO, seeded), on the drives ``nodes`` (None: all).

    Attributes:
        drop_tpdo: Probability that a TPDO is not sent.
        delay_tpdo: Probability that a TPDO is held back until the next SYNC.
        corrupt_tpdo: Probability that a TPDO is sent one byte short.
        drop_syncs: The TPDOs of the next this many SYNCs are not sent (counted down).
        delay_syncs: The TPDOs of the next this many SYNCs are held back until the SYNC after (counted down).
        stop_heartbeat: No more heartbeats.
        refuse_transitions: Controlword commands leave the state as it is.
        nodes: Node IDs the faults apply to.
        seed: Random seed.
    """

    drop_tpdo: float = 0.0
    delay_tpdo: float = 0.0
    corrupt_tpdo: float = 0.0
    drop_syncs: int = 0
    delay_syncs: int = 0
    stop_heartbeat: bool = False
    refuse_transitions: bool = False
    nodes: tuple[int, ...] | None = None
    seed: int = 0


@dataclass(frozen=True)
class CspGains:
    """The emulated drives' position loop in CSP, motor side: N·m/rad and N·m·s/rad."""

    kp_Nm_per_rad: float = 0.5
    kd_Nm_s_per_rad: float = 0.005


@dataclass
class Cia402Stats:
    """What the emulator sent and dropped; ``reply_lag_max_s``: the latest a TPDO went out after its
    due time (SYNC + reply delay); ``unsent``: TPDOs not sent because the next SYNC came first (a
    stalled serving thread)."""

    syncs: int = 0
    tpdos: int = 0
    dropped: int = 0
    delayed: int = 0
    corrupted: int = 0
    heartbeats: int = 0
    emcys: int = 0
    unsent: int = 0
    reply_lag_max_s: float = 0.0


@dataclass
class EmulatedDrive:
    """One emulated drive: NMT and 402 state, set-points and PDO layouts."""

    node_id: int
    node: canopen.LocalNode
    nmt: int = 0x7F
    state: State = State.SWITCH_ON_DISABLED
    controlword: int = 0
    mode: int = 0
    target_torque: int = 0
    target_position: int = 0
    max_torque: int = 1000
    error_code: int = 0
    heartbeat_ms: int = 0
    torque_permille: float = 0.0
    rpdo: dict[int, tuple[struct.Struct, tuple[int, ...]]] = field(default_factory=dict)
    tpdo: list[tuple[int, struct.Struct, tuple[int, ...]]] = field(default_factory=list)
    pending: bytes | None = None
    next_heartbeat: float = 0.0
