"""The discretised timing problem as one sparse linear program, solved by HiGHS.

The same stage rows as :mod:`mbctl.ctrl.timing.reachability`, with ``a_i = (b_{i+1} - b_i)/(2 ds)``
substituted, over the unknowns ``b_0..b_N`` (``b_0 = b_N = 0``)::

    maximise sum_i b_i   subject to   A_i (b_{i+1} - b_i)/(2 ds) + B_i b_i <= C_i,   0 <= b_i <= b_max_i

The maximal profile of the passes is the optimum of this program (it lies above every
feasible profile at every point), so the two solvers must agree; this one is the
cross-check (``solver="highs"``), the passes are the faster default.

Drive torques as decision variables (redundantly actuated closed chains,
:mod:`mbctl.ctrl.timing.closed`) add, per interval, the drive torques ``tau_i`` (na) with
bounds and the equations ``W_i^T tau_i = F_a,i a_i + F_b,i b_i + F_0,i`` (d rows): the reduced
dynamics on the independent coordinates, which the drives must supply.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix, hstack

from mbctl.ctrl.timing.reachability import Infeasible, StageConstraints

__all__ = ["DriveRows", "lp_profile"]


@dataclass(frozen=True)
class DriveRows:
    """``Wt_i tau_i = Fa_i a_i + Fb_i b_i + F0_i`` per interval (``Wt``: (N, d, na); ``Fa``, ``Fb``, ``F0``:
    (N, d)) with ``lower <= tau_i <= upper`` ((N, na))."""

    Wt: np.ndarray
    Fa: np.ndarray
    Fb: np.ndarray
    F0: np.ndarray
    lower: np.ndarray
    upper: np.ndarray


def lp_profile(con: StageConstraints, drives: DriveRows | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """The maximal squared-speed profile ``b`` (N+1,) by HiGHS' dual simplex, and with ``drives`` the
    drive torques (N, na) of the solution (else None).

    Raises:
        Infeasible: When HiGHS finds no feasible profile.
    """
    n = con.A.shape[0]  # grid points N+1; rows of stage N are not used (b_N = 0 there)
    A, B, C = con.A[:-1], con.B[:-1], con.C[:-1]
    keep = np.isfinite(C)
    stage, row = np.nonzero(keep)
    k = len(stage)
    g = A[stage, row] / (2.0 * con.ds)
    ids = np.arange(k)
    mat = coo_matrix(
        (np.concatenate([B[stage, row] - g, g]), (np.concatenate([ids, ids]), np.concatenate([stage, stage + 1]))), shape=(k, n)
    )
    upper = np.minimum(con.b_max, 1e12)
    upper[0] = upper[-1] = 0.0
    bounds = np.column_stack([np.zeros(n), upper])
    A_eq = b_eq = None
    na = 0
    if drives is not None:
        N, d, na = drives.Wt.shape
        # rows (i, r): sum_k Wt[i,r,k] tau[i,k] - Fa[i,r] (b_{i+1} - b_i)/(2 ds) - Fb[i,r] b_i = F0[i,r]
        rows = np.arange(N * d).reshape(N, d)
        i = np.repeat(np.arange(N), d)
        ga = drives.Fa.ravel() / (2.0 * con.ds)
        on_b = coo_matrix(
            (np.concatenate([ga - drives.Fb.ravel(), -ga]), (np.concatenate([rows.ravel(), rows.ravel()]), np.concatenate([i, i + 1]))),
            shape=(N * d, n),
        )
        r_idx = np.repeat(rows[:, :, None], na, axis=2).ravel()
        c_idx = np.repeat((np.arange(N)[:, None] * na + np.arange(na)[None, :])[:, None, :], d, axis=1).ravel()
        on_tau = coo_matrix((drives.Wt.ravel(), (r_idx, c_idx)), shape=(N * d, N * na))
        A_eq, b_eq = hstack([on_b, on_tau]).tocsr(), drives.F0.ravel()
        mat = hstack([mat, coo_matrix((k, N * na))])
        bounds = np.vstack([bounds, np.column_stack([drives.lower.ravel(), drives.upper.ravel()])])
    cost = np.concatenate([-np.ones(n), np.zeros(bounds.shape[0] - n)])
    res = linprog(cost, A_ub=mat.tocsr() if k else None, b_ub=C[stage, row] if k else None, A_eq=A_eq, b_eq=b_eq, bounds=bounds, method="highs-ds")
    if res.status != 0:
        raise Infeasible(f"HiGHS: {res.message}", 0)
    b = np.maximum(res.x[:n], 0.0)
    return b, (res.x[n:].reshape(-1, na) if drives is not None else None)
