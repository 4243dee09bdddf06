"""ROS 2 bags as joint logs: ``sensor_msgs/msg/JointState`` messages turned into a table of t, q, dq, tau.

A bag is a ``ros2 bag record`` directory (``metadata.yaml`` and its MCAP or SQLite 3 files)
or a single ``.mcap`` / ``.db3`` file; :mod:`rosbags` reads both without a ROS installation.

What :func:`read_joint_states` does with the messages of the chosen topic:

- **topic**: the one given, else ``/joint_states`` if the bag has it, else the bag's only
  JointState topic; anything else is an error that lists the JointState topics;
- **joints** are matched by name, in the order asked for (the message order is the
  publisher's); joints the robot does not have are ignored (and named in the notes), a
  joint the robot needs and no message carries is an error naming it;
- **time** is the header stamp (``stamps="header"``, the time the driver measured) or the
  bag's receive time (``stamps="receive"``), in s since the first message used; messages
  are sorted by it;
- **fields**: ``position`` (rad, m), ``velocity`` (rad/s, m/s) and ``effort`` (N·m, N),
  SI as in mbctl; ``velocity`` or ``effort`` count only when every message used fills
  them (a position-only topic gives ``dq = None``, and the log's velocity is then the
  derivative of q, as for a CSV log without ``dq`` columns);
- **several publishers** on one topic (an arm driver and a gripper driver, each with its
  own joint subset): the messages are grouped by their joint names. If one group holds
  every joint asked for, it alone is used. Otherwise the group with most of the joints
  gives the time base and each other joint's samples are interpolated linearly onto its
  stamps (exact where the stamps coincide), over the span all groups cover.

Gaps in time are not filled here: the conditioning (:mod:`mbctl.identification.arm_log`)
resamples every log and reports gaps. A bag that cannot be read whole (a recording cut
short: an MCAP file ending inside a chunk, a damaged SQLite 3 file) is refused.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from mbctl.errors import DataError

__all__ = ["BAG_SUFFIXES", "JOINT_STATE", "BagOptions", "JointStates", "is_bag", "read_joint_states", "typestore"]

BAG_SUFFIXES = (".mcap", ".db3")
JOINT_STATE = "sensor_msgs/msg/JointState"
DEFAULT_TOPIC = "/joint_states"
# rows of one block of a growing series (a bag's message count is known only per topic)
_BLOCK_ROWS = 4096


@dataclass(frozen=True)
class BagOptions:
    """How a bag's JointState messages are read.

    Attributes:
        topic: The topic (default: ``/joint_states`` or the bag's only JointState topic).
        stamps: ``"header"`` (the message's header stamp) or ``"receive"`` (the bag's time).
    """

    topic: str | None = None
    stamps: Literal["header", "receive"] = "header"

    def __post_init__(self) -> None:
        if self.stamps not in ("header", "receive"):
            raise DataError(f"must be header or receive, got {self.stamps!r}", field="stamps")


@dataclass(frozen=True, eq=False)
class JointStates:
    """The samples of one JointState topic, columns in ``joint_names`` order (SI units).

    Attributes:
        source: The bag.
        topic: The topic read.
        joint_names: Joints of the columns.
        t: Times (s since the first sample), shape (N,), increasing (ties possible).
        q: Positions (rad, m), shape (N, n).
        dq: Velocities (rad/s, m/s), or None where the messages carry none.
        tau: Efforts (N·m, N), or None where the messages carry none.
        start_ns: The first sample's stamp (ns, in the bag's clock).
        notes: What was read, in words.
    """

    source: Path
    topic: str
    joint_names: tuple[str, ...]
    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray | None
    tau: np.ndarray | None
    start_ns: int
    notes: tuple[str, ...]


def is_bag(path: str | Path) -> bool:
    """Whether ``path`` names a bag: a directory, or a ``.mcap`` / ``.db3`` file."""
    path = Path(path)
    return path.suffix.lower() in BAG_SUFFIXES or path.is_dir()


def typestore():  # noqa: ANN201  (rosbags.typesys.store.Typestore)
    """The ROS 2 message definitions (the latest LTS's: JointState, TFMessage and
    DiagnosticArray are the same in every ROS 2 distribution)."""
    from rosbags.typesys import Stores, get_typestore

    return get_typestore(Stores.LATEST)


class _Series:
    """The messages of one set of joint names: stamps (ns) and (rows, 3, joints) values, grown by blocks."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.blocks: list[np.ndarray] = []
        self.stamps: list[np.ndarray] = []
        self.rows = 0
        self.has_velocity = True
        self.has_effort = True

    def append(self, stamp_ns: int, position: np.ndarray, velocity: np.ndarray, effort: np.ndarray) -> None:
        k = self.rows % _BLOCK_ROWS
        if k == 0:
            self.blocks.append(np.full((_BLOCK_ROWS, 3, len(self.names)), np.nan))
            self.stamps.append(np.zeros(_BLOCK_ROWS, dtype=np.int64))
        block = self.blocks[-1]
        block[k, 0] = position
        self.has_velocity &= len(velocity) == len(self.names)
        self.has_effort &= len(effort) == len(self.names)
        if self.has_velocity:
            block[k, 1] = velocity
        if self.has_effort:
            block[k, 2] = effort
        self.stamps[-1][k] = stamp_ns
        self.rows += 1

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """Stamps (ns) and values, sorted by stamp (stable: equal stamps keep the bag's order)."""
        stamps = np.concatenate(self.stamps)[: self.rows]
        values = np.concatenate(self.blocks)[: self.rows]
        self.blocks, self.stamps = [], []
        order = np.argsort(stamps, kind="stable")
        return stamps[order], values[order]


