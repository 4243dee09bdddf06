"""CasADi mirror of a robot's rigid-body dynamics, kinematics and friction.

The PyPI wheel of pinocchio has no ``pinocchio.casadi``, so :class:`SymbolicDynamics`
rebuilds the model's dynamics as CasADi SX expressions from the same data
pinocchio uses (``model.parents``, ``model.jointPlacements``, ``model.inertias``,
``model.armature``, ``model.gravity``) and each DOF's kind and axis from
:class:`~mbctl.dynamics.model.robot.RobotModel`. The tests compare every function with
pinocchio to round-off.

Conventions (pinocchio's): spatial motion ``(v, w)`` and force ``(f, n)`` vectors,
linear part first, each expressed in the frame of the joint that carries the body.
Inputs are DOF coordinates: ``q`` has one entry per DOF (rad or m), so a continuous
joint takes its angle directly, not pinocchio's ``(cos, sin)`` pair.

Recursions (Featherstone), for joint ``i`` with parent ``p``, motion subspace ``S_i``
and ``X_i = placement_i * joint_motion_i(q_i)`` (child to parent)::

    v_i = X_i^-1 v_p + S_i dq_i                        (v_0 = 0)
    a_i = X_i^-1 a_p + S_i ddq_i + v_i x S_i dq_i      (a_0 = -gravity)
    f_i = I_i a_i + v_i x* I_i v_i,  f_p += X_i f_i    (children first)
    tau_i = S_i^T f_i + armature_i ddq_i               (RNEA)
    Ic_p += X_i Ic_i,  M_ij = S_j^T X_(j<-i) Ic_i S_i  (CRBA), M_ii += armature_i

``f_i`` after the backward pass is the wrench joint ``i`` transmits (pinocchio's
``data.f[i]``, joint frame), which feeds load-dependent friction symbolically.

To keep generated C small the expressions are built element by element: numeric
constants stay Python floats (so products with 0 and 1 vanish before CasADi sees
them), and a joint about a coordinate axis rotates only the two components normal
to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

import casadi as ca
import numpy as np

from mbctl.dynamics.friction.laws import LuGre, motion_direction
from mbctl.dynamics.model.robot import Joint, RobotModel

__all__ = ["SymbolicDynamics", "body_inertia"]

Scalar = Any  # a Python float (a constant) or a casadi.SX scalar
Vec = list  # three Scalars
Mat = list  # three rows of three Scalars

_SNAP = 1e-14  # numeric noise in URDF-derived constants (cos(pi/2) = 6e-17) becomes exact 0 or +-1


# ---------------------------------------------------------------------------------
# element-wise algebra on floats and SX scalars; floats fold, zeros and ones vanish


def _const(x: float) -> float:
    x = float(x)
    for exact in (0.0, 1.0, -1.0):
        if abs(x - exact) < _SNAP:
            return exact
    return x


def _is(x: Scalar, value: float) -> bool:
    return isinstance(x, float) and x == value


def _mul(a: Scalar, b: Scalar) -> Scalar:
    if _is(a, 0.0) or _is(b, 0.0):
        return 0.0
    if _is(a, 1.0):
        return b
    if _is(b, 1.0):
        return a
    if _is(a, -1.0):
        return -b
    if _is(b, -1.0):
        return -a
    return a * b


def _add(a: Scalar, b: Scalar) -> Scalar:
    if _is(a, 0.0):
        return b
    if _is(b, 0.0):
        return a
    return a + b


def _sub(a: Scalar, b: Scalar) -> Scalar:
    if _is(b, 0.0):
        return a
    if _is(a, 0.0):
        return -b
    return a - b


def _sum(terms: Sequence[Scalar]) -> Scalar:
    out: Scalar = 0.0
    for t in terms:
        out = _add(out, t)
    return out


def _dot(a: Vec, b: Vec) -> Scalar:
    return _sum([_mul(x, y) for x, y in zip(a, b)])


def _vadd(a: Vec, b: Vec) -> Vec:
    return [_add(x, y) for x, y in zip(a, b)]


def _vsub(a: Vec, b: Vec) -> Vec:
    return [_sub(x, y) for x, y in zip(a, b)]


def _scale(s: Scalar, a: Vec) -> Vec:
    return [_mul(s, x) for x in a]


def _cross(a: Vec, b: Vec) -> Vec:
    return [
        _sub(_mul(a[1], b[2]), _mul(a[2], b[1])),
        _sub(_mul(a[2], b[0]), _mul(a[0], b[2])),
        _sub(_mul(a[0], b[1]), _mul(a[1], b[0])),
    ]


def _matvec(R: Mat, x: Vec) -> Vec:
    return [_dot(row, x) for row in R]


def _matTvec(R: Mat, x: Vec) -> Vec:
    return [_dot([R[0][c], R[1][c], R[2][c]], x) for c in range(3)]


def _matmul(A: Mat, B: Mat) -> Mat:
    return [[_dot(A[r], [B[0][c], B[1][c], B[2][c]]) for c in range(3)] for r in range(3)]


def _transpose(A: Mat) -> Mat:
    return [[A[c][r] for c in range(3)] for r in range(3)]


def _zero() -> Vec:
    return [0.0, 0.0, 0.0]


def _function_name(prefix: str, name: str) -> str:
    """A valid CasADi function name (letters, digits, single underscores) for a frame."""
    clean = "".join(c if c.isalnum() else "_" for c in f"{prefix}_{name}")
    while "__" in clean:
        clean = clean.replace("__", "_")
    return clean.strip("_")


def _sx(values: Sequence[Scalar]) -> ca.SX:
    return ca.vertcat(*[ca.SX(v) if isinstance(v, float) else v for v in values]) if values else ca.SX(0, 1)


# ---------------------------------------------------------------------------------
# one joint: its motion about/along its axis


class _JointMotion:
    """Rotation about (or translation along) a unit axis by a symbolic DOF value.

    An axis along a coordinate direction rotates only the two components normal
    to it (4 products instead of 9 plus the Rodrigues terms).
    """

    def __init__(self, joint: Joint, q: Scalar):
        self.kind = joint.kind
        self.axis = [_const(a) for a in joint.axis]
        self.q = q
        nonzero = [k for k in range(3) if self.axis[k] != 0.0]
        self.aligned = nonzero[0] if len(nonzero) == 1 and abs(self.axis[nonzero[0]]) == 1.0 else None
        if self.kind == "revolute":
            self.c = ca.cos(q)
            s = ca.sin(q)
            # a rotation by q about -e_k is one by -q about +e_k: fold the sign into s
            self.s = -s if self.aligned is not None and self.axis[self.aligned] < 0 else s
        else:
            self.offset = _scale(q, self.axis)

    def rotate(self, x: Vec, inverse: bool) -> Vec:
        """``R_J x`` (or ``R_J^T x`` when ``inverse``)."""
        c, s = self.c, (-self.s if inverse else self.s)
        if self.aligned is not None:
            k = self.aligned
            i, j = (k + 1) % 3, (k + 2) % 3
            out = [0.0, 0.0, 0.0]
            out[k] = x[k]
            out[i] = _sub(_mul(c, x[i]), _mul(s, x[j]))
            out[j] = _add(_mul(s, x[i]), _mul(c, x[j]))
            return out
        # Rodrigues: R x = c x + s (a x x) + (1 - c)(a . x) a
        a = self.axis
        along = _mul(1 - c, _dot(a, x))
        return _vadd(_vadd(_scale(c, x), _scale(s, _cross(a, x))), _scale(along, a))

    def rotation(self) -> Mat:
        """``R_J`` as a 3x3 matrix (columns are the rotated unit vectors)."""
        if self.kind != "revolute":
            return [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        cols = [self.rotate([1.0 if r == k else 0.0 for r in range(3)], inverse=False) for k in range(3)]
        return _transpose(cols)

    def motion_inv(self, lin: Vec, ang: Vec) -> tuple[Vec, Vec]:
        """``X_J^-1 (lin, ang)``: a motion vector from the pre-joint frame to the joint frame."""
        if self.kind == "revolute":
            return self.rotate(lin, inverse=True), self.rotate(ang, inverse=True)
        return _vsub(lin, _cross(self.offset, ang)), ang

    def force(self, f: Vec, n: Vec) -> tuple[Vec, Vec]:
        """``X_J (f, n)``: a force from the joint frame to the pre-joint frame."""
        if self.kind == "revolute":
            return self.rotate(f, inverse=False), self.rotate(n, inverse=False)
        return f, _vadd(n, _cross(self.offset, f))

    def inertia(self, m: float, h: Vec, Ibar: Mat) -> tuple[Vec, Mat]:
        """``X_J`` applied to a spatial inertia ``(m, h = m c, Ibar about the origin)``."""
        if self.kind == "revolute":
            R = self.rotation()
            return _matvec(R, h), _matmul(_matmul(R, Ibar), _transpose(R))
        return _inertia_shift(m, h, Ibar, self.offset)


def body_inertia(Y: Any) -> tuple[float, Vec, Mat]:
    """``(m, m c, I_O)`` of a pinocchio ``Inertia``: mass (kg), first moment (kg·m) and the
    rotational inertia about the frame origin, ``I_O = I_c + m ([c]^T [c])`` (kg·m²), the
    quantities the recursions below use (and pinocchio's ``toDynamicParameters`` lists)."""
    m = float(Y.mass)
    c = np.asarray(Y.lever, dtype=float)
    Ibar = np.asarray(Y.inertia, dtype=float) + m * (float(c @ c) * np.eye(3) - np.outer(c, c))
    return m, [float(x) for x in m * c], [[float(x) for x in row] for row in Ibar]


def _skew_product(a: Vec, b: Vec) -> Mat:
    """``[a]x [b]x`` = ``b a^T - (a . b) I``."""
    d = _dot(a, b)
    return [[_sub(_mul(b[r], a[c]), d if r == c else 0.0) for c in range(3)] for r in range(3)]


def _inertia_shift(m: float, h: Vec, Ibar: Mat, p: Vec) -> tuple[Vec, Mat]:
    """Inertia ``(m, h, Ibar)`` seen from an origin at ``-p``: ``h + m p`` and
    ``Ibar - [p]x[h]x - [h]x[p]x - m [p]x[p]x`` (the body's points move by ``+p``)."""
    hp, ph, pp = _skew_product(h, p), _skew_product(p, h), _skew_product(p, p)
    Inew = [[_sub(_sub(_sub(Ibar[r][c], ph[r][c]), hp[r][c]), _mul(m, pp[r][c])) for c in range(3)] for r in range(3)]
    return _vadd(h, _scale(m, p)), Inew


class _Placement:
    """A constant SE3 ``(R, p)``: coordinates in the child frame to the parent frame."""

    def __init__(self, se3: Any):
        self.R = [[_const(x) for x in row] for row in np.asarray(se3.rotation)]
        self.p = [_const(x) for x in np.asarray(se3.translation)]

    def motion_inv(self, lin: Vec, ang: Vec) -> tuple[Vec, Vec]:
        """``X^-1 (lin, ang)``: ``w' = R^T w``, ``v' = R^T (v - p x w)``."""
        return _matTvec(self.R, _vsub(lin, _cross(self.p, ang))), _matTvec(self.R, ang)

    def force(self, f: Vec, n: Vec) -> tuple[Vec, Vec]:
        """``X (f, n)``: ``f' = R f``, ``n' = R n + p x f'``."""
        f2 = _matvec(self.R, f)
        return f2, _vadd(_matvec(self.R, n), _cross(self.p, f2))

    def inertia(self, m: float, h: Vec, Ibar: Mat) -> tuple[Vec, Mat]:
        Rh = _matvec(self.R, h)
        RI = _matmul(_matmul(self.R, Ibar), _transpose(self.R))
        return _inertia_shift(m, Rh, RI, self.p)


# ---------------------------------------------------------------------------------


class SymbolicDynamics:
    """CasADi functions of a robot's dynamics, kinematics and friction, built once.

    Args:
        robot: The robot model (fixed base, 1-DOF joints; any axis; armature kept).
        lugre: How LuGre joints enter :attr:`friction`: ``"dynamic"`` uses the
            bristle state input ``z``; ``"steady"`` uses the steady-state curve
            (Stribeck with ``delta = 2``) and ignores ``z``.
        bodies: Inertial parameters to use instead of the model's, one per joint in
            pinocchio order: ``(m, m c, I_O)`` (kg, kg·m, kg·m² about the joint frame's
            origin; :func:`body_inertia` gives them), floats or CasADi SX scalars. With
            symbols the functions below have free variables: build expressions with
            :meth:`mass_matrix_of`, :meth:`bias_of` and :meth:`joint_wrenches_of` instead
            (the compiled simulation core does, with the parameters as inputs).
        armature: Rotor inertias (kg·m² or kg) per joint, instead of the model's.
        friction: ``{idx_v: (law, load model)}`` replacing the joints' friction laws and load
            models (of the same kinds, e.g. with symbolic coefficients).

    Functions (CasADi ``Function``; ``q``, ``dq``, ``ddq``, ``z``, ``load`` are nv-vectors
    in pinocchio velocity order; SI units):

    - ``rnea(q, dq, ddq) -> tau``: ``M(q) ddq + h(q, dq)`` (N·m or N), gravity included.
    - ``mass_matrix(q) -> M`` (nv x nv), armature on the diagonal.
    - ``bias(q, dq) -> h``: Coriolis, centrifugal and gravity forces (pinocchio's nle).
    - ``gravity(q) -> g``.
    - ``joint_wrenches(q, dq, ddq) -> wrench`` (6 x nv): column ``k`` is the wrench the
      joint of DOF ``k`` transmits, in its joint frame, force (N) then moment (N·m).
    - ``normal_load(q, dq, ddq) -> load``: equivalent normal load of each joint with a
      load model (:mod:`mbctl.dynamics.friction.loads`); NaN for the other joints.
    - ``friction(dq, ddq, z, load) -> tau_f``: every joint's friction law; the sign at
      ``dq = 0`` follows ``ddq`` (:func:`~mbctl.dynamics.friction.laws.motion_direction`); ``load``
      is used by joints with a load model, ``z`` by LuGre joints (when dynamic).
    - ``inverse_dynamics(q, dq, ddq, z) -> (tau, tau_rigid, tau_friction, wrench, load)``:
      rigid torques plus friction, with load-dependent friction loaded by the
      reaction wrenches of the same RNEA pass.
    - per frame (methods): :meth:`frame_position` ``(q) -> p`` (3, world),
      :meth:`frame_rotation` ``(q) -> R`` (3x3, frame to world) and
      :meth:`frame_jacobian` ``(q) -> J`` (6 x nv, world-aligned axes at the frame
      origin, linear rows first: pinocchio's ``LOCAL_WORLD_ALIGNED``).
    """

    def __init__(
        self,
        robot: RobotModel,
        *,
        lugre: Literal["dynamic", "steady"] = "dynamic",
        bodies: Sequence[tuple[Scalar, Vec, Mat]] | None = None,
        armature: Sequence[Scalar] | None = None,
        friction: Mapping[int, tuple[Any, Any]] | None = None,
    ):
        if lugre not in ("dynamic", "steady"):
            raise ValueError(f"lugre must be 'dynamic' or 'steady', got {lugre!r}")
        self.robot = robot
        self.lugre = lugre
        model = robot.model
        self.nv = robot.nv
        by_id = {j.id: j for j in robot.joints}
        if sorted(by_id) != list(range(1, model.njoints)):
            raise ValueError("SymbolicDynamics needs every pinocchio joint to be one DOF of the RobotModel")
        self._joints = [by_id[i] for i in range(1, model.njoints)]
        self._parent = [int(model.parents[i]) for i in range(1, model.njoints)]  # pinocchio ids
        self._placement = [_Placement(model.jointPlacements[i]) for i in range(1, model.njoints)]
        self._body = list(bodies) if bodies is not None else [body_inertia(model.inertias[i]) for i in range(1, model.njoints)]
        self._armature = list(armature) if armature is not None else [float(model.armature[j.idx_v]) for j in self._joints]
        if len(self._body) != len(self._joints) or len(self._armature) != len(self._joints):
            raise ValueError(f"SymbolicDynamics needs one body and one armature per joint ({len(self._joints)})")
        self._gravity = [_const(x) for x in np.asarray(model.gravity.linear)]

        self.q = ca.SX.sym("q", self.nv)
        self.dq = ca.SX.sym("dq", self.nv)
        self.ddq = ca.SX.sym("ddq", self.nv)
        self.z = ca.SX.sym("z", self.nv)
        self.load = ca.SX.sym("load", self.nv)
        self._frames: dict[tuple[str, str], ca.Function] = {}
        self._laws = {j.idx_v: (j.friction.law, j.friction.load) for j in self._joints if j.friction is not None}
        self._laws.update(friction or {})

    # ---- recursions -------------------------------------------------------------

    def _motions(self, q: ca.SX) -> list[_JointMotion]:
        return [_JointMotion(j, q[j.idx_v]) for j in self._joints]

    def _rnea(self, q: ca.SX, dq: Sequence[Scalar], ddq: Sequence[Scalar], gravity: bool = True) -> tuple[list, list]:
        """Joint torques (nv Scalars, DOF order) and joint wrenches (per joint, 6 Scalars)."""
        X = self._motions(q)
        n = len(self._joints)
        v: list[tuple[Vec, Vec]] = []
        a: list[tuple[Vec, Vec]] = []
        f: list[tuple[Vec, Vec]] = []
        base_acc = ([-g for g in self._gravity] if gravity else _zero(), _zero())
        for i, joint in enumerate(self._joints):
            p = self._parent[i]
            vp = v[p - 1] if p > 0 else (_zero(), _zero())
            ap = a[p - 1] if p > 0 else base_acc
            vl, vw = X[i].motion_inv(*self._placement[i].motion_inv(*vp))
            al, aw = X[i].motion_inv(*self._placement[i].motion_inv(*ap))
            axis = X[i].axis
            qd, qdd = dq[joint.idx_v], ddq[joint.idx_v]
            if joint.kind == "revolute":
                vw = _vadd(vw, _scale(qd, axis))
                # v x (S qd) with S qd = (0, axis qd)
                al = _vadd(al, _scale(qd, _cross(vl, axis)))
                aw = _vadd(_vadd(aw, _scale(qdd, axis)), _scale(qd, _cross(vw, axis)))
            else:
                vl = _vadd(vl, _scale(qd, axis))
                al = _vadd(_vadd(al, _scale(qdd, axis)), _scale(qd, _cross(vw, axis)))
            v.append((vl, vw))
            a.append((al, aw))
            m, h, Ibar = self._body[i]
            # I a: f = m a_lin - h x a_ang, n = Ibar a_ang + h x a_lin
            fl = _vsub(_scale(m, al), _cross(h, aw))
            fn = _vadd(_matvec(Ibar, aw), _cross(h, al))
            # v x* (I v): (w x f_v, w x n_v + v x f_v)
            Il = _vsub(_scale(m, vl), _cross(h, vw))
            In = _vadd(_matvec(Ibar, vw), _cross(h, vl))
            fl = _vadd(fl, _cross(vw, Il))
            fn = _vadd(fn, _vadd(_cross(vw, In), _cross(vl, Il)))
            f.append((fl, fn))
        tau: list[Scalar] = [0.0] * self.nv
        for i in range(n - 1, -1, -1):
            joint = self._joints[i]
            fl, fn = f[i]
            axis = X[i].axis
            t = _dot(axis, fn if joint.kind == "revolute" else fl)
            tau[joint.idx_v] = _add(t, _mul(self._armature[i], ddq[joint.idx_v]))
            p = self._parent[i]
            if p > 0:
                up = self._placement[i].force(*X[i].force(fl, fn))
                f[p - 1] = (_vadd(f[p - 1][0], up[0]), _vadd(f[p - 1][1], up[1]))
        return tau, [fl + fn for fl, fn in f]

    def _crba(self, q: ca.SX) -> list[list[Scalar]]:
        X = self._motions(q)
        n = len(self._joints)
        composite = [(m, list(h), [list(r) for r in Ibar]) for m, h, Ibar in self._body]
        for i in range(n - 1, -1, -1):
            p = self._parent[i]
            if p > 0:
                m, h, Ibar = composite[i]
                h, Ibar = X[i].inertia(m, h, Ibar)
                h, Ibar = self._placement[i].inertia(m, h, Ibar)
                mp, hp, Ip = composite[p - 1]
                composite[p - 1] = (mp + m, _vadd(hp, h), [_vadd(Ip[r], Ibar[r]) for r in range(3)])
        M: list[list[Scalar]] = [[0.0] * self.nv for _ in range(self.nv)]
        for i in range(n):
            joint = self._joints[i]
            m, h, Ibar = composite[i]
            axis = X[i].axis
            # F = Ic S: revolute S = (0, a) -> (a x h, Ibar a); prismatic S = (a, 0) -> (m a, h x a)
            if joint.kind == "revolute":
                F = (_cross(axis, h), _matvec(Ibar, axis))
            else:
                F = (_scale(m, axis), _cross(h, axis))
            k = joint.idx_v
            M[k][k] = _add(self._column_entry(joint, axis, F), self._armature[i])
            j = i
            while self._parent[j] > 0:
                F = self._placement[j].force(*X[j].force(*F))
                j = self._parent[j] - 1
                other = self._joints[j]
                M[other.idx_v][k] = M[k][other.idx_v] = self._column_entry(other, X[j].axis, F)
        return M

    @staticmethod
    def _column_entry(joint: Joint, axis: Vec, F: tuple[Vec, Vec]) -> Scalar:
        return _dot(axis, F[1] if joint.kind == "revolute" else F[0])

    def _placements(self, q: ca.SX) -> list[tuple[Mat, Vec]]:
        """World rotation and position of every joint frame."""
        X = self._motions(q)
        out: list[tuple[Mat, Vec]] = []
        eye = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        for i, joint in enumerate(self._joints):
            p = self._parent[i]
            Rp, pp = out[p - 1] if p > 0 else (eye, _zero())
            P = self._placement[i]
            R = _matmul(Rp, P.R)
            pos = _vadd(pp, _matvec(Rp, P.p))
            if joint.kind == "revolute":
                # rows of R R_J: R_J^T applied to each row of R
                R = [X[i].rotate(row, inverse=True) for row in R]
            else:
                pos = _vadd(pos, _matvec(R, X[i].offset))
            out.append((R, pos))
        return out

    # ---- friction ---------------------------------------------------------------

    def _friction(self, dq: ca.SX, ddq: ca.SX, z: ca.SX, load: Sequence[Scalar]) -> list[Scalar]:
        out: list[Scalar] = [0.0] * self.nv
        for j in self._joints:
            if j.idx_v not in self._laws:
                continue
            k = j.idx_v
            v = dq[k]
            law, model = self._laws[k]
            factor = load[k] if model is not None else 1.0
            if isinstance(law, LuGre) and self.lugre == "dynamic":
                out[k] = law.torque(v, z[k], factor)
            else:
                out[k] = law.steady(v, motion_direction(v, ddq[k]), factor)
        return out

    def _normal_load(self, wrenches: list) -> list[Scalar]:
        out: list[Scalar] = [float("nan")] * self.nv
        for i, j in enumerate(self._joints):
            model = self._laws.get(j.idx_v, (None, None))[1]
            if model is not None:
                out[j.idx_v] = model.normal_load(_sx(wrenches[i]), j.axis, j.kind)
        return out

    def _wrench_matrix(self, wrenches: list) -> ca.SX:
        cols = [None] * self.nv
        for i, j in enumerate(self._joints):
            cols[j.idx_v] = _sx(wrenches[i])
        return ca.horzcat(*cols)

    # ---- expressions (for callers that inline them, e.g. with symbolic parameters) --

    def mass_matrix_of(self, q: ca.SX) -> ca.SX:
        """``M(q)`` (nv x nv) as an SX expression of ``q``, armature on the diagonal."""
        return ca.vertcat(*[ca.horzcat(*[ca.SX(x) if isinstance(x, float) else x for x in row]) for row in self._crba(q)])

    def bias_of(self, q: ca.SX, dq: ca.SX) -> ca.SX:
        """``h(q, dq)``: Coriolis, centrifugal and gravity forces as an SX expression."""
        return _sx(self._rnea(q, dq, [0.0] * self.nv)[0])

    def joint_wrenches_of(self, q: ca.SX, dq: ca.SX, ddq: ca.SX) -> ca.SX:
        """The joint wrenches (6 x nv, as :attr:`joint_wrenches`) as an SX expression."""
        return self._wrench_matrix(self._rnea(q, dq, ddq)[1])

    def gravity_of(self, q: ca.SX) -> ca.SX:
        """``g(q)`` as an SX expression."""
        return _sx(self._rnea(q, [0.0] * self.nv, [0.0] * self.nv)[0])

    def friction_of(self, dq: ca.SX, ddq: ca.SX, z: ca.SX, load: ca.SX) -> ca.SX:
        """The friction torques (as :attr:`friction`) as an SX expression."""
        return _sx(self._friction(dq, ddq, z, [load[k] for k in range(self.nv)]))

    def inverse_dynamics_of(self, q: ca.SX, dq: ca.SX, ddq: ca.SX, z: ca.SX) -> tuple[ca.SX, ca.SX, ca.SX, ca.SX, ca.SX]:
        """``(tau, tau_rigid, tau_friction, wrench, load)`` (as :attr:`inverse_dynamics`) as SX expressions."""
        rigid, w = self._rnea(q, dq, ddq)
        load = self._normal_load(w)
        tau_f = self._friction(dq, ddq, z, load)
        total = [_add(r, f) for r, f in zip(rigid, tau_f)]
        return _sx(total), _sx(rigid), _sx(tau_f), self._wrench_matrix(w), _sx(load)

    # ---- public functions -------------------------------------------------------

    @cached_property
    def rnea(self) -> ca.Function:
        tau, _ = self._rnea(self.q, self.dq, self.ddq)
        return ca.Function("rnea", [self.q, self.dq, self.ddq], [_sx(tau)], ["q", "dq", "ddq"], ["tau"])

    @cached_property
    def mass_matrix(self) -> ca.Function:
        return ca.Function("mass_matrix", [self.q], [self.mass_matrix_of(self.q)], ["q"], ["M"])

    @cached_property
    def bias(self) -> ca.Function:
        return ca.Function("bias", [self.q, self.dq], [self.bias_of(self.q, self.dq)], ["q", "dq"], ["h"])

    @cached_property
    def gravity(self) -> ca.Function:
        return ca.Function("gravity", [self.q], [self.gravity_of(self.q)], ["q"], ["g"])

    @cached_property
    def joint_wrenches(self) -> ca.Function:
        w = self.joint_wrenches_of(self.q, self.dq, self.ddq)
        return ca.Function("joint_wrenches", [self.q, self.dq, self.ddq], [w], ["q", "dq", "ddq"], ["wrench"])

    @cached_property
    def normal_load(self) -> ca.Function:
        _, w = self._rnea(self.q, self.dq, self.ddq)
        return ca.Function("normal_load", [self.q, self.dq, self.ddq], [_sx(self._normal_load(w))], ["q", "dq", "ddq"], ["load"])

    @cached_property
    def friction(self) -> ca.Function:
        tau_f = self.friction_of(self.dq, self.ddq, self.z, self.load)
        return ca.Function("friction", [self.dq, self.ddq, self.z, self.load], [tau_f], ["dq", "ddq", "z", "load"], ["tau_f"])

    @cached_property
    def inverse_dynamics(self) -> ca.Function:
        return ca.Function(
            "inverse_dynamics",
            [self.q, self.dq, self.ddq, self.z],
            list(self.inverse_dynamics_of(self.q, self.dq, self.ddq, self.z)),
            ["q", "dq", "ddq", "z"],
            ["tau", "tau_rigid", "tau_friction", "wrench", "load"],
        )

    def _frame(self, name: str) -> tuple[int, Any]:
        model = self.robot.model
        if not model.existFrame(name):
            names = ", ".join(f.name for f in model.frames)
            raise KeyError(f"no frame {name!r} in robot {self.robot.name} (frames: {names})")
        frame = model.frames[model.getFrameId(name)]
        return int(frame.parentJoint), frame.placement

    def _frame_placement(self, name: str) -> tuple[Mat, Vec, list, int]:
        parent, placement = self._frame(name)
        joints = self._placements(self.q)
        if parent == 0:
            Rj, pj = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], _zero()
        else:
            Rj, pj = joints[parent - 1]
        P = _Placement(placement)
        return _matmul(Rj, P.R), _vadd(pj, _matvec(Rj, P.p)), joints, parent

    def frame_position(self, name: str) -> ca.Function:
        """``p(q)``: position (m) of frame ``name`` in the world frame."""
        if ("position", name) not in self._frames:
            _, p, _, _ = self._frame_placement(name)
            self._frames["position", name] = ca.Function(_function_name("position", name), [self.q], [_sx(p)], ["q"], ["p"])
        return self._frames["position", name]

    def frame_rotation(self, name: str) -> ca.Function:
        """``R(q)``: rotation of frame ``name`` (frame coordinates to world coordinates)."""
        if ("rotation", name) not in self._frames:
            R, _, _, _ = self._frame_placement(name)
            rows = [ca.horzcat(*[ca.SX(x) if isinstance(x, float) else x for x in row]) for row in R]
            self._frames["rotation", name] = ca.Function(
                _function_name("rotation", name), [self.q], [ca.vertcat(*rows)], ["q"], ["R"]
            )
        return self._frames["rotation", name]

    def frame_jacobian(self, name: str) -> ca.Function:
        """``J(q)`` (6 x nv): ``(v, w) = J dq``, the velocity of frame ``name``'s origin and
        its angular velocity in world-aligned axes (m/s, rad/s), linear rows first."""
        if ("jacobian", name) not in self._frames:
            _, p, joints, parent = self._frame_placement(name)
            cols: list[list[Scalar]] = [[0.0] * 6 for _ in range(self.nv)]
            j = parent
            while j > 0:
                joint = self._joints[j - 1]
                R, pj = joints[j - 1]
                axis_world = _matvec(R, [_const(x) for x in joint.axis])
                if joint.kind == "revolute":
                    cols[joint.idx_v] = _cross(axis_world, _vsub(p, pj)) + axis_world
                else:
                    cols[joint.idx_v] = axis_world + _zero()
                j = self._parent[j - 1]
            J = ca.horzcat(*[_sx(c) for c in cols])
            self._frames["jacobian", name] = ca.Function(_function_name("jacobian", name), [self.q], [J], ["q"], ["J"])
        return self._frames["jacobian", name]
