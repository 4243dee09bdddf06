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
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mbctl.config.ros2 import MIN_TIMEOUT_S, NO_CONTROLLER_MANAGER, TIMEOUT_INTERVALS, Ros2Spec
from mbctl.errors import ConfigError, InputError
from mbctl.hardware.interface import CommandMode, CommunicationError, JointCommand, JointInterface, JointState
from mbctl.hardware.realtime import realtime_priority
from mbctl.hardware.ros2.runtime import Ros2Runtime, qos_profiles, require_rclpy

__all__ = ["EMULATOR_NODE", "INTERFACE_MODES", "SENT_LABEL", "Ros2Joints", "check_command_joints", "stamp_seconds"]

INTERFACE_MODES = {"effort": CommandMode.TORQUE, "velocity": CommandMode.VELOCITY, "position": CommandMode.POSITION}
SENT_LABEL = "mbctl_sent_ns="
"""Prefix of the command's ``layout.dim[0].label``: the host's CLOCK_MONOTONIC at publishing (ns), for
latency measurements by the emulator (forward command controllers ignore the layout)."""
EMULATOR_NODE = "mbctl_emulator"  # the node name of mbctl emulate --bus ros2 (lock-step is refused against any other)
DISABLE_ACK_TIMEOUT_S = 0.2  # s: the longest wait for the subscribers' acknowledgement of the stop command
SWITCH_TIMEOUT_S = 0.5  # s: the longest wait for the hand-over's switch at a stop, the robot alive ...
STALE_SWITCH_TIMEOUT_S = 0.02  # ... and after the joint states stopped (the robot may be gone: the exit must not wait)
INTERVAL_MESSAGES = 21  # joint states timed at the start, for the stream's interval ...
INTERVAL_WAIT_S = 1.0  # ... waiting at most this long for them (s)
_POLL_S = 0.002
UNKNOWN_NODE = "_NODE_NAME_UNKNOWN_"  # rclpy's node name of an endpoint whose node the graph does not know yet


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
    once in :attr:`sensing`. :attr:`JointState.t` is the message's header stamp (the time the robot
    measured it); a message with the newest sample's stamp again (an arm whose clock stands still
    while it is held) is no new sample but shows the arm alive. Paced, :meth:`read` never blocks: it
    returns the newest sample (a sample read again keeps its time) and raises
    ``CommunicationError("stale", ...)`` once no joint state has arrived for the joint-state timeout
    (the loop stops on it at once). Lock-step (only against ``mbctl emulate --bus ros2
    --lockstep-period``, node :data:`EMULATOR_NODE` publishing ``/clock``), a read after a write waits
    for the sample stamped after the command.

    The joint-state timeout: ``[ros2] joint_state_timeout_ms``, else :data:`TIMEOUT_INTERVALS` times
    the stream's interval measured at :meth:`open` (the median gap between the first
    :data:`INTERVAL_MESSAGES` joint states), at least :data:`MIN_TIMEOUT_S`.

    Effort: where the joint states carry one effort per joint and ``[ros2] effort`` is not
    ``"none"``, :attr:`effort_source` says what it is (a drive torque, or joint torque sensors':
    :attr:`effort_after_friction`), and the observer takes it as the torque acting on the arm.

    Writing: ``Float64MultiArray`` in the order of ``command_joints``, in the unit of the command
    interface (effort N·m/N, velocity rad/s or m/s, position rad or m). An arm that compensates
    gravity itself (``[ros2] gravity_compensated``) gets each effort command less the model's gravity
    at the newest sample (``gravity``).

    Opening: waits (bounded by ``topic_timeout``) for a matched joint-state publisher and its first
    message and for the command topic's subscriber, times the stream, then (unless ``[ros2]
    controller_manager = "none"``) lists the controllers and makes the commanding one active: a
    strict switch from the holding controller where that is active. No publisher, no subscriber, an
    incompatible QoS, a missing joint, a ``command_joints`` entry the robot lacks, a commanding
    controller not loaded: one line (:class:`~mbctl.errors.InputError`, exit 2); a switch refused:
    :class:`HardwareError` (exit 1); before any command.

    Ending (every stop and a clean finish alike): where ``holding_controller`` is configured, a strict
    switch from the commanding controller to it (the arm held where it is); where none is, or the
    switch fails, the stop command: zero effort on an effort interface, the present position on a
    position interface, zero velocity on a velocity interface, waiting (up to 0.2 s) until every
    subscriber acknowledged it (a forward command controller holds its last command, so the stop must
    not be lost to closing). After a stale stream (the robot may be gone) the switch gets
    :data:`STALE_SWITCH_TIMEOUT_S` and the stop command no wait: the process exits at once.

    Args:
        joint_names: The robot's actuated joints (the order of every array).
        spec: Topics, interface, joint order, timeouts, controllers, effort.
        period_s: Control period (s): the joint-state timeout before the stream is timed.
        mode: The loop's command mode, which must be the interface's.
        lockstep: Wait for the sample after each command (emulator in lock-step).
        domain_id: DDS domain (default ``ROS_DOMAIN_ID``).
        realtime_priority: ``SCHED_FIFO`` priority of the threads that receive (the executor's and the
            middleware's, started at :meth:`open`), if the OS grants it: joint states then reach a
            paced loop in time on a busy machine. None: normal scheduling.
        gravity: ``gravity(q) -> g`` of the controller's model on the actuated joints (N·m, from rad),
            needed where ``spec.gravity_compensated``.
    """

    sample_clock = True

    def __init__(self, joint_names: Sequence[str], spec: Ros2Spec, *, period_s: float, mode: CommandMode = CommandMode.TORQUE, lockstep: bool = False,
                 domain_id: int | None = None, realtime_priority: int | None = None, gravity: Callable[[np.ndarray], np.ndarray] | None = None):
        self.joint_names = tuple(joint_names)
        self.spec = spec
        self.period_s = period_s
        self.lockstep = lockstep
        self.domain_id = domain_id
        self.realtime_priority = realtime_priority
        self.scheduling = ""
        self.timeout_s = spec.joint_state_timeout_s if spec.joint_state_timeout_s is not None else max(TIMEOUT_INTERVALS * period_s, MIN_TIMEOUT_S)
        self.interval_s: float | None = None  # the stream's measured interval (s)
        self.command_joints = check_command_joints(self.joint_names, spec)
        wanted = INTERFACE_MODES[spec.command_interface]
        if mode is not wanted:
            raise InputError(f"the {mode.value} commands of this controller need {'a ' + mode.value if mode is not CommandMode.TORQUE else 'an effort'} interface; "
                             f"[ros2] command_interface is {spec.command_interface}", file=spec.file, field="ros2.command_interface")
        if spec.gravity_compensated and gravity is None and mode is CommandMode.TORQUE:
            raise ValueError("[ros2] gravity_compensated needs the model's gravity")
        self.mode = mode
        self._gravity = gravity if spec.gravity_compensated and mode is CommandMode.TORQUE else None
        self._to_command = np.array([self.joint_names.index(n) for n in self.command_joints], dtype=int)
        self.ignored: tuple[str, ...] = ()
        self.comm_errors: dict[str, int] = {}
        self.hand_over_error = ""
        self.started = ""  # what opening did with the controllers
        self.ended = ""  # what the end did with the arm
        self.disable_acked: bool | None = None  # the stop command acknowledged by every subscriber (None: none sent)
        self.effort_source = ""
        self.effort_after_friction = False
        self._lock = threading.Condition()
        self._sample: JointState | None = None
        self._received = -math.inf  # host monotonic time of the newest joint state, new or the same again (s)
        self._arrivals: deque[float] = deque(maxlen=INTERVAL_MESSAGES)
        self._names: list[str] | None = None
        self._index: np.ndarray | None = None
        self._mismatch = ""
        self._velocity_from_positions = False
        self._has_effort = False
        self._incompatible = ""
        self._written_after: float | None = None  # lock-step: the stamp a read must pass after a write
        self._runtime: Ros2Runtime | None = None
        self._manager = None
        self._subscription = None
        self._publisher = None
        self._message = None
        self._dim = None
        self._enabled = False
        self._written = False  # a command was sent: from then on a stale sample stops the run
        self._stale_seen = False  # the stream went stale: the robot may be gone

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
            self._arrivals.append(received)
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
            self._has_effort = len(msg.effort) == len(msg.name)
            effort = np.asarray(msg.effort, dtype=float)[index] if self._has_effort else np.full(len(index), np.nan)
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
            self._subscription = node.create_subscription(
                JointStateMsg, self.spec.joint_states, self._on_joint_state, qos["sensor"],
                event_callbacks=SubscriptionEventCallbacks(incompatible_qos=lambda s: self._on_incompatible(self.spec.joint_states, s)))
            self._publisher = node.create_publisher(Float64MultiArray, self.spec.command, qos["command"],
                                                    event_callbacks=PublisherEventCallbacks(incompatible_qos=lambda s: self._on_incompatible(self.spec.command, s)))
            self._message = Float64MultiArray()
            self._dim = MultiArrayDimension(label=SENT_LABEL, size=len(self.joint_names), stride=len(self.joint_names))
            self._message.layout.dim = [self._dim]
            self._node = node
            deadline = time.monotonic() + self.spec.topic_timeout_s
            self._wait_for_topics(deadline)
            if self.lockstep:
                self._check_lockstep_peer(max(deadline, time.monotonic() + 1.0))
            else:
                self._time_stream(min(deadline, time.monotonic() + INTERVAL_WAIT_S))
            self._effort_kind()
            if self.spec.controller_manager != NO_CONTROLLER_MANAGER:
                from mbctl.hardware.ros2.handover import ControllerManager

                self._manager = ControllerManager(node, self.spec)
                self.started = self._manager.activate_commanding(max(deadline - time.monotonic(), 1.0))
        except BaseException:
            self.close()
            raise

    def _wait_for_topics(self, deadline: float) -> None:
        """A matched joint-state publisher and its first message with every joint, and a subscriber of the
        commands, by ``deadline`` (host monotonic, s)."""
        spec, field = self.spec, "ros2.joint_states"
        while time.monotonic() < deadline:
            if self._incompatible:
                raise InputError(self._incompatible, file=spec.file, field=field)
            if self._mismatch:
                raise InputError(self._mismatch, file=spec.file, field=field)
            if self._sample is not None and self._subscription.get_publisher_count() > 0 and self._publisher.get_subscription_count() > 0:
                return
            time.sleep(_POLL_S)
        waited = f"after waiting {spec.topic_timeout_s:g} s on ROS domain {self._runtime.domain_id}"
        if self._incompatible or self._mismatch:
            raise InputError(self._incompatible or self._mismatch, file=spec.file, field=field)
        if self._sample is None:
            publishers = max(self._node.count_publishers(spec.joint_states), self._subscription.get_publisher_count())
            what = f"{publishers} publisher(s) but no message" if publishers else "no publisher"
            raise InputError(f"{spec.joint_states}: {what} of sensor_msgs/msg/JointState {waited}", file=spec.file, field=field)
        raise InputError(f"{spec.command}: no subscriber {waited} (is {spec.commanding_controller} loaded?)", file=spec.file, field="ros2.command")

    def _time_stream(self, until: float) -> None:
        """The stream's interval: the median gap between the first :data:`INTERVAL_MESSAGES` arrivals
        (waiting for them until ``until``, host monotonic s); the timeout from it unless configured."""
        with self._lock:
            self._lock.wait_for(lambda: len(self._arrivals) >= INTERVAL_MESSAGES, timeout=max(until - time.monotonic(), 0.0))
            arrivals = np.array(self._arrivals)
        if arrivals.size >= 3:
            self.interval_s = float(np.median(np.diff(arrivals)))
            self.sample_period_s = self.interval_s  # the robot's update period: the loop's sample timing and phase lock
            if self.spec.joint_state_timeout_s is None:
                self.timeout_s = max(TIMEOUT_INTERVALS * self.interval_s, MIN_TIMEOUT_S)

    def _check_lockstep_peer(self, deadline: float) -> None:
        """Lock-step needs mbctl's emulator stepping once per command (it publishes /clock); anything else keeps its own time.
        The publishers' node names come with the graph's own discovery, after their endpoints: waited for until ``deadline``."""
        def named(topic: str) -> set[str]:
            return {i.node_name for i in self._node.get_publishers_info_by_topic(topic)}

        while True:
            nodes, clock = named(self.spec.joint_states), named("/clock")
            known = bool(nodes) and UNKNOWN_NODE not in nodes | clock
            if (known and (EMULATOR_NODE not in nodes or EMULATOR_NODE in clock)) or time.monotonic() > deadline:
                break
            time.sleep(_POLL_S)
        nodes = sorted(nodes)
        if EMULATOR_NODE not in nodes or EMULATOR_NODE not in clock:
            raise InputError(f"lock-step over ROS 2 needs mbctl emulate --bus ros2 --lockstep-period (one step per command); {self.spec.joint_states} "
                             f"comes from {', '.join(nodes) or 'an unknown node'}, which keeps its own time: run paced", field="--lockstep")

    def _effort_kind(self) -> None:
        """:attr:`effort_source` from ``[ros2] effort`` and whether the joint states carry efforts."""
        kind = self.spec.effort or "drive"
        if kind == "none" or not self._has_effort:
            return
        what = "joint torque sensors, after friction" if kind == "joint-torque-sensor" else "drive torque"
        self.effort_source = f"JointState effort on {self.spec.joint_states} ({what})"
        self.effort_after_friction = kind == "joint-torque-sensor"

    def close(self) -> None:
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None
        self._publisher = None
        self._manager = None

    def enable(self) -> None:
        self._enabled = True

    @property
    def hand_over_possible(self) -> bool:
        """A holding controller is configured: without one the loop holds until the run is stopped."""
        return self.spec.holding_controller is not None and self.spec.controller_manager != NO_CONTROLLER_MANAGER

    @property
    def disable_action(self) -> str:
        """What the end did (after :meth:`disable`), else what it will do, for the run summary."""
        if self.ended:
            return self.ended
        if self.hand_over_possible:
            return f"the hand-over to {self.spec.holding_controller} (switch_controller), the stop command where it fails"
        return "the stop command (zero effort or velocity, or the present position) to the command topic"

    def disable(self) -> None:
        """The hand-over to the holding controller where configured, else (or where it fails) the stop command; once, never raising.
        Before any command (a run refused at its start) only a switch made at :meth:`open` is undone."""
        if self._publisher is None:
            return
        switched = self._manager is not None and self._manager.changed and self.hand_over_possible
        if not (self._enabled or switched):
            return
        enabled, self._enabled = self._enabled, False
        if self._manager is not None:
            self._manager.changed = False
        try:
            if not enabled:
                self.ended = self._manager.to_holding(SWITCH_TIMEOUT_S)
                return
            self.ended = self._end()
        except Exception as exc:  # noqa: BLE001  disable must never raise
            self.ended = f"the end failed ({exc.__class__.__name__}: {exc})"

    def hand_over(self) -> str:
        """The end of a clean run: as :meth:`disable`; what was done."""
        self.disable()
        return self.ended

    def _end(self) -> str:
        if self.hand_over_possible and self._manager is not None:
            try:
                return self._manager.to_holding(STALE_SWITCH_TIMEOUT_S if self._stale_seen else SWITCH_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001  the stop command then
                self.hand_over_error = f"{exc.__class__.__name__}: {exc}"
                return f"{self._stop_command()}: the switch to {self.spec.holding_controller} failed ({self.hand_over_error})"
        none = " (no holding controller to hand the arm to)" if self.spec.holding_controller is None else ""
        return self._stop_command() + none

    def _stop_command(self) -> str:
        """Zero effort, zero velocity, or the present position; acknowledged unless the stream went stale."""
        if self.mode is CommandMode.POSITION:
            sample = self._sample
            if sample is None:
                return "no stop command (no position to hold)"
            hold, what = sample.q, "the present position"
        else:
            hold, what = np.zeros(len(self.joint_names)), f"zero {'velocity' if self.mode is CommandMode.VELOCITY else 'effort'}"
        self._publish(hold)
        if self._stale_seen:  # no subscriber may be left to acknowledge it: no wait
            return f"{what} sent to {self.spec.command} (unacknowledged: the joint states had stopped)"
        # reliable, but only once delivered: closing right after could drop it, and a forward
        # command controller holds its last command
        from rclpy.duration import Duration

        self.disable_acked = self._publisher.wait_for_all_acked(Duration(nanoseconds=int(DISABLE_ACK_TIMEOUT_S * 1e9)))
        return f"{what} sent to {self.spec.command}" + ("" if self.disable_acked else " (not acknowledged within 0.2 s)")

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
        self._stale_seen = True
        self.comm_errors["stale"] = self.comm_errors.get("stale", 0) + 1
        raise CommunicationError("stale", f"{self.spec.joint_states}: no new JointState for {age * 1e3:.0f} ms (timeout {timeout_s * 1e3:.0f} ms)")

    def write(self, command: JointCommand) -> None:
        if command.mode is not self.mode:
            raise ValueError(f"the {self.spec.command_interface} interface takes {self.mode.value} commands, got {command.mode.value}")
        if self.lockstep:
            with self._lock:
                self._written_after = self._sample.t
        self._written = True
        value = command.value if self._gravity is None else command.value - self._gravity(self._sample.q)
        self._publish(value)

    def _publish(self, value: np.ndarray) -> None:
        self._dim.label = f"{SENT_LABEL}{time.monotonic_ns()}"
        self._message.data = np.asarray(value, dtype=float)[self._to_command]
        self._publisher.publish(self._message)

    @property
    def sensing(self) -> str:
        """Where the measurements come from, in one line (for the run summary)."""
        parts = [f"ROS 2 {self.spec.joint_states} (header stamps; receiving threads {self.scheduling or 'normal'})"]
        if self.interval_s is not None:
            parts.append(f"interval {self.interval_s * 1e3:.2f} ms, timeout {self.timeout_s * 1e3:.0f} ms")
        if self._velocity_from_positions:
            parts.append("velocity: difference of positions (the joint states carry none)")
        parts.append(f"effort: {self.effort_source or 'not a measured torque (the commands are used)'}")
        if self.ignored:
            parts.append(f"ignored joints: {', '.join(self.ignored)}")
        parts.append(f"commands on {self.spec.command} ({self.spec.command_interface})")
        if self._gravity is not None:
            parts.append("the robot compensates gravity: each command less the model's gravity")
        if self.started:
            parts.append(f"controllers: {self.started}")
        return "; ".join(parts)