def _pick_topic(topics: dict[str, str], asked: str | None, path: Path) -> str:
    states = sorted(t for t, kind in topics.items() if kind == JOINT_STATE)
    listed = ", ".join(states) or "none"
    if asked is not None:
        if topics.get(asked) != JOINT_STATE:
            what = f"is {topics[asked]}" if asked in topics else "is not in the bag"
            raise DataError(f"{asked} {what}; JointState topics: {listed}", file=path, field="--topic")
        return asked
    if not states:
        raise DataError(f"no {JOINT_STATE} topic (topics: {', '.join(sorted(topics)) or 'none'})", file=path, field="--topic")
    if len(states) > 1 and DEFAULT_TOPIC not in states:
        raise DataError(f"{len(states)} JointState topics ({listed}): choose one with --topic", file=path, field="--topic")
    return DEFAULT_TOPIC if DEFAULT_TOPIC in states else states[0]


def _read_series(path: Path, options: BagOptions) -> tuple[str, dict[tuple[str, ...], _Series]]:
    """The chosen topic and its messages grouped by joint names."""
    from rosbags.rosbag2 import Reader
    from rosbags.rosbag2.errors import ReaderError

    store = typestore()
    try:
        with Reader(path) as reader:
            topic = _pick_topic({c.topic: c.msgtype for c in reader.connections}, options.topic, path)
            groups: dict[tuple[str, ...], _Series] = {}
            for count, (connection, received_ns, raw) in enumerate(reader.messages([c for c in reader.connections if c.topic == topic])):
                try:
                    msg = store.deserialize_cdr(raw, connection.msgtype)
                except Exception as exc:  # noqa: BLE001  (a damaged message: whatever the decoder raises)
                    raise DataError(f"message {count + 1} cannot be decoded ({exc})", file=path, field=topic) from None
                names = tuple(msg.name)
                if len(msg.position) != len(names):
                    raise DataError(f"message {count + 1} has {len(names)} names and {len(msg.position)} positions", file=path, field=topic)
                stamp = received_ns if options.stamps == "receive" else msg.header.stamp.sec * 1_000_000_000 + msg.header.stamp.nanosec
                series = groups.get(names)
                if series is None:
                    series = groups[names] = _Series(names)
                series.append(stamp, msg.position, msg.velocity, msg.effort)
    except FileNotFoundError as exc:
        hint = " (a recording still open or killed; `ros2 bag reindex` rebuilds it)" if "metadata" in str(exc) else ""
        raise DataError(f"cannot read the bag: {exc}{hint}", file=path) from None
    except (ReaderError, OSError, ValueError, KeyError) as exc:
        hint = " (a recording cut short? `mcap recover` keeps its complete chunks)" if "magic" in str(exc).lower() else ""
        raise DataError(f"cannot read the bag: {exc}{hint}", file=path) from None
    if not groups:
        raise DataError("the topic holds no messages", file=path, field=topic)
    return topic, groups


