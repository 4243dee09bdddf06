"""Constraint objects: each returns ``Phi(t,q)``, ``Phi_q`` and the acceleration right-hand side.

A position-level (holonomic, possibly rheonomic) constraint ``Phi(t, q) = 0``
differentiates to
```
dPhi  = Phi_q dq + Phi_t                                   = 0
ddPhi = Phi_q ddq - gamma,   gamma = -(dPhi_q/dt) dq - 2 Phi_qt dq - Phi_tt
```
so ``Phi_q ddq = gamma`` is what a solver enforces (plus Baumgarte terms, see
:mod:`dynamics.constrained`). A velocity-level (Pfaffian) constraint
``Psi(q) dq - s(t) = 0`` has no ``Phi``; it reports ``phi = NaN``, ``jac = Psi``,
``phi_t = -s(t)`` and ``gamma = -(dPsi/dt) dq + s'(t)``.

Every constraint evaluates at a :class:`~dynamics.frames.KinematicState` and a time
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

from dynamics.frames import KinematicState
from dynamics.model import RobotModel
from dynamics.targets import Target
from mbctl.errors import ConfigError, MbctlError

__all__ = [
    "AXES",
    "ANGLES",
    "PLANES",
    "VELOCITY_AXES",
    "Constraint",
    "ConstraintValues",
    "ConstraintSet",
    "ConstraintEvaluationError",
    "FramePosition",
    "FrameOrientation",
    "FrameVelocity",
    "JointLinear",
    "LoopClosure",
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
    """

    level = 1

    def __init__(
        self, robot: RobotModel, name: str, frame: str, axes: Sequence[str], target: Target, expressed: str = "local"
    ):
        if expressed not in ("local", "world"):
            raise ConfigError(f"unknown value {expressed!r} (expected local, world)", field="expressed")
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


