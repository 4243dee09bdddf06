"""Baumgarte stabilization and the policy near singular constraint Jacobians."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mbctl.errors import ConfigError

__all__ = ["Baumgarte", "SingularityPolicy"]


@dataclass(frozen=True)
class Baumgarte:
    """Baumgarte stabilization of the acceleration-level constraint rows.

    - ``form="squared"`` (the flexible-manipulator study): ``Phi'' + 2*alpha*Phi' + beta**2*Phi = 0``,
      ``gamma_stab = gamma - 2*alpha*dPhi - beta**2*Phi``;
    - ``form="linear"`` (the SCARA constraint study): ``Phi'' + alpha*Phi' + beta*Phi = 0``,
      ``gamma_stab = gamma - alpha*dPhi - beta*Phi``.

    Velocity-level (Pfaffian) rows get the damping term only: ``dPsi' + c1*dPsi = 0``
    with ``c1 = 2*alpha`` or ``alpha``. Units: ``alpha`` 1/s; ``beta`` 1/s (squared)
    or 1/s² (linear).
    """

    form: Literal["squared", "linear"]
    alpha: float
    beta: float

    def __post_init__(self) -> None:
        if self.form not in ("squared", "linear"):
            raise ConfigError(f"unknown value {self.form!r} (expected squared, linear)", field="form")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"must be a finite number >= 0, got {value!r}", field=name)

    @property
    def coefficients(self) -> tuple[float, float]:
        """``(c1, c0)`` of the violation's law ``Phi'' + c1*Phi' + c0*Phi = 0``."""
        if self.form == "squared":
            return 2.0 * self.alpha, self.beta**2
        return float(self.alpha), float(self.beta)

    def stabilize(self, gamma: np.ndarray, phi: np.ndarray, dphi: np.ndarray, level: np.ndarray) -> np.ndarray:
        """``gamma_stab`` for rows of the given levels (2 position, 1 velocity)."""
        c1, c0 = self.coefficients
        if np.all(level == 2):
            return gamma - c1 * dphi - c0 * phi
        return gamma - c1 * dphi - c0 * np.where(level == 2, phi, 0.0)


@dataclass(frozen=True)
class SingularityPolicy:
    """What to do when the constraint Jacobian loses rank.

    When the constraints fix every DOF (rank = nv), the sign of ``det A`` is also
    watched: a fixed-step integrator can step across a singular configuration
    between two evaluations, and a sign change reveals it.

    Attributes:
        tolerance: A singular value ``s_r`` below ``tolerance*s_1`` (r = the initial
            rank) counts as singular (1e-3: for the SCARA, an elbow within ~1° of
            stretched).
        action: ``"stop"`` raises :class:`SingularConstraintError`; ``"damped"``
            continues with damped least squares (Udwadia–Kalaba only).
        damping: ``mu/s_max`` of the damped mode.
    """

    tolerance: float = 1e-3
    action: Literal["stop", "damped"] = "stop"
    damping: float = 1e-3

    def __post_init__(self) -> None:
        if self.action not in ("stop", "damped"):
            raise ConfigError(f"unknown value {self.action!r} (expected stop, damped)", field="action")
        if not (0 < self.tolerance < 1):
            raise ConfigError(f"must be in (0, 1), got {self.tolerance!r}", field="tolerance")
        if not (self.damping > 0 and math.isfinite(self.damping)):
            raise ConfigError(f"must be > 0, got {self.damping!r}", field="damping")
