"""The description of a running ROS 2 system: the URDF that ``/robot_description`` carries.

robot_state_publisher (and ``mbctl emulate --bus ros2``) publishes the robot's URDF once, as a
``std_msgs/msg/String`` on ``/robot_description`` with a transient-local (latched) QoS: a
subscriber that comes later still gets it. :func:`fetch_description` subscribes with that QoS
(:func:`~mbctl.hardware.ros2.runtime.qos_profiles` ``"latched"``), waits a bounded time for the
message and returns its text, checked to be a URDF (an XML document whose root is ``<robot>``).
``mbctl description fetch`` writes it to a file; the robot TOML then adds what URDF cannot say.
"""

from __future__ import annotations

import math
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass

from mbctl.errors import InputError
from mbctl.hardware.ros2.runtime import Ros2Runtime, qos_profiles, require_rclpy

__all__ = ["DEFAULT_TOPIC", "Description", "fetch_description"]

DEFAULT_TOPIC = "/robot_description"
STRING = "std_msgs/msg/String"


@dataclass(frozen=True)
class Description:
    """A fetched robot description.

    Attributes:
        urdf: The URDF text, as published.
        robot: The ``name`` of its ``<robot>`` element.
        links, joints: How many ``<link>`` and ``<joint>`` elements it has.
        publishers: Publishers of the topic seen when it came.
        wait_s: How long it took to come (s).
    """

    urdf: str
    robot: str
    links: int
    joints: int
    publishers: int
    wait_s: float


def fetch_description(topic: str = DEFAULT_TOPIC, timeout_s: float = 10.0, *, domain_id: int | None = None) -> Description:
    """Subscribe to ``topic`` (std_msgs/String, latched) and return the first description that comes.

    Args:
        topic: The topic (default ``/robot_description``).
        timeout_s: The longest wait (s) for a message.
        domain_id: DDS domain (default: ``ROS_DOMAIN_ID``, else 0).

    Raises:
        InputError: Naming ``--topic``: nothing published on it within ``timeout_s`` (with how many
            publishers were seen: a publisher that is not latched gives nothing to a late
            subscriber), or what came is not a URDF.
        Ros2Unavailable: Without rclpy (one line on how to get it).
    """
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise InputError(f"must be a finite number > 0, got {timeout_s!r}", field="--timeout")
    require_rclpy("std_msgs.msg")
    from std_msgs.msg import String

    received: list[str] = []
    came = threading.Event()

    def take(msg: String) -> None:
        if not came.is_set():
            received.append(msg.data)
            came.set()

    with Ros2Runtime(domain_id) as ros:
        node = ros.node("mbctl_description_fetch")
        try:
            node.create_subscription(String, topic, take, qos_profiles()["latched"])
        except Exception as exc:  # noqa: BLE001 (rclpy raises its own types for a bad topic name)
            raise InputError(f"not a valid ROS 2 topic name ({' '.join(str(exc).split()) or type(exc).__name__})", field="--topic") from None
        start = time.monotonic()
        came.wait(timeout_s)
        wait_s = time.monotonic() - start
        found = node.get_publishers_info_by_topic(topic)
    if not received:
        raise InputError(f"nothing published on {topic} within {timeout_s:g} s in ROS domain {ros.domain_id} ({_seen(found)})", field="--topic")
    return _checked(received[0], topic, len(found), wait_s)


def _seen(found: list) -> str:
    """What the publishers of the topic (rclpy's ``TopicEndpointInfo``) offered instead of a latched
    ``std_msgs/msg/String``: their message types, else their durability."""
    from rclpy.qos import DurabilityPolicy

    if not found:
        return "no publisher seen"
    types = sorted({info.topic_type for info in found})
    if types != [STRING]:
        other = ", ".join(t for t in types if t != STRING)
        return f"{len(found)} publisher(s) seen, of {other}, not {STRING}"
    durability = sorted({info.qos_profile.durability.name.lower() for info in found if info.qos_profile.durability != DurabilityPolicy.TRANSIENT_LOCAL})
    if durability:
        return f"{len(found)} publisher(s) of {STRING} seen, {' and '.join(durability)}, not latched (transient local): a late subscriber gets nothing"
    return f"{len(found)} latched publisher(s) of {STRING} seen, but nothing came"


def _checked(text: str, topic: str, publishers: int, wait_s: float) -> Description:
    """``text`` as a :class:`Description`, if it is a URDF.

    Raises:
        InputError: Naming ``--topic``, if it is not XML or its root is not ``<robot>``.
    """
    try:
        root = ET.fromstring(text)
    except ET.ParseError as exc:
        raise InputError(f"what {topic} carries is not XML ({exc})", field="--topic") from None
    if root.tag != "robot":
        raise InputError(f"what {topic} carries is not a URDF (root element <{root.tag}>, not <robot>)", field="--topic")
    return Description(
        urdf=text, robot=root.get("name", ""), links=len(root.findall("link")), joints=len(root.findall("joint")), publishers=publishers, wait_s=wait_s,
    )
