"""Experiment plans: which speeds, which range, how long; and the reference motion they give.

A constant-speed plan moves the tested joint, for every speed ``v``, from one end
``a`` of its range to the other end ``b`` at ``+v`` and back at ``-v``
(trapezoidal velocity: ramps at ``acceleration``, a cruise at constant speed),
holding ``settle_s`` at both ends; quintic transits with no constant-speed part
connect the legs. A slow speed whose leg would take longer than ``max_leg_s`` uses
a shorter range centred in the full one. Speeds are log-spaced and densest around
the expected Stribeck velocity ``vs`` (:func:`speed_grid`).

A presliding plan, on the same joint, runs in torque mode from a held position:
a slow triangular torque cycle below break-away (``0 -> +A -> -A -> 0``), torque
steps (``+dF`` then back), and torque ramps through break-away at a few rates, each
in both directions (see :mod:`mbctl.identification.experiments`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

__all__ = [
    "ConstantSpeedPlan",
    "PreslidingPlan",
    "ControlGains",
    "Phase",
    "Timeline",
    "speed_grid",
    "constant_speed_timeline",
    "leg_range",
]


def speed_grid(v_min: float, v_max: float, count: int, v_stribeck: float, width: float = math.log(3.0)) -> np.ndarray:
    """``count`` speeds from ``v_min`` to ``v_max`` (rad/s, m/s), densest around ``v_stribeck``.

    With ``x = ln(v/v_stribeck)`` the points are uniform in ``asinh(x/width)``: log-spaced
    far from ``v_stribeck`` and about ``1/width`` times denser per decade near it.
    """
    if not (0 < v_min < v_max) or count < 2 or not v_stribeck > 0:
        raise ValueError("need 0 < v_min < v_max, count >= 2 and v_stribeck > 0")
    y0, y1 = (math.asinh(math.log(v / v_stribeck) / width) for v in (v_min, v_max))
    return v_stribeck * np.exp(width * np.sinh(np.linspace(y0, y1, count)))


@dataclass(frozen=True)
class ControlGains:
    """Host-side loops that drive the experiments in torque mode.

    Every joint gets a PID on position around a reference, scaled by its own inertia
    ``J`` (the mass-matrix diagonal at the start): ``kp = J*w**2``,
    ``kd = 2*damping*J*w``, ``ki = integral*kp*w`` with ``w = 2*pi*bandwidth_hz``.

    Attributes:
        bandwidth_hz: Closed-loop bandwidth (Hz).
        damping: Damping ratio of the PD part.
        integral: Integral gain relative to ``kp*w``.
    """

    bandwidth_hz: float = 10.0
    damping: float = 1.0
    integral: float = 0.3


@dataclass(frozen=True)
class ConstantSpeedPlan:
    """Constant-speed test of one joint.

    Attributes:
        joint: Tested joint.
        speeds: Cruise speeds in run order (rad/s, m/s), > 0.
        range: Positions ``(a, b)`` travelled at every speed (rad, m), ``a < b``.
        settle_s: Hold at both ends of a leg, and the transient dropped at the start
            of every cruise when processing (s).
        acceleration: Of the speed ramps (rad/s², m/s²).
        max_leg_s: Longest cruise (s); slower legs use a shorter, centred range.
        transit_speed: Peak speed of the transits between legs (rad/s, m/s).
    """

    joint: str
    speeds: tuple[float, ...]
    range: tuple[float, float]
    settle_s: float = 0.2
    acceleration: float = 10.0
    max_leg_s: float = 20.0
    transit_speed: float = 0.5


@dataclass(frozen=True)
class PreslidingPlan:
    """Presliding and break-away test of one joint (torques relative to the holding torque).

    Attributes:
        joint: Tested joint.
        breakaway: Expected break-away torque (N·m, N), > 0: scales the tests.
        amplitude: Peak of the slow cycle, fraction of ``breakaway``.
        cycle_s: Duration of the cycle ``0 -> +A -> -A -> 0`` (s).
        step: Torque step, fraction of ``breakaway``.
        step_s: Each step level is held this long (s).
        ramp_rates: Ramps through break-away, fractions of ``breakaway`` per second.
        max_torque: Ramps stop at this multiple of ``breakaway`` if the joint has not slipped.
        slip_distance: Displacement from the ramp's start that ends it (rad, m).
        hold_s: Position hold between tests (s).
    """

    joint: str
    breakaway: float
    amplitude: float = 0.5
    cycle_s: float = 4.0
    step: float = 0.1
    step_s: float = 0.5
    ramp_rates: tuple[float, ...] = (0.25, 0.5, 1.0)
    max_torque: float = 2.0
    slip_distance: float = 1e-3
    hold_s: float = 1.0


@dataclass(frozen=True)
class Phase:
    """One piece of the tested joint's plan, from ``t0`` to ``t1`` (s).

    Position phases (``hold``, ``transit``, ``leg``) have a reference from ``q0`` to
    ``q1`` (rad, m); legs cruise at ``speed`` (signed) with ramps at ``acceleration``.
    Torque phases (``cycle``, ``step``, ``ramp``) add a torque profile to the holding
    torque; ``sign`` is the ramp direction and ``rate`` its slope (N·m/s, N/s).
    """

    kind: str
    t0: float
    t1: float
    q0: float = math.nan
    q1: float = math.nan
    speed: float = 0.0
    acceleration: float = 0.0
    sign: float = 0.0
    rate: float = 0.0

    @property
    def is_torque(self) -> bool:
        return self.kind in ("cycle", "step", "ramp")

    def reference(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Position, velocity, acceleration of a position phase at times ``t`` (inside it)."""
        tau = np.asarray(t, dtype=float) - self.t0
        d = self.q1 - self.q0
        if self.kind == "hold" or d == 0:
            z = np.zeros_like(tau)
            return z + self.q0, z, z
        if self.kind == "transit":
            T = self.t1 - self.t0
            s = np.clip(tau / T, 0.0, 1.0)
            p = s**3 * (10 - 15 * s + 6 * s**2)
            dp = 30 * s**2 * (1 - s) ** 2 / T
            ddp = 60 * s * (1 - s) * (1 - 2 * s) / T**2
            return self.q0 + d * p, d * dp, d * ddp
        v, a = abs(self.speed), self.acceleration
        sgn = math.copysign(1.0, d)
        ta = v / a
        T = self.t1 - self.t0
        tc = T - ta  # start of the deceleration
        q = np.where(tau < ta, 0.5 * a * tau**2, np.where(tau < tc, 0.5 * a * ta**2 + v * (tau - ta), abs(d) - 0.5 * a * (T - tau) ** 2))
        dq = np.where(tau < ta, a * tau, np.where(tau < tc, v, a * (T - tau)))
        ddq = np.where(tau < ta, a, np.where(tau < tc, 0.0, -a))
        return self.q0 + sgn * q, sgn * dq, sgn * ddq