def _perpendicular_pair(a: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Two unit vectors completing the unit vector ``a`` to a right-handed basis."""
    helper = np.eye(3)[int(np.argmin(np.abs(a)))]
    u1 = np.cross(a, helper)
    u1 /= np.linalg.norm(u1)
    return u1, np.cross(a, u1)


class LoopClosure(Constraint):
    """Closure of a kinematic loop cut at a joint, between frames A and B of the tree.

    Frame A sits on one side of the cut joint and frame B on the other; in the
    assembled mechanism their origins coincide (at the joint centre). Rows, with
    ``p``, ``R`` the frames' world positions and rotations:

    - ``spherical``: ``p_A - p_B = 0`` (3 rows: x, y, z);
    - ``revolute`` (axis ``a`` in A's axes, ``a_B`` in B's, default the same):
      the 3 position rows plus ``(R_A u_i)·(R_B a_B) = 0`` for the two unit vectors
      ``u_1, u_2`` perpendicular to ``a`` (rows axis1, axis2);
    - ``prismatic`` (slide axis ``a`` in A's axes; A and B have the same orientation
      when assembled): ``(R_A e_j)·(R_B e_k) = 0`` for (j,k) = (y,z), (z,x), (x,y)
      (rows rx, ry, rz: no relative rotation) and ``(R_A u_i)·(p_B - p_A) = 0``
      (rows n1, n2: no offset across the slide).

    Planar variants (``plane`` = "xy", "yz" or "zx", the mechanism moving in that
    world plane): ``revolute`` (axis = plane normal) keeps the two in-plane position
    rows; ``prismatic`` keeps one offset row across the slide (n) and one rotation row
    about the plane normal (r). The plane normal in A's axes is taken at the neutral
    configuration (in a planar mechanism it is constant).

    Every row's Jacobian is ``g_A·J_A + g_B·J_B`` with 6-vectors ``g_A``, ``g_B``
    (linear, angular; world-aligned frame Jacobians); the row's force on the bodies
    is the wrench ``-lambda*g`` at each frame origin (world axes), which is how
    :mod:`dynamics.reactions` gets the cut joint's reaction.
    """

    programmed = False

    def __init__(
        self,
        robot: RobotModel,
        name: str,
        frames: Sequence[str],
        joint: str,
        axis: Sequence[float] | None = None,
        axis_b: Sequence[float] | None = None,
        plane: str | None = None,
    ):
        if isinstance(frames, str) or len(frames) != 2:
            raise ConfigError("must name two frames [A, B], one each side of the cut joint", field="frames")
        if joint not in ("revolute", "prismatic", "spherical"):
            raise ConfigError(f"unknown cut joint {joint!r} (expected revolute, prismatic, spherical)", field="joint")
        if plane is not None and plane not in PLANES:
            raise ConfigError(f"unknown plane {plane!r} (expected {', '.join(PLANES)})", field="plane")
        if plane is not None and joint == "spherical":
            raise ConfigError("a spherical cut joint has no planar variant; use revolute in a planar mechanism", field="plane")
        self.name = name
        self.frames = (frames[0], frames[1])
        self.fid_a = frame_id(robot, frames[0], "frames")
        self.fid_b = frame_id(robot, frames[1], "frames")
        if self.fid_a == self.fid_b:
            raise ConfigError("frames A and B must differ", field="frames")
        self.joint = joint
        self.plane = plane

        def unit(v: Sequence[float] | None, field: str) -> np.ndarray:
            if v is None:
                return np.array([0.0, 0.0, 1.0])
            a = np.asarray(v, dtype=float)
            if a.shape != (3,) or not np.isfinite(a).all() or np.linalg.norm(a) < 1e-12:
                raise ConfigError("must be a nonzero 3-vector", field=field)
            return a / np.linalg.norm(a)

        a = unit(axis, "axis")
        a_b = unit(axis_b, "axis_b") if axis_b is not None else a
        # rows: ("pos", world axis k) | ("dot", u in A, w in B) | ("rel", u in A)
        spec: list[tuple] = []
        labels: list[str] = []
        if plane is None:
            if joint in ("revolute", "spherical"):
                spec += [("pos", k) for k in range(3)]
                labels += list(AXES)
            if joint == "revolute":
                u1, u2 = _perpendicular_pair(a)
                spec += [("dot", u1, a_b), ("dot", u2, a_b)]
                labels += ["axis1", "axis2"]
            elif joint == "prismatic":
                e = np.eye(3)
                spec += [("dot", e[1], e[2]), ("dot", e[2], e[0]), ("dot", e[0], e[1])]
                u1, u2 = _perpendicular_pair(a)
                spec += [("rel", u1), ("rel", u2)]
                labels += ["rx", "ry", "rz", "n1", "n2"]
        else:
            normal = PLANES[plane]
            if joint == "revolute":
                spec += [("pos", k) for k in range(3) if k != normal]
                labels += [AXES[k] for k in range(3) if k != normal]
            else:
                data = robot.model.createData()
                pin.framesForwardKinematics(robot.model, data, pin.neutral(robot.model))
                n_a = data.oMf[self.fid_a].rotation.T @ np.eye(3)[normal]
                u = np.cross(n_a, a)
                if np.linalg.norm(u) < 1e-9:
                    raise ConfigError(f"the slide axis must lie in the {plane} plane", field="axis")
                u /= np.linalg.norm(u)
                spec += [("rel", u), ("dot", u, a_b)]
                labels += ["n", "r"]
        self._spec = spec
        self.labels = tuple(labels)

    @property
    def row_spec(self) -> tuple[tuple, ...]:
        """One entry per row, for code that rebuilds the rows elsewhere (e.g. in CasADi):
        ``("pos", k)`` (world axis k of ``p_A - p_B``), ``("dot", u, w)`` (``(R_A u)·(R_B w)``)
        or ``("rel", u)`` (``(R_A u)·(p_B - p_A)``), with ``u``, ``w`` unit 3-vectors."""
        return tuple(self._spec)

    def _rows(self, ks: KinematicState) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(phi, g_A, g_B, drift)`` per row plus the frames' Jacobians stacked."""
        A = ks.frame(self.fid_a)
        B = ks.frame(self.fid_b)
        k = len(self._spec)
        phi = np.empty(k)
        drift = np.empty(k)
        gA = np.zeros((k, 6))
        gB = np.zeros((k, 6))
        wA, wB = A.v[3:], B.v[3:]
        for i, row in enumerate(self._spec):
            if row[0] == "pos":
                kk = row[1]
                phi[i] = A.p[kk] - B.p[kk]
                gA[i, kk] = 1.0
                gB[i, kk] = -1.0
                drift[i] = A.a0[kk] - B.a0[kk]
            elif row[0] == "dot":
                n = A.R @ row[1]
                m = B.R @ row[2]
                c = np.cross(n, m)
                phi[i] = n @ m
                gA[i, 3:] = c
                gB[i, 3:] = -c
                c_dot = np.cross(np.cross(wA, n), m) + np.cross(n, np.cross(wB, m))
                drift[i] = c_dot @ (wA - wB) + c @ (A.a0[3:] - B.a0[3:])
            else:  # "rel": (R_A u).(p_B - p_A)
                n = A.R @ row[1]
                d = B.p - A.p
                d_dot = B.v[:3] - A.v[:3]
                n_dot = np.cross(wA, n)
                nxd = np.cross(n, d)
                phi[i] = n @ d
                gA[i, :3] = -n
                gA[i, 3:] = nxd
                gB[i, :3] = n
                drift[i] = (
                    A.a0[3:] @ nxd
                    + wA @ (np.cross(n_dot, d) + np.cross(n, d_dot))
                    + n_dot @ d_dot
                    + n @ (B.a0[:3] - A.a0[:3])
                )
        return phi, gA, gB, drift, np.stack([A.J, B.J])

    def wrench_maps(self, ks: KinematicState) -> tuple[np.ndarray, np.ndarray]:
        """``(g_A, g_B)`` (rows x 6): a row's multiplier ``lambda`` puts the wrench
        ``-lambda*g_A`` on A's body at A's origin and ``-lambda*g_B`` on B's body at
        B's origin (force N then moment N·m, world axes)."""
        _, gA, gB, _, _ = self._rows(ks)
        return gA, gB

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        phi, gA, gB, drift, J = self._rows(ks)
        k = len(phi)
        return ConstraintValues(
            phi=phi,
            jac=gA @ J[0] + gB @ J[1],
            phi_t=np.zeros(k),
            gamma=-drift,
            target=np.full(k, np.nan),
        )


class ConstraintSet:
    """Any set of constraints, stacked row-wise in declaration order.

    Raises:
        ConfigError: For duplicate constraint names.
    """

    def __init__(self, constraints: Sequence[Constraint], nv: int):
        names = [c.name for c in constraints]
        for name in names:
            if names.count(name) > 1:
                raise ConfigError(f"constraint name {name!r} is used twice", field="constraints")
        self.constraints = tuple(constraints)
        self.nv = nv
        self.rows = tuple(r for c in self.constraints for r in c.rows)
        self.m = len(self.rows)
        self.level = np.concatenate([[c.level] * c.size for c in self.constraints]).astype(int) if self.m else np.zeros(0, int)
        self.programmed = (
            np.concatenate([[c.programmed] * c.size for c in self.constraints]).astype(bool) if self.m else np.zeros(0, bool)
        )
        self.slices: dict[str, slice] = {}
        start = 0
        for c in self.constraints:
            self.slices[c.name] = slice(start, start + c.size)
            start += c.size

    def __len__(self) -> int:
        return len(self.constraints)

    def __iter__(self):
        return iter(self.constraints)

    def row_index(self, row: str) -> int:
        """Index of the row called ``row`` (``<constraint>.<label>``).

        Raises:
            ConfigError: If there is no such row.
        """
        if row not in self.rows:
            close = difflib.get_close_matches(row, self.rows, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"no constraint row {row!r} (rows: {', '.join(self.rows)}){hint}")
        return self.rows.index(row)

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        """All rows stacked (see :class:`ConstraintValues`)."""
        m, nv = self.m, self.nv
        phi, phi_t, gamma, target = np.empty(m), np.empty(m), np.empty(m), np.empty(m)
        jac = np.empty((m, nv))
        start = 0
        for c in self.constraints:
            v = c.evaluate(ks, t)
            k = len(v.phi)
            sl = slice(start, start + k)
            phi[sl], jac[sl], phi_t[sl], gamma[sl], target[sl] = v.phi, v.jac, v.phi_t, v.gamma, v.target
            start += k
        return ConstraintValues(phi=phi, jac=jac, phi_t=phi_t, gamma=gamma, target=target)

    def loop_forces(self, ks: KinematicState, lam: np.ndarray) -> tuple[list[pin.Force], list[np.ndarray]]:
        """External forces of the loop-closure rows for RNEA, from their multipliers.

        A loop row's multiplier ``lambda`` puts ``-lambda*g_A`` on frame A's body and
        ``-lambda*g_B`` on B's (:meth:`LoopClosure.wrench_maps`). Returns the force on every
        joint's body (joint frame, as ``pinocchio.rnea``'s ``fext`` wants it) and each
        loop's wrench on B's body (at B's origin, B's axes).
        """
        model, data = ks.model, ks.data
        fext = [pin.Force.Zero() for _ in range(model.njoints)]
        on_b = []
        for c in self.constraints:
            if not isinstance(c, LoopClosure):
                continue
            gA, gB = c.wrench_maps(ks)
            lam_c = lam[self.slices[c.name]]
            for fid, g in ((c.fid_a, gA), (c.fid_b, gB)):
                w = -(g.T @ lam_c)  # world axes, at the frame origin
                frame = ks.frame(fid)
                f_world = pin.SE3(np.eye(3), frame.p).act(pin.Force(w[:3], w[3:]))
                parent = model.frames[fid].parentJoint
                fext[parent] = fext[parent] + data.oMi[parent].actInv(f_world)
                if fid == c.fid_b:
                    on_b.append(np.concatenate([frame.R.T @ w[:3], frame.R.T @ w[3:]]))
        return fext, on_b

