"""Solvers of ``M ddq = f + Q_c`` subject to ``A ddq = b``: Lagrange, Udwadia–Kalaba, null space.

Each solver is factored once per evaluation (:class:`Factored`) and then solves for any
applied force ``f = Q - h`` (N·m, N); ``linear`` gives the part linear in ``f``, which
the load loop of load-dependent friction (:mod:`mbctl.dynamics.constraints.normal_loads`) uses.
With the mass matrix ``M``, the rows' Jacobian ``A`` and right-hand side ``b``
(:mod:`mbctl.dynamics.constraints.constrained`):

- ``"lagrange"``: the index-1 KKT system
  ``[[M, A^T], [A, 0]] [ddq; lambda] = [f; b]``. **Sign convention:**
  ``Q_c = -A^T lambda``; a row's ``lambda`` is the force (N, N·m) that pushes the
  system towards decreasing ``Phi``. Redundant rows are eliminated first (the rows
  named in ``eliminate``, or those QR with column pivoting of ``A^T`` finds dependent
  at the initial state); their multipliers are zero.
- ``"udwadia-kalaba"``: with ``M = L L^T`` (Cholesky), ``a = M^-1 f``,
  ``X = A L^-T``: ``ddq = a + L^-T X^+ (b - A a)``, ``Q_c = L X^+ (b - A a)``, the
  Moore–Penrose inverse handling redundant rows. The minimum-norm multipliers
  ``lambda = -(X X^T)^+ (b - A a)`` satisfy ``Q_c = -A^T lambda`` and are reported.
  Only this solver offers the damped (robust) mode: near singular configurations
  ``X^+`` uses ``s/(s^2 + mu^2)`` with ``mu = damping*s_max`` instead of ``1/s``.
- ``"nullspace"``: independent coordinates. The coordinates split into dependent
  ``q_d`` (r of them) and independent ``q_i``, picked by QR with column pivoting of
  ``A`` at every evaluation or named by the user; with ``V = [I; -A_d^-1 A_i]``
  (a basis of the null space of ``A``) and a particular solution ``ddq_p``
  (``A_d ddq_p,d = b``, ``ddq_p,i = 0``) the reaction-free equations are
  ``V^T M V ddq_i = V^T (f - M ddq_p)``. ``Q_c = M ddq - f``; no multipliers.

All three give the same ``ddq`` for consistent constraints, and the Lagrange and
Udwadia–Kalaba forces agree (for independent rows, also their multipliers).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import numpy as np
import scipy.linalg
import scipy.linalg.blas
import scipy.linalg.lapack

from mbctl.config.simulation import SOLVERS

__all__ = [
    "SOLVERS",
    "Solver",
    "Factored",
    "KeptRows",
    "lagrange",
    "lagrange_factor",
    "nullspace",
    "nullspace_factor",
    "udwadia_kalaba",
    "udwadia_kalaba_factor",
]

Solver = Literal["udwadia-kalaba", "lagrange", "nullspace"]


class Factored:
    """One evaluation's solver, factored once.

    ``self(f)`` solves for the applied force ``f = Q - h`` (N·m, N) and returns
    ``(ddq, Q_c, lambda)``; ``self.linear(F)`` returns the same for every column of
    ``F`` (nv x K) with the constraint right-hand side set to zero — the part of the
    solution that is linear in ``f`` (``self(f + F x) = self(f) + self.linear(F) x``).
    """

    def __call__(self, f: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError

    def linear(self, F: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        raise NotImplementedError


class _Lagrange(Factored):
    def __init__(self, M: np.ndarray, A: np.ndarray, b: np.ndarray):
        n, m = M.shape[0], A.shape[0]
        K = np.zeros((n + m, n + m))
        K[:n, :n] = M
        K[:n, n:] = A.T
        K[n:, :n] = A
        self.lu, self.piv, info = scipy.linalg.lapack.dgetrf(K)
        if info != 0:
            raise np.linalg.LinAlgError("the KKT matrix is singular")
        self.n, self.A, self.b = n, A, b

    def _solve(self, rhs: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        x = scipy.linalg.lapack.dgetrs(self.lu, self.piv, rhs)[0]
        lam = x[self.n :]
        return x[: self.n], -(self.A.T @ lam), lam

    def __call__(self, f):
        return self._solve(np.concatenate([f, self.b]))

    def linear(self, F):
        return self._solve(np.vstack([F, np.zeros((self.A.shape[0], F.shape[1]))]))


class _UdwadiaKalaba(Factored):
    def __init__(self, M: np.ndarray, A: np.ndarray, b: np.ndarray, rcond: float, damping: float):
        # direct LAPACK/BLAS calls: at robot sizes the wrappers' overhead would dominate
        self.L, info = scipy.linalg.lapack.dpotrf(M, lower=1, clean=1)
        if info != 0:
            raise np.linalg.LinAlgError("the mass matrix is not positive definite")
        self.A, self.b = A, b
        if A.shape[0] == 0:
            return
        X = scipy.linalg.blas.dtrsm(1.0, self.L, A.T, lower=1).T  # A L^-T
        U, sv, Vt = np.linalg.svd(X, full_matrices=False)
        smax = sv[0] if sv.size else 0.0
        if damping > 0:
            mu2 = (damping * smax) ** 2
            s_inv = sv / (sv**2 + mu2)
        else:
            keep = sv > rcond * smax
            s_inv = np.where(keep, 1.0 / np.where(keep, sv, 1.0), 0.0)
        self.U, self.V, self.s_inv = U, Vt.T, s_inv

    def _solve(self, f: np.ndarray, r0: np.ndarray | float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        L = self.L
        a = scipy.linalg.lapack.dpotrs(L, f, lower=1)[0]
        if self.A.shape[0] == 0:
            return a, np.zeros_like(a), np.zeros((0,) + a.shape[1:])
        Ur = self.U.T @ (r0 - self.A @ a)
        si = self.s_inv if a.ndim == 1 else self.s_inv[:, None]
        y = self.V @ (si * Ur)  # X^+ (b - A a)
        if a.ndim == 1:
            ddq = a + scipy.linalg.blas.dtrsv(L, y, lower=1, trans=1)  # L^-T y
        else:
            ddq = a + scipy.linalg.blas.dtrsm(1.0, L, y, lower=1, trans_a=1)
        return ddq, L @ y, -(self.U @ (si**2 * Ur))

    def __call__(self, f):
        return self._solve(f, self.b)

    def linear(self, F):
        return self._solve(F, 0.0)


class _Nullspace(Factored):
    def __init__(self, M: np.ndarray, A: np.ndarray, b: np.ndarray, independent: Sequence[int] | None):
        n, m = M.shape[0], A.shape[0]
        is_dep = np.ones(n, dtype=bool)
        if independent is None:
            piv = scipy.linalg.lapack.dgeqp3(A)[1] - 1  # QR with column pivoting: best-conditioned columns first
            is_dep[piv[m:]] = False
        else:
            is_dep[np.asarray(independent, dtype=int)] = False
        dep = np.flatnonzero(is_dep)
        self.independent = np.flatnonzero(~is_dep)
        if len(dep) != m:
            raise np.linalg.LinAlgError(f"{len(self.independent)} independent coordinates given, {n - m} needed")
        # one solve for the particular solution and the null-space block: A_d^-1 [b, A_i]
        sol = np.linalg.solve(A[:, dep], np.column_stack([b, A[:, self.independent]]))
        self.ddq_p = np.zeros(n)
        self.ddq_p[dep] = sol[:, 0]
        self.M, self.m = M, m
        if n - m == 0:
            self.V = None
            return
        self.V = np.zeros((n, n - m))
        self.V[self.independent, np.arange(n - m)] = 1.0
        self.V[dep] = -sol[:, 1:]
        self.Lr, info = scipy.linalg.lapack.dpotrf(self.V.T @ M @ self.V, lower=1, clean=1)
        if info != 0:
            raise np.linalg.LinAlgError("the reduced mass matrix is not positive definite")

    def _solve(self, f: np.ndarray, ddq_p: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if f.ndim == 2 and ddq_p.ndim == 1:
            ddq_p = ddq_p[:, None]
        ddq = ddq_p if self.V is None else ddq_p + self.V @ scipy.linalg.lapack.dpotrs(self.Lr, self.V.T @ (f - self.M @ ddq_p), lower=1)[0]
        ddq = np.broadcast_to(ddq, f.shape).copy()
        return ddq, self.M @ ddq - f, np.full((self.m,) + f.shape[1:], np.nan)

    def __call__(self, f):
        return self._solve(f, self.ddq_p)

    def linear(self, F):
        return self._solve(F, np.zeros(F.shape[0]))


class KeptRows(Factored):
    """A solver on the kept rows of a redundant set, its multipliers expanded to every
    row: zero on eliminated rows (NaN throughout if the solver gives none)."""

    def __init__(self, inner: Factored, kept: np.ndarray, m: int):
        self.inner, self.kept, self.m = inner, kept, m

    def _expand(self, out: tuple[np.ndarray, np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        ddq, force, lam_k = out
        lam = np.full((self.m,) + lam_k.shape[1:], np.nan if np.isnan(lam_k).any() else 0.0)
        lam[self.kept] = lam_k
        return ddq, force, lam

    def __call__(self, f):
        return self._expand(self.inner(f))

    def linear(self, F):
        return self._expand(self.inner.linear(F))


def lagrange_factor(M: np.ndarray, A: np.ndarray, b: np.ndarray) -> Factored:
    """Factor the KKT matrix ``[[M, A^T], [A, 0]]`` once (rows of ``A`` independent):
    ``f -> (ddq, Q_c, lambda)`` with ``Q_c = -A^T lambda``.

    Raises:
        numpy.linalg.LinAlgError: If the KKT matrix is singular.
    """
    return _Lagrange(M, A, b)


def lagrange(M: np.ndarray, f: np.ndarray, A: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Solve ``[[M, A^T], [A, 0]] [ddq; lambda] = [f; b]``; rows of ``A`` independent.

    Returns:
        ``(ddq, lambda)``; the constraint force is ``-A^T lambda``.

    Raises:
        numpy.linalg.LinAlgError: If the KKT matrix is singular.
    """
    ddq, _, lam = _Lagrange(M, A, b)(f)
    return ddq, lam


