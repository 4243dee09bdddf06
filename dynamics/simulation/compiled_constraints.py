"""Constraint rows and constrained solutions of the compiled core, as CasADi SX.

What :mod:`mbctl.dynamics.constraints` computes numerically, rebuilt symbolically for
:mod:`mbctl.dynamics.simulation.compiled` (SI units; ``q``, ``dq`` DOF coordinates and
velocities, ``t`` time in s):

**Rows** (:func:`constraint_rows`). Position-level rows ``Phi(q, t)`` (target subtracted)
of :class:`~mbctl.dynamics.constraints.kinds.FramePosition`,
:class:`~mbctl.dynamics.constraints.kinds.FrameOrientation` (Z-Y-X Euler angles, the error
wrapped to (-pi, pi]), :class:`~mbctl.dynamics.constraints.kinds.JointLinear`,
:class:`~mbctl.dynamics.constraints.loops.LoopClosure` and
:class:`~mbctl.dynamics.constraints.loops.FrameOffset` give ``A = dPhi/dq``,
``dPhi/dt = A dq + Phi_t`` and ``gamma = -(d(A dq)/dq dq + 2 d(A dq)/dt + Phi_tt)`` by
automatic differentiation. Velocity-level rows of
:class:`~mbctl.dynamics.constraints.kinds.FrameVelocity`, ``w(q, dq) = (J dq)_axes``
(world-aligned, or the frame's own axes: ``R^T`` applied to the linear and angular
parts), have no ``Phi`` (NaN): ``A = dw/d(dq)``, ``Phi_t = -g(t)``,
``gamma = -d(A dq)/dq dq + g'(t)``.

**Solution** (:func:`constrained_solution`). With ``a = M^-1 f``, Baumgarte's
``b = gamma - c1 dPhi - c0 Phi`` (``Phi`` term on position rows only) and ``r = b - A a``;
every solver and mode, as the interpreted ``_factor``
(:mod:`mbctl.dynamics.constraints.solvers`) computes it:

- Lagrange and null space act on the kept rows ``A_k`` (``setup.kept``: all rows, or those
  left after eliminating the named or QR-picked redundant ones), independent there: with
  ``S = A_k M^-1 A_k^T``, ``lambda_k = -S^-1 r_k``, ``ddq = a - M^-1 A_k^T lambda_k``
  (the KKT solution; the null-space solution with any choice of independent coordinates
  is the same ``ddq``, so the QR pick at every evaluation does not enter), multipliers
  zero on eliminated rows (NaN for the null-space solver, set by the sample evaluator).
- Udwadia–Kalaba with ``X = A L^-T`` (``M = L L^T``) uses the Moore–Penrose inverse
  ``X^+``. For rank ``r`` rows (the rank at the initial state) the redundant rows are
  combinations of the kept ones, ``A = T A_k`` with ``T = A A_k^T (A_k A_k^T)^-1``
  (identity on kept rows); then ``X = T X_k`` is a full-rank factorization and
  ``X^+ = X_k^T (X_k X_k^T)^-1 P^-1 T^T`` with ``P = T^T T``: exactly the pseudo-inverse
  of the interpreted solver (which truncates singular values below ``rank_tolerance``;
  the same where the redundancy is structural, as in a parallelogram), including the
  least-squares compromise between the Baumgarte terms of redundant rows off the
  manifold. ``r_k = P^-1 T^T r``, ``lambda = T P^-1 lambda_k`` (the minimum-norm
  multipliers ``-(X X^T)^+ r``).
- The damped mode (Udwadia–Kalaba): where ``s_r(A) < tolerance s_1(A)``, ``X^+`` becomes
  ``X^T (G + mu^2 I)^-1``, ``G = X X^T = A M^-1 A^T``, ``mu = damping s_max(X)``, and the
  reported multipliers ``-(G + mu^2 I)^-1 G (G + mu^2 I)^-1 r`` as in the interpreted
  solver; elsewhere the regular solution. The switch is an ``if_else`` on the singular
  values, which come from unrolled cyclic Jacobi sweeps on ``A A^T`` and ``G``
  (:func:`symmetric_eigenvalues`).

All parts are affine in the applied force, so the solution is returned as its value for
``f`` plus its linear part for the columns of ``B`` (the load-dependent friction's
``Q = Q0 + B N``).

**Loop forces in the joint reactions** (:func:`loop_wrenches`): a loop row's multiplier
puts ``-lambda g_A`` on frame A's body and ``-lambda g_B`` on B's (a material
:class:`~mbctl.dynamics.constraints.kinds.FrameVelocity` row ``-lambda e_k`` on its
frame's body), which the reaction wrenches of load-dependent friction include, as the
interpreted RNEA's external forces do.

Not covered (:func:`unsupported_constraints` names it): :class:`~mbctl.dynamics.constraints.kinds.Pfaffian`
rows (Python callables) and targets other than expressions and quintic polylines.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.kinds import FrameOrientation, FramePosition, FrameVelocity, JointLinear
from mbctl.dynamics.constraints.loops import LoopClosure, acts_on_bodies
from mbctl.dynamics.constraints.targets import ExpressionTarget, QuinticPolyline, parse_expression
from mbctl.dynamics.symbolic import SymbolicDynamics

__all__ = [
    "ConstraintRows",
    "Solution",
    "cholesky",
    "cholesky_solve",
    "constrained_solution",
    "constraint_rows",
    "loop_wrenches",
    "wrench_maps",
    "spd_solve",
    "stabilized",
    "symmetric_eigenvalues",
    "unsupported_constraints",
]

# cyclic Jacobi sweeps for the singular values of the damped mode: convergence is quadratic,
# so a handful of sweeps reach round-off for the few rows a constraint set has
_JACOBI_SWEEPS = 8


@dataclass(frozen=True)
class ConstraintRows:
    """The stacked rows at ``(t, q, dq)`` (see the module docstring).

    Attributes:
        phi: ``Phi`` (m, rad); NaN on velocity-level rows.
        jac: ``A`` (rows x nv).
        phi_t: ``Phi_t``, so that ``dPhi = A dq + Phi_t``.
        dphi: ``dPhi/dt`` (the velocity-level residual on Pfaffian rows).
        gamma: Right-hand side of ``A ddq = gamma``, unstabilized.
        target: The rows' targets ``g(t)``; NaN for loop rows.
    """

    phi: ca.SX
    jac: ca.SX
    phi_t: ca.SX
    dphi: ca.SX
    gamma: ca.SX
    target: ca.SX


@dataclass(frozen=True)
class Solution:
    """The constrained solution for ``f + B N``: ``ddq = ddq0 + ddqB N`` (rad/s², m/s²),
    ``Q_c = force0 + forceB N`` (N·m, N), ``lambda = lam0 + lamB N``; ``singular`` is 1
    where the damped mode applied (0 otherwise)."""

    ddq0: ca.SX
    ddqB: ca.SX
    force0: ca.SX
    forceB: ca.SX
    lam0: ca.SX
    lamB: ca.SX
    singular: ca.SX


def unsupported_constraints(system: ConstrainedDynamics) -> str:
    """Why the constraint rows of ``system`` cannot be generated, or ``""``."""
    for c in system.constraints:
        if not isinstance(c, (FramePosition, FrameOrientation, FrameVelocity, JointLinear, LoopClosure)):
            return f"{type(c).__name__} constraints"
        if type(c) is not LoopClosure and not isinstance(c.target, (ExpressionTarget, QuinticPolyline)):
            return f"{type(c.target).__name__} targets"
    return ""


def _target(target: ExpressionTarget | QuinticPolyline, t: ca.SX) -> ca.SX:
    """``g(t)`` of a constraint target. A rest-to-rest polyline is the sum of its segments'
    moves, ``g = P_0 + sum_i (P_{i+1} - P_i) p(clip((t - t_i)/T_i, 0, 1))``, with
    ``p(s) = 10 s^3 - 15 s^4 + 6 s^5`` (smooth to the second derivative at the kinks)."""
    if isinstance(target, ExpressionTarget):
        return ca.vertcat(*(parse_expression(text, t) for text in target.expressions))
    g = ca.SX(ca.DM(target.points[0]))
    for i, T in enumerate(target.durations):
        s = ca.fmin(ca.fmax((t - target.times[i]) / T, 0.0), 1.0)
        g = g + ca.DM(target.points[i + 1] - target.points[i]) * (s**3 * (10 - 15 * s + 6 * s**2))
    return g


def _loop_rows(c: LoopClosure, sym: SymbolicDynamics, q: ca.SX) -> ca.SX:
    """The rows of :class:`LoopClosure` (its ``row_spec``; also :class:`FrameOffset`'s before its
    target): ``p_A - p_B``, ``(R_A u)·(R_B w)``, ``(R_A u)·(p_B - p_A)``."""
    a, b = c.frames
    pA, pB = sym.frame_position(a)(q), sym.frame_position(b)(q)
    RA, RB = sym.frame_rotation(a)(q), sym.frame_rotation(b)(q)
    rows = []
    for row in c.row_spec:
        if row[0] == "pos":
            rows.append(pA[row[1]] - pB[row[1]])
        elif row[0] == "dot":
            rows.append(ca.dot(RA @ ca.DM(row[1]), RB @ ca.DM(row[2])))
        else:
            rows.append(ca.dot(RA @ ca.DM(row[1]), pB - pA))
    return ca.vertcat(*rows)


def _euler_errors(c: FrameOrientation, sym: SymbolicDynamics, q: ca.SX, g: ca.SX) -> ca.SX:
    """Chosen Z-Y-X Euler angles of ``R = Rz(yaw) Ry(pitch) Rx(roll)`` (pinocchio's
    ``matrixToRpy`` away from gimbal lock) minus ``g``, wrapped to (-pi, pi] (rad)."""
    R = sym.frame_rotation(c.frame)(q)
    roll = ca.atan2(R[2, 1], R[2, 2])
    pitch = ca.atan2(-R[2, 0], ca.sqrt(R[2, 1] ** 2 + R[2, 2] ** 2))
    yaw = ca.atan2(R[1, 0], R[0, 0])
    angles = ca.vertcat(roll, pitch, yaw)[c.angles]
    shifted = angles - g + np.pi
    return shifted - 2 * np.pi * ca.floor(shifted / (2 * np.pi)) - np.pi


def _velocity_rows(c: FrameVelocity, sym: SymbolicDynamics, q: ca.SX, dq: ca.SX) -> ca.SX:
    """``(J dq)_axes`` of :class:`FrameVelocity`: world-aligned, or in the frame's own axes."""
    J = sym.frame_jacobian(c.frame)(q)
    if c.expressed == "local":
        RT = sym.frame_rotation(c.frame)(q).T
        J = ca.vertcat(RT @ J[:3, :], RT @ J[3:, :])
    return (J @ dq)[c.axes]


