"""rclpy for mbctl: imported on demand, one context of its own, the QoS profiles ros2_control uses.

rclpy comes from the ``ros2`` extra (``pip install "mbctl[ros2]"``: rclpy with Fast DDS and the
message packages, from PyPI) or from a sourced ROS 2 installation; without either, the first use
raises one line saying how to get it.

:class:`Ros2Runtime` owns an rclpy context (its domain id from ``ROS_DOMAIN_ID`` unless given),
with rclpy's own signal handlers off (the loop has its own), nodes on it and one executor thread
that runs their callbacks, off the loop's thread. Closing it stops the thread, destroys the nodes
and shuts the context down, in that order.

QoS (ros2_control's joint_state_broadcaster publishes and its forward command controllers subscribe
with the system defaults: reliable, volatile, keep last):

- :data:`SENSOR_QOS` for subscribing to joint states: best effort (matches a reliable or a best-effort
  publisher), keep last 1 (only the newest sample matters);
- :data:`COMMAND_QOS` for commands and published states: reliable, volatile, keep last 1;
- :data:`LATCHED_QOS` for ``/robot_description``: reliable, transient local, keep last 1 (as
  robot_state_publisher publishes it).
"""

from __future__ import annotations

import importlib
import os
import threading
from types import ModuleType, TracebackType
from typing import Any

from mbctl.errors import InputError, MbctlError

__all__ = ["INSTALL_HINT", "MAX_DOMAIN_ID", "Ros2Unavailable", "Ros2Runtime", "domain_id_from_env", "require_rclpy", "qos_profiles"]

MAX_DOMAIN_ID = 232  # DDS's default port mapping: domain ids 0..232 (ROS 2 advises 0..101 on Linux)

INSTALL_HINT = 'pip install "mbctl[ros2]" (rclpy with Fast DDS from PyPI), or source a ROS 2 installation'


class Ros2Unavailable(MbctlError):
    """rclpy or a message package cannot be imported."""


def require_rclpy(*packages: str) -> ModuleType:
    """Import rclpy (and the message ``packages``, e.g. ``"sensor_msgs.msg"``); returns rclpy.

    Raises:
        Ros2Unavailable: One line naming what is missing and how to get it.
    """
    for name in ("rclpy", *packages):
        try:
            importlib.import_module(name)
        except ImportError as exc:
            raise Ros2Unavailable(f"ROS 2 is not available here ({name}: {exc}); {INSTALL_HINT}") from None
    return importlib.import_module("rclpy")


def domain_id_from_env() -> int:
    """``ROS_DOMAIN_ID`` (unset or blank: 0, as rclpy takes it).

    Raises:
        InputError: Naming ``ROS_DOMAIN_ID`` for anything but a whole number in 0..232 (rclpy would
            take ``abc`` as 0, and Fast DDS fail on ``300`` with an error of its own).
    """
    env = os.environ.get("ROS_DOMAIN_ID", "").strip()
    if not env:
        return 0
    if not (env.isdigit() and int(env) <= MAX_DOMAIN_ID):
        raise InputError(f"must be a whole number in 0..{MAX_DOMAIN_ID} (the DDS domain), got {env!r}", field="ROS_DOMAIN_ID")
    return int(env)


def qos_profiles() -> dict[str, Any]:
    """``{"sensor": ..., "command": ..., "latched": ...}`` (see the module docstring)."""
    from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

    keep_last = {"history": HistoryPolicy.KEEP_LAST, "depth": 1}
    return {
        "sensor": QoSProfile(reliability=ReliabilityPolicy.BEST_EFFORT, durability=DurabilityPolicy.VOLATILE, **keep_last),
        "command": QoSProfile(reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.VOLATILE, **keep_last),
        "latched": QoSProfile(reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL, **keep_last),
    }


class Ros2Runtime:
    """An rclpy context of mbctl's own with an executor thread (a context manager).

    Args:
        domain_id: DDS domain (default: ``ROS_DOMAIN_ID``, else 0; :func:`domain_id_from_env`).

    Usage::

        with Ros2Runtime() as ros:
            node = ros.node("mbctl_run")
            node.create_subscription(...)   # callbacks run on the executor thread
    """

    opened = False
    """A runtime was opened in this process (``mbctl``'s entry point then ends the process at once when done)."""

    def __init__(self, domain_id: int | None = None):
        self.rclpy = require_rclpy()
        self.domain_id = domain_id_from_env() if domain_id is None else domain_id
        self._nodes: list[Any] = []
        self._context = None
        self._executor = None
        self._thread: threading.Thread | None = None

    def open(self) -> Ros2Runtime:
        from rclpy.context import Context
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        self._context = Context()
        Ros2Runtime.opened = True
        self.rclpy.init(context=self._context, domain_id=self.domain_id, signal_handler_options=SignalHandlerOptions.NO)
        self._executor = SingleThreadedExecutor(context=self._context)
        self._thread = threading.Thread(target=self._spin, name="mbctl-ros2", daemon=True)
        self._thread.start()
        return self

    def _spin(self) -> None:
        from rclpy.executors import ExternalShutdownException

        try:
            self._executor.spin()
        except ExternalShutdownException:
            pass

    def node(self, name: str) -> Any:
        """A new node on this context whose callbacks the executor thread runs."""
        node = self.rclpy.create_node(name, context=self._context)
        self._nodes.append(node)
        self._executor.add_node(node)
        return node

    def close(self) -> None:
        if self._context is None:
            return
        self._executor.shutdown(timeout_sec=1.0)
        if self._thread is not None:
            self._thread.join(timeout=2.0)
        for node in self._nodes:
            node.destroy_node()
        self._nodes.clear()
        self.rclpy.try_shutdown(context=self._context)
        self._context = None

    def __enter__(self) -> Ros2Runtime:
        return self.open()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
