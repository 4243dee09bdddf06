"""Time-optimal path timing with stage constraints linear in ``(a, b)``: TOPP-RA's two passes.

On a grid ``s_0 = 0 < ... < s_N = 1`` with uniform step ``ds`` the unknowns are the squared
path speeds ``b_i = sdot^2(s_i) >= 0`` and the path accelerations ``a_i = sddot``, constant on
``[s_i, s_{i+1}]``, so that ``b_{i+1} = b_i + 2 ds a_i``. Every limit is written at the grid
point (TOPP-RA's collocation)::

    A[i, k] a_i + B[i, k] b_i <= C[i, k]          (k = 1..m)

At fixed ``b`` the rows bound ``a`` from above (``A > 0``), below (``A < 0``) or bound ``b``
(``A = 0``), so the admissible ``a`` is an interval ``[amin(b), amax(b)]`` whose ends are the
max and min of lines in ``b``. Then

- backward pass: the controllable set ``K_i = [lo_i, hi_i]`` of ``b_i`` from which the rest
  state ``b_N = 0`` can be reached is an interval, and each of the conditions
  ``amin(b) <= amax(b)``, ``b + 2 ds amin(b) <= hi_{i+1}``, ``b + 2 ds amax(b) >= lo_{i+1}`` splits
  into one linear bound on ``b`` per line: ``K_i`` is a min and a max over a few numbers;
- forward pass: from ``b_0 = 0`` take the largest admissible step,
  ``b_{i+1} = min(hi_{i+1}, b_i + 2 ds amax(b_i))``.

The result is the optimum of the discretised problem: every feasible profile lies below it
at every grid point, so it also minimises the duration
``T = sum 2 ds / (sqrt(b_i) + sqrt(b_{i+1}))`` (Pham and Pham, "A new approach to time-optimal
path parameterization based on reachability analysis", IEEE T-RO 2018). The per-stage work is
set up for all stages at once with numpy; only the two scalar recursions run in Python.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbctl.errors import MbctlError

__all__ = ["StageConstraints", "Infeasible", "reachability_profile", "controllable_sets", "speed_bound"]


class Infeasible(MbctlError):
    """No timing of the path satisfies the limits (e.g. gravity alone exceeds a torque limit)."""

    def __init__(self, reason: str, index: int):
        self.index = index
        super().__init__(reason)


@dataclass(frozen=True)
class StageConstraints:
    """Rows ``A a + B b <= C`` at every grid point (arrays (N+1, m)) and a bound ``b <= b_max``
    ((N+1,), e.g. from velocity limits); ``ds`` the uniform grid step."""

    A: np.ndarray
    B: np.ndarray
    C: np.ndarray
    b_max: np.ndarray
    ds: float


def _compact(used: np.ndarray, p: np.ndarray, r: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Move each stage's used slots first and drop the columns no stage uses (fewer pairs below)."""
    order = np.argsort(~used, axis=1, kind="stable")[:, : max(int(used.sum(axis=1).max(initial=0)), 1)]
    return np.take_along_axis(p, order, axis=1), np.take_along_axis(r, order, axis=1)


def _lines(con: StageConstraints) -> dict[str, np.ndarray]:
    """Split the rows into upper lines ``a <= up - ur b``, lower lines ``a >= lp - lr b`` and the
    static interval ``[b_lo, b_hi]`` of each stage; unused slots hold lines that never bind."""
    A, B, C = con.A, con.B, con.C
    scale = np.abs(B) + np.abs(C) + 1.0
    zero = np.abs(A) <= 1e-12 * scale
    upper, lower = (A > 0) & ~zero, (A < 0) & ~zero
    safe = np.where(zero, 1.0, A)
    p, r = C / safe, B / safe
    up, ur = _compact(upper, np.where(upper, p, np.inf), np.where(upper, r, 0.0))
    lp, lr = _compact(lower, np.where(lower, p, -np.inf), np.where(lower, r, 0.0))
    # rows without a: B b <= C
    with np.errstate(divide="ignore", invalid="ignore"):
        bound = C / np.where(B == 0, 1.0, B)
    b_hi = np.minimum(con.b_max, np.min(np.where(zero & (B > 0), bound, np.inf), axis=1, initial=np.inf))
    b_lo = np.maximum(0.0, np.max(np.where(zero & (B < 0), bound, -np.inf), axis=1, initial=-np.inf))
    if np.any(zero & (B == 0) & (C < 0)):
        i = int(np.argwhere(zero & (B == 0) & (C < 0))[0, 0])
        raise Infeasible(f"a limit is exceeded at rest on the path at grid point {i}", i)
    # amin(b) <= amax(b) for every pair of a lower and an upper line: (ur - lr) b <= up - lp
    k = ur[:, :, None] - lr[:, None, :]
    rhs = up[:, :, None] - lp[:, None, :]
    finite = np.isfinite(rhs)
    with np.errstate(divide="ignore", invalid="ignore"):
        pair = np.where(finite & (k != 0), rhs / np.where(k == 0, 1.0, k), np.nan)
    b_hi = np.minimum(b_hi, np.min(np.where(finite & (k > 0), pair, np.inf), axis=(1, 2), initial=np.inf))
    b_lo = np.maximum(b_lo, np.max(np.where(finite & (k < 0), pair, -np.inf), axis=(1, 2), initial=-np.inf))
    bad = np.any(finite & (k == 0) & (rhs < 0), axis=(1, 2))
    b_hi = np.where(bad, -np.inf, b_hi)
    return dict(up=up, ur=ur, lp=lp, lr=lr, b_lo=b_lo, b_hi=b_hi)


