"""What the MPC does each cycle besides its update, inside the generated code or on preallocated buffers.

:func:`cycle_function` wraps the update (:func:`~mbctl.ctrl.optimal.mpc.update_function`) with the
plan's shift, the reference's interpolation at the knots and the applied torque, so that one
generated call does a cycle's arithmetic; :class:`KnotRows` lays the reference's table out so that
the call reads the knots' rows where they are. Python keeps a few assignments per cycle (the MPC
call's overhead over its update: ``benchmarks/mpc.py``).
"""

from __future__ import annotations

import casadi as ca
import numpy as np

__all__ = ["KnotRows", "cycle_function", "shift_weights"]


def shift_weights(s: ca.MX, rows: int, cols: int, last: float) -> ca.MX:
    """``S`` (rows, cols), ``S[i, j] = max(0, 1 - |min(j + s, last) - i|)``: a plan's columns ``P`` (…, rows)
    shifted by ``s`` knots (s >= 0) and linearly interpolated between them are ``P @ S``, the last held."""
    i = ca.DM(np.arange(rows, dtype=float)) @ ca.DM.ones(1, cols)
    j = ca.DM.ones(rows, 1) @ ca.DM(np.arange(cols, dtype=float)).T
    return ca.fmax(0, 1 - ca.fabs(ca.fmin(j + s, last) - i))


def cycle_function(update: ca.Function, effort: np.ndarray) -> ca.Function:
    """One cycle around ``update``::

        (x0, s, U_plan, X_plan, below, above, w) -> (U, X, tau, cost, path, u_plan, x_plan, check, at_limit)

    ``s`` the time since the plan was made, in knots (>= 0); ``U_plan`` (nv, N), ``X_plan`` (2nv, N+1) that
    plan; the reference at the new knots ``t + k h`` is ``(1 - w) below + w above``, two blocks (4nv, N+1)
    of a table's rows (:class:`KnotRows`), each column a knot: positions, velocities, the model's inputs
    and the feed-forward. The plan's inputs shifted by ``s`` start the update; ``tau = clip(tau_ff(t) + u0 -
    u_ref,0, ±effort)`` (:class:`~mbctl.ctrl.optimal.controller.MpcController`); ``u_plan``, ``x_plan`` are
    the old plan's input and state at ``t`` (the fallback's); ``check`` the sum of every planned input and
    state and the cost, non-finite when any of them is; ``at_limit`` 1 when a joint's ``tau`` is on its
    limit.
    """
    nu, N = update.size1_in(1), update.size2_in(1)
    nx = update.size1_in(0)
    x0, s, w = ca.MX.sym("x0", nx), ca.MX.sym("s"), ca.MX.sym("w")
    U_plan, X_plan = ca.MX.sym("U_plan", nu, N), ca.MX.sym("X_plan", nx, N + 1)
    below, above = ca.MX.sym("below", 2 * nx, N + 1), ca.MX.sym("above", 2 * nx, N + 1)
    rows = (1 - w) * below + w * above
    guess = U_plan @ shift_weights(s, N, N, N - 1)
    x_plan = X_plan @ shift_weights(s, N + 1, 1, N)
    out = update(x0, guess, rows[:nx, :], rows[nx : nx + nu, :N])
    big = ca.DM(np.where(np.isfinite(effort), effort, 1e30))
    tau = ca.fmin(ca.fmax(rows[nx + nu :, 0] + out[2] - rows[nx : nx + nu, 0], -big), big)
    path = out[4] if len(out) > 4 else ca.MX(0)  # the subproblem's path (mbctl.ctrl.optimal.box_qp.PATHS)
    check = ca.sum1(ca.sum2(out[0])) + ca.sum1(ca.sum2(out[1])) + out[3]
    at_limit = ca.mmax(ca.fabs(tau) - big * (1 - 1e-9)) >= 0
    return ca.Function(
        "mpc_cycle", [x0, s, U_plan, X_plan, below, above, w], [out[0], out[1], tau, out[3], path, guess[:, 0], x_plan, check, at_limit],
        ["x0", "s", "U_plan", "X_plan", "below", "above", "w"], ["U", "X", "tau", "cost", "path", "u_plan", "x_plan", "check", "at_limit"],
    )  # fmt: skip


