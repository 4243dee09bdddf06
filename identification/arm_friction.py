"""The friction columns of the whole-arm fit (:mod:`mbctl.identification.arm_fit`), filtered as its
regressor is, and the choice of each joint's Stribeck velocity from a grid."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from mbctl.dynamics.friction.laws import motion_direction
from mbctl.identification.arm_log import ConditionedLog

__all__ = ["STRIBECK_VS_GRID", "friction_columns", "friction_matrix", "parallel_filter", "stribeck_speeds"]

STRIBECK_VS_GRID = np.geomspace(0.02, 0.5, 15)  # rad/s (m/s); a slower bump is lost in the 5 Hz parallel filter


def friction_columns(law: str, dq: np.ndarray, ddq: np.ndarray, vs: float | None = None) -> tuple[np.ndarray, tuple[str, ...]]:
    """Columns of one joint's friction, shape (N, k), and the parameter names."""
    s = motion_direction(dq, ddq)
    if law == "coulomb-viscous":
        return np.column_stack([s, dq]), ("fc", "fv")
    if law == "stribeck":
        bump = np.exp(-((dq / vs) ** 2))
        return np.column_stack([s * (1 - bump), s * bump, dq]), ("fc", "fs", "fv")
    return np.zeros((len(dq), 0)), ()


def friction_matrix(law: str, logs: Sequence[ConditionedLog], vs: np.ndarray, cutoff_hz: float) -> tuple[np.ndarray, tuple[str, ...]]:
    """Friction columns, block-diagonal over joints, shape (N, n, n*k), parallel-filtered, and the parameter names."""
    parts = []
    for log in logs:
        n = len(log.joint_names)
        blocks = [friction_columns(law, log.dq[:, c], log.ddq[:, c], vs[c]) for c in range(n)]
        names = blocks[0][1]
        k = len(names)
        F = np.zeros((len(log), n, n * k))
        for c, (cols, _) in enumerate(blocks):
            F[:, c, c * k : (c + 1) * k] = cols
        parts.append(F)
    return parallel_filter(np.concatenate(parts), logs, cutoff_hz), names


def parallel_filter(x: np.ndarray, logs: Sequence[ConditionedLog], cutoff_hz: float) -> np.ndarray:
    """Each log's stretch of ``x`` (samples along axis 0) through a zero-phase low-pass at ``cutoff_hz``."""
    out, start = np.empty_like(x), 0
    for log in logs:
        stop = start + len(log)
        out[start:stop] = log.conditioning.smooth(x[start:stop], cutoff_hz) if x.shape[-1] else x[start:stop]
        start = stop
    return out


def stribeck_speeds(Yb: np.ndarray, logs: Sequence[ConditionedLog], rhs: np.ndarray, cutoff_hz: float) -> np.ndarray:
    """Each joint's Stribeck velocity (rad/s, m/s) from :data:`STRIBECK_VS_GRID`.

    The rigid part is taken from a Coulomb–viscous fit; then, joint by joint, the
    grid speed whose linear Stribeck fit leaves the smallest residual wins.
    """
    N, n, nb = Yb.shape
    F, _ = friction_matrix("coulomb-viscous", logs, np.full(n, np.nan), cutoff_hz)
    A = np.concatenate([Yb, F], axis=2)
    z, *_ = np.linalg.lstsq(A.reshape(N * n, -1), rhs.ravel(), rcond=None)
    rest = rhs - Yb @ z[:nb]
    errors = np.empty((len(STRIBECK_VS_GRID), n))
    for i, vs in enumerate(STRIBECK_VS_GRID):
        F, _ = friction_matrix("stribeck", logs, np.full(n, vs), cutoff_hz)
        for c in range(n):
            B = F[:, c, 3 * c : 3 * c + 3]
            x, *_ = np.linalg.lstsq(B, rest[:, c], rcond=None)
            errors[i, c] = np.sum((B @ x - rest[:, c]) ** 2)
    return STRIBECK_VS_GRID[np.argmin(errors, axis=0)]
