"""Closure of kinematic loops cut at a joint (revolute, prismatic, spherical and planar variants), and
driving constraints between two bodies (:class:`FrameOffset`)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pinocchio as pin

from mbctl.dynamics.constraints.kinds import (
    AXES,
    PLANES,
    Constraint,
    ConstraintValues,
    FrameVelocity,
    _check_target,
    _choose,
    frame_id,
)
from mbctl.dynamics.constraints.targets import Target
from mbctl.dynamics.model.frames import KinematicState
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError

__all__ = ["FrameOffset", "LoopClosure", "acts_on_bodies"]


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
    :mod:`mbctl.dynamics.constraints.reactions` gets the cut joint's reaction.
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
        self.name = name
        self._frames(robot, frames)
        if joint not in ("revolute", "prismatic", "spherical"):
            raise ConfigError(f"unknown cut joint {joint!r} (expected revolute, prismatic, spherical)", field="joint")
        if plane is not None and plane not in PLANES:
            raise ConfigError(f"unknown plane {plane!r} (expected {', '.join(PLANES)})", field="plane")
        if plane is not None and joint == "spherical":
            raise ConfigError("a spherical cut joint has no planar variant; use revolute in a planar mechanism", field="plane")
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

    def _frames(self, robot: RobotModel, frames: Sequence[str]) -> None:
        if isinstance(frames, str) or len(frames) != 2:
            raise ConfigError("must name two frames [A, B], one on each of the two bodies", field="frames")
        self.frames = (frames[0], frames[1])
        self.fid_a = frame_id(robot, frames[0], "frames")
        self.fid_b = frame_id(robot, frames[1], "frames")
        if self.fid_a == self.fid_b:
            raise ConfigError("frames A and B must differ", field="frames")

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


class FrameOffset(LoopClosure):
    """A driving constraint between two bodies: the offset of frame B's origin from frame A's,
    along chosen axes of A, follows a target (m).

    Rows ``(R_A e_k)·(p_B - p_A) = g_k(t)`` for the chosen axes ``k`` of A (x, y, z): e.g.
    the stroke of a linear actuator in a translational joint whose other rows a planar
    prismatic :class:`LoopClosure` gives. ``Phi_q`` and the drift are those of a loop's
    ``rel`` row; ``phi_t = -g'``, ``gamma = -drift + g''``.

    Its force is not a generalized force on joint coordinates but an internal force pair:
    a row's multiplier ``lambda`` puts ``-lambda*g_A`` on A's body and ``-lambda*g_B`` on
    B's, the actuator force, reported with the cut joints' reactions (on B's body, B's axes).
    So, like a loop, it counts as material (``programmed = False``): no joint drive supplies it.
    """

    programmed = False

    def __init__(self, robot: RobotModel, name: str, frames: Sequence[str], axes: Sequence[str], target: Target):
        self.name = name
        self._frames(robot, frames)
        chosen = _choose(axes, AXES, "axes")
        self.joint = "offset"
        self.plane = None
        self._spec = [("rel", np.eye(3)[k]) for k in chosen]
        self.labels = tuple(AXES[k] for k in chosen)
        _check_target(target, len(chosen))
        self.target = target

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        phi, gA, gB, drift, J = self._rows(ks)
        g, dg, ddg = self.target(t)
        return ConstraintValues(phi=phi - g, jac=gA @ J[0] + gB @ J[1], phi_t=-dg, gamma=ddg - drift, target=g)


def acts_on_bodies(c: Constraint) -> bool:
    """True for constraints whose force acts on bodies (loop closures, drives between two
    bodies, material velocity-level rows such as knife edges), False for those acting on
    joint coordinates (programmed constraints: a drive's force)."""
    return isinstance(c, LoopClosure) or (isinstance(c, FrameVelocity) and not c.programmed)
