"""Errors of the constrained dynamics: singular or contradictory constraints, no consistent loads."""

from __future__ import annotations

import numpy as np

from mbctl.errors import ConfigError, MbctlError

__all__ = ["SingularConstraintError", "InconsistentConstraintsError", "ReactionLoopError"]


class SingularConstraintError(ConfigError):
    """The constraint Jacobian lost rank during a run.

    Attributes:
        time: Time of the detection (s), when known.
        q: Configuration at the detection (nv,), when known.
    """

    def __init__(self, reason: str, *, file=None, field=None, time: float | None = None, q: np.ndarray | None = None):
        super().__init__(reason, file=file, field=field)
        self.time = time
        self.q = None if q is None else np.array(q, dtype=float)


class InconsistentConstraintsError(ConfigError):
    """The constraint rows cannot hold together."""


class ReactionLoopError(MbctlError):
    """No consistent normal loads for load-dependent friction (Newton on the loads failed)."""