def constraint_rows(system: ConstrainedDynamics, sym: SymbolicDynamics, t: ca.SX, q: ca.SX, dq: ca.SX) -> ConstraintRows:
    """The stacked rows of ``system``'s constraints (see the module docstring), in the order of
    ``system.constraints.rows``."""
    nv = q.numel()
    parts = []
    for c in system.constraints:
        if isinstance(c, FrameVelocity):
            g = _target(c.target, t)
            w = _velocity_rows(c, sym, q, dq)
            A = ca.jacobian(w, dq)
            gamma = -ca.jtimes(A @ dq, q, dq) + ca.jacobian(g, t)
            parts.append((ca.SX(ca.DM.nan(c.size)), A, -g, gamma, g))
            continue
        if type(c) is LoopClosure:
            g = ca.SX(ca.DM.nan(c.size))
            phi = _loop_rows(c, sym, q)
        else:
            g = _target(c.target, t)
            if isinstance(c, LoopClosure):  # FrameOffset
                phi = _loop_rows(c, sym, q) - g
            elif isinstance(c, FramePosition):
                phi = sym.frame_position(c.frame)(q)[c.axes] - g
            elif isinstance(c, FrameOrientation):
                phi = _euler_errors(c, sym, q, g)
            else:
                phi = ca.dot(ca.DM(c.c), q) - g
        A = ca.jacobian(phi, q)
        phi_t = ca.jacobian(phi, t)
        w = A @ dq
        gamma = -(ca.jtimes(w, q, dq) + 2 * ca.jacobian(w, t) + ca.jacobian(phi_t, t))
        parts.append((phi, A, phi_t, gamma, g))
    if not parts:
        empty = ca.SX(0, 1)
        return ConstraintRows(empty, ca.SX(0, nv), empty, empty, empty, empty)
    phi, A, phi_t, gamma, target = (ca.vertcat(*column) for column in zip(*parts))
    return ConstraintRows(phi=phi, jac=A, phi_t=phi_t, dphi=A @ dq + phi_t, gamma=gamma, target=target)


