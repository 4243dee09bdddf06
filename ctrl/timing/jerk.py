"""Jerk-limited timing: a nonlinear program over the discretised path-speed profile.

The joint jerk along a path is ``dddq = q''' sdot^3 + 3 q'' sdot sddot + q' sdddot``. With
``x = sdot`` and the path acceleration ``a = sddot`` taken piecewise linear in ``s`` (values
``a_i`` at the grid points), ``sdddot = x da/ds`` and on interval ``i``
``da/ds = (a_{i+1} - a_i)/ds``, so the jerk at either end of the interval is
``x (q''' x^2 + 3 q'' a + q' da/ds)``: a polynomial in the unknowns, but not convex. The program::

    minimise  sum_i 2 ds / (x_i + x_{i+1})                          (3 ds / x on the end intervals)
    s.t.      x_{i+1}^2 - x_i^2 = ds (a_i + a_{i+1})              (b' = 2 a, trapezoidal)
              velocity, acceleration and torque rows at every grid point (friction linearised
              at the previous profile, as in the SCP of :mod:`mbctl.ctrl.timing.solve`)
              |jerk| <= j at both ends of every interval
              x_0 = x_N = 0,  a_0 = a_N = 0                        (rest, no acceleration step)

A linear ``a(s)`` cannot leave rest (``sddot = k s`` keeps ``s = 0``), so the first and last
intervals are timed as constant ``sdddot`` from and to rest instead: ``s = j t^3 / 6`` gives
``b_1 = 1.5 ds a_1``, the time ``3 ds / x_1`` and ``sdddot = a_1 x_1 / (3 ds)``.

is solved by IPOPT (through CasADi), warm-started from the jerk-free optimum. IPOPT returns a
local optimum; the result is sampled through a C2 ``s(t)`` (quintic Hermite pieces through
``(s_i, x_i, a_i)`` at the grid times, :mod:`mbctl.ctrl.timing.sampling`) and checked at the output
rate like every timing, the jerk included.
"""

from __future__ import annotations

import casadi as ca
import numpy as np

from mbctl.ctrl.timing.reachability import Infeasible, StageConstraints

__all__ = ["jerk_profile"]


def jerk_profile(
    con: StageConstraints,
    dq_ds: np.ndarray,
    ddq_ds: np.ndarray,
    dddq_ds: np.ndarray,
    jerk: np.ndarray,
    b_start: np.ndarray,
    a_start: np.ndarray,
    *,
    max_iterations: int = 1000,
) -> tuple[np.ndarray, np.ndarray]:
    """The jerk-limited profile: squared path speeds ``b`` (N+1,) and path accelerations ``a`` (N+1,)
    at the grid points.

    Args:
        con: The linear rows (acceleration, torque) and the speed bound ``b <= b_max``.
        dq_ds, ddq_ds, dddq_ds: Path derivatives at the grid points (N+1, nv).
        jerk: |dddq| limits at the grid points (N+1, nv), inf where unlimited.
        b_start, a_start: Warm start (N+1,).

    Raises:
        Infeasible: When IPOPT does not find a feasible point.
    """
    n = len(b_start)
    ds = con.ds
    opti = ca.Opti()
    x = opti.variable(n)
    a = opti.variable(n)
    b = x**2
    # first and last interval: constant sdddot from (and to) rest, s = j t^3 / 6, which gives
    # b_1 = 1.5 ds a_1 and the interval time 3 ds / x_1 (a linear a(s) could not leave rest)
    inner = slice(1, n - 2)
    opti.minimize(3 * ds / (x[1] + 1e-9) + 3 * ds / (x[n - 2] + 1e-9) + ca.sum1(2 * ds / (x[1:-2] + x[2:-1] + 1e-9)))
    opti.subject_to(x >= 0)
    opti.subject_to(x <= np.sqrt(np.minimum(con.b_max, 1e12)))
    opti.subject_to([x[0] == 0, x[-1] == 0, a[0] == 0, a[-1] == 0])
    opti.subject_to(b[1] == 1.5 * ds * a[1])
    opti.subject_to(b[n - 2] == -1.5 * ds * a[n - 2])
    opti.subject_to(b[2:-1] - b[1:-2] == ds * (a[1:-2] + a[2:-1]))
    keep = np.isfinite(con.C).all(axis=0)
    for k in np.nonzero(keep)[0]:
        opti.subject_to(ca.DM(con.A[:-1, k]) * a[:-1] + ca.DM(con.B[:-1, k]) * b[:-1] <= ca.DM(con.C[:-1, k]))
    # sdddot at the left and right end of every interval
    slope = (a[1:] - a[:-1]) / ds
    first, last = a[1] * x[1] / (3 * ds), -a[n - 2] * x[n - 2] / (3 * ds)
    sddd_left = ca.vertcat(first, x[inner] * slope[inner], last)
    sddd_right = ca.vertcat(first, x[2:-1] * slope[inner], last)
    for j in np.nonzero(np.isfinite(jerk).any(axis=0))[0]:
        for end, sddd in ((slice(None, -1), sddd_left), (slice(1, None), sddd_right)):
            d1, d2, d3 = (ca.DM(d[end, j]) for d in (dq_ds, ddq_ds, dddq_ds))
            value = d3 * x[end] ** 3 + 3 * d2 * x[end] * a[end] + d1 * sddd
            limit = ca.DM(np.minimum(jerk[end, j], 1e12))
            opti.subject_to(opti.bounded(-limit, value, limit))
    opti.set_initial(x, np.sqrt(np.maximum(b_start, 0.0)))
    opti.set_initial(a, a_start)
    opti.solver("ipopt", {"print_time": False}, {"print_level": 0, "sb": "yes", "max_iter": max_iterations, "tol": 1e-8})
    try:
        sol = opti.solve()
    except RuntimeError as exc:
        raise Infeasible(f"IPOPT found no jerk-limited profile ({opti.stats().get('return_status', exc)})", 0) from None
    xs = np.maximum(np.asarray(sol.value(x)).ravel(), 0.0)
    return xs**2, np.asarray(sol.value(a)).ravel()
