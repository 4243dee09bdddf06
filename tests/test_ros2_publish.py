"""Live output of runs on ROS 2 (mbctl.hardware.ros2.publish): a subscriber node written here receives
the messages of a lock-step run, with the numbers its log holds."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest
from ros2_domains import ros_domain_fixture  # noqa: F401 (the fixture ros_domain)

from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.mcap_log import MESSAGE_TYPES
from mbctl.hardware.runlog import log_table
from mbctl.hardware.session import SessionOptions, run_session

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("sensor_msgs.msg")

WAIT_S = 60.0  # the longest wait for messages (a wait, not a speed)


class Listener:
    """A node of this test (a context and executor thread of its own) that keeps every message of the topics."""

    def __init__(self, domain: int, topics: dict[str, type]):
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
        from rclpy.signals import SignalHandlerOptions

        self.context = Context()
        rclpy.init(context=self.context, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("test_listener", context=self.context)
        self.received: dict[str, list] = {t: [] for t in topics}
        for topic, kind in topics.items():
            durability = DurabilityPolicy.TRANSIENT_LOCAL if topic == "/tf_static" else DurabilityPolicy.VOLATILE
            qos = QoSProfile(history=HistoryPolicy.KEEP_ALL, reliability=ReliabilityPolicy.RELIABLE, durability=durability)
            self.node.create_subscription(kind, topic, self.received[topic].append, qos)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        self.thread = threading.Thread(target=self._spin, daemon=True)
        self.thread.start()

    def _spin(self) -> None:
        with contextlib.suppress(Exception):
            self.executor.spin()

    def wait_for(self, counts: dict[str, int]) -> None:
        end = time.monotonic() + WAIT_S
        while any(len(self.received[t]) < n for t, n in counts.items()) and time.monotonic() < end:
            time.sleep(0.02)

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        self.thread.join(timeout=5.0)
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)


@contextlib.contextmanager
def listening(domain: int, topics: dict[str, type]) -> Iterator[Listener]:
    listener = Listener(domain, topics)
    try:
        yield listener
    finally:
        listener.close()


@pytest.fixture(scope="module")
def scara_run():
    robot = load_robot("scara")
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.3, 0.4, -0.2, 0.02]]), [0.3], 500.0, robot.joint_names)
    return robot, traj


def _types() -> dict[str, type]:
    from diagnostic_msgs.msg import DiagnosticArray
    from sensor_msgs.msg import JointState

    return {"/joint_states": JointState, "/joint_commands": JointState, "/diagnostics": DiagnosticArray}


def test_subscriber_receives_every_row_of_a_lockstep_run(ros_domain, scara_run, tmp_path):
    """Every row of a lock-step run arrives on /joint_states, /joint_commands and /diagnostics, in order,
    with the log's q, dq, effort, q_ref, dq_ref, tau, period, compute and read_ok, stamped t0 + t."""
    from mbctl.hardware.ros2.publish import LivePublisher

    pytest.importorskip("diagnostic_msgs.msg")
    robot, traj = scara_run
    log = tmp_path / "run.npz"
    with listening(ros_domain, _types()) as listener:
        with LivePublisher(robot, log=log, rate_hz=None, subscriptions=3) as publisher:
            assert {"/joint_states", "/joint_commands", "/diagnostics"} <= set(publisher.topics)
            summary = run_session(robot, traj, SessionOptions(lockstep=True, rate_hz=500.0), log)
        published = publisher.summary
        assert summary.completed and published is not None and published.acknowledged
        with np.load(log) as data:
            columns, table = log_table(data)
        rows = len(table)
        assert published.rows == rows and all(published.published[t] == rows for t in _types())
        listener.wait_for(dict.fromkeys(_types(), rows))
    got = listener.received
    col = {c: i for i, c in enumerate(columns)}

    def logged(group: str) -> np.ndarray:
        return table[:, [col[f"{group}.{j}"] for j in robot.actuated_names]]

    states, commands = got["/joint_states"], got["/joint_commands"]
    assert [len(got[t]) for t in _types()] == [rows] * 3
    assert list(states[0].name) == list(robot.actuated_names)
    for field, group in (("position", "q"), ("velocity", "dq"), ("effort", "effort")):
        assert np.array_equal(np.array([getattr(m, field) for m in states]), logged(group), equal_nan=True)
    for field, group in (("position", "q_ref"), ("velocity", "dq_ref"), ("effort", "tau")):
        assert np.array_equal(np.array([getattr(m, field) for m in commands]), logged(group), equal_nan=True)
    stamps = np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec for m in states])
    t_ns = np.rint(table[:, col["t"]] * 1e9).astype(np.int64)
    assert np.array_equal(stamps - stamps[0], t_ns - t_ns[0])  # one offset: t0 on this machine's clock
    assert abs(stamps[0] * 1e-9 - time.time()) < 3600  # a wall-clock time, not seconds since the run started
    diagnostics = {kv.key: [] for kv in got["/diagnostics"][0].status[0].values}
    for m in got["/diagnostics"]:
        for kv in m.status[0].values:
            diagnostics[kv.key].append(float(kv.value))
    for key in ("period", "compute", "read_ok", "phase.control"):
        assert np.array_equal(np.array(diagnostics[key]), table[:, col[key]], equal_nan=True)