def read_joint_states(path: str | Path, joint_names: Sequence[str] | None = None, options: BagOptions = BagOptions()) -> JointStates:
    """Read the JointState messages of a bag as a table (module docstring).

    Args:
        path: Bag directory, ``.mcap`` or ``.db3`` file.
        joint_names: Joints wanted, in column order (default: those of the most frequent
            message, in its order).
        options: Topic and stamps.

    Raises:
        DataError: One line naming the bag and the topic, for an unreadable or truncated
            bag, a missing or ambiguous topic, missing joints, or stamps that never advance.
    """
    path = Path(path)
    topic, groups = _read_series(path, options)
    biggest = max(groups.values(), key=lambda s: s.rows)
    wanted = tuple(joint_names) if joint_names is not None else biggest.names
    found = {n for s in groups.values() for n in s.names}
    missing = [j for j in wanted if j not in found]
    if missing:
        raise DataError(f"no message carries joint{'s' if len(missing) > 1 else ''} {', '.join(missing)} (joints on the topic: {', '.join(sorted(found))})", file=path, field=topic)
    extra = sorted(found - set(wanted))
    # the time base: the group holding most of the wanted joints (then the most messages)
    base = max(groups.values(), key=lambda s: (len(set(s.names) & set(wanted)), s.rows))
    others = [s for s in groups.values() if s is not base and set(s.names) & (set(wanted) - set(base.names))]
    stamps, values = base.arrays()
    column = {n: (base, i) for i, n in enumerate(base.names)}
    used = {id(base): (stamps, values)}
    for series in others:
        used[id(series)] = series.arrays()
        column.update({n: (series, i) for i, n in enumerate(series.names) if n not in column})
    first = max(s[0] for s, _ in used.values())
    last = min(s[-1] for s, _ in used.values())
    keep = (stamps >= first) & (stamps <= last)
    if keep.sum() < 2 or last <= first:
        raise DataError(
            f"{options.stamps} stamps do not advance" + (" (header stamps all equal: try --stamps receive)" if options.stamps == "header" else ""),
            file=path, field=topic,
        )
    stamps = stamps[keep]
    t = (stamps - stamps[0]) * 1e-9
    columns = np.empty((len(t), 3, len(wanted)))
    for k, name in enumerate(wanted):
        series, i = column[name]
        s, v = used[id(series)]
        columns[:, :, k] = v[keep, :, i] if series is base else np.column_stack([np.interp(t, (s - stamps[0]) * 1e-9, v[:, f, i]) for f in range(3)])
    sources = {id(column[n][0]): column[n][0] for n in wanted}.values()
    has_velocity = all(s.has_velocity for s in sources)
    has_effort = all(s.has_effort for s in sources)
    notes = [
        f"{path.name}: {topic}, {len(t)} messages, {options.stamps} stamps from {stamps[0] * 1e-9:.9g} s; joints matched by name"
        + (f"; ignored: {', '.join(extra)}" if extra else "")
        + ("" if has_velocity else "; no velocities")
        + ("" if has_effort else "; no efforts"),
    ]
    if others:
        moved = [n for n in wanted if column[n][0] is not base]
        notes.append(
            f"{topic} has {len(groups)} publishers (joint sets); {', '.join(moved)} interpolated linearly onto the stamps of "
            f"the one with {', '.join(n for n in wanted if column[n][0] is base)}, over the span all cover"
        )
    elif len(groups) > 1:
        skipped = sum(s.rows for s in groups.values() if s is not base)
        notes.append(f"{topic}: {skipped} messages with other joint sets ignored (one publisher has every joint)")
    return JointStates(
        source=path,
        topic=topic,
        joint_names=wanted,
        t=t,
        q=columns[:, 0],
        dq=columns[:, 1] if has_velocity else None,
        tau=columns[:, 2] if has_effort else None,
        start_ns=int(stamps[0]),
        notes=tuple(notes),
    )