def stabilized(rows: ConstraintRows, level: np.ndarray, c1: ca.SX | float, c0: ca.SX | float) -> ca.SX:
    """Baumgarte's ``b = gamma - c1 dPhi - c0 Phi``, the ``Phi`` term on position-level rows
    (``level == 2``) only, as :func:`~mbctl.dynamics.constraints.stabilization.stabilize`;
    ``c1`` (1/s) and ``c0`` (1/s²) may be symbols (run-time parameters)."""
    position = [int(i) for i in np.flatnonzero(np.asarray(level) == 2)]
    phi = ca.SX.zeros(rows.phi.numel())
    if position:
        phi[position] = rows.phi[position]
    return rows.gamma - c1 * rows.dphi - c0 * phi


def symmetric_eigenvalues(G: ca.SX, sweeps: int = _JACOBI_SWEEPS) -> ca.SX:
    """Eigenvalues of the symmetric ``G``, decreasing: ``sweeps`` cyclic Jacobi sweeps,
    unrolled (rotation ``t = sign(theta)/(|theta| + sqrt(theta^2 + 1))``,
    ``theta = (g_qq - g_pp)/(2 g_pq)``, skipped where ``g_pq = 0``), then a sorting network."""
    n = G.size1()
    S = [[G[i, j] for j in range(n)] for i in range(n)]
    for _ in range(sweeps):
        for p in range(n):
            for r in range(p + 1, n):
                off = S[p][r]
                zero = off == 0
                theta = (S[r][r] - S[p][p]) / (2 * ca.if_else(zero, 1.0, off))
                tan = ca.if_else(zero, 0.0, ca.if_else(theta >= 0, 1.0, -1.0) / (ca.fabs(theta) + ca.sqrt(theta**2 + 1)))
                cos = 1 / ca.sqrt(tan**2 + 1)
                sin = tan * cos
                for k in range(n):  # columns p, r
                    skp, skr = S[k][p], S[k][r]
                    S[k][p], S[k][r] = cos * skp - sin * skr, sin * skp + cos * skr
                for k in range(n):  # rows p, r
                    spk, srk = S[p][k], S[r][k]
                    S[p][k], S[r][k] = cos * spk - sin * srk, sin * spk + cos * srk
    values = [S[i][i] for i in range(n)]
    for i in range(n):
        for j in range(n - 1 - i):
            values[j], values[j + 1] = ca.fmax(values[j], values[j + 1]), ca.fmin(values[j], values[j + 1])
    return ca.vertcat(*values) if values else ca.SX(0, 1)


