"""What a torque distribution of :mod:`mbctl.ctrl.redundancy` yields: the drive torques with their reactions and
checks (:class:`Distribution`), or the error naming the sample the torque limits make infeasible."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from mbctl.errors import InputError

__all__ = ["ActuationLimitError", "Distribution"]


class ActuationLimitError(InputError):
    """The drives' torque limits cannot realise the motion at some sample.

    Attributes:
        time: Sample time (s).
        joints: The drives at (or beyond) their limits.
    """

    def __init__(self, reason: str, *, file=None, field=None, time: float = math.nan, joints: Sequence[str] = ()):
        super().__init__(reason, file=file, field=field)
        self.time = time
        self.joints = tuple(joints)


@dataclass(frozen=True, eq=False)
class Distribution:
    """Drive torques of one mode along a motion, with reactions and checks (N samples).

    Attributes:
        mode: The distribution mode.
        t: Sample times (s).
        joints: The drives (columns of ``tau`` and ``power``).
        tau: Drive torques (N, na), N·m or N.
        lam: Loop multipliers (N, m), ``Q_c = -A^T lambda``; rows in ``row_names``.
        reaction_names: Passive tree joints, then cut joints (loop constraint names).
        reaction: Reaction forces (N, len(reaction_names), 3), N (see module docstring).
        residual: max over DOF of ``|B tau - A^T lambda - tau_tree|`` per sample (N·m, N).
        reduced_residual: max of ``|W^T tau - f|`` per sample.
        power: Drive powers ``tau_i omega_i`` (N, na), W.
        row_names: Loop rows (columns of ``lam``).
    """

    mode: str
    t: np.ndarray
    joints: tuple[str, ...]
    tau: np.ndarray
    lam: np.ndarray
    reaction_names: tuple[str, ...]
    reaction: np.ndarray
    residual: np.ndarray
    reduced_residual: np.ndarray
    power: np.ndarray
    row_names: tuple[str, ...]

    @property
    def internal_force(self) -> np.ndarray:
        """Euclidean norm of all passive-joint reaction forces per sample (N)."""
        return np.sqrt(np.sum(self.reaction**2, axis=(1, 2)))

    @property
    def power_norm(self) -> np.ndarray:
        """Euclidean norm of the drive powers per sample (W)."""
        return np.linalg.norm(self.power, axis=1)
