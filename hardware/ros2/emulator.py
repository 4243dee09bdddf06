"""The simulated plant served as a ros2_control robot over ROS 2 (``mbctl emulate ROBOT --bus ros2``).

What a ros2_control arm with a joint_state_broadcaster and forward command controllers exposes:

- ``sensor_msgs/msg/JointState`` on the joint-states topic, one per update;
- ``std_msgs/msg/Float64MultiArray`` commands on the effort controller's topic (always) and the
  position controller's (when every actuated joint has a servo, ``[joints.<name>.actuator]``, whose
  firmware loop takes goal positions), in the order of ``command_joints``; a forward command
  controller holds the last command it got, without a timeout: if its sender dies, the arm goes on
  with the last command;
- the URDF on ``/robot_description`` (``std_msgs/msg/String``, transient local, as
  robot_state_publisher publishes it), and the links' poses on ``/tf`` (every ``tf_period_s``) and
  ``/tf_static`` (:class:`~mbctl.hardware.ros2.tf.TfPublisher`);
- a controller manager's ``list_controllers`` and ``switch_controller`` services
  (:class:`~mbctl.hardware.ros2.manager.EmulatedControllers`): the commanding controller starts
  active, the holding controller inactive; a command to an inactive controller is ignored (counted);
  with the holding controller active the joints are held where they are.

/tf and the services need the interface types of :mod:`mbctl.hardware.ros2.interfaces`; where those
cannot be had, the emulator serves without them and says so in :attr:`Ros2Emulator.notes`.

It serves no ``FollowJointTrajectory`` action: its holding controller only holds (MoveIt's or rqt's
trajectory goals find no action server).

Timing. **Real time** (default): the robot runs on its own clock at its own rate
(:class:`~mbctl.hardware.ros2.realtime.RealtimeOptions`, independent of any client's), on absolute
deadlines. At each update it advances its plant (:class:`~mbctl.hardware.ros2.realtime.RealtimeArm`)
by the time that actually elapsed since the last update, with the command it took then; measures;
publishes the sample stamped with the system clock at that instant (ROS time) and the effort applied
over the update; and takes the newest command that has arrived (a queue of one) for the next. A late
update moves the arm further; an update later than ``max_advance_s`` advances only that much and the
rest is slipped (counted), its clock with it: from then on its stamps are the system clock less the
time slipped, so that stamps and motion agree (a stall the process cannot simulate must not read as
an arm that stood still under its command); missed deadlines are skipped (counted). Before its first command and while
held, the arm stands still and its samples keep coming with new stamps.

**Lock-step** (``lockstep=True``): each command received (plus the truth's gravity where the arm
compensates gravity) advances the plant (the simulated plant of
``mbctl run --lockstep``, :class:`~mbctl.hardware.sim.SimPlant`) by exactly one period and
publishes the sample after it, stamped with simulated time (also on ``/clock``,
``rosgraph_msgs/msg/Clock``); while no command comes, the newest sample is published again every
``republish_s`` with its own stamp. A controller that publishes a command and waits for the next
sample therefore runs, whatever the machine's load, as on the simulated plant stepped directly.

Faults (:class:`Ros2Faults`, seeded): joint states dropped or delayed, publishing stopped after a
time of motion, the process killed after a time of motion (``mbctl emulate``: ``--die-after``).

Command latency: where a command's ``layout.dim[0].label`` carries its send time
(:data:`~mbctl.hardware.ros2.backend.SENT_LABEL`, host CLOCK_MONOTONIC), the time from sending to its
arrival (:attr:`EmulatorStats.latencies_s`) and, in real time, to the update that applied it
(:attr:`EmulatorStats.apply_delays_s`) are recorded.
"""

from __future__ import annotations

import dataclasses
import math
import os
import random
import signal
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mbctl.config.plant import PlantConfig
from mbctl.config.ros2 import Ros2Spec, default_command_topic
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.interface import JointCommand
from mbctl.hardware.ros2.backend import EMULATOR_NODE, SENT_LABEL, check_command_joints
from mbctl.hardware.ros2.manager import EMULATED_HOLDING_CONTROLLER, EmulatedControllers
from mbctl.hardware.ros2.realtime import RealtimeArm, RealtimeOptions, actuated_gravity
from mbctl.hardware.ros2.runtime import Ros2Runtime, qos_profiles, require_rclpy
from mbctl.hardware.sim import SimPlant

__all__ = ["EMULATED_HOLDING_CONTROLLER", "Ros2Emulator", "Ros2Faults", "EmulatorStats", "to_stamp"]