def cholesky(M: ca.SX) -> list[list[ca.SX]]:
    """The lower Cholesky factor ``L`` of a symmetric positive definite ``M`` (``M = L L^T``) as
    rows of SX entries; where ``M``'s zeros give zeros of ``L`` the entries are structural zeros,
    so a sparse ``M`` (block-diagonal: one block per chain) costs what its blocks cost."""
    n = M.size1()
    L = [[ca.SX(0.0)] * n for _ in range(n)]
    for j in range(n):
        L[j][j] = ca.sqrt(M[j, j] - sum((L[j][i] ** 2 for i in range(j)), ca.SX(0.0)))
        for r in range(j + 1, n):
            L[r][j] = (M[r, j] - sum((L[r][i] * L[j][i] for i in range(j)), ca.SX(0.0))) / L[j][j]
    return L


def cholesky_solve(L: list[list[ca.SX]], R: ca.SX) -> ca.SX:
    """``(L L^T)^-1 R`` by forward and back substitution with the factor of :func:`cholesky`."""
    n = len(L)
    columns = []
    for c in range(R.size2()):
        y: list[ca.SX] = []
        for r in range(n):
            y.append((R[r, c] - sum((L[r][i] * y[i] for i in range(r)), ca.SX(0.0))) / L[r][r])
        x: list[ca.SX] = [ca.SX(0.0)] * n
        for r in reversed(range(n)):
            x[r] = (y[r] - sum((L[i][r] * x[i] for i in range(r + 1, n)), ca.SX(0.0))) / L[r][r]
        columns.append(ca.vertcat(*x))
    return ca.horzcat(*columns) if columns else ca.SX(n, 0)


