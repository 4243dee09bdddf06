"""``mbctl description fetch``: the URDF of /robot_description, from a publisher node written here."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pinocchio as pin
import pytest
from ros2_domains import ros_domain_fixture  # noqa: F401 (the fixture ros_domain)

rclpy = pytest.importorskip("rclpy")
pytest.importorskip("std_msgs.msg")

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


@contextlib.contextmanager
def publisher(domain: int, text: str, *, latched: bool = True, topic: str = "/robot_description") -> Iterator[None]:
    """A node of this test (a context of its own) that publishes ``text`` once on ``topic``, as
    robot_state_publisher does (reliable, transient local) or, ``latched=False``, volatile."""
    from rclpy.context import Context
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.signals import SignalHandlerOptions
    from std_msgs.msg import String

    context = Context()
    rclpy.init(context=context, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("test_robot_state_publisher", context=context)
    durability = DurabilityPolicy.TRANSIENT_LOCAL if latched else DurabilityPolicy.VOLATILE
    pub = node.create_publisher(String, topic, QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=durability))
    pub.publish(String(data=text))
    try:
        yield
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def test_fetch_writes_the_published_urdf(ros_domain, tmp_path, cli):
    """The latched description, published before the command starts, is written byte for byte; pinocchio
    builds the SCARA from it."""
    text = (CONFIGS / "scara.urdf").read_text()
    out = tmp_path / "fetched.urdf"
    with publisher(ros_domain, text):
        result = cli("description", "fetch", "--out", out, "--timeout", "60")
    assert result.code == 0, result.err
    assert out.read_text() == text
    assert "robot 'scara', 6 links, 5 joints" in result.out
    model = pin.buildModelFromUrdf(str(out))
    assert list(model.names)[1:] == ["j1", "j2", "j3", "j4"]


def test_other_topic_and_domain(ros_domain, tmp_path, cli):
    """--topic and --domain-id pick where to listen (the environment's domain is another one here)."""
    text = (CONFIGS / "friction_rig.urdf").read_text()
    out = tmp_path / "rig.urdf"
    with publisher(ros_domain, text, topic="/left_arm/robot_description"):
        result = cli("description", "fetch", "--out", out, "--topic", "/left_arm/robot_description", "--domain-id", str(ros_domain), "--timeout", "60")
    assert result.code == 0, result.err
    assert out.read_text() == text


def test_nothing_published_is_one_line_and_exit_2(ros_domain, tmp_path, cli):
    """No publisher: after the wait, one line naming the topic and the domain, exit 2, no file."""
    out = tmp_path / "none.urdf"
    result = cli("description", "fetch", "--out", out, "--timeout", "0.5")
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "/robot_description" in lines[0] and f"ROS domain {ros_domain}" in lines[0], result.err
    assert not out.exists()


def test_not_a_urdf_is_refused(ros_domain, tmp_path, cli):
    """A description that is not a URDF (XML whose root is not <robot>, or not XML): exit 2, no file."""
    out = tmp_path / "bad.urdf"
    for text, expected in (("<sdf version='1.7'><model name='m'/></sdf>", "root element <sdf>"), ("robot {", "not XML")):
        with publisher(ros_domain, text):
            result = cli("description", "fetch", "--out", out, "--timeout", "60")
        assert result.code == 2 and expected in result.err and len(result.err.strip().splitlines()) == 1, result.err
        assert not out.exists()


def test_bad_options(tmp_path, cli):
    """A bad timeout, domain id or output suffix is refused naming the option, before any ROS work."""
    assert "--timeout" in cli("description", "fetch", "--out", tmp_path / "a.urdf", "--timeout", "0").err
    assert "--domain-id" in cli("description", "fetch", "--out", tmp_path / "a.urdf", "--domain-id", "300").err
    assert cli("description", "fetch", "--out", tmp_path / "a.txt").code == 2


def test_expand_writes_the_urdf_of_a_xacro(tmp_path, cli, monkeypatch):
    """`description expand` writes a xacro's URDF with its arguments (the accepted case of the refusals above)."""
    source = tmp_path / "one.urdf.xacro"
    source.write_text(
        '<robot name="one" xmlns:xacro="http://www.ros.org/wiki/xacro"><xacro:arg name="reach" default="1"/>'
        '<link name="a"/><link name="b"><inertial><mass value="1"/><inertia ixx="1" iyy="1" izz="1" ixy="0" ixz="0" iyz="0"/></inertial></link>'
        '<joint name="j" type="prismatic"><parent link="a"/><child link="b"/><axis xyz="1 0 0"/>'
        '<limit lower="0" upper="$(arg reach)" effort="1" velocity="1"/></joint></robot>'
    )
    out = tmp_path / "one.urdf"
    result = cli("description", "expand", source, "--xacro-arg", "reach:=0.75", "--out", out)
    assert result.code == 0, result.err
    assert pin.buildModelFromUrdf(str(out)).upperPositionLimit[0] == pytest.approx(0.75)
    result = cli("description", "expand", CONFIGS / "scara.urdf", "--out", tmp_path / "x.urdf")
    assert result.code == 2 and "not a xacro file" in result.err


@contextlib.contextmanager
def other_type_publisher(domain: int, topic: str = "/robot_description") -> Iterator[None]:
    """A node of this test latching a std_msgs/Int32 on ``topic``: a publisher, but not of a description."""
    from rclpy.context import Context
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from rclpy.signals import SignalHandlerOptions
    from std_msgs.msg import Int32

    context = Context()
    rclpy.init(context=context, domain_id=domain, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("test_other_type", context=context)
    pub = node.create_publisher(Int32, topic, QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL))
    pub.publish(Int32(data=7))
    try:
        yield
    finally:
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def test_a_publisher_of_another_type_or_not_latched_is_named(ros_domain, tmp_path, cli):
    """What was found instead of a latched String is said: a publisher of another type, or one that is not latched; exit 2, no file."""
    out = tmp_path / "none.urdf"
    with other_type_publisher(ros_domain):
        result = cli("description", "fetch", "--out", out, "--timeout", "3")
    assert result.code == 2 and "1 publisher(s) seen, of std_msgs/msg/Int32, not std_msgs/msg/String" in result.err, result.err
    with publisher(ros_domain, (CONFIGS / "scara.urdf").read_text(), latched=False):
        result = cli("description", "fetch", "--out", out, "--timeout", "3")
    assert result.code == 2 and "1 publisher(s) of std_msgs/msg/String seen, volatile, not latched" in result.err, result.err
    assert not out.exists()


def test_an_unwritable_output_is_refused_before_the_wait(ros_domain, tmp_path, cli):
    """--out where no file can be made (/proc) is refused before any wait, even with a publisher up; the same publisher
    fetched to a writable path works (the valid case)."""
    text = (CONFIGS / "scara.urdf").read_text()
    with publisher(ros_domain, text):
        result = cli("description", "fetch", "--out", "/proc/r.urdf", "--timeout", "60")
        assert result.code == 2 and result.err.startswith("mbctl: error: /proc/r.urdf: cannot create files in /proc"), result.err
        assert cli("description", "fetch", "--out", tmp_path / "r.urdf", "--timeout", "60").code == 0
    assert (tmp_path / "r.urdf").read_text() == text
