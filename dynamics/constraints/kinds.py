"""Constraint objects: each returns ``Phi(t,q)``, ``Phi_q`` and the acceleration right-hand side.

A position-level (holonomic, possibly rheonomic) constraint ``Phi(t, q) = 0``
differentiates to
```
dPhi  = Phi_q dq + Phi_t                                   = 0
ddPhi = Phi_q ddq - gamma,   gamma = -(dPhi_q/dt) dq - 2 Phi_qt dq - Phi_tt
```
so ``Phi_q ddq = gamma`` is what a solver enforces (plus Baumgarte terms, see
:mod:`mbctl.dynamics.constraints.constrained`). A velocity-level (Pfaffian) constraint
``Psi(q) dq - s(t) = 0`` has no ``Phi``; it reports ``phi = NaN``, ``jac = Psi``,
``phi_t = -s(t)`` and ``gamma = -(dPsi/dt) dq + s'(t)``.

Every constraint evaluates at a :class:`~mbctl.dynamics.model.frames.KinematicState` and a time
``t`` (s) and returns :class:`ConstraintValues` with one entry per scalar row;
:class:`ConstraintSet` stacks any set of them in declaration order. Row names are
``<constraint>.<label>``.

Kinds (units: m and rad, as the rows' coordinates):

- :class:`FramePosition`: chosen world axes of a frame origin equal a target(t).
- :class:`FrameOrientation`: chosen Z-Y-X Euler angles (yaw, pitch, roll, world
  fixed: ``R = Rz(yaw) Ry(pitch) Rx(roll)``) of a frame equal a target(t); the angle
  error is wrapped to (-pi, pi]; undefined at pitch = ±pi/2 (gimbal lock).
- :class:`JointLinear`: ``sum_i c_i q_i = target(t)``.
- :class:`LoopClosure`: closes a kinematic loop cut at a joint, between frame A and
  frame B of the spanning tree (revolute, prismatic, spherical; planar variants).
- :class:`FrameVelocity`: Pfaffian ``(J dq)_axis = target(t)`` in the frame's own axes
  (e.g. a knife edge or wheel that cannot slide sideways) or in world axes.
- :class:`Pfaffian`: ``Psi(q) dq = 0`` from user callables.
"""

from __future__ import annotations

import difflib
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.dynamics.constraints.targets import Target
from mbctl.dynamics.model.frames import KinematicState
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError, MbctlError

__all__ = [
    "AXES",
    "ANGLES",
    "PLANES",
    "VELOCITY_AXES",
    "Constraint",
    "ConstraintValues",
    "ConstraintEvaluationError",
    "FramePosition",
    "FrameOrientation",
    "FrameVelocity",
    "JointLinear",
    "Pfaffian",
    "frame_id",
]

AXES = ("x", "y", "z")
ANGLES = ("roll", "pitch", "yaw")
VELOCITY_AXES = ("x", "y", "z", "wx", "wy", "wz")
PLANES = {"xy": 2, "yz": 0, "zx": 1}  # plane -> index of its normal world axis


class ConstraintEvaluationError(MbctlError):
    """A constraint cannot be evaluated at a state (e.g. Euler angles at gimbal lock)."""


@dataclass(frozen=True, eq=False)
class ConstraintValues:
    """One evaluation of a constraint (or a stacked set), one entry per scalar row.

    Attributes:
        phi: ``Phi(t, q)`` (m or rad); NaN for velocity-level rows.
        jac: ``Phi_q`` (rows x nv).
        phi_t: ``Phi_t``, so that ``dPhi = jac @ dq + phi_t``.
        gamma: Right-hand side of ``Phi_q ddq = gamma`` (no stabilization).
        target: The row's target value at ``t``; NaN for rows without one.
    """

    phi: np.ndarray
    jac: np.ndarray
    phi_t: np.ndarray
    gamma: np.ndarray
    target: np.ndarray


def frame_id(robot: RobotModel, name: str, field: str = "frame") -> int:
    """Pinocchio index of the frame called ``name``.

    Raises:
        ConfigError: If the model has no such frame (with a suggestion for typos).
    """
    names = [f.name for f in robot.model.frames]
    if not isinstance(name, str) or name not in names or name == "universe":
        close = difflib.get_close_matches(str(name), names, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"no frame {name!r} in robot {robot.name}{hint}", field=field)
    return robot.model.getFrameId(name)


def _check_target(target: Target, size: int) -> None:
    if target.size != size:
        raise ConfigError(f"needs {size} target component{'s' if size > 1 else ''}, got {target.size}", field="target")


def _choose(values: Sequence[str], allowed: Sequence[str], field: str) -> list[int]:
    if isinstance(values, str) or not values:
        raise ConfigError(f"must be a non-empty list of {', '.join(allowed)}", field=field)
    out = []
    for v in values:
        if v not in allowed:
            raise ConfigError(f"unknown {field[:-1] if field.endswith('s') else field} {v!r} (expected {', '.join(allowed)})", field=field)
        if allowed.index(v) in out:
            raise ConfigError(f"{v!r} appears twice", field=field)
        out.append(allowed.index(v))
    return out


