"""The simulated plant served as a ros2_control robot over ROS 2 (``mbctl emulate ROBOT --bus ros2``).

What a ros2_control arm with a joint_state_broadcaster and forward command controllers exposes:

- ``sensor_msgs/msg/JointState`` on the joint-states topic, one per plant period, stamped with the
  plant's sample instants (the robot's ``[plant]`` sensors: encoders, velocity filter, latency);
- ``std_msgs/msg/Float64MultiArray`` commands on the effort controller's topic (always) and the
  position controller's (when every actuated joint has a servo, ``[joints.<name>.actuator]``, whose
  firmware loop takes goal positions), in the order of ``command_joints``; a command is held until
  the next (forward command controllers hold it too);
- the URDF on ``/robot_description`` (``std_msgs/msg/String``, transient local, as
  robot_state_publisher publishes it), and the links' poses on ``/tf`` (every ``tf_period_s``) and
  ``/tf_static`` (:class:`~mbctl.hardware.ros2.tf.TfPublisher`);
- a controller manager's ``<controller_manager>/switch_controller`` service
  (``controller_manager_msgs/srv/SwitchController``): the command controllers (named after their
  topics' namespaces) start active, the holding controller (``[ros2] holding_controller``, default
  ``joint_trajectory_controller``) inactive. With the holding controller active, the joints are held
  where they are (an ideal position hold) and commands are ignored; a command to an inactive
  controller is ignored too.

/tf and the service need the interface types of :mod:`mbctl.hardware.ros2.interfaces`; where those
cannot be had, the emulator serves without them and says so in :attr:`Ros2Emulator.notes`.

Before the first command, and while the holding controller is active, the joints are held (as by
brakes) and the plant's clock stands still: its sample is published again each period with the same
stamp (a reader sees it alive, and no motion to estimate from). The plant moves from the first
command on.

Timing. Paced (default): the plant steps on absolute deadlines ``t0 + k*period`` with the latest
command, then publishes; the stamps are ``start + plant time`` on the system clock (ROS time; behind
the wall clock by the time the plant was held). A
step that ends late is caught up back to back up to ``max_lag_s`` (two periods by default); a longer
stall of the process (a busy machine stalls Python processes for tens of ms) pauses the plant: its
clock slips (counted), rather than a burst of steps under one held command that no controller chose. Lock-step (``lockstep=True``): each command received advances the plant by exactly
one period and publishes the sample after it, stamped with simulated time (also on ``/clock``,
``rosgraph_msgs/msg/Clock``); while no command comes, the newest sample is published again every
``republish_s`` with its own stamp (a late subscriber gets it; a reader sees no new sample). A
controller that publishes a command and waits for the next sample therefore runs, whatever the
machine's load, as on the simulated plant stepped directly.

Faults (:class:`Ros2Faults`, seeded): joint states dropped or delayed, publishing stopped after a
plant time, the process killed after a plant time (``mbctl emulate``: ``--die-after``).

Command latency: where a command's ``layout.dim[0].label`` carries its send time
(:data:`~mbctl.hardware.ros2.backend.SENT_LABEL`, host CLOCK_MONOTONIC), the time from sending to the
emulator taking it as the held command is recorded (:attr:`Ros2Emulator.latencies_s`).
"""

from __future__ import annotations

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
from mbctl.hardware.ros2.backend import SENT_LABEL, check_command_joints
from mbctl.hardware.ros2.runtime import Ros2Runtime, qos_profiles, require_rclpy
from mbctl.hardware.sim import SimPlant

__all__ = ["EMULATED_HOLDING_CONTROLLER", "Ros2Emulator", "Ros2Faults", "EmulatorStats", "to_stamp"]

EMULATED_HOLDING_CONTROLLER = "joint_trajectory_controller"
"""The emulated controller manager's holding controller where ``[ros2] holding_controller`` names none."""

LATENCIES_KEPT = 100_000  # the newest command latencies kept (a bounded memory over a long emulation)


@dataclass(frozen=True)
class Ros2Faults:
    """Fault injection (seeded).

    Attributes:
        drop: Probability that a joint state is not published.
        delay_s: Extra delay before each joint state is published (s).
        stop_after_s: Plant time after which no joint state is published (s; None: never).
        die_after_s: Plant time after which the process is killed with SIGKILL (s; None: never).
        seed: Random seed.
    """

    drop: float = 0.0
    delay_s: float = 0.0
    stop_after_s: float | None = None
    die_after_s: float | None = None
    seed: int = 0


