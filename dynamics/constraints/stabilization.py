"""Baumgarte stabilization of the constraint rows, and the policy near singular constraint Jacobians.

The parameters (:class:`Baumgarte`, :class:`SingularityPolicy`) are plain specs of
``[simulation]`` (:mod:`mbctl.config.simulation`); this module applies them.
"""

from __future__ import annotations

import numpy as np

from mbctl.config.simulation import Baumgarte, SingularityPolicy

__all__ = ["Baumgarte", "SingularityPolicy", "stabilize"]


def stabilize(baumgarte: Baumgarte, gamma: np.ndarray, phi: np.ndarray, dphi: np.ndarray, level: np.ndarray) -> np.ndarray:
    """``gamma_stab = gamma - c1*dPhi - c0*Phi`` for rows of the given levels (2 position, 1 velocity:
    damping term only), with ``(c1, c0) = baumgarte.coefficients``."""
    c1, c0 = baumgarte.coefficients
    if np.all(level == 2):
        return gamma - c1 * dphi - c0 * phi
    return gamma - c1 * dphi - c0 * np.where(level == 2, phi, 0.0)
