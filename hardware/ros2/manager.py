"""The controller manager of ``mbctl emulate --bus ros2``: its controllers, their states, and its
``list_controllers`` and ``switch_controller`` services, as ros2_control's controller manager
answers them (controller_manager_msgs, Jazzy).

Controllers: ``joint_state_broadcaster`` (always active), one forward command controller per command
topic (named after the topic's namespace; the one of ``[ros2] command`` after
``commanding_controller``), and the holding controller (``[ros2] holding_controller``, default
:data:`EMULATED_HOLDING_CONTROLLER`, a joint trajectory controller that holds the joints where they
are when it is activated). At the start the commanding controller is active and the others inactive.
Every command and holding controller claims every joint's command interface, so at most one of them
can be active: a switch that would leave two active is refused (a resource conflict), as
ros2_control refuses it.

A switch (``strictness`` STRICT = 2): every controller named must exist and be in the other state, else
nothing changes and ``ok`` is False; BEST_EFFORT = 1 switches what it can.
"""

from __future__ import annotations

import threading
from typing import Any

from mbctl.config.ros2 import Ros2Spec

__all__ = ["EMULATED_HOLDING_CONTROLLER", "EmulatedControllers", "controller_of"]

EMULATED_HOLDING_CONTROLLER = "joint_trajectory_controller"
"""The emulated controller manager's holding controller where ``[ros2] holding_controller`` names none."""

BROADCASTER = "joint_state_broadcaster"
TYPES = {
    "forward": "forward_command_controller/ForwardCommandController",
    "holding": "joint_trajectory_controller/JointTrajectoryController",
    BROADCASTER: "joint_state_broadcaster/JointStateBroadcaster",
}
STRICT = 2


def controller_of(topic: str) -> str:
    """The controller a command topic belongs to: its namespace (``/forward_effort_controller/commands``)."""
    parts = [p for p in topic.split("/") if p]
    return parts[-2] if len(parts) >= 2 else topic


class EmulatedControllers:
    """The controllers' states behind a lock (service callbacks and the update thread share them).

    Args:
        spec: The robot's ``[ros2]`` (the commanding and holding controllers' names).
        topics: Command topic -> its interface (``"effort"``, ``"position"``).
        joint_names: The joints every command and holding controller claims.
    """

    def __init__(self, spec: Ros2Spec, topics: dict[str, str], joint_names: tuple[str, ...]):
        self.holding_controller = spec.holding_controller or EMULATED_HOLDING_CONTROLLER
        commanding = spec.commanding_controller
        self.of_topic = {t: commanding if t == spec.command else controller_of(t) for t in topics}
        self.interfaces = {self.of_topic[t]: i for t, i in topics.items()}
        self.interfaces[self.holding_controller] = "position"
        self.joint_names = joint_names
        self.active = {BROADCASTER: True, **{c: c == commanding for c in self.of_topic.values()}, self.holding_controller: False}
        if not any(self.active[c] for c in self.of_topic.values()):  # [ros2] command names no served topic
            self.active[self.of_topic[next(iter(topics))]] = True
        self.lock = threading.Lock()
        self.switches = 0

    @property
    def holding(self) -> bool:
        """The holding controller is active: the joints are held, commands ignored."""
        return self.active[self.holding_controller]

    def accepts(self, topic: str) -> bool:
        """A command on ``topic`` reaches the arm: its controller is active."""
        return self.active.get(self.of_topic.get(topic, ""), False)

    def switch(self, activate: list[str], deactivate: list[str], strictness: int) -> tuple[bool, str]:
        """Apply a switch; ``(ok, message)``. The caller holds :attr:`lock`."""
        unknown = [c for c in activate + deactivate if c not in self.active]
        wrong = [c for c in activate if self.active.get(c)] + [c for c in deactivate if self.active.get(c) is False]
        if unknown and strictness == STRICT:
            return False, f"unknown controller {unknown[0]}"
        if wrong and strictness == STRICT:
            return False, f"controller {wrong[0]} is already {'active' if self.active[wrong[0]] else 'inactive'}"
        after = dict(self.active)
        for c in deactivate:
            if c in after:
                after[c] = False
        for c in activate:
            if c in after:
                after[c] = True
        claiming = [c for c, on in after.items() if on and c != BROADCASTER]
        if len(claiming) > 1:
            if strictness == STRICT:
                return False, f"resource conflict: {claiming[0]} and {claiming[1]} both claim the joints' command interfaces"
            return False, "resource conflict"
        self.active = after
        self.switches += 1
        return True, ""

    def describe(self) -> list[dict[str, Any]]:
        """Each controller: name, state, type, claimed interfaces (as ``ControllerState`` has them)."""
        out = []
        for name, on in self.active.items():
            kind = "holding" if name == self.holding_controller else BROADCASTER if name == BROADCASTER else "forward"
            interface = self.interfaces.get(name)
            claimed = [f"{j}/{interface}" for j in self.joint_names] if on and interface else []
            out.append({"name": name, "state": "active" if on else "inactive", "type": TYPES[kind], "claimed_interfaces": claimed})
        return out