@dataclass
class EmulatorStats:
    """What the emulator did."""

    steps: int = 0
    published: int = 0
    dropped: int = 0
    commands: int = 0
    bad_commands: int = 0
    ignored: int = 0
    overruns: int = 0
    max_late_s: float = 0.0  # the latest a step ended after its deadline (s) ...
    max_late_at_s: float = 0.0  # ... at this plant time (s)
    slipped_s: float = 0.0
    latencies_s: deque[float] = field(default_factory=lambda: deque(maxlen=LATENCIES_KEPT))


def _controller_of(topic: str) -> str:
    """The controller a command topic belongs to: its namespace (``/forward_effort_controller/commands``)."""
    parts = [p for p in topic.split("/") if p]
    return parts[-2] if len(parts) >= 2 else topic


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
        spec: Topics and command joint order (the robot's ``[ros2]``).
        period_s: The plant's period (s): one sample per period.
        q0: Initial DOF positions (rad, m).
        lockstep: One period per command received, simulated time (see the module docstring).
        faults: Fault injection.
        urdf: The URDF text for ``/robot_description`` (None: not published).
        domain_id: DDS domain (default ``ROS_DOMAIN_ID``).
        max_lag_s: Paced: the largest lag the plant makes up by stepping back to back (s; None: two
            periods). A longer stall of this process is slipped: the plant pauses, its stamps continue
            from where they were, and no burst of steps with one held command follows.
        republish_s: Lock-step: how often the newest sample is published again while idle (s).
        tf_period_s: Interval of ``/tf`` (s; rounded to whole periods; None: no ``/tf``).
    """

    def __init__(
        self,
        truth: RobotModel,
        config: PlantConfig,
        spec: Ros2Spec,
        *,
        period_s: float,
        q0: np.ndarray | None = None,
        lockstep: bool = False,
        faults: Ros2Faults | None = None,
        urdf: str | None = None,
        domain_id: int | None = None,
        max_lag_s: float | None = None,
        republish_s: float = 0.05,
        tf_period_s: float | None = 0.01,
    ):
        self.plant = SimPlant(truth, period_s, config, q0=q0)
        self.joint_names = self.plant.joint_names
        self.spec = spec
        self.period_s = period_s
        self.lockstep = lockstep
        self.faults = faults or Ros2Faults()
        self.urdf = urdf
        self.domain_id = domain_id
        self.max_lag_s = 2 * period_s if max_lag_s is None else max_lag_s
        self.republish_s = republish_s
        order = check_command_joints(self.joint_names, spec)
        self._from_command = np.array([order.index(n) for n in self.joint_names], dtype=int)
        self.truth = truth
        self.tf_every = None if tf_period_s is None else max(1, round(tf_period_s / period_s))
        self.notes: list[str] = []
        self.topics = {default_command_topic("effort"): "effort"}
        if len(self.plant.plant.servo_slots) == len(self.joint_names):
            self.topics[default_command_topic("position")] = "position"
        if spec.command_interface in ("effort", "position"):
            self.topics[spec.command] = spec.command_interface
        self.holding_controller = spec.holding_controller or EMULATED_HOLDING_CONTROLLER
        self.controllers = {"joint_state_broadcaster": True, **{_controller_of(t): True for t in self.topics}, self.holding_controller: False}
        self.stats = EmulatorStats()
        self._rng = random.Random(self.faults.seed)
        self._lock = threading.Lock()
        self._command: JointCommand | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._runtime: Ros2Runtime | None = None
        self._started = False  # the first command arrived: the plant moves
        self._tf = None
        self._t_base = 0.0  # stamp of plant time 0 (s)

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> Ros2Emulator:
        require_rclpy("sensor_msgs.msg", "std_msgs.msg", "rosgraph_msgs.msg")
        from rosgraph_msgs.msg import Clock
        from sensor_msgs.msg import JointState
        from std_msgs.msg import Float64MultiArray, String

        qos = qos_profiles()
        self.plant.open()
        self.plant.enable()
        self._runtime = Ros2Runtime(self.domain_id).open()
        self.domain_id = self._runtime.domain_id
        try:
            node = self._runtime.node("mbctl_emulator")
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
        self._t_base = 0.0 if self.lockstep else time.time()
        self._thread = threading.Thread(target=self._idle if self.lockstep else self._paced, name="mbctl-ros2-emulator", daemon=True)
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
        """/tf and the switch_controller service, where their interface types can be had."""
        from mbctl.hardware.ros2.handover import service_name, switch_controller_type
        from mbctl.hardware.ros2.runtime import Ros2Unavailable

        try:
            if self.tf_every is not None:
                from mbctl.hardware.ros2.tf import TfPublisher

                self._tf = TfPublisher(node, self.truth)
            node.create_service(switch_controller_type(), service_name(self.spec.controller_manager), self._on_switch)
        except (Ros2Unavailable, ImportError) as exc:
            self.notes.append(f"no /tf and no switch_controller service: {exc}")

    def _on_switch(self, request: Any, response: Any) -> Any:
        """A strict switch: every controller named must exist and be in the other state, else nothing changes."""
        activate, deactivate = list(request.activate_controllers), list(request.deactivate_controllers)
        unknown = [c for c in activate + deactivate if c not in self.controllers]
        wrong = [c for c in activate if self.controllers.get(c)] + [c for c in deactivate if self.controllers.get(c) is False]
        if unknown or (wrong and request.strictness == 2):
            response.ok = False
            response.message = f"unknown controller {unknown[0]}" if unknown else f"controller {wrong[0]} is already in that state"
            return response
        with self._lock:
            for c in deactivate:
                self.controllers[c] = False
            for c in activate:
                self.controllers[c] = True
            if self.controllers[self.holding_controller]:
                self._command = None  # held where it is; a command controller activated later starts afresh
        response.ok = True
        response.message = ""
        return response

    @property
    def holding(self) -> bool:
        """The holding controller is active: the joints are held."""
        return self.controllers[self.holding_controller]

    # -- commands (executor thread) ------------------------------------------------------------
    def _on_command(self, msg: Any, interface: str, topic: str = "") -> None:
        taken = time.monotonic_ns()
        if self.holding or not self.controllers.get(_controller_of(topic), True):
            self.stats.ignored += 1
            return
        value = np.asarray(msg.data, dtype=float)
        if value.shape != (len(self.joint_names),) or not np.isfinite(value).all():
            self.stats.bad_commands += 1
            return
        value = value[self._from_command]
        command = JointCommand.torque(value) if interface == "effort" else JointCommand.position(value)
        dims = msg.layout.dim
        if dims and dims[0].label.startswith(SENT_LABEL):
            self.stats.latencies_s.append((taken - int(dims[0].label[len(SENT_LABEL):])) * 1e-9)
        with self._lock:
            self.stats.commands += 1
            self._started = True
            self._command = command
            if self.lockstep:
                self._step_and_publish()

    # -- stepping and publishing ---------------------------------------------------------------
    def _step_and_publish(self) -> None:
        """One period with the held command, then the sample (caller holds the lock)."""
        if self._started and self._command is not None:
            self.plant.write(self._command)
            self.stats.steps += 1
        self._publish()

    def _publish(self) -> None:
        f = self.faults
        t = self.plant.t
        if f.die_after_s is not None and t >= f.die_after_s:
            os.kill(os.getpid(), signal.SIGKILL)
        if (f.stop_after_s is not None and t >= f.stop_after_s) or (f.drop and self._rng.random() < f.drop):
            self.stats.dropped += 1
            return
        if f.delay_s:
            time.sleep(f.delay_s)
        sample = self.plant.read()
        stamp = sample.t + self._t_base
        m = self._message
        to_stamp(stamp, m.header.stamp)
        m.position, m.velocity, m.effort = sample.q, sample.dq, sample.effort
        if self._clock_pub is not None:
            to_stamp(sample.t, self._clock.clock)
            self._clock_pub.publish(self._clock)
        self._states.publish(m)
        self.stats.published += 1
        if self._tf is not None and self.stats.published % self.tf_every == 1 % self.tf_every:
            self._tf.publish(self.plant.plant.full.q, m.header.stamp)

    def _idle(self) -> None:
        """Lock-step: the newest sample again every ``republish_s`` (commands do the stepping)."""
        while not self._stop.wait(self.republish_s):
            with self._lock:
                self._publish()

    def _paced(self) -> None:
        """Steps on absolute deadlines; late steps caught up, a long lag given up (the clock slips)."""
        t0 = time.monotonic()
        k = 0
        while not self._stop.is_set():
            k += 1
            deadline = t0 + k * self.period_s
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self._lock:
                self._step_and_publish()
            lag = time.monotonic() - (deadline + self.period_s)
            if lag + self.period_s > self.stats.max_late_s:
                self.stats.max_late_s, self.stats.max_late_at_s = lag + self.period_s, self.plant.t
            if lag > 0:
                self.stats.overruns += 1
                if lag > self.max_lag_s:
                    skipped = math.floor(lag / self.period_s)
                    k += skipped
                    self.stats.slipped_s += skipped * self.period_s

    def latency_percentiles_us(self) -> dict[str, float]:
        """p50, p99 and max of the command latency (µs), or {} before any timed command."""
        if not self.stats.latencies_s:
            return {}
        lat = np.array(self.stats.latencies_s) * 1e6
        return {"p50": float(np.percentile(lat, 50)), "p99": float(np.percentile(lat, 99)), "max": float(lat.max()), "count": float(lat.size)}