LATENCIES_KEPT = 100_000  # the newest command latencies kept (a bounded memory over a long emulation)


@dataclass(frozen=True)
class Ros2Faults:
    """Fault injection (seeded).

    Attributes:
        drop: Probability that a joint state is not published.
        delay_s: Extra delay before each joint state is published (s).
        stop_after_s: Time of motion (s since the first command; lock-step: plant time) after which
            no joint state is published (None: never).
        die_after_s: Time of motion after which the process is killed with SIGKILL (s; None: never).
        seed: Random seed.
    """

    drop: float = 0.0
    delay_s: float = 0.0
    stop_after_s: float | None = None
    die_after_s: float | None = None
    seed: int = 0


@dataclass
class EmulatorStats:
    """What the emulator did (times in s)."""

    steps: int = 0
    published: int = 0
    dropped: int = 0
    commands: int = 0
    bad_commands: int = 0
    ignored: int = 0
    overruns: int = 0  # updates that missed their deadline by a period or more (the deadlines skipped)
    max_late_s: float = 0.0  # the latest an update came after its deadline ...
    max_late_at_s: float = 0.0  # ... at this time of motion
    slips: int = 0  # updates whose elapsed time exceeded the longest advance
    slipped_s: float = 0.0  # the time not simulated in them
    applied_after_last_command: int = 0  # updates that applied the newest command again, none newer having come
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCIES_KEPT))
    apply_delays_s: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCIES_KEPT))


def to_stamp(t: float, stamp: Any) -> Any:
    """Fill a ``builtin_interfaces/Time`` with ``t`` (s, >= 0), to the nanosecond."""
    ns = round(t * 1e9)
    stamp.sec, stamp.nanosec = divmod(ns, 1_000_000_000)
    return stamp


