"""Run and simulation logs as MCAP files with ROS 2 messages, for Foxglove and the ROS 2 tools.

:func:`write_mcap` turns a closed run log (``mbctl run --log``, :mod:`mbctl.hardware.runlog`)
or a simulation (``mbctl simulate --out``) into one ``.mcap`` file of CDR-encoded ROS 2
messages (schemas ``ros2msg``, as ``ros2 bag record`` writes them), every message stamped
with its row's time ``t`` (s, the log's clock: header stamp = log time = publish time =
``round(t * 1e9)`` ns):

- ``/joint_states`` (``sensor_msgs/msg/JointState``), one per row: the logged joints'
  measured position (rad, m), velocity (rad/s, m/s) and effort (N·m, N: a run's measured
  ``effort``; a simulation's drive forces ``tau_programmed``);
- ``/joint_commands`` (JointState, runs only): the reference ``q_ref``, ``dq_ref`` and the
  commanded torque ``tau`` as effort;
- ``/diagnostics`` (``diagnostic_msgs/msg/DiagnosticArray``, runs only): status
  ``mbctl loop`` with the cycle's ``period``, ``compute``, the phase times (s) and
  ``read_ok``; level ERROR where the read failed;
- ``/tf`` (``tf2_msgs/msg/TFMessage``), one per row: the pose of every link below a moving
  joint in its parent link (forward kinematics of the robot model), frames named after the
  URDF's links; ``/tf_static`` (once, at the first row's time) the links fixed to their
  parent. With the robot's URDF, Foxglove's 3-D panel draws the arm moving.

The log is read a block of rows at a time and the MCAP written as it goes (chunks of
1 MiB, zstd), so memory stays flat however long the run. Joints a run log does not hold
(unactuated ones) are drawn at 0 in ``/tf`` (stated in the summary's notes).
"""

from __future__ import annotations

import zipfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import DataError
from mbctl.fileio import atomic_output, npz_shapes, read_npz_blocks
from mbctl.rosbag import typestore

__all__ = ["McapSummary", "link_tree", "write_mcap"]

BLOCK_ROWS = 4096
MESSAGE_TYPES = {
    "/joint_states": "sensor_msgs/msg/JointState",
    "/joint_commands": "sensor_msgs/msg/JointState",
    "/diagnostics": "diagnostic_msgs/msg/DiagnosticArray",
    "/tf": "tf2_msgs/msg/TFMessage",
    "/tf_static": "tf2_msgs/msg/TFMessage",
}


@dataclass(frozen=True)
class McapSummary:
    """What :func:`write_mcap` wrote.

    Attributes:
        path: The MCAP file.
        kind: ``"run"`` or ``"simulation"``.
        rows: Rows of the log (messages per per-row topic).
        messages: Messages per topic.
        links: Links in ``/tf`` (moving) and ``/tf_static`` (fixed).
        notes: Anything the reader should know (joints drawn at 0).
    """

    path: Path
    kind: str
    rows: int
    messages: dict[str, int]
    links: tuple[str, ...]
    notes: tuple[str, ...]


def link_tree(robot: RobotModel) -> list[tuple[int, int, bool]]:
    """The URDF's link tree in pinocchio frames: ``(parent frame, child frame, moving)`` for every
    link frame with a parent link, ``moving`` when a joint with a DOF lies between them."""
    import pinocchio as pin

    frames = robot.model.frames
    tree = []
    for child, frame in enumerate(frames):
        if frame.type != pin.FrameType.BODY:
            continue
        moving, parent = False, frame.parentFrame
        while parent != 0 and frames[parent].type != pin.FrameType.BODY:
            moving |= frames[parent].type == pin.FrameType.JOINT
            parent = frames[parent].parentFrame
        if parent != 0 or frames[0].type == pin.FrameType.BODY:
            tree.append((parent, child, moving))
    return tree