def test_decimated_to_the_publishing_rate(ros_domain, scara_run, tmp_path):
    """At 50 Hz from a 500 Hz run every tenth row is published: the first at or after each 20 ms of the run's time."""
    from mbctl.hardware.ros2.publish import LivePublisher

    robot, traj = scara_run
    log = tmp_path / "run.npz"
    from sensor_msgs.msg import JointState

    with listening(ros_domain, {"/joint_states": JointState}) as listener:
        with LivePublisher(robot, log=log, rate_hz=50.0, subscriptions=1) as publisher:
            run_session(robot, traj, SessionOptions(lockstep=True, rate_hz=500.0), log)
        with np.load(log) as data:
            columns, table = log_table(data)
        t = table[:, columns.index("t")]
        expected = [i for i in range(len(t)) if i == 0 or np.floor(t[i] / 0.02) > np.floor(t[i - 1] / 0.02)]
        assert publisher.summary.published["/joint_states"] == len(expected)
        listener.wait_for({"/joint_states": len(expected)})
    q = table[:, [columns.index(f"q.{j}") for j in robot.actuated_names]]
    assert np.array_equal(np.array([m.position for m in listener.received["/joint_states"]]), q[expected])


def test_simulation_states_are_published(ros_domain, tmp_path, cli):
    """`mbctl simulate --publish` puts the simulated positions on /joint_states while it integrates and says
    what it published (the accepted case of the option; the values come from the run's states)."""
    result = cli("simulate", "scara", "--duration", "0.2", "--out", tmp_path / "sim.npz", "--publish", "--publish-rate", "1000")
    assert result.code == 0, result.err
    assert f"publishing on ROS 2 domain {ros_domain}: /joint_states" in result.out
    assert "published on ROS 2: /joint_states " in result.out


def test_run_command_publishes(ros_domain, tmp_path, cli, configs):
    """`mbctl run --lockstep --publish` runs, publishes every row it logs at --publish-rate 1000 (the run's rate), and says so."""
    from mbctl.ctrl.trajectory import write_trajectory

    robot = load_robot(configs / "scara.toml")
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.2, 0.2, -0.1, 0.01]]), [0.2], 1000.0, robot.joint_names)
    write_trajectory(tmp_path / "traj.csv", traj)
    log = tmp_path / "run.npz"
    result = cli("run", configs / "scara.toml", "--trajectory", tmp_path / "traj.csv", "--lockstep", "--log", log, "--summary", tmp_path / "s.json",
                 "--publish", "--publish-rate", "1000")  # fmt: skip
    assert result.code == 0, result.err
    rows = len(np.load(log)["t"])
    assert f"published on ROS 2: /joint_states {rows}, /joint_commands {rows}" in result.out


def test_bad_rate_is_refused(tmp_path, cli):
    """A publishing rate that is not a positive number is one line naming --publish-rate, exit 2."""
    result = cli("simulate", "scara", "--duration", "0.1", "--out", tmp_path / "sim.npz", "--publish", "--publish-rate", "0")
    assert result.code == 2 and "--publish-rate" in result.err and len(result.err.strip().splitlines()) == 1


def test_command_line_default_rate_is_the_publishers():
    """--publish-rate's default (kept in the command line so that --help imports no ROS) is the publisher's."""
    from mbctl.cli.publish import DEFAULT_RATE_HZ as cli_default
    from mbctl.hardware.ros2.publish import DEFAULT_RATE_HZ

    assert cli_default == DEFAULT_RATE_HZ