class Constraint(ABC):
    """A set of scalar constraint rows with a common name.

    Attributes:
        name: Constraint name (row names are ``name.label``).
        labels: One label per scalar row.
        level: 2 for position-level (``Phi`` exists), 1 for velocity-level (Pfaffian).
        programmed: True for programmed (operator-imposed) constraints, whose force
            the drives must supply; False for material ones (loop closures), whose
            force is a joint reaction.
    """

    name: str
    labels: tuple[str, ...]
    level: int = 2
    programmed: bool = True

    @property
    def size(self) -> int:
        return len(self.labels)

    @property
    def rows(self) -> tuple[str, ...]:
        return tuple(f"{self.name}.{label}" if label else self.name for label in self.labels)

    @abstractmethod
    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        """Rows of ``Phi``, ``Phi_q``, ``Phi_t``, ``gamma`` at state ``ks`` and time ``t`` (s)."""


class JointLinear(Constraint):
    """``sum_i c_i q_i = target(t)`` over named joints (rad or m).

    Args:
        robot: The robot.
        name: Constraint name.
        coefficients: Joint name -> coefficient ``c_i``.
        target: Scalar target.
    """

    def __init__(self, robot: RobotModel, name: str, coefficients: Mapping[str, float], target: Target):
        if not coefficients:
            raise ConfigError("needs at least one joint", field="coefficients")
        self.name = name
        self.labels = ("",)
        self.c = np.zeros(robot.nv)
        for jname, c in coefficients.items():
            try:
                j = robot.joint(jname)
            except ConfigError as exc:
                raise ConfigError(exc.reason, field=f"coefficients.{jname}") from None
            self.c[j.idx_v] = c
        if not np.any(self.c):
            raise ConfigError("all coefficients are zero", field="coefficients")
        _check_target(target, 1)
        self.target = target
        self._jac = self.c[None, :]

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        g, dg, ddg = self.target(t)
        return ConstraintValues(
            phi=np.array([self.c @ ks.q]) - g,
            jac=self._jac,
            phi_t=-dg,
            gamma=ddg.copy(),
            target=g,
        )


class FramePosition(Constraint):
    """Chosen world coordinates of a frame's origin equal a target(t) (m).

    ``Phi = p_axes(q) - g(t)``, ``Phi_q`` = the linear rows of the world-aligned frame
    Jacobian, ``gamma = -a0_axes + g''(t)`` with ``a0`` the classical acceleration of
    the origin at ``ddq = 0``.
    """

    def __init__(self, robot: RobotModel, name: str, frame: str, axes: Sequence[str], target: Target):
        self.name = name
        self.frame = frame
        self.fid = frame_id(robot, frame)
        self.axes = _choose(axes, AXES, "axes")
        self.labels = tuple(AXES[i] for i in self.axes)
        _check_target(target, len(self.axes))
        self.target = target

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        f = ks.frame(self.fid)
        g, dg, ddg = self.target(t)
        ax = self.axes
        return ConstraintValues(phi=f.p[ax] - g, jac=f.J[ax], phi_t=-dg, gamma=ddg - f.a0[ax], target=g)


class FrameOrientation(Constraint):
    """Chosen Z-Y-X Euler angles of a frame equal a target(t) (rad).

    ``R = Rz(yaw) Ry(pitch) Rx(roll)`` in world-fixed axes (pinocchio's
    ``rpy.matrixToRpy``). With ``c = cos``, ``s = sin``, the angle rates follow from
    the world angular velocity ``w`` as ``[roll', pitch', yaw'] = E^-1 w``:
    ```
    roll'  = (c_y w_x + s_y w_y)/c_p
    pitch' = -s_y w_x + c_y w_y
    yaw'   = w_z + s_p roll'
    ```
    so ``Phi_q = E^-1 J_w`` and ``gamma = -(E^-1 alpha0 + (dE^-1/dt) w) + g''``.
    ``Phi`` is the angle error wrapped to (-pi, pi]. Roll and yaw are undefined at
    pitch = ±pi/2: evaluating there raises :class:`ConstraintEvaluationError`.
    """

    def __init__(self, robot: RobotModel, name: str, frame: str, angles: Sequence[str], target: Target):
        self.name = name
        self.frame = frame
        self.fid = frame_id(robot, frame)
        self.angles = _choose(angles, ANGLES, "angles")
        self.labels = tuple(ANGLES[i] for i in self.angles)
        _check_target(target, len(self.angles))
        self.target = target

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        f = ks.frame(self.fid)
        roll, pitch, yaw = pin.rpy.matrixToRpy(f.R)
        cp, sp, cy, sy = math.cos(pitch), math.sin(pitch), math.cos(yaw), math.sin(yaw)
        if abs(cp) < 1e-9 and self.angles != [1]:
            raise ConstraintEvaluationError(
                f"constraint {self.name!r}: roll and yaw of frame {self.frame!r} are undefined at pitch = ±pi/2 (gimbal lock)"
            )
        Einv = np.array([[cy / cp, sy / cp, 0.0], [-sy, cy, 0.0], [cy * sp / cp, sy * sp / cp, 1.0]])
        w = f.v[3:]
        dr, dp, dy = Einv @ w
        dEinv_w = np.array(
            [dy * dp / cp + dr * dp * sp / cp, -dy * cp * dr, cp * dp * dr + sp * (dy * dp / cp + dr * dp * sp / cp)]
        )
        sel = self.angles
        g, dg, ddg = self.target(t)
        angle = np.array([roll, pitch, yaw])[sel]
        err = np.remainder(angle - g + math.pi, 2 * math.pi) - math.pi
        return ConstraintValues(
            phi=err,
            jac=(Einv @ f.J[3:])[sel],
            phi_t=-dg,
            gamma=ddg - (Einv @ f.a0[3:] + dEinv_w)[sel],
            target=g,
        )