def udwadia_kalaba_factor(M: np.ndarray, A: np.ndarray, b: np.ndarray, rcond: float = 1e-9, damping: float = 0.0) -> Factored:
    """Factor ``M = L L^T`` and the SVD of ``X = A L^-T`` once (see :func:`udwadia_kalaba`)."""
    return _UdwadiaKalaba(M, A, b, rcond, damping)


def udwadia_kalaba(
    M: np.ndarray, f: np.ndarray, A: np.ndarray, b: np.ndarray, rcond: float = 1e-9, damping: float = 0.0
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Udwadia–Kalaba in Cholesky-factor form (see module docstring).

    Args:
        rcond: Singular values of ``X = A L^-T`` below ``rcond*s_max`` count as zero.
        damping: 0 for the Moore–Penrose inverse; > 0 replaces ``1/s`` by
            ``s/(s^2 + mu^2)``, ``mu = damping*s_max`` (damped least squares).

    Returns:
        ``(ddq, Q_c, lambda)`` with ``lambda`` the minimum-norm multipliers,
        ``Q_c = -A^T lambda``.
    """
    return _UdwadiaKalaba(M, A, b, rcond, damping)(f)


def nullspace_factor(M: np.ndarray, A: np.ndarray, b: np.ndarray, independent: Sequence[int] | None = None) -> Factored:
    """Split the coordinates and factor ``V^T M V`` once (see :func:`nullspace`); its
    ``independent`` attribute holds the independent coordinates; multipliers are NaN.

    Raises:
        numpy.linalg.LinAlgError: If ``A_d`` (columns of the dependent coordinates) is singular.
    """
    return _Nullspace(M, A, b, independent)


def nullspace(M: np.ndarray, f: np.ndarray, A: np.ndarray, b: np.ndarray, independent: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Independent-coordinate (null-space) solution; rows of ``A`` independent.

    Args:
        independent: Indices of the independent coordinates (``nv - rows`` of them);
            None picks the dependent ones by QR with column pivoting of ``A``.

    Returns:
        ``(ddq, independent)``: accelerations and the independent coordinates used.

    Raises:
        numpy.linalg.LinAlgError: If ``A_d`` (columns of the dependent coordinates) is singular.
    """
    solver = _Nullspace(M, A, b, independent)
    return solver(f)[0], solver.independent
