"""``[ros2]``: a live arm under ros2_control, reached over ROS 2 topics (SI units inside).

```toml
[ros2]
joint_states = "/joint_states"                      # sensor_msgs/JointState (joint_state_broadcaster)
command_interface = "effort"                        # effort | velocity | position
command = "/forward_effort_controller/commands"     # std_msgs/Float64MultiArray (forward command controller)
command_joints = ["shoulder_pan_joint", "shoulder_lift_joint"]  # that controller's `joints` order (default: the robot's)
topic_timeout_ms = 5000                             # before the first command: wait this long for the topics
joint_state_timeout_ms = 100                        # during the run: no new joint state for this long stops it
controller_manager = "/controller_manager"          # lists and switches the controllers ("none": the arm has none)
active_controller = "forward_effort_controller"     # the controller mbctl commands
holding_controller = "joint_trajectory_controller"  # the controller the arm is handed to at every end of a run
effort = "drive"                                    # what JointState effort is: drive | joint-torque-sensor | none
gravity_compensated = false                         # the robot adds its own gravity model to every effort command
```

Every key is optional. ``command`` defaults by interface to
``/forward_<interface>_controller/commands``; ``joint_state_timeout_ms`` to many intervals of the
stream measured at the start (:data:`TIMEOUT_INTERVALS`, at least :data:`MIN_TIMEOUT_S`);
``active_controller`` to the command topic's namespace; ``effort`` to the message's effort taken
as a drive torque where it carries one for every joint. Without ``holding_controller`` there is no
hand-over: a clean run keeps holding until it is stopped, and every stop commands zero.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mbctl.tomlfields import Table

__all__ = ["COMMAND_INTERFACES", "EFFORT_KINDS", "MIN_TIMEOUT_S", "NO_CONTROLLER_MANAGER", "TIMEOUT_INTERVALS", "Ros2Spec", "check_topic", "default_command_topic", "parse_ros2"]

KEYS = (
    "joint_states", "command", "command_interface", "command_joints", "topic_timeout_ms", "joint_state_timeout_ms",
    "controller_manager", "active_controller", "holding_controller", "effort", "gravity_compensated",
)
COMMAND_INTERFACES = ("effort", "velocity", "position")
EFFORT_KINDS = ("drive", "joint-torque-sensor", "none")
NO_CONTROLLER_MANAGER = "none"  # [ros2] controller_manager for an arm without one: nothing listed or switched
TIMEOUT_INTERVALS = 25  # default joint-state timeout: this many of the stream's measured intervals ...
MIN_TIMEOUT_S = 0.1  # ... and at least this long (s): Python nodes on a busy 2-core host stall for tens of ms


def default_command_topic(interface: str) -> str:
    """The topic of ros2_control's forward command controller for ``interface`` by its usual name."""
    return f"/forward_{interface}_controller/commands"


@dataclass(frozen=True)
class Ros2Spec:
    """The ``[ros2]`` table, parsed (times in s).

    Attributes:
        joint_states: Topic of ``sensor_msgs/msg/JointState``.
        command: Topic of ``std_msgs/msg/Float64MultiArray`` commands.
        command_interface: ``"effort"`` (N·m, N), ``"velocity"`` (rad/s, m/s) or ``"position"`` (rad, m).
        command_joints: Joint order of the command array (None: the robot's actuated order).
        topic_timeout_s: Longest wait for the topics before the first command (s).
        joint_state_timeout_s: Longest time without a new joint state during a run (s; None:
            :data:`TIMEOUT_INTERVALS` of the stream's interval measured at the start, at least
            :data:`MIN_TIMEOUT_S`).
        controller_manager: Node name of the controller manager (its ``list_controllers`` and
            ``switch_controller`` services); :data:`NO_CONTROLLER_MANAGER`: none.
        active_controller: The controller mbctl commands (None: the command topic's namespace).
        holding_controller: The controller the arm is handed to at the end of every run, clean or
            stopped (None: no hand-over; stops command zero).
        effort: What the joint states' ``effort`` is: ``"drive"`` (the torque the drives apply,
            before the joints' friction), ``"joint-torque-sensor"`` (link-side torque sensors, after
            friction), ``"none"`` (not a measured torque); None: ``"drive"`` where every message
            carries one effort per joint.
        gravity_compensated: The robot adds its own gravity model to every effort command (UR,
            Franka): mbctl then removes its model's gravity from each command it writes.
        file: The TOML file, for errors.
    """

    joint_states: str = "/joint_states"
    command: str = default_command_topic("effort")
    command_interface: str = "effort"
    command_joints: tuple[str, ...] | None = None
    topic_timeout_s: float = 5.0
    joint_state_timeout_s: float | None = None
    controller_manager: str = "/controller_manager"
    active_controller: str | None = None
    holding_controller: str | None = None
    effort: str | None = None
    gravity_compensated: bool = False
    file: Path | None = None

    @property
    def commanding_controller(self) -> str:
        """The active controller's name: given, else the command topic's namespace."""
        if self.active_controller is not None:
            return self.active_controller
        parts = [p for p in self.command.split("/") if p]
        return parts[-2] if len(parts) >= 2 else parts[0] if parts else ""


def check_topic(name: str, example: str) -> str:
    """The reason ``name`` is no ROS 2 topic name (``""`` if it is one); ``example``: a good one, for the message."""
    if not name or any(c.isspace() for c in name) or name.endswith("/") or "//" in name:
        return f"must be a ROS 2 topic name such as {example!r}, got {name!r}"
    return ""


def _topic(t: Table, key: str, default: str) -> str:
    name = t.string(key, default)
    reason = check_topic(name, default)
    if reason:
        raise t.error(key, reason)
    return name


def _name(t: Table, key: str) -> str | None:
    if key not in t:
        return None
    value = t.string(key)
    if not value or any(c.isspace() for c in value):
        raise t.error(key, f"must be a ROS 2 node or controller name, got {value!r}")
    return value


def _milliseconds(t: Table, key: str, default: float | None, upper: float) -> float | None:
    value = t.number(key, default)
    if value is None:
        return None
    if not 0 < value <= upper:
        raise t.error(key, f"must be in (0, {upper:g}] ms, got {value:g}")
    return value * 1e-3


def parse_ros2(t: Table) -> Ros2Spec:
    """Parse a ``[ros2]`` table (joint names are checked against the robot by the backend).

    Raises:
        ConfigError: Naming the file and field of a bad value.
    """
    t.only(KEYS)
    interface = t.string("command_interface", "effort", choices=COMMAND_INTERFACES)
    joints = None
    if "command_joints" in t:
        value = t.get("command_joints")
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise t.error("command_joints", f"must be a non-empty list of joint names, got {value!r}")
        repeated = sorted({v for v in value if value.count(v) > 1})
        if repeated:
            raise t.error("command_joints", f"joint {repeated[0]} is listed twice")
        joints = tuple(value)
    return Ros2Spec(
        joint_states=_topic(t, "joint_states", "/joint_states"),
        command=_topic(t, "command", default_command_topic(interface)),
        command_interface=interface,
        command_joints=joints,
        topic_timeout_s=_milliseconds(t, "topic_timeout_ms", 5000.0, 600e3),
        joint_state_timeout_s=_milliseconds(t, "joint_state_timeout_ms", None, 60e3),
        controller_manager=_name(t, "controller_manager") or "/controller_manager",
        active_controller=_name(t, "active_controller"),
        holding_controller=_name(t, "holding_controller"),
        effort=t.string("effort", None, choices=EFFORT_KINDS) if "effort" in t else None,
        gravity_compensated=t.boolean("gravity_compensated", False),
        file=t.file,
    )
