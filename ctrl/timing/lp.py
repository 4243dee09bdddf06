"""The discretised timing problem as one sparse linear program, solved by HiGHS.

The same stage rows as :mod:`mbctl.ctrl.timing.reachability`, with ``a_i = (b_{i+1} - b_i)/(2 ds)``
substituted, over the unknowns ``b_0..b_N`` (``b_0 = b_N = 0``)::

    maximise sum_i b_i   subject to   A_i (b_{i+1} - b_i)/(2 ds) + B_i b_i <= C_i,   0 <= b_i <= b_max_i

The maximal profile of the passes is the optimum of this program (it lies above every
feasible profile at every point), so the two solvers must agree; this one is the
cross-check (``solver="highs"``), the passes are the faster default.
"""

from __future__ import annotations

import numpy as np
from scipy.optimize import linprog
from scipy.sparse import coo_matrix

from mbctl.ctrl.timing.reachability import Infeasible, StageConstraints

__all__ = ["lp_profile"]


def lp_profile(con: StageConstraints) -> np.ndarray:
    """The maximal squared-speed profile ``b`` (N+1,) by HiGHS' dual simplex.

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
    ).tocsr()
    upper = np.minimum(con.b_max, 1e12)
    upper[0] = upper[-1] = 0.0
    res = linprog(-np.ones(n), A_ub=mat, b_ub=C[stage, row], bounds=np.column_stack([np.zeros(n), upper]), method="highs-ds")
    if res.status != 0:
        raise Infeasible(f"HiGHS: {res.message}", 0)
    return np.maximum(res.x, 0.0)