def controllable_sets(con: StageConstraints, lines: dict[str, np.ndarray] | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Backward pass: ``(lo, hi)`` of the controllable sets ``K_i`` toward ``b_N = 0``.

    Raises:
        Infeasible: When some ``K_i`` is empty (the index says where).
    """
    L = _lines(con) if lines is None else lines
    h2 = 2.0 * con.ds
    # b + 2ds*(lp - lr*b) <= H  ->  e*b <= H - 2ds*lp,  e = 1 - 2ds*lr
    e_l = 1.0 - h2 * L["lr"]
    p_l = h2 * L["lp"]
    # b + 2ds*(up - ur*b) >= Lo  ->  e*b >= Lo - 2ds*up,  e = 1 - 2ds*ur
    e_u = 1.0 - h2 * L["ur"]
    p_u = h2 * L["up"]
    # bounds on b, each ``(X - p) * w`` with X = H (lower lines) or Lo (upper lines): upper bounds
    # from e_l > 0 and e_u < 0, lower bounds from e_l < 0 and e_u > 0. A slot that does not apply
    # gets p = -inf (upper) or +inf (lower) and w = 1, so that it never binds.
    def slots(p: np.ndarray, e: np.ndarray, sign: float, upper: bool) -> tuple[list, list]:
        use = np.isfinite(p) & (sign * e > 0)
        filler = -np.inf if upper else np.inf
        return np.where(use, p, filler).tolist(), np.where(use, 1.0 / np.where(use, e, 1.0), 1.0).tolist()

    lh_p, lh_w = slots(p_l, e_l, 1.0, True)
    uh_p, uh_w = slots(p_u, e_u, -1.0, True)
    ll_p, ll_w = slots(p_l, e_l, -1.0, False)
    ul_p, ul_w = slots(p_u, e_u, 1.0, False)
    # the rare groups (e_l < 0, e_u < 0: rows with 2 ds |B/A| > 1) are skipped where empty
    has_uh = (np.isfinite(p_u) & (e_u < 0)).any(axis=1).tolist()
    has_ll = (np.isfinite(p_l) & (e_l < 0)).any(axis=1).tolist()
    b_lo, b_hi = L["b_lo"].tolist(), L["b_hi"].tolist()
    n = len(b_hi)
    lo, hi = [0.0] * n, [0.0] * n
    H = Lo = 0.0
    inf = float("inf")
    for i in range(n - 2, -1, -1):
        top = min(b_hi[i], min([(H - p) * w for p, w in zip(lh_p[i], lh_w[i])]))
        if has_uh[i]:
            top = min(top, min([(Lo - p) * w for p, w in zip(uh_p[i], uh_w[i])]))
        bot = max(b_lo[i], max([(Lo - p) * w for p, w in zip(ul_p[i], ul_w[i])]))
        if has_ll[i]:
            bot = max(bot, max([(H - p) * w for p, w in zip(ll_p[i], ll_w[i])]))
        if top == inf:
            raise Infeasible(f"no limit bounds the path speed at grid point {i} (s = {i / (n - 1):.4g})", i)
        if not top >= bot:
            raise Infeasible(f"the limits cannot be met at grid point {i} of {n - 1} (s = {i / (n - 1):.4g})", i)
        lo[i], hi[i] = bot, top
        H, Lo = top, bot
    if lo[0] > 0.0:
        raise Infeasible("the path cannot start from rest within the limits", 0)
    return np.array(lo), np.array(hi)


def reachability_profile(con: StageConstraints) -> np.ndarray:
    """The time-optimal squared path speeds ``b`` (N+1,), ``b_0 = b_N = 0``.

    Raises:
        Infeasible: When no profile satisfies the rows.
    """
    L = _lines(con)
    lo, hi = controllable_sets(con, L)
    h2 = 2.0 * con.ds
    up, ur = L["up"].tolist(), L["ur"].tolist()
    hi_l = hi.tolist()
    n = len(hi_l)
    b = [0.0] * n
    bi = 0.0
    for i in range(n - 1):
        amax = min([p - r * bi for p, r in zip(up[i], ur[i])])
        bi = min(hi_l[i + 1], bi + h2 * amax)
        b[i + 1] = bi
    out = np.maximum(np.array(b), 0.0)
    out[-1] = 0.0
    return out


def speed_bound(con: StageConstraints) -> np.ndarray:
    """The largest ``b`` (N+1,) at which each stage's rows still admit some ``a`` (the maximum
    velocity curve, squared); ``inf`` where the rows do not bound it, ``-inf`` where no ``b`` works."""
    return _lines(con)["b_hi"]
