"""ROS 2 messages of mbctl's logs, CDR-encoded a block of rows at a time.

The messages of a log keep one layout from row to row: the same joint and frame names,
arrays of the same lengths; only the numbers change. CDR places every number at an
offset that depends on the layout alone, so :class:`FixedLayout` has rosbags serialize
one message whose numbers are sentinels, finds the sentinels' byte offsets, and then
writes a whole block's numbers there with numpy: the bytes are those rosbags would
write for each row (the tests decode them with an independent decoder), at about a
hundredth of the cost. Messages of variable length (the diagnostics' number strings)
go through rosbags row by row (:meth:`Messages.diagnostics`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from mbctl.rosbag import typestore

__all__ = ["FixedLayout", "Messages"]

# sentinel stamp: 1012563473 s, 708529245 ns; numbers whose bytes appear nowhere else in a message
_SENTINEL_SEC, _SENTINEL_NSEC = 0x3C5A7E11, 0x2A3B4C5D


def _find_all(raw: bytes, pattern: bytes) -> list[int]:
    found, at = [], raw.find(pattern)
    while at >= 0:
        found.append(at)
        at = raw.find(pattern, at + 1)
    return found


class FixedLayout:
    """Encode messages of one layout: ``serialize(numbers, sec, nanosec)`` gives the CDR bytes of
    the message with these ``count`` float64 numbers and every header stamp at (sec, nanosec).

    Raises:
        ValueError: If a sentinel is not found exactly where expected (a layout that varies with
            the numbers: not for this class).
    """

    def __init__(self, serialize: Callable[[np.ndarray, int, int], bytes], count: int):
        sentinels = 1.0 + np.pi * 1e-7 + np.arange(count) * 2.0**-20  # distinct, with irregular low bits
        self.template = np.frombuffer(serialize(sentinels, _SENTINEL_SEC, _SENTINEL_NSEC), dtype=np.uint8)
        raw = self.template.tobytes()
        names, formats, offsets = [], [], []
        for k, value in enumerate(sentinels):
            at = _find_all(raw, np.float64(value).tobytes())
            if len(at) != 1:
                raise ValueError(f"number {k} found {len(at)} times in the message")
            names.append(f"x{k}"), formats.append("<f8"), offsets.append(at[0])
        for field, value, fmt in (("sec", _SENTINEL_SEC, "<i4"), ("nsec", _SENTINEL_NSEC, "<u4")):
            for j, at in enumerate(_find_all(raw, np.array(value, dtype=fmt).tobytes())):
                names.append(f"{field}{j}"), formats.append(fmt), offsets.append(at)
        spans = sorted((at, at + int(fmt[-1])) for at, fmt in zip(offsets, formats))
        stamps = sum(n.startswith("sec") for n in names)
        if stamps != sum(n.startswith("nsec") for n in names) or any(a[1] > b[0] for a, b in zip(spans, spans[1:])):
            raise ValueError("the stamp sentinels are ambiguous in the message")
        self.count = count
        self.record = np.dtype({"names": names, "formats": formats, "offsets": offsets, "itemsize": len(raw)})

    def encode(self, numbers: np.ndarray, stamps_ns: np.ndarray) -> np.ndarray:
        """The messages of ``numbers`` (rows, count) stamped ``stamps_ns`` (rows,) (ns): (rows, bytes) uint8."""
        rows = len(stamps_ns)
        buffer = np.tile(self.template, rows)
        record = buffer.view(self.record)
        for k in range(self.count):
            record[f"x{k}"] = numbers[:, k]
        sec, nsec = np.divmod(np.asarray(stamps_ns, dtype=np.int64), 1_000_000_000)
        for name in self.record.names:
            if name.startswith("sec"):
                record[name] = sec
            elif name.startswith("nsec"):
                record[name] = nsec
        return buffer.reshape(rows, -1)


class Messages:
    """The ROS 2 messages of a log: JointState, TFMessage and DiagnosticArray (rosbags' definitions)."""

    def __init__(self) -> None:
        self.store = typestore()
        t = self.store.types
        self._t = t
        self.Header, self.Time = t["std_msgs/msg/Header"], t["builtin_interfaces/msg/Time"]

    def schema(self, msgtype: str) -> bytes:
        """The ``ros2msg`` definition of ``msgtype`` (what ``ros2 bag record`` stores as an MCAP schema)."""
        return self.store.generate_msgdef(msgtype, ros_version=2)[0].encode()

    def _serialize(self, msg: object, msgtype: str) -> bytes:
        return bytes(self.store.serialize_cdr(msg, msgtype))

    def _header(self, sec: int, nsec: int, frame: str = "") -> object:
        return self.Header(stamp=self.Time(sec=sec, nanosec=nsec), frame_id=frame)

    def joint_states(self, names: Sequence[str], effort: bool = True) -> FixedLayout:
        """JointState of ``names``: numbers = positions, velocities, then efforts (if ``effort``), SI units."""
        n, JointState = len(names), self._t["sensor_msgs/msg/JointState"]

        def serialize(x: np.ndarray, sec: int, nsec: int) -> bytes:
            msg = JointState(header=self._header(sec, nsec), name=list(names), position=x[:n], velocity=x[n : 2 * n], effort=x[2 * n :])
            return self._serialize(msg, "sensor_msgs/msg/JointState")

        return FixedLayout(serialize, (3 if effort else 2) * n)

    def transforms(self, frames: Sequence[tuple[str, str]]) -> FixedLayout:
        """TFMessage of (parent, child) ``frames``: numbers = per frame x, y, z (m) and the quaternion x, y, z, w."""
        t = self._t
        Stamped, Transform, Vector3, Quaternion = (t[f"geometry_msgs/msg/{n}"] for n in ("TransformStamped", "Transform", "Vector3", "Quaternion"))

        def serialize(x: np.ndarray, sec: int, nsec: int) -> bytes:
            p = x.reshape(-1, 7).tolist()
            msg = t["tf2_msgs/msg/TFMessage"](
                transforms=[
                    Stamped(header=self._header(sec, nsec, parent), child_frame_id=child,
                            transform=Transform(translation=Vector3(x=v[0], y=v[1], z=v[2]), rotation=Quaternion(x=v[3], y=v[4], z=v[5], w=v[6])))
                    for (parent, child), v in zip(frames, p)
                ]
            )  # fmt: skip
            return self._serialize(msg, "tf2_msgs/msg/TFMessage")

        return FixedLayout(serialize, 7 * len(frames))

    def diagnostics(self, name: str, hardware_id: str, keys: Sequence[str]) -> Callable[[int, Sequence[float], bool], bytes]:
        """``encode(ns, values, ok)``: a DiagnosticArray of one status ``name`` with ``keys`` = ``values``
        (as Python's shortest round-trip text), level OK, or ERROR with ``error`` as message."""
        t = self._t
        values = [t["diagnostic_msgs/msg/KeyValue"](key=k, value="") for k in keys]
        status = t["diagnostic_msgs/msg/DiagnosticStatus"](level=0, name=name, message="", hardware_id=hardware_id, values=values)
        msg = t["diagnostic_msgs/msg/DiagnosticArray"](header=self._header(0, 0), status=[status])

        def encode(ns: int, numbers: Sequence[float], ok: bool, error: str = "read failed") -> bytes:
            msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(ns, 1_000_000_000)
            status.level, status.message = (0, "") if ok else (2, error)
            for kv, v in zip(values, numbers):
                kv.value = repr(float(v))
            return self._serialize(msg, "diagnostic_msgs/msg/DiagnosticArray")

        return encode
