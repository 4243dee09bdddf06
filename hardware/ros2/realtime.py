"""A robot arm that keeps its own time, as a ros2_control robot does (the plant of ``mbctl emulate
--bus ros2`` when it is not in lock-step).

A ros2_control robot runs its update loop on its own clock: at each update it reads the hardware
(the sample, stamped with the system clock at that instant), publishes it, takes the newest command
that has arrived (a forward command controller's real-time buffer: a queue of one) and writes it to
the drives, which apply it until the next update. :class:`RealtimeArm` is that hardware: the truth
model (:class:`~mbctl.hardware.sim.TruthPlant`) advanced by the time that actually elapsed since the
last update with the command taken then, so a late update moves the arm further, as physics does.

Effort (the ``effort`` of the joint states, the torque over the update that ends at the sample):

- ``"drive"``: the torque the drives applied (``tau_applied``: the command, plus the robot's own
  gravity model where it compensates gravity, limited to the joints' effort limits), plus
  Gaussian noise of ``effort_noise`` (N·m);
- ``"joint-torque-sensor"``: the link-side torque after the joints' friction, as joint torque
  sensors measure it (Franka's ``tau_J``): ``tau_J = M(q) ddq + c(q, dq) + g(q) - tau_ext`` over the
  update (``ddq`` the mean acceleration ``(dq_k - dq_{k-1}) / dt``; ``tau_ext`` the push), plus noise.

While the arm is held (before its first command, and while the holding controller is active) it is
an ideal position hold: positions fixed, velocities zero, effort the truth's gravity torque ``g(q)``
(what a holding controller applies, friction aside).

Gravity compensation (``gravity_compensated``, as UR and Franka arms do): every effort command gets
the truth model's gravity ``g(q)`` at the update added before it is applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.config.plant import PlantConfig
from mbctl.dynamics.external import ExternalWrench
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.interface import CommandMode, JointCommand
from mbctl.hardware.sim import TruthPlant, encoder_resolution

__all__ = ["ARM_EFFORTS", "Push", "RealtimeArm", "RealtimeOptions", "actuated_gravity"]

ARM_EFFORTS = ("drive", "joint-torque-sensor")


@dataclass(frozen=True)
class Push:
    """An external torque on one joint (a push on the link), for detection tests.

    Attributes:
        joint: The joint pushed.
        torque: Torque (N·m, N for a prismatic joint).
        start_s: Its start, in s after the arm's first command (the start of the motion).
        duration_s: How long it lasts (s).
    """

    joint: str
    torque: float
    start_s: float
    duration_s: float


@dataclass(frozen=True)
class RealtimeOptions:
    """How the arm runs.

    Attributes:
        rate_hz: Its update rate (Hz).
        effort: ``"drive"`` or ``"joint-torque-sensor"`` (module docstring).
        effort_noise: Standard deviation of the effort (N·m; None: the ``[plant]`` sensors').
        gravity_compensated: The arm adds the truth's gravity to every effort command.
        max_step_s: The longest time one update advances the plant (s; None: five periods, at
            least 20 ms); a longer stall of the serving process is slipped (counted).
        push: An external torque (None: none).
    """

    rate_hz: float = 1000.0
    effort: str = "drive"
    effort_noise: float | None = None
    gravity_compensated: bool = False
    max_step_s: float | None = None
    push: Push | None = None

    @property
    def period_s(self) -> float:
        return 1.0 / self.rate_hz

    @property
    def max_advance_s(self) -> float:
        return self.max_step_s if self.max_step_s is not None else max(5 * self.period_s, 0.02)


def actuated_gravity(truth: RobotModel, data: pin.Data, q_full: np.ndarray) -> np.ndarray:
    """The gravity torque on the actuated joints (N·m) at the DOF positions ``q_full`` (rad, m)."""
    return truth.actuation_matrix.T @ pin.computeGeneralizedGravity(truth.model, data, truth.configuration(q_full))


class RealtimeArm:
    """The truth model advanced by elapsed time with the command held, and measured (no clock of
    its own: the emulator's update thread calls :meth:`update`).

    Args:
        truth: Robot simulated (its actuated joints, in order).
        config: The ``[plant]`` sensors (encoders, velocity filter, effort noise), substeps, seed,
            contact (its ``start_s`` counted from the first command).
        options: Rate, effort, gravity compensation, push.
        q0: Initial DOF positions (rad, m).
    """

    def __init__(self, truth: RobotModel, config: PlantConfig, options: RealtimeOptions, q0: np.ndarray | None = None):
        self.truth, self.config, self.options = truth, config, options
        self.joint_names = truth.actuated_names
        period = options.period_s
        self.plant = TruthPlant(truth, period / config.substeps, q0, period_s=period)
        self._data = truth.create_data()
        self._B = truth.actuation_matrix
        self._limits = np.array([truth.joint(n).limits.effort for n in self.joint_names])
        self._resolution = encoder_resolution(truth, list(self.joint_names), config.sensors.encoder_counts)
        self._noise = config.sensors.effort_noise if options.effort_noise is None else options.effort_noise
        self._rng = np.random.default_rng(config.seed)
        contact = config.contact
        self._contact = None if contact is None else ExternalWrench(truth, contact.frame, contact.force, contact.torque, contact.start_s, contact.duration_s)
        self._push = None
        if options.push is not None:
            self._push = np.zeros(truth.nv)
            self._push[truth.joint(options.push.joint).idx_v] = options.push.torque
        self.motion_s = 0.0  # time moved since the first command (s): the clock of the push and the contact
        self.saturated = 0
        self.held = True
        self._q_meas_last: np.ndarray | None = None
        self._v = np.zeros(len(self.joint_names))
        self._effort = self.gravity()

    def gravity(self) -> np.ndarray:
        """The truth's gravity torque on the actuated joints (N·m) at the plant's present positions."""
        return actuated_gravity(self.truth, self._data, self.plant.full.q)

    def hold(self) -> None:
        """Held where it is (an ideal position hold): velocities zero, effort the gravity torque."""
        self.plant.brake()
        self.held = True
        self._effort = self.gravity()

    def update(self, command: JointCommand | None, dt: float) -> None:
        """Advance ``dt`` seconds (s) with ``command`` applied throughout (None: held in place)."""
        if command is None:
            self.hold()
            return
        self.held = False
        goal = None
        _, dq = self.plant.state()
        if command.mode is CommandMode.POSITION:
            tau = np.zeros(len(self.joint_names))
            goal = np.asarray(command.value, dtype=float)
        else:
            tau = np.asarray(command.value, dtype=float)
            if self.options.gravity_compensated:
                tau = tau + self.gravity()
            self.saturated += int((np.abs(tau) > self._limits).sum())
            tau = np.clip(tau, -self._limits, self._limits)
        ext = np.zeros(self.truth.nv)
        if self._contact is not None and self._contact.active(self.motion_s):
            ext = ext + self._contact.generalized(self.plant.full.q)
        push = self.options.push
        if push is not None and push.start_s <= self.motion_s < push.start_s + push.duration_s:
            ext = ext + self._push
        self.plant.step(tau, dt, goal, ext if ext.any() else None)
        self.motion_s += dt
        q_new, dq_new = self.plant.state()
        if self.options.effort == "joint-torque-sensor" or goal is not None:
            ddq = np.zeros(self.truth.nv)
            ddq[[self.truth.joint(n).idx_v for n in self.joint_names]] = (dq_new - dq) / dt
            full = self.plant.full
            tau_link = pin.rnea(self.truth.model, self._data, self.truth.configuration(full.q), full.dq, ddq) - ext
            self._effort = self._B.T @ tau_link
        else:
            self._effort = tau

    def measure(self, dt: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The sample now: positions (the encoders' quanta), velocities (exact, or the filtered
        difference of encoder positions over ``dt``, s) and efforts (N·m, with noise)."""
        q, dq = self.plant.state()
        quantum = np.where(self._resolution > 0, self._resolution, 1.0)
        q_meas = np.where(self._resolution > 0, np.round(q / quantum) * quantum, q)
        s = self.config.sensors
        if self.held:
            self._v = np.zeros_like(q)
        elif s.velocity == "exact" or self._q_meas_last is None or dt <= 0:
            self._v = dq
        else:
            a = 1.0 - math.exp(-2 * math.pi * s.velocity_cutoff_hz * dt)
            self._v = self._v + a * ((q_meas - self._q_meas_last) / dt - self._v)
        self._q_meas_last = q_meas
        effort = self._effort
        if self._noise:
            effort = effort + self._rng.normal(0.0, self._noise, effort.shape)
        return q_meas, self._v.copy(), effort
