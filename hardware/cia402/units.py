"""Drive units of the CiA 402 drives: a robot's CANopen ``[drives]`` spec checked against its actuated joints.

The TOML is described in :mod:`mbctl.config.canopen`. :class:`Cia402Units` converts
between joint SI units and drive units; it is used by the host driver and (inverted)
by the emulator, nowhere else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.config.canopen import CanopenSpec
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError
from mbctl.hardware.cia402.objects import Mode
from mbctl.hardware.drive_config import joint_drives

__all__ = ["Cia402Units", "CanopenConfig", "canopen_config", "bus_load", "bus_rate", "COMMON_RATES"]

COMMON_RATES = (1000.0, 500.0, 400.0, 250.0, 200.0, 125.0, 100.0, 50.0, 20.0, 10.0)
"""Control rates (Hz) drives commonly take as their SYNC period: 1, 2, 2.5, 4, 5, 8, 10, 20, 50, 100 ms."""


@dataclass(frozen=True)
class Cia402Units:
    """Per-joint drive parameters, arrays in the order of the actuated joints.

    Joint position ``q = direction*(counts - zero_count)*2*pi/(counts_per_rev*gear_ratio)`` (rad),
    velocity ``dq = direction*(increments/s)*2*pi/(counts_per_rev*gear_ratio)`` (rad/s),
    effort ``tau = direction*permille/1000*rated_torque_Nm*gear_ratio`` (N·m at the joint;
    gear losses are not modelled).
    """

    node_ids: np.ndarray
    rated_torque_Nm: np.ndarray
    gear_ratio: np.ndarray
    counts_per_rev: np.ndarray
    zero_count: np.ndarray
    direction: np.ndarray
    max_torque_permille: np.ndarray

    @property
    def rad_per_count(self) -> np.ndarray:
        """Joint radians per position increment."""
        return 2 * math.pi / (self.counts_per_rev * self.gear_ratio)

    @property
    def nm_per_permille(self) -> np.ndarray:
        """Joint N·m per per mille of rated torque."""
        return self.rated_torque_Nm * self.gear_ratio * 1e-3

    def q_from_counts(self, counts: np.ndarray) -> np.ndarray:
        return self.direction * (counts - self.zero_count) * self.rad_per_count

    def counts_from_q(self, q: np.ndarray) -> np.ndarray:
        return np.rint(self.zero_count + self.direction * q / self.rad_per_count).astype(np.int64)

    def dq_from_counts(self, counts_per_s: np.ndarray) -> np.ndarray:
        return self.direction * counts_per_s * self.rad_per_count

    def counts_from_dq(self, dq: np.ndarray) -> np.ndarray:
        return np.rint(self.direction * dq / self.rad_per_count).astype(np.int64)

    def effort_from_permille(self, permille: np.ndarray) -> np.ndarray:
        return self.direction * permille * self.nm_per_permille

    def permille_from_effort(self, tau: np.ndarray) -> np.ndarray:
        """Per mille of rated torque for a joint effort, unrounded (the caller decides on saturation)."""
        return self.direction * tau / self.nm_per_permille


@dataclass(frozen=True)
class CanopenConfig:
    """Bus settings and the drives of the actuated joints (times in s)."""

    interface: str
    channel: str | None
    bitrate: int
    mode: Mode
    heartbeat_s: float
    heartbeat_timeout_s: float
    pdo_timeout_s: float | None
    eds: Path | None
    units: Cia402Units
    file: Path | None = None
    tpdo_missing_max: int = 5
    sample_timeout_s: float | None = None


def canopen_config(robot: RobotModel, spec: CanopenSpec | None = None) -> CanopenConfig:
    """The CANopen drives of the robot's actuated joints, from ``spec`` (default: the robot's ``[drives]``).

    Raises:
        ConfigError: Naming the file and field, for a missing or Dynamixel table, an unknown
            joint, or an actuated joint without a drive.
    """
    if spec is None:
        spec = robot.spec.drives if robot.spec is not None else None
    if spec is None:
        raise ConfigError("missing required table (the CANopen bus needs its drives)", file=robot.source, field="drives")
    if not isinstance(spec, CanopenSpec):
        raise ConfigError('this is a Dynamixel bus: set bus = "canopen" for CiA 402 drives', file=spec.file, field="drives.bus")
    drives = joint_drives(robot, spec.drives, spec.file, "a drive")
    units = Cia402Units(
        node_ids=np.array([d.node_id for d in drives], dtype=int),
        max_torque_permille=np.array([d.max_torque_permille for d in drives], dtype=int),
        **{key: np.array([getattr(d, key) for d in drives], dtype=float) for key in ("rated_torque_Nm", "gear_ratio", "counts_per_rev", "zero_count", "direction")},
    )
    return CanopenConfig(
        interface=spec.interface,
        channel=spec.channel,
        bitrate=spec.bitrate,
        mode=Mode.CST if spec.mode == "cst" else Mode.CSP,
        heartbeat_s=spec.heartbeat_s,
        heartbeat_timeout_s=spec.heartbeat_timeout_s,
        pdo_timeout_s=spec.pdo_timeout_s,
        eds=spec.eds,
        units=units,
        file=spec.file,
        tpdo_missing_max=spec.tpdo_missing_max,
        sample_timeout_s=spec.sample_timeout_s,
    )


def _frame_bits(payload_bytes: int) -> int:
    """Bits of a classic CAN frame with an 11-bit identifier, worst-case bit stuffing included:
    47 framing bits + 8 per data byte, of which the 34 + 8n stuffed ones grow by up to a quarter."""
    return 47 + 8 * payload_bytes + (34 + 8 * payload_bytes - 1) // 4


def bus_load(n_drives: int, mode: Mode, bitrate: int, period_s: float) -> float:
    """Fraction of the bus time one control cycle takes (SYNC, one RPDO and two TPDOs per drive)."""
    rpdo = 4 if mode is Mode.CST else 6
    bits = _frame_bits(0) + n_drives * (_frame_bits(rpdo) + _frame_bits(8) + _frame_bits(4))
    return bits / bitrate / period_s


def bus_rate(n_drives: int, mode: Mode, bitrate: int, share: float = 1.0) -> float:
    """The highest of :data:`COMMON_RATES` (Hz) whose cycle takes at most ``share`` of the bus time
    (:func:`bus_load`; the slowest where none does): 400 Hz for six drives in CST at 1 Mbit/s (2005 bits
    a cycle; 500 Hz would need 100.25 %), 250 Hz with a fifth of the bus left for the rest (heartbeats,
    emergencies, SDOs)."""
    return next((rate for rate in COMMON_RATES if bus_load(n_drives, mode, bitrate, 1.0 / rate) <= share), COMMON_RATES[-1])