@dataclass(frozen=True)
class Timeline:
    """The phases of one experiment, back to back from ``t = 0``."""

    phases: tuple[Phase, ...]

    @property
    def duration(self) -> float:
        return self.phases[-1].t1 if self.phases else 0.0

    def index(self, t: float) -> int:
        """Index of the phase running at time ``t`` (the last one after the end)."""
        starts = [p.t0 for p in self.phases]
        return max(0, min(len(self.phases) - 1, int(np.searchsorted(starts, t, side="right")) - 1))

    def reference(self, t: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Position, velocity and acceleration references at times ``t`` (position phases only)."""
        t = np.asarray(t, dtype=float)
        q, dq, ddq = np.full(t.shape, np.nan), np.zeros(t.shape), np.zeros(t.shape)
        starts = np.array([p.t0 for p in self.phases])
        k = np.clip(np.searchsorted(starts, t, side="right") - 1, 0, len(self.phases) - 1)
        for i in np.unique(k):
            p = self.phases[i]
            if p.is_torque:
                continue
            sel = k == i
            q[sel], dq[sel], ddq[sel] = p.reference(t[sel])
        return q, dq, ddq


def leg_range(plan: ConstantSpeedPlan, speed: float) -> tuple[float, float]:
    """The range travelled at ``speed``: the plan's, or a centred part whose cruise lasts ``max_leg_s``."""
    a, b = plan.range
    length = speed * plan.max_leg_s + speed**2 / plan.acceleration
    if length >= b - a:
        return a, b
    c = 0.5 * (a + b)
    return c - 0.5 * length, c + 0.5 * length


def _transit(t0: float, q0: float, q1: float, speed: float, acceleration: float) -> Phase:
    d = abs(q1 - q0)
    # quintic: peak speed 1.875*d/T, peak acceleration 5.7735*d/T**2
    T = max(0.2, 1.875 * d / speed, math.sqrt(5.7735 * d / acceleration))
    return Phase("transit", t0, t0 + T, q0, q1)


def constant_speed_timeline(plan: ConstantSpeedPlan, q_start: float) -> Timeline:
    """The tested joint's reference: from ``q_start``, every speed forward and back.

    Raises:
        ValueError: If a leg is too short to reach its speed and cruise for
            ``2*settle_s`` plus 0.1 s (the caller turns it into an input error).
    """
    phases: list[Phase] = []
    t, q = 0.0, q_start
    a_max = plan.acceleration
    phases.append(Phase("hold", t, t + plan.settle_s, q, q))
    t += plan.settle_s
    for v in plan.speeds:
        lo, hi = leg_range(plan, v)
        cruise = (hi - lo - v * v / a_max) / v
        # both directions drop settle_s at the start of their cruise; what is left must overlap
        if cruise < 2 * plan.settle_s + 0.1:
            raise ValueError(
                f"at {v:.4g} the range {lo:.4g}..{hi:.4g} leaves {max(cruise, 0):.3g} s at constant speed; "
                f"need 2*settle_s + 0.1 s = {2 * plan.settle_s + 0.1:.3g} s so that both directions cover a common "
                "range after their transients (widen the range, lower the speed or raise the acceleration)"
            )
        if abs(q - lo) > 1e-12:
            phases.append(_transit(t, q, lo, plan.transit_speed, a_max))
            t = phases[-1].t1
            phases.append(Phase("hold", t, t + plan.settle_s, lo, lo))
            t += plan.settle_s
        duration = (hi - lo) / v + v / a_max
        for q0, q1, s in ((lo, hi, v), (hi, lo, -v)):
            phases.append(Phase("leg", t, t + duration, q0, q1, speed=s, acceleration=a_max))
            t += duration
            phases.append(Phase("hold", t, t + plan.settle_s, q1, q1))
            t += plan.settle_s
        q = lo
    return Timeline(tuple(phases))