class _Encoder:
    """ROS 2 messages for one log, serialized with the rosbags type store."""

    def __init__(self, names: Sequence[str]):
        self.store = typestore()
        self.names = list(names)
        t = self.store.types
        self.JointState, self.Header, self.Time = t["sensor_msgs/msg/JointState"], t["std_msgs/msg/Header"], t["builtin_interfaces/msg/Time"]
        self.TF, self.Stamped = t["tf2_msgs/msg/TFMessage"], t["geometry_msgs/msg/TransformStamped"]
        self.Transform, self.Vector3, self.Quaternion = t["geometry_msgs/msg/Transform"], t["geometry_msgs/msg/Vector3"], t["geometry_msgs/msg/Quaternion"]
        self.Array, self.Status, self.KeyValue = t["diagnostic_msgs/msg/DiagnosticArray"], t["diagnostic_msgs/msg/DiagnosticStatus"], t["diagnostic_msgs/msg/KeyValue"]

    def schema(self, msgtype: str) -> bytes:
        return self.store.generate_msgdef(msgtype, ros_version=2)[0].encode()

    def header(self, ns: int, frame: str = "") -> object:
        return self.Header(stamp=self.Time(sec=ns // 1_000_000_000, nanosec=ns % 1_000_000_000), frame_id=frame)

    def joint_state(self, ns: int, q: np.ndarray, dq: np.ndarray, effort: np.ndarray | None) -> bytes:
        msg = self.JointState(header=self.header(ns), name=self.names, position=q, velocity=dq, effort=np.empty(0) if effort is None else effort)
        return bytes(self.store.serialize_cdr(msg, "sensor_msgs/msg/JointState"))

    def diagnostics(self, ns: int, values: dict[str, float], ok: bool, hardware_id: str) -> bytes:
        pairs = [self.KeyValue(key=k, value=repr(float(v))) for k, v in values.items()]
        status = self.Status(level=0 if ok else 2, name="mbctl loop", message="" if ok else "read failed", hardware_id=hardware_id, values=pairs)
        return bytes(self.store.serialize_cdr(self.Array(header=self.header(ns), status=[status]), "diagnostic_msgs/msg/DiagnosticArray"))

    def transforms(self, ns: int, frames: Sequence[tuple[str, str]], poses: np.ndarray) -> bytes:
        """TFMessage of ``poses`` (k, 7: x, y, z in m, then the quaternion x, y, z, w), parent and child frame names in ``frames``."""
        stamped = [
            self.Stamped(
                header=self.header(ns, parent),
                child_frame_id=child,
                transform=self.Transform(translation=self.Vector3(x=p[0], y=p[1], z=p[2]), rotation=self.Quaternion(x=p[3], y=p[4], z=p[5], w=p[6])),
            )
            for (parent, child), p in zip(frames, poses.tolist())
        ]
        return bytes(self.store.serialize_cdr(self.TF(transforms=stamped), "tf2_msgs/msg/TFMessage"))


class _Kinematics:
    """Link poses in their parent links (x, y, z, qx, qy, qz, qw) at DOF coordinates ``q``."""

    def __init__(self, robot: RobotModel):
        self.robot, self.data = robot, robot.create_data()
        tree = link_tree(robot)
        names = [f.name for f in robot.model.frames]
        self.moving = [(p, c) for p, c, m in tree if m]
        self.fixed = [(p, c) for p, c, m in tree if not m]
        self.moving_names = [(names[p], names[c]) for p, c in self.moving]
        self.fixed_names = [(names[p], names[c]) for p, c in self.fixed]

    def poses(self, q: np.ndarray, pairs: Sequence[tuple[int, int]]) -> np.ndarray:
        import pinocchio as pin

        pin.framesForwardKinematics(self.robot.model, self.data, self.robot.configuration(q))
        frames = self.data.oMf
        out = np.empty((len(pairs), 7))
        for k, (parent, child) in enumerate(pairs):
            out[k] = pin.SE3ToXYZQUAT(frames[parent].actInv(frames[child]))
        return out


@dataclass(frozen=True)
class _Source:
    """A log's joints, phase names (runs) and row blocks (2-D per-joint arrays)."""

    kind: str
    joints: list[str]
    phases: list[str]
    blocks: Iterator[dict[str, np.ndarray]]


def _open_log(path: Path, shapes: dict[str, tuple[int, ...]]) -> _Source:
    """The rows of a run log (effort: measured) or a simulation (effort: the drive forces ``tau_programmed``).

    Raises:
        KeyError: If it is neither.
    """
    with np.load(path, allow_pickle=False) as z:
        if "columns" in shapes:
            columns = [str(c) for c in z["columns"]]
        elif "joint_names" in shapes:
            names = [str(n) for n in z["joint_names"]]
            return _Source("simulation", names, [], _renamed(read_npz_blocks(path, ["t", "q", "dq", "tau_programmed"], BLOCK_ROWS), {"tau_programmed": "effort"}))
        else:
            raise KeyError("neither a run log (columns) nor a simulation (joint_names)")
    keys = [k for k in ("t", "q", "dq", "q_ref", "dq_ref", "tau", "effort", "period", "compute", "read_ok", "phase") if k in shapes]
    group = lambda g: [c.split(".", 1)[1] for c in columns if c.startswith(g + ".")]  # noqa: E731
    return _Source("run", group("q"), group("phase"), _renamed(read_npz_blocks(path, keys, BLOCK_ROWS), {}))


def _renamed(blocks: Iterator[dict[str, np.ndarray]], names: dict[str, str]) -> Iterator[dict[str, np.ndarray]]:
    """``blocks`` with keys renamed and per-joint groups 2-D (a one-joint run log stores them 1-D)."""
    for block in blocks:
        yield {names.get(k, k): v if k in ("t", "period", "compute", "read_ok") else v.reshape(len(v), -1) for k, v in block.items()}


def write_mcap(log: str | Path, out: str | Path, robot: RobotModel | None = None, *, progress: Callable[[int, int], None] | None = None) -> McapSummary:
    """Write the run log or simulation ``log`` (NPZ) as the MCAP file ``out`` (module docstring),
    atomically; without ``robot`` there is no ``/tf``.

    Args:
        progress: Called with the rows written and the rows in all, after every block.

    Raises:
        DataError: If ``log`` is not a run log or simulation of mbctl, or its joints are not
            the robot's.
    """
    from mcap.writer import CompressionType, Writer

    log, out = Path(log), Path(out)
    try:
        shapes = npz_shapes(log)
        source = _open_log(log, shapes)
        rows = shapes["t"][0]
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"not a run log or simulation of mbctl ({exc})", file=log) from None
    kind, joints = source.kind, source.joints
    notes = []
    kinematics = index = None
    if robot is not None:
        unknown = [j for j in joints if j not in robot.joint_names]
        if unknown:
            raise DataError(f"joints {', '.join(unknown)} are not {robot.name}'s", file=log)
        kinematics = _Kinematics(robot)
        index = [robot.joint(j).idx_v for j in joints]
        unlogged = [j for j in robot.joint_names if j not in joints]
        if unlogged:
            notes.append(f"/tf draws {', '.join(unlogged)} at 0 (not in the log)")
    enc = _Encoder(joints)
    topics = ["/joint_states"] + (["/joint_commands", "/diagnostics"] if kind == "run" else []) + (["/tf", "/tf_static"] if kinematics else [])
    counts = dict.fromkeys(topics, 0)
    name = robot.name if robot is not None else log.stem
    try:
        with atomic_output(out) as tmp, open(tmp, "wb") as stream:
            writer = Writer(stream, compression=CompressionType.ZSTD)
            writer.start(profile="ros2", library="mbctl")
            channel = {}
            for topic in topics:
                schema = writer.register_schema(name=MESSAGE_TYPES[topic], encoding="ros2msg", data=enc.schema(MESSAGE_TYPES[topic]))
                channel[topic] = writer.register_channel(topic=topic, message_encoding="cdr", schema_id=schema)

            def put(topic: str, ns: int, data: bytes) -> None:
                writer.add_message(channel[topic], log_time=ns, data=data, publish_time=ns, sequence=counts[topic])
                counts[topic] += 1

            done = 0
            q_full = np.zeros(robot.nv) if robot is not None else None
            for block in source.blocks:
                stamps = np.rint(np.asarray(block["t"]) * 1e9).astype(np.int64)
                for i, ns in enumerate(stamps.tolist()):
                    put("/joint_states", ns, enc.joint_state(ns, block["q"][i], block["dq"][i], block["effort"][i] if "effort" in block else None))
                    if kind == "run":
                        put("/joint_commands", ns, enc.joint_state(ns, block["q_ref"][i], block["dq_ref"][i], block["tau"][i]))
                        values = {"period": block["period"][i], "compute": block["compute"][i]}
                        if "phase" in block:
                            values.update((f"phase.{p}", v) for p, v in zip(source.phases, block["phase"][i]))
                        values["read_ok"] = block["read_ok"][i]
                        put("/diagnostics", ns, enc.diagnostics(ns, values, bool(block["read_ok"][i]), name))
                    if kinematics is not None:
                        q_full[index] = block["q"][i]
                        if done == 0 and i == 0:
                            put("/tf_static", ns, enc.transforms(ns, kinematics.fixed_names, kinematics.poses(q_full, kinematics.fixed)))
                        put("/tf", ns, enc.transforms(ns, kinematics.moving_names, kinematics.poses(q_full, kinematics.moving)))
                done += len(stamps)
                if progress is not None:
                    progress(done, rows)
            writer.finish()
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read the log ({exc})", file=log) from None
    links = () if kinematics is None else tuple(c for _, c in kinematics.moving_names + kinematics.fixed_names)
    return McapSummary(path=out, kind=kind, rows=rows, messages=counts, links=links, notes=tuple(notes))
