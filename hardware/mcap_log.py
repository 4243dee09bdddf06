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
  URDF's links (through a failed read, the last measured pose); ``/tf_static`` (once, at the
  first row's time) the links fixed to their parent. With the robot's URDF, Foxglove's 3-D
  panel draws the arm moving.

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
from mbctl.ros2msg import Messages

__all__ = ["LogMessages", "McapSummary", "link_tree", "run_block", "write_mcap"]

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
    link frame with a parent link, ``moving`` when a joint with a DOF lies between them; a root
    link that moves (an elastic base's six DOF) has pinocchio's ``universe`` frame as parent."""
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
        if parent != 0 or moving:  # a root link on an elastic base moves in pinocchio's universe frame
            tree.append((parent, child, moving))
    return tree


class _Kinematics:
    """Link poses in their parent links (x, y, z in m, quaternion x, y, z, w), a block of rows at a time."""

    def __init__(self, robot: RobotModel):
        self.robot, self.data = robot, robot.create_data()
        tree = link_tree(robot)
        names = [f.name for f in robot.model.frames]
        self.moving = [(p, c) for p, c, m in tree if m]
        self.fixed = [(p, c) for p, c, m in tree if not m]
        self.moving_names = [(names[p], names[c]) for p, c in self.moving]
        self.fixed_names = [(names[p], names[c]) for p, c in self.fixed]

    def poses(self, q: np.ndarray, pairs: Sequence[tuple[int, int]]) -> np.ndarray:
        """(rows, 7 len(pairs)): child in parent, ``T_parent^-1 T_child``, at DOF coordinates ``q`` (rows, nv)."""
        import pinocchio as pin
        from scipy.spatial.transform import Rotation

        frames = sorted({f for pair in pairs for f in pair})
        at = {f: k for k, f in enumerate(frames)}
        world = np.empty((len(q), len(frames), 4, 4))
        for i, qi in enumerate(q):  # pinocchio per row; the rest per block
            pin.framesForwardKinematics(self.robot.model, self.data, self.robot.configuration(qi))
            for f in frames:
                world[i, at[f]] = self.data.oMf[f].homogeneous
        parent, child = world[:, [at[p] for p, _ in pairs]], world[:, [at[c] for _, c in pairs]]
        rotation = np.einsum("nkji,nkjl->nkil", parent[..., :3, :3], child[..., :3, :3])
        position = np.einsum("nkji,nkj->nki", parent[..., :3, :3], child[..., :3, 3] - parent[..., :3, 3])
        quaternion = Rotation.from_matrix(rotation.reshape(-1, 3, 3)).as_quat().reshape(len(q), len(pairs), 4)  # x, y, z, w
        return np.concatenate([position, quaternion], axis=2).reshape(len(q), -1)


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


def _hold_last_finite(q: np.ndarray, last: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Rows of ``q`` with a non-finite number (a failed read) replaced by the last finite row
    before them (``last`` before the first); and the last finite row."""
    good = np.isfinite(q).all(axis=1)
    if good.all():
        return q, q[-1] if len(q) else last
    source = np.maximum.accumulate(np.where(good, np.arange(len(q)), -1))
    filled = np.where((source >= 0)[:, None], q[np.maximum(source, 0)], last)
    return filled, filled[-1]


class LogMessages:
    """The ROS 2 messages of a log's rows (the topics and mapping of the module docstring), CDR-encoded
    a block of rows at a time; shared by :func:`write_mcap` and the live publisher of a run
    (:mod:`mbctl.hardware.ros2.publish`).

    Args:
        kind: ``"run"`` (every topic) or ``"simulation"`` (``/joint_states`` and ``/tf``).
        joints: The log's joints, in its column order (each one of ``robot``'s).
        phases: A run log's phase names (``phase.<name>`` columns).
        robot: The robot, for ``/tf`` and ``/tf_static``; None: no link poses.
        name: The diagnostics' ``hardware_id``.
        tf: False: no ``/tf`` and ``/tf_static`` even with a robot.

    Attributes:
        topics: Every topic, ``/tf_static`` included.
        per_row: The topics with one message per row, in the order they are written for a row.
        links: Links in ``/tf`` (moving) and ``/tf_static`` (fixed).
    """

    def __init__(self, kind: str, joints: Sequence[str], phases: Sequence[str] = (), robot: RobotModel | None = None, *, name: str = "", tf: bool = True):
        self.kind, self.joints, self.robot = kind, list(joints), robot
        self.messages = Messages()
        self.kinematics = _Kinematics(robot) if robot is not None and tf else None
        self.index = [robot.joint(j).idx_v for j in joints] if self.kinematics is not None else []
        self.per_row = ["/joint_states"] + (["/joint_commands", "/diagnostics"] if kind == "run" else []) + (["/tf"] if self.kinematics else [])
        self.topics = self.per_row + (["/tf_static"] if self.kinematics else [])
        self.links = () if self.kinematics is None else tuple(c for _, c in self.kinematics.moving_names + self.kinematics.fixed_names)
        self._states = self.messages.joint_states(self.joints)
        self._transforms = self.messages.transforms(self.kinematics.moving_names) if self.kinematics else None
        keys = ["period", "compute", *(f"phase.{p}" for p in phases), "read_ok"]
        self._diagnostics = self.messages.diagnostics("mbctl loop", name, keys)
        self._held = np.zeros(robot.nv) if robot is not None else None

    def schema(self, topic: str) -> bytes:
        """The ``ros2msg`` definition of ``topic``'s message type."""
        return self.messages.schema(MESSAGE_TYPES[topic])

    def _q_full(self, block: dict[str, np.ndarray]) -> np.ndarray:
        q_full = np.zeros((len(block["t"]), self.robot.nv))
        q_full[:, self.index] = block["q"]
        q_full, self._held = _hold_last_finite(q_full, self._held)
        return q_full

    def static(self, block: dict[str, np.ndarray], stamps_ns: np.ndarray) -> tuple[int, bytes] | None:
        """``(stamp, message)`` of ``/tf_static`` at the block's first row (None without a robot or rows)."""
        if self.kinematics is None or not len(stamps_ns):
            return None
        q = np.zeros((1, self.robot.nv))
        q[:, self.index] = block["q"][:1]
        fixed = self.messages.transforms(self.kinematics.fixed_names)
        return int(stamps_ns[0]), fixed.encode(self.kinematics.poses(np.nan_to_num(q), self.kinematics.fixed), stamps_ns[:1])[0].tobytes()

    def encode(self, block: dict[str, np.ndarray], stamps_ns: np.ndarray) -> dict[str, list[bytes]]:
        """The messages of the block's rows stamped ``stamps_ns`` (ns): per topic of :attr:`per_row`, one per row.

        ``block``: ``t``, ``q``, ``dq``, ``effort`` and, for a run, ``q_ref``, ``dq_ref``, ``tau``,
        ``period``, ``compute``, ``read_ok`` (and ``phase``): per-joint groups 2-D (rows, joints).
        """
        rows = {"/joint_states": self._states.encode(np.hstack([block["q"], block["dq"], block["effort"]]), stamps_ns)}
        out: dict[str, list[bytes]] = {}
        if self.kind == "run":
            rows["/joint_commands"] = self._states.encode(np.hstack([block["q_ref"], block["dq_ref"], block["tau"]]), stamps_ns)
            timing = np.column_stack([block["period"], block["compute"], *([block["phase"]] if "phase" in block else []), block["read_ok"]])
            out["/diagnostics"] = [self._diagnostics(ns, timing[i], timing[i, -1] == 1) for i, ns in enumerate(stamps_ns.tolist())]
        if self.kinematics is not None:
            rows["/tf"] = self._transforms.encode(self.kinematics.poses(self._q_full(block), self.kinematics.moving), stamps_ns)
        out.update({topic: [row.tobytes() for row in r] for topic, r in rows.items()})
        return out


def run_block(columns: Sequence[str], table: np.ndarray) -> dict[str, np.ndarray]:
    """Rows ``table`` (rows, columns) of a run log with ``columns`` as the block :class:`LogMessages`
    takes: ``t``, ``period``, ``compute``, ``read_ok`` 1-D, the per-joint groups and ``phase`` 2-D."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(columns):
        groups.setdefault(str(name).split(".", 1)[0], []).append(i)
    return {g: table[:, idx[0]] if g in ("t", "period", "compute", "read_ok") else table[:, idx] for g, idx in groups.items()}


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
    if robot is not None:
        unknown = [j for j in joints if j not in robot.joint_names]
        if unknown:
            raise DataError(f"joints {', '.join(unknown)} are not {robot.name}'s", file=log)
        unlogged = [j for j in robot.joint_names if j not in joints]
        if unlogged:
            notes.append(f"/tf draws {', '.join(unlogged)} at 0 (not in the log)")
    encoder = LogMessages(kind, joints, source.phases, robot, name=robot.name if robot is not None else log.stem)
    counts = dict.fromkeys(encoder.topics, 0)
    try:
        with atomic_output(out) as tmp, open(tmp, "wb") as stream:
            writer = Writer(stream, compression=CompressionType.ZSTD)
            writer.start(profile="ros2", library="mbctl")
            channel = {}
            for topic in encoder.topics:
                schema = writer.register_schema(name=MESSAGE_TYPES[topic], encoding="ros2msg", data=encoder.schema(topic))
                channel[topic] = writer.register_channel(topic=topic, message_encoding="cdr", schema_id=schema)

            def put(topic: str, ns: int, data: bytes) -> None:
                writer.add_message(channel[topic], log_time=ns, data=data, publish_time=ns, sequence=counts[topic])
                counts[topic] += 1

            done = 0
            for block in source.blocks:
                stamps = np.rint(np.asarray(block["t"]) * 1e9).astype(np.int64)
                if done == 0 and (static := encoder.static(block, stamps)) is not None:
                    put("/tf_static", *static)
                rows_of = encoder.encode(block, stamps)
                for i, ns in enumerate(stamps.tolist()):
                    for topic in encoder.per_row:
                        put(topic, ns, rows_of[topic][i])
                done += len(stamps)
                if progress is not None:
                    progress(done, rows)
            writer.finish()
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
        raise DataError(f"cannot read the log ({exc})", file=log) from None
    return McapSummary(path=out, kind=kind, rows=rows, messages=counts, links=encoder.links, notes=tuple(notes))
