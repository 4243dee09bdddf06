"""When a sample was measured and when the next command will act, on the loop's clock.

A robot that keeps its own time measures its joints at its own instants, stamps each sample with
that instant on its own clock (:attr:`~mbctl.hardware.interface.JointState.t`), and at each of its
updates applies the latest command that has reached it (ros2_control's read, update, write; the SYNC
of CANopen drives; Franka's 1 kHz ticks). The loop reads a sample some time after it was measured,
and its command acts from a later update of the robot, so three instants matter for a cycle:

- the sample's instant on the loop's clock: where the backend knows it on the host's clock
  (:attr:`~mbctl.hardware.interface.JointState.t_host`), that instant; else ``t_sample = t_s + offset``,
  the offset between the two clocks estimated as the smallest ``t - t_s`` seen (the quickest
  delivery, taken as no delay at all), allowed to creep up by :data:`OFFSET_CREEP` seconds a second so
  that drifting clocks are followed;
- the sample's age when the loop reads it, ``age = t - t_sample`` (at least 0);
- the horizon ``H`` from the sample to the update that applies the command written this cycle:
  ``H = P_r max(1, ceil((age + latency) / P_r))``, ``P_r`` the robot's update period
  (:attr:`~mbctl.hardware.interface.JointInterface.sample_period_s`, else the loop's) and ``latency`` the
  time a command takes to reach it (:attr:`~mbctl.hardware.interface.JointInterface.command_latency_s`):
  the command misses the update whose instant it arrives after.

The law is evaluated for the state predicted ``H`` after the sample, against the reference at that
instant; the tracking error compares the sample with the reference at its own instant.

Where a command acted is also what the momentum observer needs when it has no measured torque: the
torque over the interval between two samples is the command whose action instant
``t_sample + H`` (of the cycle that wrote it) is the latest at or before the interval's start, give or
take half an update period.

Phase lock: a loop on its own timer at the robot's rate reads each sample at a phase that depends on
when both started and drifts with their clocks: read just before a sample arrives, every sample is a
period old and every command misses an update, a delay of up to two periods where one suffices. Where
the backend says the robot updates on its own at the loop's rate or faster
(:attr:`~mbctl.hardware.interface.JointInterface.sample_period_s`), the loop seeks the instant samples
arrive: it moves each deadline a little earlier (:data:`LOCK_SEEK` of a period until it first finds
that instant, then :data:`LOCK_CREEP`) until a read finds no newer sample than the one before (or one
older than the last by more than half a robot period), and then moves the next deadline
:data:`LOCK_MARGIN` of the robot's period later. It reads each sample soon after it arrives, as an
event-driven client would, with a margin for the delivery's jitter; neither clock needs to be known.

Lock-step, and backends whose sample time is only the host's time of the read (no sample clock), have
nothing to measure: the sample is taken at the loop's ``t``, a command acts at once (``H = 0``), and
the observer takes the command written ``1 + command_delay_cycles`` cycles before, as the backend says.
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["LOCK_CREEP", "LOCK_MARGIN", "LOCK_SEEK", "OFFSET_CREEP", "STALE_PERIODS", "STEP_SAMPLES", "SampleTiming"]

LOCK_SEEK = 0.02
"""How much earlier each deadline comes while the phase lock looks for the samples' arrival (share of the loop's period)."""
LOCK_CREEP = 1e-3
"""... and once it has found it: a read misses the arrival about once every ``LOCK_MARGIN / LOCK_CREEP`` cycles."""
LOCK_MARGIN = 0.3
"""How much later the next deadline comes after a read that missed the arrival (share of the robot's period)."""
STALE_PERIODS = 3
"""Robot periods beyond which a sample is stale: the prediction looks no further ahead, and new samples that
all look older (``STEP_SAMPLES`` in a row) mean the robot's clock stepped back (its stamps are re-learned)."""
STEP_SAMPLES = 10
OFFSET_CREEP = 1e-3
"""s/s: how fast the estimate of the clock offset may grow between two quick deliveries (a robot's
clock drifts by at most a few hundred ppm against the host's, NTP slews the system clock by at most 500)."""


class SampleTiming:
    """The loop's account of its samples' instants and of its commands' (module docstring).

    Args:
        period_s: The loop's period (s).
        sample_period_s: The robot's update period (s; None: the loop's).
        measured: The robot keeps its own time and stamps its samples (a paced run on a backend with a
            sample clock); False: lock-step or the host's read time (nothing to measure).
        delay_cycles: Lock-step or no sample clock: the observer takes the command written ``1 +
            delay_cycles`` cycles before.
        latency_s: Time a command takes to reach the robot (s).
        commands: How many of the last commands are kept (the cycle's command queue).
        cycles: How many cycles' ages and horizons are kept for the summary.

    Attributes:
        t0: The host's time (``time.perf_counter``, s) of the loop's ``t = 0``; the loop sets it when it
            starts.
        t_sample: The last sample's instant on the loop's clock (s).
        horizon: ``H`` of the last cycle (s).
        age: The last sample's age (s).
    """

    def __init__(self, period_s: float, sample_period_s: float | None, *, measured: bool, delay_cycles: int, latency_s: float = 0.0, commands: int = 4, cycles: int = 0):
        self.period_s = period_s
        self.sample_period_s = sample_period_s if sample_period_s else period_s
        self.measured = measured
        self.delay_cycles = delay_cycles
        self.latency_s = latency_s
        self.t0 = 0.0
        self.ages, self.horizons = np.full(cycles, np.nan), np.full(cycles, np.nan)
        self.locks = measured and sample_period_s is not None and sample_period_s <= 1.01 * period_s
        self._commands = commands
        self.reset()

    def reset(self) -> None:
        """Forget what was measured (after the loop's warm-up, whose ``t`` is no loop time)."""
        self.offset = math.nan
        self.t_sample = self.horizon = self.age = 0.0
        self._t_seen = self._t_s_last = math.nan  # loop time of the last offset update (s), the stamp it had
        self._acts = [-math.inf] * self._commands  # action instants of the commands written, oldest first (loop clock)
        self._first_act = math.inf  # the first command's
        self.shift = 0.0  # the move of the next deadline the phase lock asks for (s)
        self._found, self._t_s_lock, self._age_last = False, math.nan, math.inf
        self._old, self.clock_steps = 0, 0  # new samples in a row that all look stale; the clock steps found
        self._k = 0

    def sample(self, t: float, t_s: float, t_host: float = math.nan) -> None:
        """A sample stamped ``t_s`` (the backend's clock; ``t_host`` on the host's, NaN if unknown) read
        at the loop's ``t`` (s): sets :attr:`t_sample`, :attr:`age` and :attr:`horizon`."""
        if not self.measured:
            self.t_sample, self.age, self.horizon = t, 0.0, 0.0
            return
        p = self.sample_period_s
        if t_host == t_host:  # known on the host's clock
            self.age = max(0.0, t - (t_host - self.t0))
        else:
            lag = t - t_s
            if t_s != self._t_s_last:  # a sample read again says nothing new of the offset
                creep = 0.0 if math.isnan(self._t_seen) else OFFSET_CREEP * (t - self._t_seen)
                self.offset = lag if math.isnan(self.offset) else min(self.offset + creep, lag)
                self._t_seen, self._t_s_last = t, t_s
                # new samples keep coming yet all look old: the robot's clock stepped back, not its samples
                self._old = self._old + 1 if lag - self.offset > STALE_PERIODS * p else 0
                if self._old >= STEP_SAMPLES:
                    self.offset, self._old = lag, 0
                    self.clock_steps += 1
            self.age = lag - self.offset
        self.t_sample = t - self.age
        self.horizon = p * min(max(1, math.ceil((self.age + self.latency_s) / p - 1e-6)), STALE_PERIODS)
        if self.locks:
            missed = t_s == self._t_s_lock or self.age - self._age_last > 0.5 * p
            self._found = self._found or missed
            self.shift = LOCK_MARGIN * p if missed else -(LOCK_CREEP if self._found else LOCK_SEEK) * self.period_s
            self._t_s_lock, self._age_last = t_s, self.age
        if self._k < len(self.ages):
            self.ages[self._k], self.horizons[self._k] = self.age, self.horizon
            self._k += 1

    def report(self) -> dict[str, float]:
        """The samples' age and the commands' horizon (µs): p50, p99 and max of each, and the steps of the robot's
        clock re-learned where there were any ({} when nothing was measured)."""
        if not self._k:
            return {}
        out = {}
        for name, values in (("age", self.ages[: self._k]), ("horizon", self.horizons[: self._k])):
            v = values * 1e6
            out |= {f"{name}_p50_us": float(np.percentile(v, 50)), f"{name}_p99_us": float(np.percentile(v, 99)), f"{name}_max_us": float(v.max())}
        if self.clock_steps:
            out["clock_steps"] = float(self.clock_steps)
        return out

    def written(self) -> None:
        """The command of this cycle was written: it acts from ``t_sample + horizon``."""
        acts = self._acts
        acts.pop(0)
        acts.append(self.t_sample + self.horizon)
        self._first_act = min(self._first_act, acts[-1])

    def acting(self) -> bool:
        """A command of this run acts at the last sample's instant: until then the arm moved under no
        command of the loop's (held by its brakes, or under the torque it had), which the observer must
        not take for an external torque."""
        first = self._first_act if self._first_act < math.inf else self.t_sample + self.horizon  # this cycle's is the first
        return self.t_sample >= first - 0.5 * self.sample_period_s

    def acted(self, t_previous: float) -> int:
        """The command that acted from the sample instant ``t_previous`` (loop clock, s) on: how many
        commands were written after it (0: the newest)."""
        if not self.measured:
            return self.delay_cycles
        acts, tolerance = self._acts, 0.5 * self.sample_period_s
        for d in range(len(acts)):
            if acts[-1 - d] <= t_previous + tolerance:
                return d
        return len(acts) - 1
