"""Gains of the velocity filters for a stated cutoff (pure functions, SI units).

First-order filtered difference, with ``v_raw = (q_k - q_{k-1})/h``::

    v_k = v_{k-1} + a (v_raw - v_{k-1}),   a = 1 - exp(-2 pi f_c h)

Alpha-beta (tracking) filter on position and velocity, prediction ``q- = q + h v (+ model)``,
residual ``e = q_meas - q-``::

    q = q- + alpha e,   v = v- + (beta / h) e

Its error dynamics ``z^2 - (2 - alpha - beta) z + (1 - alpha)`` get a double pole at
``p = exp(-2 pi f_c h)`` (critically damped, bandwidth ``f_c``) with ``alpha = 1 - p^2`` and
``beta = (1 - p)^2``.

The model-based observer (:mod:`mbctl.ctrl.estimation.step`) has a third state per joint, an
acceleration bias ``d`` (an unmodelled load), predicted as ``v- = v + dv + h d``, ``q- = q + h (v + v-)/2``,
``d- = d`` and corrected by ``(l1, l2/h, l3/h^2) e``: :func:`observer_gains` places all three poles
of its error dynamics at ``p`` (a triple pole: bandwidth ``f_c`` per pole).
"""

from __future__ import annotations

import math

import numpy as np

__all__ = ["alpha_beta_gains", "first_order_gain", "observer_gains"]


def first_order_gain(cutoff_hz: float, period_s: float) -> float:
    """``a = 1 - exp(-2 pi f_c h)`` of a first-order low-pass at ``cutoff_hz`` sampled every ``period_s``."""
    return 1.0 - math.exp(-2.0 * math.pi * cutoff_hz * period_s)


def alpha_beta_gains(cutoff_hz: float, period_s: float) -> tuple[float, float]:
    """``(alpha, beta)`` placing both poles of the alpha-beta error dynamics at ``exp(-2 pi f_c h)``."""
    p = math.exp(-2.0 * math.pi * cutoff_hz * period_s)
    return 1.0 - p * p, (1.0 - p) ** 2


def observer_gains(cutoff_hz: float, period_s: float) -> tuple[float, float, float]:
    """``(l1, l2, l3)`` of the three-state observer (see the module docstring) with all poles at
    ``p = exp(-2 pi f_c h)``.

    The error transition ``(I - L c) A`` (``A`` the prediction, ``c = (1, 0, 0)``, ``L = (l1, l2,
    l3)`` in units of the step) has a characteristic polynomial affine in ``L``; matching it to
    ``(z - p)^3`` is a 3 x 3 linear solve.
    """
    p = math.exp(-2.0 * math.pi * cutoff_hz * period_s)
    A = np.array([[1.0, 1.0, 0.5], [0.0, 1.0, 1.0], [0.0, 0.0, 1.0]])  # q, h v, h^2 d; trapezoidal position step
    c = np.array([1.0, 0.0, 0.0])

    def coefficients(L: np.ndarray) -> np.ndarray:
        return np.poly((np.eye(3) - np.outer(L, c)) @ A)[1:]

    base = coefficients(np.zeros(3))
    columns = np.column_stack([coefficients(e) - base for e in np.eye(3)])
    target = np.poly([p, p, p])[1:]
    l1, l2, l3 = np.linalg.solve(columns, target - base)
    return float(l1), float(l2), float(l3)
