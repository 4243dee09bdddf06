"""A simulated arm that keeps its own time, on a virtual clock it shares with the loop.

A real robot is never in lock-step with its controller: it updates at its own rate on its own clock,
and at each update it measures its joints (the sample stamped with that instant), applies the newest
command that has reached it, and moves under that command until its next update. Its samples reach
the controller some time after they were measured, and a command reaches it some time after it was
written, so the delay from a command to its effect varies between runs and between cycles.

:class:`RealTimingRobot` does all of that deterministically: the robot's updates, its clock's phase
and drift, the time a sample takes to reach the host and the time a command takes to reach the robot
are set (the latter drawn from a seeded range), and every instant is on a
:class:`~mbctl.hardware.clock.VirtualClock` that the loop (:func:`~mbctl.hardware.loop.run_loop`,
paced) waits on. A run is therefore the same however loaded the machine is: what a real-timing robot
does to the loop can be tested without wall-clock timing. The physics is the simulated plant's
(:class:`~mbctl.hardware.sim.TruthPlant`), exact sensors; ``effort`` reports the torque the robot
applied over the period before the sample (optionally with noise), or NaN when it measures none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.clock import VirtualClock
from mbctl.hardware.interface import CommandMode, JointCommand, JointInterface, JointState
from mbctl.hardware.sim import TruthPlant

__all__ = ["Push", "RealTimingRobot", "RobotTiming"]


@dataclass(frozen=True)
class RobotTiming:
    """When a :class:`RealTimingRobot` updates and how long messages take (s).

    Attributes:
        period_s: The robot's update period on its own clock.
        phase_s: How far into the robot's period the host starts (after its first sample arrived): the
            phase of the loop's cycles against the robot's updates.
        drift_ppm: How much faster its clock runs than the host's (parts per million).
        publish_s: From an update to its sample reaching the host.
        latency_s: The range a command's time to reach the robot is drawn from (uniform).
        read_s: The host's time spent in a read (advances the clock).
        late_s: Each update comes up to this late (uniform; a robot process its OS delays): it moves the
            arm by the time that actually elapsed, stamps the instant it measured.
        seed: Seed of the latencies, the updates' lateness and the effort noise.
    """

    period_s: float = 2e-3
    phase_s: float = 0.0
    drift_ppm: float = 0.0
    publish_s: float = 1e-4
    latency_s: tuple[float, float] = (1e-4, 4e-4)
    read_s: float = 2e-5
    late_s: float = 0.0
    seed: int = 0


@dataclass(frozen=True)
class Push:
    """An external torque on one joint (N·m, N) from ``start_s`` for ``duration_s`` (robot time, s)."""

    joint: str
    torque: float
    start_s: float
    duration_s: float


class RealTimingRobot(JointInterface):
    """The truth model as a robot with its own timing (module docstring).

    Args:
        truth: The robot simulated (its actuated joints are served).
        clock: The host's clock, shared with the loop.
        timing: Its update period, phase, drift and message times.
        q0: Initial DOF positions (rad, m).
        effort: The robot measures the torque it applies (else ``effort`` is NaN).
        effort_noise: Standard deviation of that measurement's noise (N·m, N).
        push: An external torque during the run.
        host_stamps: Its samples carry their instant on the host's clock too (as ROS stamps on one
            machine do): :attr:`~mbctl.hardware.interface.JointState.t_host`.
    """

    sample_clock = True

    def __init__(self, truth: RobotModel, clock: VirtualClock, timing: RobotTiming = RobotTiming(), *, q0: np.ndarray | None = None,
                 effort: bool = True, effort_noise: float = 0.0, push: Push | None = None, host_stamps: bool = False):  # fmt: skip
        self.truth, self.clock, self.timing = truth, clock, timing
        self.joint_names = truth.actuated_names
        self.sample_period_s = timing.period_s
        self.effort_source = "the torque the robot applied" if effort else ""
        self._effort, self._noise, self._push, self.host_stamps = effort, effort_noise, push, host_stamps
        self._q0 = q0
        self._limits = np.array([truth.joint(n).limits.effort for n in self.joint_names])
        self._actuated = np.array([truth.joint(n).idx_v for n in self.joint_names], dtype=int)
        self.updates = 0
        self.commands_applied: list[int] = []  # per update: how many commands had been written when the one applied was

    def _true_interval(self) -> float:
        """Host seconds between two updates."""
        return self.timing.period_s / (1.0 + 1e-6 * self.timing.drift_ppm)

    def open(self) -> None:
        n = len(self.joint_names)
        self.plant = TruthPlant(self.truth, 2.5e-4, self._q0, period_s=self._true_interval())
        self._rng = np.random.default_rng(self.timing.seed)
        self._next_update = self._origin = self._moved_to = self.clock.now()
        self._pending: list[tuple[float, int, np.ndarray]] = []  # (arrival, index, torque), in arrival order
        self._written = 0
        self._applied = np.zeros(n)
        self._applied_index = 0
        self._enabled = self._moving = False
        self._samples: list[tuple[float, JointState]] = []  # (visible from, sample)
        self._update()
        self.clock.sleep_until(self._samples[0][0] + self.timing.phase_s)  # a backend's open waits for the robot's first sample

    def close(self) -> None:
        pass

    def enable(self) -> None:
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False
        self._pending.clear()

    def _update(self) -> None:
        """One update (at ``self._next_update``, late by up to ``late_s``): the arm moves under the last
        command up to this instant, is measured, and the newest command that arrived is taken."""
        u = self._next_update + (float(self._rng.uniform(0.0, self.timing.late_s)) if self.timing.late_s else 0.0)
        clock = lambda host: (host - self._origin) * (1.0 + 1e-6 * self.timing.drift_ppm)  # noqa: E731  the robot's own clock
        if self._moving and u > self._moved_to:  # until its first command, or with torque off: held, as by brakes
            self.plant.step(self._applied, u - self._moved_to, external=self._external(clock(self._moved_to), u - self._moved_to))
        self._moved_to = u
        q, dq = self.plant.state()
        effort = self._applied.copy() if self._effort else np.full(len(q), np.nan)
        if self._effort and self._noise:
            effort += self._rng.normal(0.0, self._noise, effort.shape)
        self._samples.append((u + self.timing.publish_s, JointState(t=clock(u), q=q, dq=dq, effort=effort, t_host=u if self.host_stamps else math.nan)))
        del self._samples[:-4]
        arrived = [p for p in self._pending if p[0] <= u]
        if arrived and self._enabled:
            _, self._applied_index, tau = arrived[-1]
            self._applied = np.clip(tau, -self._limits, self._limits)
            self._moving = True
        self._pending = [p for p in self._pending if p[0] > u]
        if not self._enabled:
            self._applied, self._moving = np.zeros_like(self._applied), False
        self.commands_applied.append(self._applied_index)
        self.updates += 1
        self._next_update += self._true_interval()

    def _external(self, start: float, dt: float) -> np.ndarray | None:
        """The push's generalized force over ``dt`` seconds from ``start`` (robot clock; its share of the
        interval it overlaps)."""
        push = self._push
        if push is None:
            return None
        overlap = min(start + dt, push.start_s + push.duration_s) - max(start, push.start_s)
        if overlap <= 0:
            return None
        force = np.zeros(self.truth.nv)
        force[self.truth.joint(push.joint).idx_v] = push.torque * overlap / dt
        return force

    def _catch_up(self) -> None:
        now = self.clock.now()
        while self._next_update <= now:
            self._update()

    def read(self) -> JointState:
        self._catch_up()
        now = self.clock.now()
        visible = [s for at, s in self._samples if at <= now]
        self.clock.advance(self.timing.read_s)
        return visible[-1]

    def write(self, command: JointCommand) -> None:
        if command.mode is not CommandMode.TORQUE:
            raise ValueError("the real-timing robot takes torque commands")
        self._catch_up()
        low, high = self.timing.latency_s
        self._written += 1
        self._pending.append((self.clock.now() + float(self._rng.uniform(low, high)), self._written, np.array(command.value, dtype=float)))
        self._pending.sort(key=lambda p: p[0])
