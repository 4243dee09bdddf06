"""``[ros2]``: a live arm under ros2_control, reached over ROS 2 topics (SI units inside).

```toml
[ros2]
joint_states = "/joint_states"                      # sensor_msgs/JointState (joint_state_broadcaster)
command_interface = "effort"                        # effort | velocity | position
command = "/forward_effort_controller/commands"     # std_msgs/Float64MultiArray (forward command controller)
command_joints = ["shoulder_pan_joint", "shoulder_lift_joint"]  # that controller's `joints` order (default: the robot's)
topic_timeout_ms = 5000                             # before the first command: wait this long for the topics
joint_state_timeout_ms = 50                         # during the run: no new joint state for this long stops it
controller_manager = "/controller_manager"          # for the hand-over at the end of a clean run
active_controller = "forward_effort_controller"     # the controller mbctl commands
holding_controller = "joint_trajectory_controller"  # the controller the arm is handed over to
```

Every key is optional. ``command`` defaults by interface to
``/forward_<interface>_controller/commands``; ``joint_state_timeout_ms`` to ten control periods, at least 50 ms;
``active_controller`` to the command topic's namespace. Without ``holding_controller`` there is no
hand-over: a clean run keeps holding until it is stopped.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mbctl.tomlfields import Table

__all__ = ["COMMAND_INTERFACES", "Ros2Spec", "default_command_topic", "parse_ros2"]

KEYS = (
    "joint_states", "command", "command_interface", "command_joints", "topic_timeout_ms", "joint_state_timeout_ms",
    "controller_manager", "active_controller", "holding_controller",
)
COMMAND_INTERFACES = ("effort", "velocity", "position")


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
        joint_state_timeout_s: Longest time without a new joint state during a run (s; None: ten
            control periods, at least 50 ms).
        controller_manager: Node name of the controller manager (its ``switch_controller`` service).
        active_controller: The controller mbctl commands (None: the command topic's namespace).
        holding_controller: The controller the arm is handed to after a clean run (None: no hand-over).
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
    file: Path | None = None

    @property
    def commanding_controller(self) -> str:
        """The active controller's name: given, else the command topic's namespace."""
        if self.active_controller is not None:
            return self.active_controller
        parts = [p for p in self.command.split("/") if p]
        return parts[-2] if len(parts) >= 2 else parts[0] if parts else ""


def _topic(t: Table, key: str, default: str) -> str:
    name = t.string(key, default)
    if not name or any(c.isspace() for c in name) or name.endswith("/") or "//" in name:
        raise t.error(key, f"must be a ROS 2 topic name such as {default!r}, got {name!r}")
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
        file=t.file,
    )