class FrameVelocity(Constraint):
    """Pfaffian (velocity-level) constraint on a frame's velocity components.

    ``(J dq)_axes = target(t)`` (m/s, rad/s) with ``axes`` among x, y, z (velocity of
    the origin) and wx, wy, wz (angular velocity), expressed in the frame's own axes
    (``expressed="local"``: nonholonomic in general, e.g. a wheel that cannot slide
    sideways) or in world axes. ``gamma = -(dJ/dt dq)_axes + target'(t)``, where for
    local axes the drift is pinocchio's LOCAL spatial acceleration at ``ddq = 0``.

    ``material=True`` marks a physical contact (a knife edge, a wheel): its force is a
    reaction, the wrench ``-lambda*e_k`` (frame axes for ``local``, world axes for
    ``world``) at the frame's origin on the frame's body (:meth:`wrench_world`), which
    joint reactions and the reaction-solvability analysis take as a body force. Otherwise
    (the default) the row is programmed: its force is a drive's.
    """

    level = 1

    def __init__(
        self,
        robot: RobotModel,
        name: str,
        frame: str,
        axes: Sequence[str],
        target: Target,
        expressed: str = "local",
        material: bool = False,
    ):
        if expressed not in ("local", "world"):
            raise ConfigError(f"unknown value {expressed!r} (expected local, world)", field="expressed")
        self.programmed = not material
        self.name = name
        self.frame = frame
        self.fid = frame_id(robot, frame)
        self.axes = _choose(axes, VELOCITY_AXES, "axes")
        self.labels = tuple(f"v{VELOCITY_AXES[i]}" if i < 3 else VELOCITY_AXES[i] for i in self.axes)
        self.expressed = expressed
        _check_target(target, len(self.axes))
        self.target = target

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        if self.expressed == "local":
            J, a0 = ks.frame_local(self.fid)
        else:
            f = ks.frame(self.fid)
            J, a0 = f.J, f.a0
        g, dg, _ = self.target(t)
        ax = self.axes
        return ConstraintValues(phi=np.full(len(ax), np.nan), jac=J[ax], phi_t=-g, gamma=dg - a0[ax], target=g)

    def wrench_world(self, ks: KinematicState, lam: np.ndarray) -> np.ndarray:
        """The wrench (force N then moment N·m, world axes, at the frame origin) that the rows'
        multipliers ``lam`` put on the frame's body: ``-sum_k lam_k e_k``, ``e_k`` the unit
        twist direction of axis k in the frame's axes (``local``) or world axes."""
        w = np.zeros(6)
        w[self.axes] = -np.asarray(lam, dtype=float)
        if self.expressed == "local":
            R = ks.frame(self.fid).R
            w = np.concatenate([R @ w[:3], R @ w[3:]])
        return w


class Pfaffian(Constraint):
    """``Psi(q) dq = 0`` from callables (Python API).

    Args:
        name: Constraint name.
        psi: ``q -> Psi`` (k x nv).
        psi_dot_dq: ``(q, dq) -> (dPsi/dt) dq`` (k,).
        labels: One label per row of ``Psi``.
    """

    level = 1

    def __init__(
        self,
        name: str,
        psi: Callable[[np.ndarray], np.ndarray],
        psi_dot_dq: Callable[[np.ndarray, np.ndarray], np.ndarray],
        labels: Sequence[str],
    ):
        self.name = name
        self.psi = psi
        self.psi_dot_dq = psi_dot_dq
        self.labels = tuple(labels)

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        k = self.size
        Psi = np.asarray(self.psi(ks.q), dtype=float).reshape(k, -1)
        return ConstraintValues(
            phi=np.full(k, np.nan),
            jac=Psi,
            phi_t=np.zeros(k),
            gamma=-np.asarray(self.psi_dot_dq(ks.q, ks.dq), dtype=float).reshape(k),
            target=np.zeros(k),
        )