class KnotRows:
    """A table's rows (n, m) at sample times ``t`` (s), linearly interpolated at ``t0 + k h`` (k = 0..N)
    and held beyond the ends (the trajectory starts and ends at rest), as two blocks of rows and a weight
    for :func:`cycle_function`.

    Nearest samples would not do: a knot a sample off moves the reference by ``dq`` x 1 ms between
    two knots the model's inputs take to be ``h`` apart. On a uniform table whose period divides ``h``
    (``h`` = ``stride`` periods) the rows of the knots from sample ``i`` are every ``stride``-th row from
    ``i``: the table is stored as ``stride`` interleaved copies, so that those rows are contiguous in
    one of them, and :meth:`locate` gives the address of the knots' rows from the samples below and
    above ``t0`` and the weight between them: no arithmetic on the rows in Python, no copy. Other
    tables are interpolated into one block (both addresses the same, weight 0).

    Attributes:
        address: Per sample ``i``, the address of the (m, N+1) block (column-major: each knot's row
            contiguous) of the knots from ``i``; a compiled call reads there
            (:meth:`~mbctl.dynamics.codegen.CompiledFunction.point_input`).
    """

    def __init__(self, t: np.ndarray, table: np.ndarray, h: float, knots: int):
        self.t, self.table, self.knots = np.asarray(t, dtype=float), np.asarray(table, dtype=float), knots
        n, m = self.table.shape
        dt = np.diff(self.t)
        period = float(dt.mean()) if len(dt) else 0.0
        stride = h / period if period > 0 else 0.0
        self.uniform = period > 0 and np.allclose(dt, period, rtol=1e-9, atol=0) and abs(stride - round(stride)) < 1e-9
        if self.uniform:
            self._t0, self._rate, self._last = float(self.t[0]), 1.0 / period, n - 1
            stride = int(round(stride))
            per = -(-(n + 1) // stride) + knots  # rows per copy: every sample's knots, the last held
            rows = np.minimum(np.arange(stride)[:, None] + stride * np.arange(per)[None, :], n - 1)
            self._copies = np.ascontiguousarray(self.table[rows])  # (stride, per, m)
            base, row = self._copies.ctypes.data, 8 * m
            self.address = [base + row * ((i % stride) * per + i // stride) for i in range(n + 1)]
        else:
            self._offsets = np.arange(knots + 1) * h
            self._block = np.zeros((knots + 1, m))
            self.address = [self._block.ctypes.data] * 2

    def locate(self, t0: float) -> tuple[int, float]:
        """``(i, w)``: the knots' rows at ``t0`` are ``(1 - w)`` those from sample ``i`` plus ``w`` those from ``i + 1``."""
        if not self.uniform:
            times = t0 + self._offsets
            k = np.clip(np.searchsorted(self.t, times, side="right") - 1, 0, len(self.t) - 2)
            w = np.clip((times - self.t[k]) / (self.t[k + 1] - self.t[k]), 0.0, 1.0)[:, None]
            self._block[...] = (1 - w) * self.table[k] + w * self.table[k + 1]
            return 0, 0.0
        i = (t0 - self._t0) * self._rate
        if i <= 0.0:
            return 0, 0.0
        if i >= self._last:
            return self._last, 0.0
        lo = int(i)
        return lo, i - lo

    def block(self, i: int) -> np.ndarray:
        """The (m, N+1) block at :attr:`address` ``[i]``, a view (for a call that reads its input buffers)."""
        if not self.uniform:
            return self._block.T
        stride, per = self._copies.shape[:2]
        j = i // stride
        return self._copies[i % stride, j : j + self.knots + 1].T
