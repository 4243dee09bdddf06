"""``[drives]`` with ``bus = "canopen"``: CiA 402 joint drives on a CAN bus (SI units inside).

```toml
[drives]
bus = "canopen"
interface = "socketcan"      # python-can interface: socketcan, pcan, kvaser, virtual, udp_multicast
channel = "can0"             # the interface's channel (the CLI's --interface/--channel override both)
bitrate = 1000000            # bit/s: for the bus-load estimate, and given to interfaces that set it
mode = "cst"                 # "cst": cyclic synchronous torque; "csp": cyclic synchronous position
heartbeat_ms = 10.0          # heartbeat producer time written to every drive (0x1017)
heartbeat_timeout_ms = 30.0  # no heartbeat from a drive for this long stops the loop
pdo_timeout_ms = 0.8         # a drive's TPDOs must arrive this long after the SYNC (paced runs)
tpdo_missing_max = 5         # this many cycles in a row without a drive's TPDOs stop the run (fewer: the last sample is reused)
sample_timeout_ms = 20.0     # no fresh sample for this long stops the run (default: ten periods, at least 20 ms)
eds = "drive.eds"            # optional: the drives' EDS file, relative to this TOML (default: built-in CiA 402 objects)

[drives.joints.shoulder_pan_joint]
node_id = 1                  # CANopen node ID, 1..127
rated_torque_mNm = 800.0     # motor rated torque (0x6076), mN·m: the unit of target/actual torque (per mille)
gear_ratio = 101.0           # motor turns per joint turn
counts_per_rev = 524288      # position increments per motor turn (0x6064, 0x607A; velocity in increments/s)
zero_count = 0               # position actual (increments) at joint position 0
direction = 1                # +1 or -1: sign between motor and joint motion
max_torque_permille = 3000   # 0x6072: the largest torque the drive may apply, per mille of rated
```

The conversions these become are in :mod:`mbctl.hardware.cia402.units`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mbctl.tomlfields import Table

__all__ = ["CanopenDriveSpec", "CanopenSpec", "INTERFACES", "parse_canopen"]

BUS_KEYS = ("bus", "interface", "channel", "bitrate", "mode", "heartbeat_ms", "heartbeat_timeout_ms", "pdo_timeout_ms", "tpdo_missing_max", "sample_timeout_ms", "eds", "joints")
JOINT_KEYS = ("node_id", "rated_torque_mNm", "gear_ratio", "counts_per_rev", "zero_count", "direction", "max_torque_permille")
INTERFACES = ("socketcan", "pcan", "kvaser", "virtual", "udp_multicast", "vector", "ixxat", "slcan", "gs_usb")
MODES = ("cst", "csp")


@dataclass(frozen=True)
class CanopenDriveSpec:
    """One joint's CiA 402 drive: ``node_id``, ``rated_torque_Nm`` (motor side, N·m), ``gear_ratio``
    (motor turns per joint turn), ``counts_per_rev`` (increments per motor turn), ``zero_count``
    (increments at q = 0), ``direction`` (±1), ``max_torque_permille`` (of rated torque)."""

    node_id: int
    rated_torque_Nm: float
    gear_ratio: float = 1.0
    counts_per_rev: float = 4096.0
    zero_count: float = 0.0
    direction: float = 1.0
    max_torque_permille: int = 1000


@dataclass(frozen=True)
class CanopenSpec:
    """The ``[drives]`` table of a CANopen bus, parsed (times in s, bit rate in bit/s)."""

    drives: dict[str, CanopenDriveSpec] = field(default_factory=dict)
    interface: str = "socketcan"
    channel: str | None = None
    bitrate: int = 1000000
    mode: str = "cst"
    heartbeat_s: float = 0.01
    heartbeat_timeout_s: float = 0.03
    pdo_timeout_s: float | None = None
    tpdo_missing_max: int = 5
    sample_timeout_s: float | None = None
    eds: Path | None = None
    file: Path | None = None


def _drive(jt: Table) -> CanopenDriveSpec:
    jt.only(JOINT_KEYS)
    node_id = jt.number("node_id")
    if node_id != int(node_id) or not 1 <= node_id <= 127:
        raise jt.error("node_id", "must be an integer CANopen node ID in 1..127")
    direction = jt.number("direction", 1.0)
    if direction not in (1.0, -1.0):
        raise jt.error("direction", "must be 1 or -1")
    positive = {key: jt.number(key, default) for key, default in (("rated_torque_mNm", None), ("gear_ratio", 1.0), ("counts_per_rev", 4096.0))}
    for key, value in positive.items():
        if value is None:
            raise jt.error(key, "missing required field")
        if not value > 0:
            raise jt.error(key, "must be > 0")
    limit = jt.number("max_torque_permille", 1000.0)
    if limit != int(limit) or not 1 <= limit <= 32767:
        raise jt.error("max_torque_permille", "must be an integer in 1..32767 (per mille of rated torque)")
    return CanopenDriveSpec(
        node_id=int(node_id),
        rated_torque_Nm=positive["rated_torque_mNm"] * 1e-3,
        gear_ratio=positive["gear_ratio"],
        counts_per_rev=positive["counts_per_rev"],
        zero_count=jt.number("zero_count", 0.0),
        direction=direction,
        max_torque_permille=int(limit),
    )


def parse_canopen(t: Table) -> CanopenSpec:
    """Parse a ``[drives]`` table with ``bus = "canopen"``.

    Raises:
        ConfigError: Naming the file and field of a bad value or a repeated node ID.
    """
    t.only(BUS_KEYS)
    bitrate = t.number("bitrate", 1000000.0)
    if bitrate not in (10e3, 20e3, 50e3, 125e3, 250e3, 500e3, 800e3, 1e6):
        raise t.error("bitrate", "must be a CiA 301 bit rate: 10000, 20000, 50000, 125000, 250000, 500000, 800000 or 1000000 bit/s")
    times = {}
    for key, default in (("heartbeat_ms", 10.0), ("heartbeat_timeout_ms", 30.0)):
        times[key] = t.number(key, default)
        if not 0 < times[key] <= 65535:
            raise t.error(key, "must be in (0, 65535] ms")
    if times["heartbeat_timeout_ms"] <= times["heartbeat_ms"]:
        raise t.error("heartbeat_timeout_ms", f"must exceed heartbeat_ms ({times['heartbeat_ms']:g} ms)")
    pdo_timeout = t.number("pdo_timeout_ms", None)
    if pdo_timeout is not None and not 0 < pdo_timeout <= 1000:
        raise t.error("pdo_timeout_ms", "must be in (0, 1000] ms")
    missing_max = t.number("tpdo_missing_max", 5.0)
    if missing_max != int(missing_max) or not 1 <= missing_max <= 1000:
        raise t.error("tpdo_missing_max", "must be an integer in 1..1000 (cycles in a row)")
    sample_timeout = t.number("sample_timeout_ms", None)
    if sample_timeout is not None and not 0 < sample_timeout <= 60e3:
        raise t.error("sample_timeout_ms", "must be in (0, 60000] ms")
    eds = t.string("eds", None)
    eds_path = None
    if eds is not None:
        eds_path = (t.file.parent / eds) if t.file is not None else Path(eds)
        if not eds_path.is_file():
            raise t.error("eds", f"no such file: {eds_path}")
    joints = t.table("joints")
    drives = {name: _drive(jt) for name, jt in joints.tables()}
    ids = [d.node_id for d in drives.values()]
    if len(set(ids)) != len(ids):
        raise joints.error(None, f"node IDs must be distinct, got {ids}")
    return CanopenSpec(
        drives=drives,
        interface=t.string("interface", "socketcan", choices=INTERFACES),
        channel=t.string("channel", None),
        bitrate=int(bitrate),
        mode=t.string("mode", "cst", choices=MODES),
        heartbeat_s=times["heartbeat_ms"] * 1e-3,
        heartbeat_timeout_s=times["heartbeat_timeout_ms"] * 1e-3,
        pdo_timeout_s=None if pdo_timeout is None else pdo_timeout * 1e-3,
        tpdo_missing_max=int(missing_max),
        sample_timeout_s=None if sample_timeout is None else sample_timeout * 1e-3,
        eds=eds_path,
        file=t.file,
    )
