"""Joint friction laws: Coulomb–viscous, Stribeck and LuGre, optionally load-dependent.

Each law is written once over :mod:`mbctl.dynamics.backend`, so the same method
evaluates numpy arrays (whole trajectories at once) and CasADi symbols
(controllers). Velocities are in rad/s for revolute joints and m/s for prismatic
ones; torques come out in N·m or N respectively.

**Load dependence.** Every law takes a ``load`` factor that multiplies its dry part
(Coulomb, Stribeck and bristle terms) but not the viscous term ``fv*v``: lubricant
shear does not grow with the bearing load. Without a load model ``load = 1`` and
``fc``, ``fs`` are torques (N·m) or forces (N); with one, ``load`` is the joint's
equivalent normal load from :mod:`mbctl.dynamics.friction.loads` and ``fc``, ``fs`` are
dimensionless coefficients.

**Sign at zero velocity.** A static law is set-valued at ``v = 0``. The laws take an
optional ``direction`` in [-1, 1] that replaces ``sgn(v)``; inverse dynamics passes
:func:`motion_direction`, which uses the sign of the acceleration where the velocity
is exactly zero (the friction a motion starting from rest must overcome), and 0
when both vanish (a joint at rest needs no friction torque).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, ClassVar

from scipy.optimize import brentq

from mbctl.dynamics.backend import namespace
from mbctl.dynamics.friction.loads import Bearing3D, Journal2D
from mbctl.dynamics.parameters import Parameters

__all__ = [
    "lugre_decay",
    "lugre_force",
    "lugre_rate",
    "lugre_z_steady",
    "lugre_z_step",
    "smoothed_dry",
    "smoothed_dry_slope",
    "stribeck_level",
    "CoulombViscous",
    "Stribeck",
    "LuGre",
    "FrictionLaw",
    "JointFriction",
    "LAWS",
    "motion_direction",
    "simplify_law",
]


def motion_direction(v: Any, a: Any) -> Any:
    """Direction of motion used for ``sgn(v)``: ``sgn(v)``, or ``sgn(a)`` where ``v == 0``.

    Args:
        v: Joint velocity (rad/s or m/s), array or CasADi expression.
        a: Joint acceleration (rad/s² or m/s²), same shape.
    """
    xp = namespace(v, a)
    return xp.where(v != 0, xp.sign(v), xp.sign(a))


# ---- the formulas, as functions of the parameters over a backend namespace ``xp``
# (:mod:`mbctl.dynamics.backend`): parameters may be numbers or CasADi symbols, so the
# laws below, the compiled simulation and the servo model share these lines


def stribeck_level(xp: Any, v: Any, fc: Any, fs: Any, vs: Any, delta: Any = 2.0) -> Any:
    """Dry friction level ``fc + (fs - fc)*exp(-|v/vs|**delta)`` at velocity ``v``
    (units of ``fc``; ``delta = 2`` is LuGre's ``g(v)``)."""
    return fc + (fs - fc) * xp.exp(-(xp.abs(v / vs) ** delta))


def smoothed_dry(xp: Any, dry: Any, v: Any, eps: Any) -> Any:
    """Dry friction ``dry*sgn(v)`` with the sign regularized, ``dry*tanh(v/eps)`` (``eps`` in rad/s
    or m/s), as simulations apply static laws: below ``eps`` the dry friction acts as a steep
    viscous damper."""
    return dry * xp.tanh(v / eps)


def smoothed_dry_slope(xp: Any, dry: Any, v: Any, eps: Any) -> Any:
    """Slope ``dry*(1 - tanh^2(v/eps))/eps`` of :func:`smoothed_dry` at fixed ``dry`` (>= 0 for ``dry >= 0``)."""
    return dry * (1 - xp.tanh(v / eps) ** 2) / eps


def lugre_rate(xp: Any, v: Any, z: Any, sigma0: Any, g: Any) -> Any:
    """Bristle rate ``dz/dt = v - sigma0*|v|*z/g`` (rad/s or m/s), ``g`` the level at ``v``."""
    return v - sigma0 * xp.abs(v) * z / g


def lugre_force(z: Any, rate: Any, sigma0: Any, sigma1: Any) -> Any:
    """Bristle force ``sigma0*z + sigma1*dz/dt`` at unit load (units of ``fc``)."""
    return sigma0 * z + sigma1 * rate


def lugre_decay(xp: Any, v: Any, sigma0: Any, g: Any) -> Any:
    """Decay rate ``sigma0*|v|/g`` (1/s) of the bristle state: ``-d(dz/dt)/dz``."""
    return sigma0 * xp.abs(v) / g


def lugre_z_steady(direction: Any, sigma0: Any, g: Any) -> Any:
    """Steady bristle deflection ``direction*g/sigma0`` (rad or m), ``direction = sgn(v)``."""
    return direction * g / sigma0


def lugre_z_step(xp: Any, z: Any, v: Any, dt: Any, sigma0: Any, g: Any) -> Any:
    """The bristle state ``dt`` seconds on at constant ``v``, exact for any ``dt``:
    ``z_ss + (z - z_ss)*exp(-sigma0*|v|*dt/g)`` with ``z_ss = sgn(v)*g/sigma0``."""
    z_ss = lugre_z_steady(xp.sign(v), sigma0, g)
    return z_ss + (z - z_ss) * xp.exp(-lugre_decay(xp, v, sigma0, g) * dt)


def _validate_stribeck_levels(law: Stribeck | LuGre) -> None:
    law._require("fc", law.fc >= 0, "must be >= 0")
    law._require("fs", law.fs >= law.fc, f"must be >= fc = {law.fc:g}")
    law._require("vs", law.vs > 0, "must be > 0")
    law._require("fv", law.fv >= 0, "must be >= 0")


@dataclass(frozen=True)
class CoulombViscous(Parameters):
    """Coulomb plus viscous friction.

    ``F(v) = load*fc*sgn(v) + fv*v``

    Attributes:
        fc: Coulomb level (N·m, N, or dimensionless with a load model), >= 0.
        fv: Viscous coefficient (N·m·s/rad or N·s/m), >= 0.
    """

    fc: float
    fv: float = 0.0
    name: ClassVar[str] = "coulomb-viscous"

    def _validate(self) -> None:
        self._require("fc", self.fc >= 0, "must be >= 0")
        self._require("fv", self.fv >= 0, "must be >= 0")

    def steady(self, v: Any, direction: Any = None, load: Any = 1.0) -> Any:
        """Friction torque in steady sliding at velocity ``v``."""
        xp = namespace(v, direction, load)
        s = xp.sign(v) if direction is None else direction
        return load * self.fc * s + self.fv * v

    def level(self, v: Any, xp: Any = None) -> Any:
        """Dry level at unit load: ``fc`` at every velocity."""
        return self.fc


@dataclass(frozen=True)
class Stribeck(Parameters):
    """Stribeck friction (Bo–Pavelescu / generalised Tustin form).

    ``F(v) = load*[fc + (fs - fc)*exp(-|v/vs|**delta)]*sgn(v) + fv*v``

    Attributes:
        fc: Coulomb level, >= 0 (units as :class:`CoulombViscous`).
        fs: Static (break-away) level, >= fc.
        vs: Stribeck velocity (rad/s or m/s), > 0.
        fv: Viscous coefficient, >= 0.
        delta: Stribeck exponent, > 0 (2 is the usual choice, 1 Tustin's).
    """

    fc: float
    fs: float
    vs: float
    fv: float = 0.0
    delta: float = 2.0
    name: ClassVar[str] = "stribeck"

    def _validate(self) -> None:
        _validate_stribeck_levels(self)
        self._require("delta", self.delta > 0, "must be > 0")

    def steady(self, v: Any, direction: Any = None, load: Any = 1.0) -> Any:
        """Friction torque in steady sliding at velocity ``v``."""
        xp = namespace(v, direction, load)
        s = xp.sign(v) if direction is None else direction
        return load * self.level(v, xp) * s + self.fv * v

    def level(self, v: Any, xp: Any = None) -> Any:
        """Dry level at unit load, :func:`stribeck_level` with ``delta``."""
        return stribeck_level(xp or namespace(v), v, self.fc, self.fs, self.vs, self.delta)


@dataclass(frozen=True)
class LuGre(Parameters):
    """LuGre dynamic friction with one bristle state ``z`` (rad or m).

    ```
    g(v)  = fc + (fs - fc)*exp(-(v/vs)**2)
    dz/dt = v - sigma0*|v|*z/g(v)
    F     = load*(sigma0*z + sigma1*dz/dt) + fv*v
    ```
    In steady sliding ``z = sgn(v)*g(v)/sigma0`` and ``F`` is the Stribeck law with
    ``delta = 2``.

    Attributes:
        fc, fs, vs, fv: As :class:`Stribeck`.
        sigma0: Bristle stiffness (N·m/rad, N/m; 1/rad or 1/m with a load model), > 0.
        sigma1: Bristle damping (N·m·s/rad, N·s/m; s/rad or s/m with a load model), >= 0.
    """

    fc: float
    fs: float
    vs: float
    fv: float
    sigma0: float
    sigma1: float
    name: ClassVar[str] = "lugre"

    def _validate(self) -> None:
        _validate_stribeck_levels(self)
        self._require("fs", self.fs > 0, "must be > 0 (g(v) > 0 is needed by the LuGre state equation)")
        self._require("sigma0", self.sigma0 > 0, "must be > 0")
        self._require("sigma1", self.sigma1 >= 0, "must be >= 0")

    def g(self, v: Any, xp: Any = None) -> Any:
        """Stribeck curve ``g(v) = fc + (fs - fc)*exp(-(v/vs)**2)``, > 0 (:func:`stribeck_level`)."""
        return stribeck_level(xp or namespace(v), v, self.fc, self.fs, self.vs)

    level = g  # the dry level at unit load, as the static laws name it

    def z_rate(self, v: Any, z: Any, xp: Any = None) -> Any:
        """Bristle state derivative ``dz/dt = v - sigma0*|v|*z/g(v)`` (rad/s or m/s)."""
        xp = xp or namespace(v, z)
        return lugre_rate(xp, v, z, self.sigma0, self.g(v, xp))

    def torque(self, v: Any, z: Any, load: Any = 1.0) -> Any:
        """Friction ``load*(sigma0*z + sigma1*dz/dt) + fv*v`` at velocity ``v`` and state ``z``."""
        return load * lugre_force(z, self.z_rate(v, z), self.sigma0, self.sigma1) + self.fv * v

    def decay(self, v: Any, xp: Any = None) -> Any:
        """Bristle decay rate ``sigma0*|v|/g(v)`` (1/s), :func:`lugre_decay`."""
        xp = xp or namespace(v)
        return lugre_decay(xp, v, self.sigma0, self.g(v, xp))

    def z_steady(self, v: Any, direction: Any = None) -> Any:
        """Steady-state bristle deflection ``sgn(v)*g(v)/sigma0`` (rad or m)."""
        xp = namespace(v, direction)
        return lugre_z_steady(xp.sign(v) if direction is None else direction, self.sigma0, self.g(v, xp))

    def steady(self, v: Any, direction: Any = None, load: Any = 1.0) -> Any:
        """Friction torque in steady sliding: ``load*g(v)*sgn(v) + fv*v``."""
        return load * self.sigma0 * self.z_steady(v, direction) + self.fv * v

    def z_step(self, z: Any, v: Any, dt: Any, xp: Any = None) -> Any:
        """Advance the bristle state by ``dt`` seconds at constant velocity ``v``.

        The state equation is linear in ``z`` at constant ``v``, so the step is exact
        and stable for any ``dt``:
        ``z(t+dt) = z_ss + (z - z_ss)*exp(-sigma0*|v|*dt/g(v))`` (:func:`lugre_z_step`).
        """
        xp = xp or namespace(z, v, dt)
        return lugre_z_step(xp, z, v, dt, self.sigma0, self.g(v, xp))

    def passive_speed_limit(self, load_dependent: bool = False) -> float:
        """Largest speed up to which the map v -> F is guaranteed dissipative (rad/s or m/s).

        With storage ``sigma0*z**2/2`` the supplied power ``F*v`` exceeds the
        stored-energy rate when ``sigma1**2*|v| <= 4*sigma0*(sigma1 + fv)*g(v)``
        (Canudas de Wit et al., 1995). ``g`` decreases with ``|v|``, so this holds on
        ``[0, v_p]`` up to the single crossing ``v_p`` returned here. With a load
        model the viscous term is not scaled by the load, so ``fv`` is dropped (the
        large-load limit).
        """
        if self.sigma1 == 0:
            return math.inf
        k = 4 * self.sigma0 * (self.sigma1 + (0.0 if load_dependent else self.fv))
        h = lambda v: k * self.g(v) - self.sigma1**2 * v  # noqa: E731  decreasing, h(0) > 0
        v_hi = k * self.fs / self.sigma1**2
        return v_hi if h(v_hi) >= 0 else brentq(h, 0.0, v_hi, xtol=1e-12 * v_hi)


FrictionLaw = CoulombViscous | Stribeck | LuGre

LAWS: dict[str, type[CoulombViscous] | type[Stribeck] | type[LuGre]] = {law.name: law for law in (CoulombViscous, Stribeck, LuGre)}


@dataclass(frozen=True)
class JointFriction:
    """The friction of one joint: a law and, optionally, a normal-load model.

    Attributes:
        law: Velocity (and state) law.
        load: Model turning the joint's reaction wrench into an equivalent normal
            load that scales the law's dry part; None for load-independent friction.
    """

    law: FrictionLaw
    load: Bearing3D | Journal2D | None = None

    @property
    def is_dynamic(self) -> bool:
        """True when the law carries a state (LuGre)."""
        return isinstance(self.law, LuGre)


def simplify_law(law: FrictionLaw, target: str) -> FrictionLaw:
    """Reduce a law to at most ``target`` in the order LuGre > Stribeck > Coulomb–viscous.

    LuGre becomes its steady state (Stribeck, ``delta = 2``); Stribeck becomes
    Coulomb–viscous by dropping the bump; a law already at or below ``target`` is
    kept. Used to compare feed-forward variants of one identified model.
    """
    order = [CoulombViscous.name, Stribeck.name, LuGre.name]
    if order.index(law.name) <= order.index(target):
        return law
    if target == CoulombViscous.name:
        return CoulombViscous(fc=law.fc, fv=law.fv)
    return Stribeck(fc=law.fc, fs=law.fs, vs=law.vs, fv=law.fv, delta=2.0)
