"""Synthetic constant-speed logs with a known truth, for tests, benchmarks and accuracy studies.

The joint follows the plan's reference exactly (an ideal velocity loop); the
logged torque is what a drive would have to supply::

    tau = J*ddq + tau_g(q) + F(dq) + noise,   tau_g(q) = A*cos(q + phase)

with ``F`` the truth's steady friction law (0 while held at rest), white Gaussian
``noise``, positions quantised to an encoder of ``encoder_counts`` per revolution
(per metre), and ``dq`` the first-order filtered difference of those positions, as
the simulated plant measures it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from scipy.signal import lfilter

from mbctl.dynamics.friction.laws import CoulombViscous, LuGre, Stribeck
from mbctl.identification.logs import ConstantSpeedLog
from mbctl.identification.plan import ConstantSpeedPlan, constant_speed_timeline

__all__ = ["SyntheticRig", "synthetic_log", "steady_points"]


@dataclass(frozen=True)
class SyntheticRig:
    """The simulated joint and its sensors.

    Attributes:
        truth: Friction law (its steady curve is used).
        inertia: Joint inertia J (kg·m², kg).
        gravity: Amplitude A of the gravity torque ``A*cos(q + phase)`` (N·m, N).
        gravity_phase: Its phase (rad).
        torque_noise: Standard deviation of the torque noise per sample (N·m, N).
        encoder_counts: Counts per revolution (per metre); 0: exact positions.
        rate_hz: Sampling rate (Hz).
        velocity_cutoff_hz: Filter of the logged velocity (Hz).
    """

    truth: CoulombViscous | Stribeck | LuGre
    inertia: float = 0.3
    gravity: float = 0.0
    gravity_phase: float = 0.0
    torque_noise: float = 0.0
    encoder_counts: int = 4096
    rate_hz: float = 1000.0
    velocity_cutoff_hz: float = 50.0


def synthetic_log(rig: SyntheticRig, plan: ConstantSpeedPlan, rng: np.random.Generator, *, with_dq_ref: bool = True, q_start: float | None = None) -> ConstantSpeedLog:
    """The log of ``plan`` run on ``rig`` (see module docstring)."""
    timeline = constant_speed_timeline(plan, plan.range[0] if q_start is None else q_start)
    n = int(math.floor(timeline.duration * rig.rate_hz)) + 1
    t = np.arange(n) / rig.rate_hz
    q, dq, ddq = timeline.reference(t)
    moving = dq != 0
    friction = np.zeros(n)
    friction[moving] = rig.truth.steady(dq[moving])
    tau = rig.inertia * ddq + rig.gravity * np.cos(q + rig.gravity_phase) + friction
    if rig.torque_noise:
        tau = tau + rng.normal(0.0, rig.torque_noise, n)
    if rig.encoder_counts:
        res = 2 * math.pi / rig.encoder_counts
        q_meas = np.round(q / res) * res
    else:
        q_meas = q
    raw = np.concatenate([[0.0], np.diff(q_meas) * rig.rate_hz])
    a = 1.0 - math.exp(-2 * math.pi * rig.velocity_cutoff_hz / rig.rate_hz)
    dq_meas = _first_order(raw, a)
    return ConstantSpeedLog(t=t, q=q_meas, dq=dq_meas, tau=tau, dq_ref=dq if with_dq_ref else None)


def _first_order(x: np.ndarray, a: float) -> np.ndarray:
    """``y[k] = y[k-1] + a*(x[k] - y[k-1])`` from ``y[0] = x[0]``."""
    y, _ = lfilter([a], [1.0, a - 1.0], x[1:], zi=[(1 - a) * x[0]])
    return np.concatenate([[x[0]], y])


def steady_points(truth: CoulombViscous | Stribeck | LuGre, speeds: np.ndarray, stderr: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Clean steady-state friction points ``F(v_k) + e_k``, ``e_k ~ N(0, stderr_k**2)``."""
    speeds = np.asarray(speeds, dtype=float)
    return np.asarray(truth.steady(speeds), dtype=float) + rng.normal(0.0, 1.0, speeds.shape) * stderr