def test_message_types_are_those_of_the_mcap_log():
    """The live topics carry the message types of the run's MCAP file (one mapping for both)."""
    from mbctl.hardware.ros2.publish import _message_types

    types = _message_types()
    for topic in ("/joint_states", "/joint_commands", "/diagnostics"):
        if types[topic] is not None:
            module, _, name = MESSAGE_TYPES[topic].split("/")
            assert (types[topic].__module__.split(".")[0], types[topic].__name__) == (module, name)


def test_tf_carries_the_link_poses(ros_domain, scara_run, tmp_path):
    """Where TFMessage can be had: /tf holds, per published row, every moving link's pose in its parent link as
    pinocchio's forward kinematics of the logged q gives it; /tf_static (latched) the fixed links."""
    import pinocchio as pin

    from mbctl.hardware.ros2.publish import LivePublisher, tf_message_type

    TFMessage = tf_message_type()
    if TFMessage is None:
        pytest.skip("tf2_msgs/msg/TFMessage cannot be had here (not on PyPI; a sourced ROS 2 installation has it)")
    robot, traj = scara_run
    log = tmp_path / "run.npz"
    with listening(ros_domain, {"/tf": TFMessage, "/tf_static": TFMessage}) as listener:
        with LivePublisher(robot, log=log, rate_hz=100.0, subscriptions=2) as publisher:
            run_session(robot, traj, SessionOptions(lockstep=True, rate_hz=500.0), log)
        count = publisher.summary.published["/tf"]
        listener.wait_for({"/tf": count, "/tf_static": 1})
    assert count == len(listener.received["/tf"]) > 10 and len(listener.received["/tf_static"]) == 1
    with np.load(log) as data:
        columns, table = log_table(data)
    q_log = table[:, [columns.index(f"q.{j}") for j in robot.actuated_names]]
    t_ns = np.rint(table[:, columns.index("t")] * 1e9).astype(np.int64)
    stamp = lambda m: m.transforms[0].header.stamp.sec * 1_000_000_000 + m.transforms[0].header.stamp.nanosec  # noqa: E731
    offset = stamp(listener.received["/tf"][0]) - t_ns[0]  # the first row is published; stamps are offset + t
    t0 = listener.received["/tf"][0].transforms[0].header.stamp
    data = robot.model.createData()
    for message in listener.received["/tf"]:
        row = int(np.searchsorted(t_ns, stamp(message) - offset))
        assert t_ns[row] == stamp(message) - offset
        pin.framesForwardKinematics(robot.model, data, robot.configuration(q_log[row]))
        for tf in message.transforms:
            parent = data.oMf[robot.model.getFrameId(tf.header.frame_id)]
            child = data.oMf[robot.model.getFrameId(tf.child_frame_id)]
            expected = parent.actInv(child)
            r = tf.transform.rotation
            got = pin.XYZQUATToSE3(np.array([tf.transform.translation.x, tf.transform.translation.y, tf.transform.translation.z, r.x, r.y, r.z, r.w]))
            assert np.allclose(got.homogeneous, expected.homogeneous, atol=1e-9)
    assert t0.sec > 0 and [t.child_frame_id for t in listener.received["/tf_static"][0].transforms] == ["tool"]


def test_simulation_states_through_show(ros_domain):
    """A simulation's states handed over with show(t, q) arrive on /joint_states with those positions (NaN
    velocity and effort: only positions are handed over), stamped t0 + t; each is awaited before the next."""
    from sensor_msgs.msg import JointState

    from mbctl.hardware.ros2.publish import LivePublisher

    robot = load_robot("scara")
    states = [(0.01 * k, np.array([0.1 * k, -0.2 * k, 0.05, 0.001 * k])) for k in range(1, 6)]
    with listening(ros_domain, {"/joint_states": JointState}) as listener:
        with LivePublisher(robot, rate_hz=200.0, subscriptions=1) as publisher:
            for k, (t, q) in enumerate(states, start=1):
                publisher.show(t, q)
                listener.wait_for({"/joint_states": k})
        assert publisher.summary.rows == len(states)
    got = listener.received["/joint_states"]
    assert list(got[0].name) == list(robot.joint_names)
    assert np.array_equal(np.array([m.position for m in got]), np.array([q for _, q in states]))
    assert np.isnan(np.array([m.velocity for m in got])).all() and np.isnan(np.array([m.effort for m in got])).all()
    stamps = np.array([m.header.stamp.sec * 1_000_000_000 + m.header.stamp.nanosec for m in got])
    assert np.array_equal(stamps - stamps[0], np.rint(np.array([t for t, _ in states]) * 1e9).astype(np.int64) - round(states[0][0] * 1e9))