class Ros2Emulator:
    """The robot's simulated plant behind ROS 2 topics, as a ros2_control robot (a context manager).

    Args:
        truth: The plant's robot (:func:`mbctl.hardware.sim.truth_model`).
        config: Its sensors and substeps.
        spec: Topics, command joint order, controllers (the robot's ``[ros2]``).
        period_s: Lock-step: the plant's advance per command (s); real time: the update period
            (s), unless ``arm`` gives a rate.
        q0: Initial DOF positions (rad, m).
        lockstep: One period per command received, simulated time (see the module docstring).
        faults: Fault injection.
        urdf: The URDF text for ``/robot_description`` (None: not published).
        domain_id: DDS domain (default ``ROS_DOMAIN_ID``).
        republish_s: Lock-step: how often the newest sample is published again while idle (s).
        tf_period_s: Interval of ``/tf`` (s; rounded to whole periods; None: no ``/tf``).
        arm: Real time: rate, effort, noise, gravity compensation, push (None: ``period_s``'s rate, drive
            effort, the ``[plant]`` sensors' noise).
    """

    def __init__(
        self,
        truth: RobotModel,
        config: PlantConfig,
        spec: Ros2Spec,
        *,
        period_s: float | None = None,
        q0: np.ndarray | None = None,
        lockstep: bool = False,
        faults: Ros2Faults | None = None,
        urdf: str | None = None,
        domain_id: int | None = None,
        republish_s: float = 0.05,
        tf_period_s: float | None = 0.01,
        arm: RealtimeOptions | None = None,
    ):
        if period_s is not None and (arm is None or lockstep):
            arm = dataclasses.replace(arm or RealtimeOptions(), rate_hz=1.0 / period_s)
        self.options = arm or RealtimeOptions()
        self.period_s = self.options.period_s
        self.lockstep = lockstep
        if lockstep:
            self.plant: SimPlant | None = SimPlant(truth, self.period_s, config, q0=q0)
            self.arm: RealtimeArm | None = None
        else:
            self.plant, self.arm = None, RealtimeArm(truth, config, self.options, q0)
        self.joint_names = truth.actuated_names
        self.spec = spec
        self.faults = faults or Ros2Faults()
        self.urdf = urdf
        self.domain_id = domain_id
        self.republish_s = republish_s
        order = check_command_joints(self.joint_names, spec)
        self._from_command = np.array([order.index(n) for n in self.joint_names], dtype=int)
        self.truth = truth
        self._data = truth.create_data()
        self.tf_every = None if tf_period_s is None else max(1, round(tf_period_s / self.period_s))
        self.notes: list[str] = []
        self.topics = {default_command_topic("effort"): "effort"}
        servos = self.plant.plant.servo_slots if self.plant is not None else self.arm.plant.servo_slots
        if len(servos) == len(self.joint_names):
            self.topics[default_command_topic("position")] = "position"
        if spec.command_interface in ("effort", "position"):
            self.topics[spec.command] = spec.command_interface
        self.manager = EmulatedControllers(spec, self.topics, tuple(self.joint_names))
        self.holding_controller = self.manager.holding_controller
        self.stats = EmulatorStats()
        self._rng = random.Random(self.faults.seed)
        self._lock = self.manager.lock  # one lock for the command, the controllers and the plant
        self._command: JointCommand | None = None
        self._sent_ns: int | None = None  # the send time of the newest command, not yet applied
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runtime: Ros2Runtime | None = None
        self._tf = None

    @property
    def controllers(self) -> dict[str, bool]:
        """Every controller's state (True: active), by name."""
        return self.manager.active

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Ros2Emulator:
        require_rclpy("sensor_msgs.msg", "std_msgs.msg", "rosgraph_msgs.msg")
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray, String

        qos = qos_profiles()
        if self.plant is not None:
            self.plant.open()
            self.plant.enable()
        self._runtime = Ros2Runtime(self.domain_id).open()
        self.domain_id = self._runtime.domain_id
        try:
            node = self._runtime.node(EMULATOR_NODE)
            self._states = node.create_publisher(JointState, self.spec.joint_states, qos["command"])
            self._message = JointState()
            self._message.name = list(self.joint_names)
            self._clock_pub = node.create_publisher(Clock, "/clock", qos["command"]) if self.lockstep else None
            self._clock = Clock()
            for topic, interface in self.topics.items():
                node.create_subscription(Float64MultiArray, topic, lambda msg, i=interface, t=topic: self._on_command(msg, i, t), 10)
            if self.urdf is not None:
                self._description = node.create_publisher(String, "/robot_description", qos["latched"])
                self._description.publish(String(data=self.urdf))
            self._node = node
            self._serve_controller_manager(node)
        except BaseException:
            self.stop()
            raise
        self._thread = threading.Thread(target=self._idle if self.lockstep else self._realtime, name="mbctl-ros2-emulator", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2.0)
            self._thread = None
        if self._runtime is not None:
            self._runtime.close()
            self._runtime = None

    def __enter__(self) -> Ros2Emulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _serve_controller_manager(self, node: Any) -> None:
        """/tf and the list_controllers and switch_controller services, where their interface types can be had."""
        from mbctl.hardware.ros2.handover import list_controllers_type, service_name, switch_controller_type
        from mbctl.hardware.ros2.runtime import Ros2Unavailable

        try:
            if self.tf_every is not None:
                from mbctl.hardware.ros2.tf import TfPublisher

                self._tf = TfPublisher(node, self.truth)
            node.create_service(switch_controller_type(), service_name(self.spec.controller_manager), self._on_switch)
            node.create_service(list_controllers_type(), service_name(self.spec.controller_manager, "list_controllers"), self._on_list)
        except (Ros2Unavailable, ImportError) as exc:
            self.notes.append(f"no /tf and no controller manager services: {exc}")

    def _on_switch(self, request: Any, response: Any) -> Any:
        with self._lock:
            response.ok, response.message = self.manager.switch(list(request.activate_controllers), list(request.deactivate_controllers), request.strictness)
            if response.ok:
                self._command = None  # an activated command controller starts without a command (held until one comes)
                if self.arm is not None and self.manager.holding:
                    self.arm.hold()
        return response

    def _on_list(self, request: Any, response: Any) -> Any:
        from mbctl.hardware.ros2.interfaces import interface_type

        ControllerState = interface_type("controller_manager_msgs", "msg", "ControllerState")  # noqa: N806
        with self._lock:
            described = self.manager.describe()
        response.controller = [ControllerState(name=c["name"], state=c["state"], type=c["type"], claimed_interfaces=c["claimed_interfaces"],
                                               update_rate=round(self.options.rate_hz) if not self.lockstep else 0) for c in described]
        return response

    @property
    def holding(self) -> bool:
        """The holding controller is active: the joints are held."""
        return self.manager.holding

    # -- commands (executor thread) ------------------------------------------------------------
    def _on_command(self, msg: Any, interface: str, topic: str = "") -> None:
        taken = time.monotonic_ns()
        if not self.manager.accepts(topic):
            self.stats.ignored += 1
            return
        value = np.asarray(msg.data, dtype=float)
        if value.shape != (len(self.joint_names),) or not np.isfinite(value).all():
            self.stats.bad_commands += 1
            return
        value = value[self._from_command]
        command = JointCommand.torque(value) if interface == "effort" else JointCommand.position(value)
        dims = msg.layout.dim
        sent = int(dims[0].label[len(SENT_LABEL):]) if dims and dims[0].label.startswith(SENT_LABEL) else None
        if sent is not None:
            self.stats.latencies_s.append((taken - sent) * 1e-9)
        with self._lock:
            self.stats.commands += 1
            self._command = command
            self._sent_ns = sent
            if self.lockstep:
                if self.options.gravity_compensated and interface == "effort":
                    command = JointCommand.torque(value + actuated_gravity(self.truth, self._data, self.plant.plant.full.q))
                self.plant.write(command)
                self.stats.steps += 1
                self._publish(self.plant.t, self.plant.t, self.plant.read())

    # -- publishing ----------------------------------------------------------------------------
    def _publish(self, motion_s: float, stamp_s: float, sample: Any) -> None:
        """Publish ``sample`` (q, dq, effort) stamped ``stamp_s`` (s), after the faults at ``motion_s``."""
        f = self.faults
        if f.die_after_s is not None and motion_s >= f.die_after_s:
            os.kill(os.getpid(), signal.SIGKILL)
        if (f.stop_after_s is not None and motion_s >= f.stop_after_s) or (f.drop and self._rng.random() < f.drop):
            self.stats.dropped += 1
            return
        if f.delay_s:
            time.sleep(f.delay_s)
        m = self._message
        to_stamp(stamp_s, m.header.stamp)
        m.position, m.velocity, m.effort = sample.q, sample.dq, sample.effort
        if self._clock_pub is not None:
            to_stamp(stamp_s, self._clock.clock)
            self._clock_pub.publish(self._clock)
        self._states.publish(m)
        self.stats.published += 1
        if self._tf is not None and self.stats.published % self.tf_every == 1 % self.tf_every:
            q_full = self.plant.plant.full.q if self.plant is not None else self.arm.plant.full.q
            self._tf.publish(q_full, m.header.stamp)

    def _idle(self) -> None:
        """Lock-step: the newest sample again every ``republish_s`` (commands do the stepping)."""
        while not self._stop.wait(self.republish_s):
            with self._lock:
                self._publish(self.plant.t, self.plant.t, self.plant.read())

    def _realtime(self) -> None:
        """Real time: updates on absolute deadlines, each advancing the plant by the elapsed time."""
        period, arm, stats = self.period_s, self.arm, self.stats
        limit = self.options.max_advance_s
        applied: JointCommand | None = None
        t0 = last = time.monotonic()
        to_system = time.time() - t0  # stamps from the same reading of the clock that times the motion
        k = 0
        while not self._stop.is_set():
            k += 1
            deadline = t0 + k * period
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            now = time.monotonic()
            dt, last = now - last, now
            if dt > limit:
                stats.slips += 1
                stats.slipped_s += dt - limit
                dt = limit
            # the sample's stamp: the system clock at the measurement, less the time this process gave up: a
            # stall it could not simulate stops its clock as it stops the arm, so that stamps and motion agree
            wall = now + to_system - stats.slipped_s
            with self._lock:
                arm.update(None if self.manager.holding else applied, dt)
                stats.steps += 1
                q, dq, effort = arm.measure(dt)
                self._publish(arm.motion_s, wall, _Sample(q, dq, effort))
                if self.manager.holding:
                    applied = None
                elif self._command is not applied:  # the newest command: applied until the next update
                    applied = self._command
                    if self._sent_ns is not None:
                        stats.apply_delays_s.append((time.monotonic_ns() - self._sent_ns) * 1e-9)
                        self._sent_ns = None
                elif applied is not None:
                    stats.applied_after_last_command += 1
            late = time.monotonic() - deadline
            if late > stats.max_late_s:
                stats.max_late_s, stats.max_late_at_s = late, arm.motion_s
            if late > period:  # missed deadlines are skipped: the next update is the next deadline to come
                stats.overruns += 1
                k = math.floor((time.monotonic() - t0) / period)

    def latency_percentiles_us(self, which: str = "latencies_s") -> dict[str, float]:
        """p50, p99 and max of a latency (µs: ``"latencies_s"`` sent -> received, ``"apply_delays_s"``
        sent -> applied), or {} before any timed command."""
        values = getattr(self.stats, which)
        if not values:
            return {}
        lat = np.array(values) * 1e6
        return {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)), "max": float(lat.max()), "count": float(lat.size)}


@dataclass(frozen=True)
class _Sample:
    q: np.ndarray
    dq: np.ndarray
    effort: np.ndarray
