"""Link poses of a robot on ``/tf`` and ``/tf_static`` (``tf2_msgs/msg/TFMessage``), as robot_state_publisher does.

Every URDF link with a parent link: its pose in the parent (translation in m, rotation as a unit
quaternion x, y, z, w), frames named after the links; links behind a moving joint go on ``/tf``
(each call of :meth:`TfPublisher.publish`), fixed ones once on ``/tf_static`` (transient local). The
poses are those the MCAP log writer computes (:mod:`mbctl.hardware.mcap_log`, pinocchio's forward
kinematics). ``TFMessage`` comes from :mod:`mbctl.hardware.ros2.interfaces` (built for rclpy from PyPI
at first use), imported only here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.mcap_log import _Kinematics
from mbctl.hardware.ros2.runtime import qos_profiles

__all__ = ["TfPublisher"]


class TfPublisher:
    """Publishes a robot's link poses at its DOF coordinates.

    Args:
        node: The rclpy node that publishes.
        robot: The robot (its pinocchio model and URDF link names).
    """

    def __init__(self, node: Any, robot: RobotModel):
        from mbctl.hardware.ros2.interfaces import tf_message_type

        self._tf_type = tf_message_type()
        self.kinematics = _Kinematics(robot)
        latched = qos_profiles()["latched"]
        self._tf = node.create_publisher(self._tf_type, "/tf", 10)
        self._static = node.create_publisher(self._tf_type, "/tf_static", latched)
        self._static_sent = False

    def _message(self, poses: np.ndarray, names: list[tuple[str, str]], stamp: Any) -> Any:
        from geometry_msgs.msg import TransformStamped

        transforms = []
        for k, (parent, child) in enumerate(names):
            x, y, z, qx, qy, qz, qw = (float(v) for v in poses[7 * k : 7 * k + 7])
            t = TransformStamped()
            t.header.stamp = stamp
            t.header.frame_id, t.child_frame_id = parent, child
            t.transform.translation.x, t.transform.translation.y, t.transform.translation.z = x, y, z
            r = t.transform.rotation
            r.x, r.y, r.z, r.w = qx, qy, qz, qw
            transforms.append(t)
        return self._tf_type(transforms=transforms)

    def publish(self, q: np.ndarray, stamp: Any) -> None:
        """The moving links' poses at DOF coordinates ``q`` (rad, m), stamped ``stamp`` (builtin_interfaces Time);
        the fixed ones too, the first time."""
        k = self.kinematics
        q = np.asarray(q, dtype=float)[None, :]
        if not self._static_sent and k.fixed:
            self._static.publish(self._message(k.poses(q, k.fixed)[0], k.fixed_names, stamp))
        self._static_sent = True
        if k.moving:
            self._tf.publish(self._message(k.poses(q, k.moving)[0], k.moving_names, stamp))
