"""A ros2_control arm behind the joint interface: JointState in, Float64MultiArray out.

ros2_control exposes every arm the same way: ``sensor_msgs/msg/JointState`` from the
joint_state_broadcaster and a forward command controller (effort, velocity or position) taking
``std_msgs/msg/Float64MultiArray`` on ``/<controller>/commands`` in the order of its ``joints``
parameter. :class:`Ros2Joints` reads the one and writes the other (topics and timeouts from the
robot's ``[ros2]`` table, :class:`mbctl.config.ros2.Ros2Spec`).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from mbctl.config.ros2 import Ros2Spec
from mbctl.errors import ConfigError, InputError
from mbctl.hardware.interface import CommandMode, CommunicationError, JointCommand, JointInterface, JointState
from mbctl.hardware.realtime import realtime_priority
from mbctl.hardware.ros2.runtime import Ros2Runtime, qos_profiles, require_rclpy

__all__ = ["INTERFACE_MODES", "SENT_LABEL", "Ros2Joints", "check_command_joints", "stamp_seconds"]

INTERFACE_MODES = {"effort": CommandMode.TORQUE, "velocity": CommandMode.VELOCITY, "position": CommandMode.POSITION}
SENT_LABEL = "mbctl_sent_ns="
"""Prefix of the command's ``layout.dim[0].label``: the host's CLOCK_MONOTONIC at publishing (ns), for
latency measurements by the emulator (forward command controllers ignore the layout)."""
DISABLE_ACK_TIMEOUT_S = 0.2  # s: the longest wait for the subscribers' acknowledgement of the stop command
DEFAULT_TIMEOUT_PERIODS = 10  # no joint state for this many control periods stops a run (default) ...
MIN_DEFAULT_TIMEOUT_S = 0.05  # ... or for this long (s), whichever is longer: Python nodes on a busy host stall
# for tens of ms (the emulator under SCHED_FIFO at load 7 on 2 cores: wake-ups up to 44-70 ms late, its step
# and publish at most 0.4 ms), and a false stop is a stop
_POLL_S = 0.005


def stamp_seconds(stamp: Any) -> float:
    """A ``builtin_interfaces/Time`` in s."""
    return stamp.sec + stamp.nanosec * 1e-9


def check_command_joints(joint_names: Sequence[str], spec: Ros2Spec) -> tuple[str, ...]:
    """The command array's joint order: ``spec.command_joints`` (every actuated joint once), else ``joint_names``.

    Raises:
        ConfigError: Naming ``ros2.command_joints`` for a joint the robot lacks or one left out.
    """
    order = spec.command_joints
    if order is None:
        return tuple(joint_names)
    for name in order:
        if name not in joint_names:
            raise ConfigError(f"joint {name} is not an actuated joint of the robot (actuated: {', '.join(joint_names)})", file=spec.file, field="ros2.command_joints")
    for name in joint_names:
        if name not in order:
            raise ConfigError(f"actuated joint {name} is missing: the command array needs every actuated joint", file=spec.file, field="ros2.command_joints")
    return tuple(order)


class Ros2Joints(JointInterface):
    """The actuated joints of an arm under ros2_control, over ROS 2 topics.

    Reading: the subscription callback (on the runtime's executor thread) keeps the newest joint
    state under a lock, its joints matched by name through an index computed from the first message
    (and again only when the names change); joints the robot lacks (a gripper) are ignored and named
    once in :attr:`sensing`. :attr:`JointState.t` is the message's header stamp (the drives' sample
    clock); a message with the newest sample's stamp again (an arm whose clock stands still while it
    is held) is no new sample but shows the arm alive. Paced, :meth:`read` never blocks: it returns
    the newest sample (a sample read again keeps its time) and raises ``CommunicationError("stale",
    ...)`` once no joint state has arrived for ``joint_state_timeout`` (the loop stops on it at once). Lock-step (against ``mbctl emulate --bus
    ros2 --lockstep-period``), a read after a write waits for the sample stamped after the command.

    Writing: ``Float64MultiArray`` in the order of ``command_joints``, in the unit of the command
    interface (effort N·m/N, velocity rad/s or m/s, position rad or m).

    Opening waits (bounded by ``topic_timeout``) for a joint state and for the command topic's
    subscriber; no publisher, no subscriber, an incompatible QoS, a missing joint or a
    ``command_joints`` entry the robot lacks is one line (:class:`~mbctl.errors.InputError`, exit 2),
    before any command.

    Ending: :meth:`disable` (every stop) commands what leaves the arm still or limp: zero effort on an
    effort interface, the present position on a position interface, zero velocity on a velocity
    interface, and waits (up to 0.2 s) until every subscriber acknowledged it: a forward command
    controller holds its last command, so the stop must not be lost to closing. :meth:`hand_over` (a clean finish) switches the controller manager from the active to
    the holding controller through ``switch_controller`` where ``holding_controller`` is configured
    and says so; without one (:attr:`hand_over_possible` False) the loop keeps holding until stopped.

    Args:
        joint_names: The robot's actuated joints (the order of every array).
        spec: Topics, interface, joint order and timeouts.
        period_s: Control period (s): the default joint-state timeout is ten of them, at least 50 ms.
        mode: The loop's command mode, which must be the interface's.
        lockstep: Wait for the sample after each command (emulator in lock-step).
        domain_id: DDS domain (default ``ROS_DOMAIN_ID``).
        realtime_priority: ``SCHED_FIFO`` priority of the threads that receive (the executor's and the
            middleware's, started at :meth:`open`), if the OS grants it: joint states then reach a
            paced loop in time on a busy machine. None: normal scheduling.
    """

    sample_clock = True
    disable_action = "the stop command (zero effort or velocity, or the present position) to the command topic"

    def __init__(self, joint_names: Sequence[str], spec: Ros2Spec, *, period_s: float, mode: CommandMode = CommandMode.TORQUE, lockstep: bool = False,
                 domain_id: int | None = None, realtime_priority: int | None = None):
        self.joint_names = tuple(joint_names)
        self.spec = spec
        self.period_s = period_s
        self.lockstep = lockstep
        self.domain_id = domain_id
        self.realtime_priority = realtime_priority
        self.scheduling = ""
        self.timeout_s = spec.joint_state_timeout_s if spec.joint_state_timeout_s is not None else max(DEFAULT_TIMEOUT_PERIODS * period_s, MIN_DEFAULT_TIMEOUT_S)
        self.command_joints = check_command_joints(self.joint_names, spec)
        wanted = INTERFACE_MODES[spec.command_interface]
        if mode is not wanted:
            raise InputError(f"the {mode.value} commands of this controller need {'a ' + mode.value if mode is not CommandMode.TORQUE else 'an effort'} interface; "
                             f"[ros2] command_interface is {spec.command_interface}", file=spec.file, field="ros2.command_interface")
        self.mode = mode
        self._to_command = np.array([self.joint_names.index(n) for n in self.command_joints], dtype=int)
        self.ignored: tuple[str, ...] = ()
        self.comm_errors: dict[str, int] = {}
        self.hand_over_error = ""
        self.disable_acked: bool | None = None  # the stop command acknowledged by every subscriber (None: none sent)
        self._lock = threading.Condition()
        self._sample: JointState | None = None
        self._received = -math.inf  # host monotonic time of the newest joint state, new or the same again (s)
        self._names: list[str] | None = None
        self._index: np.ndarray | None = None
        self._mismatch = ""
        self._velocity_from_positions = False
        self._incompatible = ""
        self._written_after: float | None = None  # lock-step: the stamp a read must pass after a write
        self._runtime: Ros2Runtime | None = None
        self._publisher = None
        self._message = None
        self._dim = None
        self._enabled = False
        self._written = False  # a command was sent: from then on a stale sample stops the run

    # -- the subscription callback (executor thread) ---------------------------------------------
    def _index_of(self, names: list[str]) -> np.ndarray | None:
        where = {name: k for k, name in enumerate(names)}
        missing = [n for n in self.joint_names if n not in where]
        if missing:
            self._mismatch = f"joint {missing[0]} is not in {self.spec.joint_states} (its joints: {', '.join(names)})"
            return None
        self.ignored = tuple(n for n in names if n not in self.joint_names)
        return np.array([where[n] for n in self.joint_names], dtype=int)

    def _on_joint_state(self, msg: Any) -> None:
        received = time.monotonic()
        if self._names != msg.name:
            self._names = list(msg.name)
            self._index = self._index_of(self._names)
        index = self._index
        if index is None:
            return
        t = stamp_seconds(msg.header.stamp)
        q = np.asarray(msg.position, dtype=float)[index]
        with self._lock:
            last = self._sample
            if last is not None and t <= last.t:
                if t == last.t:  # the same sample again (a held arm's clock stands still): alive, but no step
                    self._received = received
                    self._lock.notify_all()
                return
            if len(msg.velocity) == len(msg.name):
                dq = np.asarray(msg.velocity, dtype=float)[index]
            else:  # a broadcaster without velocity interfaces: the difference of positions over the stamps
                self._velocity_from_positions = True
                dq = np.zeros(len(index)) if last is None else (q - last.q) / (t - last.t)
            effort = np.asarray(msg.effort, dtype=float)[index] if len(msg.effort) == len(msg.name) else np.full(len(index), np.nan)
            self._sample = JointState(t=t, q=q, dq=dq, effort=effort)
            self._received = received
            self._lock.notify_all()

    def _on_incompatible(self, what: str, status: Any) -> None:
        self._incompatible = f"{what}: incompatible QoS ({getattr(status, 'last_policy_kind', 'a policy')}) with a peer"

    # -- JointInterface --------------------------------------------------------------------------
    def open(self) -> None:
        require_rclpy("sensor_msgs.msg", "std_msgs.msg")
        from rclpy.event_handler import PublisherEventCallbacks, SubscriptionEventCallbacks
        from sensor_msgs.msg import JointState as JointStateMsg
        from std_msgs.msg import Float64MultiArray, MultiArrayDimension

        qos = qos_profiles()
        with realtime_priority(self.realtime_priority) as self.scheduling:  # the threads started now inherit it
            self._runtime = Ros2Runtime(self.domain_id).open()
        try:
            node = self._runtime.node("mbctl_run")
            node.create_subscription(JointStateMsg, self.spec.joint_states, self._on_joint_state, qos["sensor"],
                                     event_callbacks=SubscriptionEventCallbacks(incompatible_qos=lambda s: self._on_incompatible(self.spec.joint_states, s)))
            self._publisher = node.create_publisher(Float64MultiArray, self.spec.command, qos["command"],
                                                    event_callbacks=PublisherEventCallbacks(incompatible_qos=lambda s: self._on_incompatible(self.spec.command, s)))
            self._message = Float64MultiArray()
            self._dim = MultiArrayDimension(label=SENT_LABEL, size=len(self.joint_names), stride=len(self.joint_names))
            self._message.layout.dim = [self._dim]
            self._node = node
            self._wait_for_topics()
        except BaseException:
            self.close()
            raise

    def _wait_for_topics(self) -> None:
        """A first joint state with every joint, and a subscriber of the commands, within the topic timeout."""
        spec, field = self.spec, "ros2.joint_states"
        deadline = time.monotonic() + spec.topic_timeout_s
        while time.monotonic() < deadline:
            if self._incompatible:
                raise InputError(self._incompatible, file=spec.file, field=field)
            if self._mismatch:
                raise InputError(self._mismatch, file=spec.file, field=field)
            if self._sample is not None and self._publisher.get_subscription_count() > 0:
                return
            time.sleep(_POLL_S)
        waited = f"after waiting {spec.topic_timeout_s:g} s on ROS domain {self._runtime.domain_id}"
        if self._incompatible or self._mismatch:
            raise InputError(self._incompatible or self._mismatch, file=spec.file, field=field)
        if self._sample is None:
            publishers = self._node.count_publishers(spec.joint_states)
            what = f"{publishers} publisher(s) but no message" if publishers else "no publisher"
            raise InputError(f"{spec.joint_states}: {what} of sensor_msgs/msg/JointState {waited}", file=spec.file, field=field)
        raise InputError(f"{spec.command}: no subscriber {waited} (is {spec.commanding_controller} loaded and active?)", file=spec.file, field="ros2.command")

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
        self._publisher = None

    def enable(self) -> None:
        self._enabled = True

    def disable(self) -> None:
        """Zero effort, zero velocity, or the present position; once, never raising."""
        if not self._enabled or self._publisher is None:
            return
        self._enabled = False
        try:
            if self.mode is CommandMode.POSITION:
                sample = self._sample
                if sample is None:
                    return
                hold = sample.q
            else:
                hold = np.zeros(len(self.joint_names))
            self._publish(hold)
            # reliable, but only once delivered: closing right after could drop it, and a forward
            # command controller holds its last command
            from rclpy.duration import Duration

            self.disable_acked = self._publisher.wait_for_all_acked(Duration(nanoseconds=int(DISABLE_ACK_TIMEOUT_S * 1e9)))
        except Exception:  # noqa: BLE001  disable must never raise
            pass

    @property
    def hand_over_possible(self) -> bool:
        """A holding controller is configured: without one the loop holds until the run is stopped."""
        return self.spec.holding_controller is not None

    def hand_over(self) -> str:
        """Switch the controller manager to the holding controller; if the switch fails, the stop of
        :meth:`disable` (nothing else is left), and the reason."""
        from mbctl.hardware.ros2.handover import switch_to_holding

        if not self.hand_over_possible or self._runtime is None:
            self.disable()
            return f"{self.disable_action} (no holding controller to hand the arm to)"
        try:
            done = switch_to_holding(self._node, self.spec)
        except Exception as exc:  # noqa: BLE001  never raises
            self.hand_over_error = f"{exc.__class__.__name__}: {exc}"
            self.disable()
            return f"{self.disable_action}: the switch to {self.spec.holding_controller} failed ({self.hand_over_error})"
        self._enabled = False  # the holding controller has the arm: no zero command after it
        return done

    def read(self) -> JointState:
        with self._lock:
            if self.lockstep and self._written_after is not None:
                after = self._written_after
                self._lock.wait_for(lambda: self._sample is not None and self._sample.t > after, timeout=self.spec.topic_timeout_s)
                if self._sample.t > after:
                    self._written_after = None
                    return self._sample
                return self._stale(self.spec.topic_timeout_s)
            age = time.monotonic() - self._received
            if self.lockstep or age <= self.timeout_s:
                return self._sample
            if not self._written:  # before the run (the loop's set-up may take longer than the timeout): wait for a new one
                heard = self._received
                if self._lock.wait_for(lambda: self._received > heard, timeout=self.spec.topic_timeout_s):
                    return self._sample
                return self._stale(self.spec.topic_timeout_s)
            return self._stale(self.timeout_s)

    def _stale(self, timeout_s: float) -> JointState:
        age = time.monotonic() - self._received
        self.comm_errors["stale"] = self.comm_errors.get("stale", 0) + 1
        raise CommunicationError("stale", f"{self.spec.joint_states}: no new JointState for {age * 1e3:.0f} ms (timeout {timeout_s * 1e3:.0f} ms)")

    def write(self, command: JointCommand) -> None:
        if command.mode is not self.mode:
            raise ValueError(f"the {self.spec.command_interface} interface takes {self.mode.value} commands, got {command.mode.value}")
        if self.lockstep:
            with self._lock:
                self._written_after = self._sample.t
        self._written = True
        self._publish(command.value)

    def _publish(self, value: np.ndarray) -> None:
        self._dim.label = f"{SENT_LABEL}{time.monotonic_ns()}"
        self._message.data = np.asarray(value, dtype=float)[self._to_command]
        self._publisher.publish(self._message)

    @property
    def sensing(self) -> str:
        """Where the measurements come from, in one line (for the run summary)."""
        parts = [f"ROS 2 {self.spec.joint_states} (header stamps; receiving threads {self.scheduling or 'normal'})"]
        if self._velocity_from_positions:
            parts.append("velocity: difference of positions (the joint states carry none)")
        if self.ignored:
            parts.append(f"ignored joints: {', '.join(self.ignored)}")
        parts.append(f"commands on {self.spec.command} ({self.spec.command_interface})")
        return "; ".join(parts)