def spd_solve(M: ca.SX, R: ca.SX) -> ca.SX:
    """``M^-1 R`` for a symmetric positive definite ``M`` (a mass matrix, ``A M^-1 A^T``) by Cholesky,
    ``M = L L^T``: about a third of the operations of CasADi's symbolic QR ``solve``."""
    return cholesky_solve(cholesky(M), R)


def _kept_solution(A: ca.SX, r: ca.SX, rB: ca.SX, a: ca.SX, MinvAt: ca.SX, MinvB: ca.SX, kept: list[int], project: bool):
    """``(ddq0, ddqB, force0, forceB, lam0, lamB)`` on the kept rows (Udwadia–Kalaba /
    Lagrange there); ``project`` maps the redundant rows through ``T`` (module docstring),
    otherwise the multipliers of the other rows are zero."""
    m = A.size1()
    Ak = A[kept, :]
    rhs = ca.horzcat(r, rB)
    if project and len(kept) < m:
        others = [i for i in range(m) if i not in kept]
        T = ca.SX(m, len(kept))
        T[kept, :] = ca.SX.eye(len(kept))
        T[others, :] = spd_solve(Ak @ Ak.T, Ak @ A[others, :].T).T
        P = T.T @ T
        rhs_k = spd_solve(P, T.T @ rhs)
    else:
        rhs_k = rhs[kept, :]
    MinvAkt = MinvAt[:, kept]
    Y = spd_solve(Ak @ MinvAkt, rhs_k)  # -lambda_k
    ddq = ca.horzcat(a, MinvB) + MinvAkt @ Y
    force = Ak.T @ Y
    if project and len(kept) < m:
        lam = -T @ spd_solve(P, Y)
    else:
        lam = ca.SX.zeros(m, Y.size2())
        lam[kept, :] = -Y
    return ddq[:, 0], ddq[:, 1:], force[:, 0], force[:, 1:], lam[:, 0], lam[:, 1:]


def constrained_solution(system: ConstrainedDynamics, A: ca.SX, b: ca.SX, a: ca.SX, MinvAt: ca.SX, MinvB: ca.SX) -> Solution:
    """The solution of ``system``'s solver and singularity mode (module docstring) for
    ``A ddq = b`` (``b`` stabilized), from ``a = M^-1 f``, ``M^-1 A^T`` and ``M^-1 B``.
    The kept rows and the rank are those ``system.initialize`` found at the initial state.

    Raises:
        RuntimeError: If ``system`` has not been initialized.
    """
    m, k = A.size1(), MinvB.size2()
    setup = system._require_setup()
    kept = [int(i) for i in setup.kept]
    r = b - A @ a
    rB = -A @ MinvB
    uk = system.solver == "udwadia-kalaba"
    parts = _kept_solution(A, r, rB, a, MinvAt, MinvB, kept, project=uk)
    singular = ca.SX(0.0)
    if uk and system.singularity.action == "damped":
        policy = system.singularity
        sigma2 = symmetric_eigenvalues(A @ A.T)  # s_i(A)^2, decreasing
        singular = sigma2[setup.rank - 1] < policy.tolerance**2 * sigma2[0]
        G = A @ MinvAt
        mu2 = policy.damping**2 * symmetric_eigenvalues(G)[0]
        H = G + mu2 * ca.SX.eye(m)
        Z = spd_solve(H, ca.horzcat(r, rB))
        ddq = ca.horzcat(a, MinvB) + MinvAt @ Z
        force = A.T @ Z
        lam = -spd_solve(H, G @ Z)
        damped = (ddq[:, 0], ddq[:, 1:], force[:, 0], force[:, 1:], lam[:, 0], lam[:, 1:])
        parts = tuple(ca.if_else(singular, d, p) for d, p in zip(damped, parts))
    ddq0, ddqB, force0, forceB, lam0, lamB = parts
    return Solution(ddq0, ddqB if k else ca.SX(a.numel(), 0), force0, forceB if k else ca.SX(a.numel(), 0), lam0, lamB if k else ca.SX(m, 0), singular)


