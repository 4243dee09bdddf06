"""Equivalent normal load of a joint bearing, from the reaction wrench it transmits.

A joint's reaction wrench ``w = (f, m)`` (force in N, moment in N·m, expressed in the
joint frame, pinocchio's ``data.f`` ordering: linear first) splits along the unit
joint axis ``n`` into components the bearing carries:

- radial force ``f_r = |(I - n n^T) f|`` and axial force ``f_a = |n . f|``;
- bending moment ``m_b = |(I - n n^T) m|`` and axial moment ``m_a = |n . m|``.

A load model combines them into the equivalent normal load that multiplies the dry
part of a friction law (:mod:`mbctl.dynamics.friction.laws`): a torque (N·m) for revolute
joints, a force (N) for prismatic ones, so the friction coefficients stay
dimensionless. Both models are written over :mod:`mbctl.dynamics.backend`: ``wrench`` is
an array whose last axis holds the 6 components, or a 6-vector CasADi expression.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar, Literal

import numpy as np

from mbctl.dynamics.backend import namespace
from mbctl.dynamics.parameters import Parameters

__all__ = ["Bearing3D", "Journal2D", "LoadModel", "LOAD_MODELS", "wrench_components"]

JointKind = Literal["revolute", "prismatic"]


def wrench_components(wrench: Any, axis: np.ndarray) -> tuple[Any, Any, Any, Any]:
    """Split a joint wrench along the joint axis.

    Args:
        wrench: Reaction wrench (f [N], m [N·m]) in the joint frame; numpy array with
            the 6 components on the last axis, or a CasADi 6-vector.
        axis: Unit joint axis in the joint frame, shape (3,).

    Returns:
        ``(f_radial, f_axial, m_bending, m_axial)`` magnitudes, in N and N·m.
    """
    xp = namespace(wrench)
    c = [xp.component(wrench, i) for i in range(6)]
    n = [float(a) for a in axis]

    def split(x: list[Any]) -> tuple[Any, Any]:
        along = n[0] * x[0] + n[1] * x[1] + n[2] * x[2]
        squared = x[0] * x[0] + x[1] * x[1] + x[2] * x[2]
        # max(.., 0) absorbs round-off when the vector is (almost) along the axis
        return xp.sqrt(xp.maximum(squared - along * along, 0.0)), xp.abs(along)

    f_radial, f_axial = split(c[:3])
    m_bending, m_axial = split(c[3:])
    return f_radial, f_axial, m_bending, m_axial


@dataclass(frozen=True)
class Bearing3D(Parameters):
    """Three-dimensional bearing model (after the load-dependent friction study).

    Revolute joint, equivalent normal torque (N·m):
    ``tau_n = (m_b/rb + f_r)*rp + f_a*rn``
    — the bending moment is carried as a radial force pair ``m_b/rb``, and every
    radial force acts on the pin radius ``rp``. (The load-dependent friction study writes ``m_b/rb`` without
    the factor ``rp``, which adds a force to torques; the factor makes the sum a
    torque and the friction coefficients dimensionless.)

    Prismatic joint, equivalent normal force (N):
    ``f_n = m_b/rb + f_r + m_a/rn``.

    Attributes:
        rb: Bending-reaction arm (m): half the spacing of the bearings that carry a
            bending moment, > 0.
        rp: Pin (journal) radius (m), >= 0; used by revolute joints.
        rn: Friction arm of the axial load (m) for revolute joints, or arm of the
            axial moment for prismatic ones, > 0.
    """

    rb: float
    rp: float
    rn: float
    name: ClassVar[str] = "bearing3d"

    def _validate(self) -> None:
        self._require("rb", self.rb > 0, "must be > 0")
        self._require("rp", self.rp >= 0, "must be >= 0")
        self._require("rn", self.rn > 0, "must be > 0")

    def normal_load(self, wrench: Any, axis: np.ndarray, kind: JointKind) -> Any:
        """Equivalent normal load: N·m for a revolute joint, N for a prismatic one."""
        f_r, f_a, m_b, m_a = wrench_components(wrench, axis)
        if kind == "revolute":
            return (m_b / self.rb + f_r) * self.rp + f_a * self.rn
        return m_b / self.rb + f_r + m_a / self.rn


@dataclass(frozen=True)
class Journal2D(Parameters):
    """Planar journal model (after the flexible-manipulator study).

    Revolute joint: ``tau_n = f_r*diameter/2`` (N·m); prismatic joint: ``f_n = f_r`` (N),
    with ``f_r`` the reaction force normal to the joint axis.

    Attributes:
        diameter: Journal diameter (m), > 0; used by revolute joints.
    """

    diameter: float
    name: ClassVar[str] = "journal2d"

    def _validate(self) -> None:
        self._require("diameter", self.diameter > 0, "must be > 0")

    def normal_load(self, wrench: Any, axis: np.ndarray, kind: JointKind) -> Any:
        """Equivalent normal load: N·m for a revolute joint, N for a prismatic one."""
        f_r = wrench_components(wrench, axis)[0]
        return f_r * (self.diameter / 2) if kind == "revolute" else f_r


LoadModel = Bearing3D | Journal2D
LOAD_MODELS: dict[str, type[Bearing3D] | type[Journal2D]] = {"bearing3d": Bearing3D, "journal2d": Journal2D}
