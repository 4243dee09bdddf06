"""Per-grid-point limits and the stage rows ``A a + B b <= C`` of a path timing (see
:mod:`mbctl.ctrl.timing.solve` for the method)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbctl.ctrl.timing.dynamics import PathDynamics
from mbctl.ctrl.timing.limits import TimingLimits
from mbctl.ctrl.timing.reachability import StageConstraints

__all__ = ["GridLimits", "stage_constraints", "interval_accel"]


@dataclass(frozen=True, eq=False)
class GridLimits:
    """Per-grid-point limits (arrays (N+1, nv)); tightened locally between solves."""

    velocity: np.ndarray
    acceleration: np.ndarray
    torque: np.ndarray
    jerk: np.ndarray | None

    @classmethod
    def of(cls, limits: TimingLimits, points: int) -> GridLimits:
        tile = lambda x: np.tile(np.asarray(x, dtype=float), (points, 1))  # noqa: E731
        return cls(tile(limits.velocity), tile(limits.acceleration), tile(limits.torque), None if limits.jerk is None else tile(limits.jerk))


def stage_constraints(pd: PathDynamics, lim: GridLimits, f0: np.ndarray, fa: np.ndarray, fb: np.ndarray, a0: np.ndarray, b0: np.ndarray) -> StageConstraints:
    """Rows ``A a + B b <= C`` of the acceleration and torque limits with the friction linearised
    at ``(a0, b0)``: ``f ~ f0 + fa (a - a0) + fb (b - b0)``; the velocity limits as ``b <= b_max``."""
    d1, d2 = pd.dq_ds, pd.ddq_ds
    acc = np.isfinite(lim.acceleration).any(axis=0)
    trq = np.isfinite(lim.torque).any(axis=0)
    ta, tb = pd.tau_a[:, trq] + fa[:, trq], pd.tau_b[:, trq] + fb[:, trq]
    rest = pd.tau_0[:, trq] + f0[:, trq] - fa[:, trq] * a0[:, None] - fb[:, trq] * b0[:, None]
    T, Acc = lim.torque[:, trq], lim.acceleration[:, acc]
    A = np.hstack([d1[:, acc], -d1[:, acc], ta, -ta])
    B = np.hstack([d2[:, acc], -d2[:, acc], tb, -tb])
    C = np.hstack([Acc, Acc, T - rest, T + rest])
    with np.errstate(divide="ignore"):
        b_max = np.min((lim.velocity / np.abs(d1)) ** 2, axis=1)
    return StageConstraints(A=A, B=B, C=C, b_max=b_max, ds=float(pd.s[1] - pd.s[0]))


def interval_accel(b: np.ndarray, ds: float) -> np.ndarray:
    """``a_i = (b_{i+1} - b_i) / (2 ds)`` per interval, repeated at the last grid point (N+1,)."""
    a = np.diff(b) / (2.0 * ds)
    return np.append(a, a[-1])
