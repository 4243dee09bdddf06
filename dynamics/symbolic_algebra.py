"""Element-wise spatial algebra on Python floats and CasADi SX scalars, for :mod:`mbctl.dynamics.symbolic`.

Vectors are lists of three scalars, matrices lists of three rows. Numeric constants stay
Python floats, so products with 0 and 1 vanish before CasADi sees them and the generated C
stays small; :class:`JointMotion` rotates only the two components normal to a coordinate
axis. Spatial conventions are pinocchio's (linear part first, joint frames).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import casadi as ca
import numpy as np

from mbctl.dynamics.model.robot import Joint

__all__ = [
    "JointMotion",
    "Mat",
    "Placement",
    "SNAP",
    "Scalar",
    "Vec",
    "add",
    "body_inertia",
    "const",
    "cross",
    "dot",
    "function_name",
    "inertia_shift",
    "is_value",
    "matTvec",
    "matmul",
    "matvec",
    "mul",
    "scale",
    "skew_product",
    "sub",
    "sx",
    "total",
    "transpose",
    "vadd",
    "vsub",
    "zero",
]

Scalar = Any  # a Python float (a constant) or a casadi.SX scalar
Vec = list  # three Scalars
Mat = list  # three rows of three Scalars

SNAP = 1e-14  # numeric noise in URDF-derived constants (cos(pi/2) = 6e-17) becomes exact 0 or +-1


# ---------------------------------------------------------------------------------
# element-wise algebra on floats and SX scalars; floats fold, zeros and ones vanish


def const(x: float) -> float:
    x = float(x)
    for exact in (0.0, 1.0, -1.0):
        if abs(x - exact) < SNAP:
            return exact
    return x


def is_value(x: Scalar, value: float) -> bool:
    return isinstance(x, float) and x == value


def mul(a: Scalar, b: Scalar) -> Scalar:
    if is_value(a, 0.0) or is_value(b, 0.0):
        return 0.0
    if is_value(a, 1.0):
        return b
    if is_value(b, 1.0):
        return a
    if is_value(a, -1.0):
        return -b
    if is_value(b, -1.0):
        return -a
    return a * b


def add(a: Scalar, b: Scalar) -> Scalar:
    if is_value(a, 0.0):
        return b
    if is_value(b, 0.0):
        return a
    return a + b


def sub(a: Scalar, b: Scalar) -> Scalar:
    if is_value(b, 0.0):
        return a
    if is_value(a, 0.0):
        return -b
    return a - b


def total(terms: Sequence[Scalar]) -> Scalar:
    out: Scalar = 0.0
    for t in terms:
        out = add(out, t)
    return out


def dot(a: Vec, b: Vec) -> Scalar:
    return total([mul(x, y) for x, y in zip(a, b)])


def vadd(a: Vec, b: Vec) -> Vec:
    return [add(x, y) for x, y in zip(a, b)]


def vsub(a: Vec, b: Vec) -> Vec:
    return [sub(x, y) for x, y in zip(a, b)]


def scale(s: Scalar, a: Vec) -> Vec:
    return [mul(s, x) for x in a]


def cross(a: Vec, b: Vec) -> Vec:
    return [
        sub(mul(a[1], b[2]), mul(a[2], b[1])),
        sub(mul(a[2], b[0]), mul(a[0], b[2])),
        sub(mul(a[0], b[1]), mul(a[1], b[0])),
    ]


def matvec(R: Mat, x: Vec) -> Vec:
    return [dot(row, x) for row in R]


def matTvec(R: Mat, x: Vec) -> Vec:
    return [dot([R[0][c], R[1][c], R[2][c]], x) for c in range(3)]


def matmul(A: Mat, B: Mat) -> Mat:
    return [[dot(A[r], [B[0][c], B[1][c], B[2][c]]) for c in range(3)] for r in range(3)]


def transpose(A: Mat) -> Mat:
    return [[A[c][r] for c in range(3)] for r in range(3)]


def zero() -> Vec:
    return [0.0, 0.0, 0.0]


def function_name(prefix: str, name: str) -> str:
    """A valid CasADi function name (letters, digits, single underscores) for a frame."""
    clean = "".join(c if c.isalnum() else "_" for c in f"{prefix}_{name}")
    while "__" in clean:
        clean = clean.replace("__", "_")
    return clean.strip("_")


def sx(values: Sequence[Scalar]) -> ca.SX:
    return ca.vertcat(*[ca.SX(v) if isinstance(v, float) else v for v in values]) if values else ca.SX(0, 1)


# ---------------------------------------------------------------------------------
# one joint: its motion about/along its axis


class JointMotion:
    """Rotation about (or translation along) a unit axis by a symbolic DOF value.

    An axis along a coordinate direction rotates only the two components normal
    to it (4 products instead of 9 plus the Rodrigues terms).
    """

    def __init__(self, joint: Joint, q: Scalar):
        self.kind = joint.kind
        self.axis = [const(a) for a in joint.axis]
        self.q = q
        nonzero = [k for k in range(3) if self.axis[k] != 0.0]
        self.aligned = nonzero[0] if len(nonzero) == 1 and abs(self.axis[nonzero[0]]) == 1.0 else None
        if self.kind == "revolute":
            self.c = ca.cos(q)
            s = ca.sin(q)
            # a rotation by q about -e_k is one by -q about +e_k: fold the sign into s
            self.s = -s if self.aligned is not None and self.axis[self.aligned] < 0 else s
        else:
            self.offset = scale(q, self.axis)

    def rotate(self, x: Vec, inverse: bool) -> Vec:
        """``R_J x`` (or ``R_J^T x`` when ``inverse``)."""
        c, s = self.c, (-self.s if inverse else self.s)
        if self.aligned is not None:
            k = self.aligned
            i, j = (k + 1) % 3, (k + 2) % 3
            out = [0.0, 0.0, 0.0]
            out[k] = x[k]
            out[i] = sub(mul(c, x[i]), mul(s, x[j]))
            out[j] = add(mul(s, x[i]), mul(c, x[j]))
            return out
        # Rodrigues: R x = c x + s (a x x) + (1 - c)(a . x) a
        a = self.axis
        along = mul(1 - c, dot(a, x))
        return vadd(vadd(scale(c, x), scale(s, cross(a, x))), scale(along, a))

    def rotation(self) -> Mat:
        """``R_J`` as a 3x3 matrix (columns are the rotated unit vectors)."""
        if self.kind != "revolute":
            return [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        cols = [self.rotate([1.0 if r == k else 0.0 for r in range(3)], inverse=False) for k in range(3)]
        return transpose(cols)

    def motion_inv(self, lin: Vec, ang: Vec) -> tuple[Vec, Vec]:
        """``X_J^-1 (lin, ang)``: a motion vector from the pre-joint frame to the joint frame."""
        if self.kind == "revolute":
            return self.rotate(lin, inverse=True), self.rotate(ang, inverse=True)
        return vsub(lin, cross(self.offset, ang)), ang

    def force(self, f: Vec, n: Vec) -> tuple[Vec, Vec]:
        """``X_J (f, n)``: a force from the joint frame to the pre-joint frame."""
        if self.kind == "revolute":
            return self.rotate(f, inverse=False), self.rotate(n, inverse=False)
        return f, vadd(n, cross(self.offset, f))

    def inertia(self, m: float, h: Vec, Ibar: Mat) -> tuple[Vec, Mat]:
        """``X_J`` applied to a spatial inertia ``(m, h = m c, Ibar about the origin)``."""
        if self.kind == "revolute":
            R = self.rotation()
            return matvec(R, h), matmul(matmul(R, Ibar), transpose(R))
        return inertia_shift(m, h, Ibar, self.offset)


def body_inertia(Y: Any) -> tuple[float, Vec, Mat]:
    """``(m, m c, I_O)`` of a pinocchio ``Inertia``: mass (kg), first moment (kg·m) and the
    rotational inertia about the frame origin, ``I_O = I_c + m ([c]^T [c])`` (kg·m²), the
    quantities the recursions below use (and pinocchio's ``toDynamicParameters`` lists)."""
    m = float(Y.mass)
    c = np.asarray(Y.lever, dtype=float)
    Ibar = np.asarray(Y.inertia, dtype=float) + m * (float(c @ c) * np.eye(3) - np.outer(c, c))
    return m, [float(x) for x in m * c], [[float(x) for x in row] for row in Ibar]


def skew_product(a: Vec, b: Vec) -> Mat:
    """``[a]x [b]x`` = ``b a^T - (a . b) I``."""
    d = dot(a, b)
    return [[sub(mul(b[r], a[c]), d if r == c else 0.0) for c in range(3)] for r in range(3)]


def inertia_shift(m: float, h: Vec, Ibar: Mat, p: Vec) -> tuple[Vec, Mat]:
    """Inertia ``(m, h, Ibar)`` seen from an origin at ``-p``: ``h + m p`` and
    ``Ibar - [p]x[h]x - [h]x[p]x - m [p]x[p]x`` (the body's points move by ``+p``)."""
    hp, ph, pp = skew_product(h, p), skew_product(p, h), skew_product(p, p)
    Inew = [[sub(sub(sub(Ibar[r][c], ph[r][c]), hp[r][c]), mul(m, pp[r][c])) for c in range(3)] for r in range(3)]
    return vadd(h, scale(m, p)), Inew


class Placement:
    """A constant SE3 ``(R, p)``: coordinates in the child frame to the parent frame."""

    def __init__(self, se3: Any):
        self.R = [[const(x) for x in row] for row in np.asarray(se3.rotation)]
        self.p = [const(x) for x in np.asarray(se3.translation)]

    def motion_inv(self, lin: Vec, ang: Vec) -> tuple[Vec, Vec]:
        """``X^-1 (lin, ang)``: ``w' = R^T w``, ``v' = R^T (v - p x w)``."""
        return matTvec(self.R, vsub(lin, cross(self.p, ang))), matTvec(self.R, ang)

    def force(self, f: Vec, n: Vec) -> tuple[Vec, Vec]:
        """``X (f, n)``: ``f' = R f``, ``n' = R n + p x f'``."""
        f2 = matvec(self.R, f)
        return f2, vadd(matvec(self.R, n), cross(self.p, f2))

    def inertia(self, m: float, h: Vec, Ibar: Mat) -> tuple[Vec, Mat]:
        Rh = matvec(self.R, h)
        RI = matmul(matmul(self.R, Ibar), transpose(self.R))
        return inertia_shift(m, Rh, RI, self.p)
