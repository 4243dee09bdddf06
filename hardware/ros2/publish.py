"""Live output of runs on ROS 2 (``mbctl run ... --publish``, ``mbctl simulate ... --publish``), for
RViz, Foxglove or PlotJuggler while the run goes, from a process of its own.

The topics and messages are those of the run's MCAP file (:class:`~mbctl.hardware.mcap_log.LogMessages`,
the one mapping from log columns to ROS 2 messages):

- ``/joint_states`` (``sensor_msgs/msg/JointState``): measured position (rad, m), velocity (rad/s,
  m/s) and effort (N·m, N) of the logged joints;
- ``/joint_commands`` (JointState, runs): the reference ``q_ref``, ``dq_ref`` and the commanded ``tau``;
- ``/diagnostics`` (``diagnostic_msgs/msg/DiagnosticArray``, runs): the cycle's period, compute time
  and phase times (s), ``read_ok``; level ERROR for a failed read;
- ``/tf`` and ``/tf_static`` (latched; ``tf2_msgs/msg/TFMessage``) where that message type can be
  had (:func:`tf_message_type`): the link poses of the robot model (pinocchio forward kinematics).

Header stamps are the run's times on this machine's clock: ``t0 + t``, with ``t0`` the wall-clock
time (ns since the epoch) of the run's start as the publisher first sees it (the newest row it
reads then, which the loop wrote at most one flush of the log before: a few ms).

Off the loop's critical path: a closed-loop run is followed through its log. The loop appends every
cycle's row to the raw file ``<log>.partial`` (:class:`~mbctl.hardware.runlog.RunLog`) as it always
does; the publisher, a separate interpreter at niceness +10 (no lock, thread or interpreter lock of
the loop's), reads the rows that came since its last look (every :data:`POLL_S`; the loop flushes its
log every 50 cycles, so the messages trail the run by up to 50 cycles), keeps one per publishing period
(``rate_hz``: by the rows' time ``t``; None keeps every row), encodes and publishes them. The loop
neither waits for it nor knows it is there. After the run (the caller closes the publisher) it
publishes the rows it has not yet read, from the raw file it holds open or, if the run ended before
it first saw the file, from the closed log, then waits (bounded) until its subscribers have
acknowledged everything. A simulation (``mbctl simulate``) hands its recorded states over through a
:class:`~mbctl.stateslot.StateSlot` (:meth:`LivePublisher.show`: positions only, so velocity and
effort are NaN), published at most ``rate_hz`` times a second.

QoS: reliable, volatile, keep last :data:`HISTORY` (a subscriber's own QoS, e.g. RViz's best effort,
decides what it gets); ``/tf_static`` transient local, as robot_state_publisher publishes it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import pickle
import select
import signal
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError, MbctlError
from mbctl.hardware.mcap_log import LogMessages, run_block
from mbctl.hardware.ros2.runtime import Ros2Runtime, qos_profiles, require_rclpy
from mbctl.hardware.runlog import log_table, raw_paths
from mbctl.stateslot import StateSlot

__all__ = ["DEFAULT_RATE_HZ", "HISTORY", "LivePublisher", "LogRows", "PublishSummary", "tf_message_type"]

DEFAULT_RATE_HZ = 100.0
"""Default publishing rate (Hz): smooth in RViz and Foxglove, light on the machine."""
HISTORY = 1000  # messages a publisher keeps for reliable delivery (a second of a 1 kHz run)
START_TIMEOUT_S = 60.0  # the publisher imports rclpy and pinocchio
SUBSCRIPTION_WAIT_S = 60.0  # the longest wait for the subscriptions asked for
POLL_S = 0.01  # how often the publisher looks for new rows (s)
ACK_TIMEOUT_S = 10.0  # after the run: the longest wait for subscribers to acknowledge


def tf_message_type() -> type | None:
    """The rclpy class of ``tf2_msgs/msg/TFMessage``, or None where it cannot be had (then there is
    no ``/tf`` or ``/tf_static``): a sourced ROS 2's, else the one :mod:`mbctl.hardware.ros2.interfaces`
    builds at first use from its shipped definition (tf2_msgs is not on PyPI), which needs a C compiler."""
    from mbctl.hardware.ros2.interfaces import tf_message_type as built

    try:
        return built()
    except MbctlError:  # no compiler or generator here: published without /tf
        return None


def _message_types() -> dict[str, Any]:
    """Topic -> rclpy message class, for the topics that can be published here (None: cannot)."""
    from sensor_msgs.msg import JointState

    try:
        from diagnostic_msgs.msg import DiagnosticArray
    except ImportError:
        DiagnosticArray = None  # noqa: N806
    tf = tf_message_type()
    return {"/joint_states": JointState, "/joint_commands": JointState, "/diagnostics": DiagnosticArray, "/tf": tf, "/tf_static": tf}


@dataclass(frozen=True)
class PublishSummary:
    """What a :class:`LivePublisher` published.

    Attributes:
        domain_id: The ROS 2 domain.
        topics: The topics it published on.
        rows: Log rows (or simulation states) it read.
        published: Messages per topic.
        acknowledged: Whether every subscriber acknowledged every message (True without subscribers).
        notes: Topics left out and why.
    """

    domain_id: int
    topics: tuple[str, ...]
    rows: int
    published: dict[str, int] = field(default_factory=dict)
    acknowledged: bool = True
    notes: tuple[str, ...] = ()


class LogRows:
    """Every row of a closed-loop run's log, read while the loop writes it (:mod:`mbctl.hardware.runlog`).

    :meth:`new` gives the complete rows appended to ``<log>.partial`` since the last call; the file
    is kept open, so rows written just before the log closed (and the raw file went) are still read
    by :meth:`rest`, which also falls back to the closed NPZ when the raw file was never seen. Files
    older than ``since`` (a previous run's) are not read.
    """

    def __init__(self, log: str | Path, since: float):
        self.path = Path(log)
        self.raw, self.header = raw_paths(self.path)
        self.since = since
        self.columns: list[str] | None = None
        self.read = 0
        self._file = None
        self._width = 0

    def _open(self) -> bool:
        with contextlib.suppress(OSError, ValueError, KeyError):
            if self.header.stat().st_mtime < self.since - 1.0:  # a stale file of an earlier run (1 s: coarse clocks)
                return False
            columns = [str(c) for c in json.loads(self.header.read_text())["columns"]]
            self._file = open(self.raw, "rb")  # noqa: SIM115 (closed in close())
            self.columns, self._width = columns, 8 * len(columns)
            return True
        return False

    def new(self) -> np.ndarray | None:
        """The complete rows written since the last call, (rows, columns); None before the file exists."""
        if self._file is None and not self._open():
            return None
        size = os.fstat(self._file.fileno()).st_size
        count = size // self._width - self.read
        if count <= 0:
            return np.empty((0, len(self.columns)))
        self._file.seek(self.read * self._width)
        rows = np.frombuffer(self._file.read(count * self._width), dtype=np.float64).reshape(count, -1)
        self.read += len(rows)
        return rows

    def rest(self) -> np.ndarray | None:
        """After the log was closed: the rows not read yet (from the open raw file, or the NPZ); None if neither is there."""
        if self._file is not None or self._open():
            return self.new()
        with contextlib.suppress(OSError, ValueError, KeyError):
            if self.path.stat().st_mtime >= self.since - 1.0:
                with np.load(self.path) as log:
                    self.columns, table = log_table(log)
                rows = table[self.read :]
                self.read = len(table)
                return rows
        return None

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class LivePublisher:
    """Publishes a run on ROS 2 while it goes (module docstring), from a process of its own.

    Args:
        robot: The robot (joint names; link poses for ``/tf`` where TFMessage can be had).
        log: A closed-loop run's log (.npz) to follow as the loop writes it; None: publish what
            :meth:`show` hands over (a simulation).
        rate_hz: Highest publishing rate (Hz) by the run's time; None: every row of the log.
        domain_id: ROS 2 domain (default: ``ROS_DOMAIN_ID``, else 0).
        subscriptions: Before returning, wait (at most :data:`START_TIMEOUT_S`) until this many
            subscriptions, summed over the topics, are matched (a test that must receive every
            message; 0: do not wait).

    Use it as a context manager or call :meth:`close` after the run; its summary is then :attr:`summary`.

    Raises:
        Ros2Unavailable: Without rclpy and the message packages (one line on how to get them).
        InputError: For a bad rate.
        MbctlError: If the publisher process does not start (its reason).
    """

    def __init__(self, robot: RobotModel, *, log: str | Path | None = None, rate_hz: float | None = DEFAULT_RATE_HZ, domain_id: int | None = None, subscriptions: int = 0):
        if rate_hz is not None and not (math.isfinite(rate_hz) and rate_hz > 0):
            raise InputError(f"must be a finite number > 0, got {rate_hz!r}", field="--publish-rate")
        require_rclpy("sensor_msgs.msg")
        self.summary: PublishSummary | None = None
        self._slot = None if log is not None else StateSlot(robot.nv)
        config = {
            "robot": robot, "log": None if log is None else str(log), "since": time.time(), "slot": None if self._slot is None else self._slot.name,
            "period_s": None if rate_hz is None else 1.0 / rate_hz, "domain_id": domain_id, "subscriptions": subscriptions,
        }  # fmt: skip
        # a fresh interpreter in a session of its own (see mbctl.viz.live): nothing of the loop's is shared,
        # a Ctrl-C at the terminal is the caller's alone, and the end of its stdin (close(), or the caller's
        # end however it comes) tells it that the run is over
        self._process = subprocess.Popen([sys.executable, "-m", "mbctl.hardware.ros2.publish"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, start_new_session=True)
        self._finalizer = weakref.finalize(self, _release, self._process, self._slot)
        answer = self._answer(config, START_TIMEOUT_S + (SUBSCRIPTION_WAIT_S if subscriptions else 0.0))
        if "error" in answer:
            self.close()
            raise MbctlError(f"live publishing on ROS 2 did not start: {answer['error']}")
        self.domain_id: int = answer["domain_id"]
        self.topics: tuple[str, ...] = tuple(answer["topics"])
        self.notes: tuple[str, ...] = tuple(answer["notes"])

    def _answer(self, config: dict | None, timeout_s: float = START_TIMEOUT_S) -> dict:
        """Send ``config`` (None: close stdin) and read the process's one-line JSON answer."""
        try:
            if config is not None:
                pickle.dump(config, self._process.stdin)
                self._process.stdin.flush()
            else:
                self._process.stdin.close()
            ready, _, _ = select.select([self._process.stdout], [], [], timeout_s)
            line = self._process.stdout.readline() if ready else b""
            return json.loads(line) if line else {"error": f"no answer within {timeout_s:g} s (exit code {self._process.poll()})"}
        except (OSError, ValueError) as exc:
            return {"error": str(exc)}

    @property
    def pid(self) -> int:
        """The publisher process's id."""
        return self._process.pid

    def show(self, t: float, q: np.ndarray) -> None:
        """A simulation's state: positions ``q`` (nv,) (rad, m) at time ``t`` (s); returns at once."""
        if self._slot is not None:
            self._slot.write(t, q)

    def close(self) -> PublishSummary | None:
        """After the run: publish what is left, wait for acknowledgements, stop the process; returns
        (and keeps in :attr:`summary`) what was published, None if the process gave no summary."""
        if self.summary is None and self._process.poll() is None and not self._process.stdin.closed:
            answer = self._answer(None, timeout_s=START_TIMEOUT_S + ACK_TIMEOUT_S)
            if "error" not in answer:
                self.summary = PublishSummary(**{**answer, "topics": tuple(answer["topics"]), "notes": tuple(answer["notes"])})
        self._finalizer()
        return self.summary

    def __enter__(self) -> LivePublisher:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def _release(process: subprocess.Popen, slot: StateSlot | None, timeout_s: float = 10.0) -> None:
    """End the publisher process (the end of its stdin stops it) and free the state slot."""
    with contextlib.suppress(OSError):
        process.stdin.close()  # type: ignore[union-attr]
    try:
        process.wait(timeout_s)
    except subprocess.TimeoutExpired:  # stuck in the middleware: it goes
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    process.stdout.close()  # type: ignore[union-attr]
    if slot is not None:
        slot.close()


class _Publishers:
    """The rclpy publishers of one node and the messages they sent."""

    def __init__(self, node: Any, topics: Sequence[str], types: dict[str, Any]):
        qos = qos_profiles()
        reliable = qos["command"]
        reliable.depth = HISTORY
        self.topics = list(topics)
        self.pubs = {t: node.create_publisher(types[t], t, qos["latched"] if t == "/tf_static" else reliable) for t in topics}
        self.counts = dict.fromkeys(topics, 0)

    def put(self, topic: str, data: bytes) -> None:
        self.pubs[topic].publish(data)  # CDR bytes: published as they are
        self.counts[topic] += 1

    def wait_for_subscriptions(self, count: int, timeout_s: float) -> bool:
        """Wait until ``count`` subscriptions, summed over the topics, are matched."""
        end = time.monotonic() + timeout_s
        while sum(p.get_subscription_count() for p in self.pubs.values()) < count:
            if time.monotonic() > end:
                return False
            time.sleep(0.01)
        return True

    def wait_acknowledged(self, timeout_s: float) -> bool:
        from rclpy.duration import Duration

        end = time.monotonic() + timeout_s
        return all(p.wait_for_all_acked(Duration(seconds=max(0.0, end - time.monotonic()))) for t, p in self.pubs.items() if t != "/tf_static")


class _Decimator:
    """Which rows to publish: the first at or after each multiple of the period in the rows' time."""

    def __init__(self, period_s: float | None):
        self.period_s, self.due = period_s, -math.inf

    def keep(self, t: np.ndarray) -> np.ndarray:
        if self.period_s is None:
            return np.isfinite(t)
        keep = np.zeros(len(t), dtype=bool)
        for i, ti in enumerate(t.tolist()):
            if ti >= self.due:
                keep[i] = True
                self.due = (math.floor(ti / self.period_s) + 1) * self.period_s
        return keep


def _serve() -> None:
    """The publisher process: its configuration comes pickled on stdin, it answers one JSON line when
    ready and one (the summary) when its stdin has closed and everything is published."""
    config = pickle.load(sys.stdin.buffer)
    with contextlib.suppress(OSError):
        os.nice(10)  # below the loop and the plant, whatever their scheduling
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Thread(target=lambda: (sys.stdin.buffer.read(), stop.set()), daemon=True).start()

    def answer(message: dict) -> None:
        sys.stdout.write(json.dumps(message) + "\n")
        sys.stdout.flush()

    robot: RobotModel = config["robot"]
    kind = "run" if config["log"] is not None else "simulation"
    try:
        types = _message_types()
        notes = [f"no {t}: " + ("diagnostic_msgs cannot be imported here" if t == "/diagnostics" else "tf2_msgs/msg/TFMessage cannot be had here (no C compiler to build it?)")
                 for t in ("/diagnostics", "/tf") if types[t] is None]
        if kind == "simulation":
            notes = [n for n in notes if "/diagnostics" not in n]
        tf = types["/tf"] is not None
        probe = LogMessages(kind, robot.actuated_names if kind == "run" else robot.joint_names, (), robot, tf=tf)
        topics = [t for t in probe.topics if types[t] is not None]
        ros = Ros2Runtime(config["domain_id"]).open()
        publishers = _Publishers(ros.node("mbctl_publish"), topics, types)
        if config["subscriptions"] and not publishers.wait_for_subscriptions(config["subscriptions"], SUBSCRIPTION_WAIT_S):
            raise MbctlError(f"fewer than {config['subscriptions']} subscription(s) to {', '.join(topics)} within {SUBSCRIPTION_WAIT_S:g} s")
    except Exception as exc:  # noqa: BLE001 (said to the caller, which raises it)
        answer({"error": f"{type(exc).__name__}: {exc}"})
        return
    answer({"domain_id": ros.domain_id, "topics": topics, "notes": notes})
    try:
        if kind == "run":
            rows = _follow_log(config, robot, tf, publishers, stop)
        else:
            rows = _follow_slot(config, robot, tf, publishers, stop)
        acknowledged = publishers.wait_acknowledged(ACK_TIMEOUT_S)
        answer({"domain_id": ros.domain_id, "topics": topics, "rows": rows, "published": publishers.counts, "acknowledged": acknowledged, "notes": notes})
    finally:
        ros.close()


def _follow_log(config: dict, robot: RobotModel, tf: bool, publishers: _Publishers, stop: threading.Event) -> int:
    """Publish a run log's rows as they come until ``stop``, then the rest; returns the rows read."""
    source = LogRows(config["log"], config["since"])
    decimator = _Decimator(config["period_s"])
    encoder: LogMessages | None = None
    offset_ns: int | None = None

    def publish(table: np.ndarray | None) -> None:
        nonlocal encoder, offset_ns
        if table is None or not len(table):
            return
        columns = source.columns
        if encoder is None:
            joints = [c.split(".", 1)[1] for c in columns if c.startswith("q.")]
            phases = [c.split(".", 1)[1] for c in columns if c.startswith("phase.")]
            encoder = LogMessages("run", joints, phases, robot, name=robot.name, tf=tf and set(joints) <= set(robot.joint_names))
        block = run_block(columns, table)
        t = block["t"]
        if offset_ns is None:
            offset_ns = time.time_ns() - round(float(t[-1]) * 1e9)
        keep = decimator.keep(t)
        if not keep.any():
            return
        block = {k: v[keep] for k, v in block.items()}
        stamps = offset_ns + np.rint(block["t"] * 1e9).astype(np.int64)
        if "/tf_static" in publishers.pubs and publishers.counts["/tf_static"] == 0 and (static := encoder.static(block, stamps)) is not None:
            publishers.put("/tf_static", static[1])
        messages = encoder.encode(block, stamps)
        for i in range(len(stamps)):
            for topic in encoder.per_row:
                if topic in publishers.pubs:
                    publishers.put(topic, messages[topic][i])

    try:
        while not stop.wait(POLL_S):
            publish(source.new())
        publish(source.rest())
        return source.read
    finally:
        source.close()


def _follow_slot(config: dict, robot: RobotModel, tf: bool, publishers: _Publishers, stop: threading.Event) -> int:
    """Publish a simulation's newest state at most once a period until ``stop``; returns the states published."""
    slot = StateSlot(robot.nv, config["slot"])
    encoder = LogMessages("simulation", robot.joint_names, (), robot, name=robot.name, tf=tf)
    period_s = config["period_s"] or POLL_S
    last, offset_ns, shown = 0, None, 0
    nan = np.full((1, robot.nv), np.nan)
    try:
        while True:
            stopping = stop.wait(period_s)
            state = slot.read()
            if state is not None and state[0] != last:
                last, t, q = state
                offset_ns = time.time_ns() - round(t * 1e9) if offset_ns is None else offset_ns
                block = {"t": np.array([t]), "q": q[None], "dq": nan, "effort": nan}
                stamps = np.array([offset_ns + round(t * 1e9)], dtype=np.int64)
                if "/tf_static" in publishers.pubs and shown == 0 and (static := encoder.static(block, stamps)) is not None:
                    publishers.put("/tf_static", static[1])
                for topic, messages in encoder.encode(block, stamps).items():
                    publishers.put(topic, messages[0])
                shown += 1
            if stopping:
                return shown
    finally:
        slot.close()


if __name__ == "__main__":
    _serve()