def _frame_wrench_on_joint(sym: SymbolicDynamics, joint_placement: tuple, q: ca.SX, frame: str, w: ca.SX) -> ca.SX:
    """A wrench ``w`` (force, moment; world axes, at frame ``frame``'s origin) in joint axes at the joint origin."""
    Rj, pj = joint_placement
    p = sym.frame_position(frame)(q)
    force, moment = w[:3], w[3:] + ca.cross(p - pj, w[:3])
    return ca.vertcat(Rj.T @ force, Rj.T @ moment)


def loop_wrenches(system: ConstrainedDynamics, sym: SymbolicDynamics, q: ca.SX, lam: ca.SX, joints: list[int]) -> ca.SX:
    """The part of the reaction wrenches of pinocchio joints ``joints`` ((len, 6): force N then
    moment N·m, joint axes) due to the constraint forces on bodies (module docstring): minus
    the wrench of every such force on a body of the joint's subtree, as RNEA's external forces."""
    model = system.robot.model
    placements = [(ca.vertcat(*[ca.horzcat(*row) for row in R]), ca.vertcat(*p)) for R, p in sym._placements(q)]
    out = [ca.SX.zeros(6) for _ in joints]
    slices = system.constraints.slices
    for c in system.constraints:
        if not acts_on_bodies(c):
            continue
        lam_c = lam[slices[c.name].start : slices[c.name].stop]
        pushes = []
        if isinstance(c, FrameVelocity):
            e = ca.SX.zeros(6)
            e[c.axes] = -lam_c
            if c.expressed == "local":
                R = sym.frame_rotation(c.frame)(q)
                e = ca.vertcat(R @ e[:3], R @ e[3:])
            pushes.append((c.frame, e))
        else:
            gA, gB = wrench_maps(c, sym, q)
            pushes += [(c.frames[0], -(gA.T @ lam_c)), (c.frames[1], -(gB.T @ lam_c))]
        for frame, w in pushes:
            body = int(model.frames[model.getFrameId(frame)].parentJoint)
            for n, j in enumerate(joints):
                i = body
                while i > 0 and i != j:
                    i = int(model.parents[i])
                if i == j and j > 0:  # the body is in the joint's subtree
                    out[n] -= _frame_wrench_on_joint(sym, placements[j - 1], q, frame, w)
    return ca.horzcat(*out).T if out else ca.SX(0, 6)


def wrench_maps(c: LoopClosure, sym: SymbolicDynamics, q: ca.SX) -> tuple[ca.SX, ca.SX]:
    """``(g_A, g_B)`` (rows x 6) of :meth:`LoopClosure.wrench_maps` (world axes, at the frames' origins)."""
    a, b = c.frames
    pA, pB = sym.frame_position(a)(q), sym.frame_position(b)(q)
    RA, RB = sym.frame_rotation(a)(q), sym.frame_rotation(b)(q)
    gA, gB = [], []
    zero = ca.SX.zeros(3)
    for row in c.row_spec:
        if row[0] == "pos":
            e = ca.SX(ca.DM(np.eye(3)[row[1]]))
            gA.append(ca.vertcat(e, zero))
            gB.append(ca.vertcat(-e, zero))
        elif row[0] == "dot":
            cross = ca.cross(RA @ ca.DM(row[1]), RB @ ca.DM(row[2]))
            gA.append(ca.vertcat(zero, cross))
            gB.append(ca.vertcat(zero, -cross))
        else:
            n = RA @ ca.DM(row[1])
            gA.append(ca.vertcat(-n, ca.cross(n, pB - pA)))
            gB.append(ca.vertcat(n, zero))
    return ca.horzcat(*gA).T, ca.horzcat(*gB).T
