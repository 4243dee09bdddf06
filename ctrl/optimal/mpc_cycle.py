"""What the MPC does each cycle besides its update, inside the generated code or on preallocated buffers.

:func:`cycle_function` wraps the update (:func:`~mbctl.ctrl.optimal.mpc.update_function`) with the
plan's shift and the applied torque, so that one generated call does a cycle's arithmetic;
:class:`ReferenceRows` samples the reference's table at the knots into a buffer that call reads.
Together they leave a few numpy operations of Python per cycle (the MPC call's overhead over its
update: ``benchmarks/mpc.py``).
"""

from __future__ import annotations

import casadi as ca
import numpy as np

__all__ = ["ReferenceRows", "cycle_function", "shift_weights"]


def shift_weights(s: ca.MX, rows: int, cols: int, last: float) -> ca.MX:
    """``S`` (rows, cols), ``S[i, j] = max(0, 1 - |min(j + s, last) - i|)``: a plan's columns ``P`` (…, rows)
    shifted by ``s`` knots (s >= 0) and linearly interpolated between them are ``P @ S``, the last held."""
    i = ca.DM(np.arange(rows, dtype=float)) @ ca.DM.ones(1, cols)
    j = ca.DM.ones(rows, 1) @ ca.DM(np.arange(cols, dtype=float)).T
    return ca.fmax(0, 1 - ca.fabs(ca.fmin(j + s, last) - i))


def cycle_function(update: ca.Function, effort: np.ndarray) -> ca.Function:
    """One cycle around ``update``::

        (x0, s, U_plan, X_plan, rows) -> (U, X, tau, cost, path, u_plan, x_plan, check)

    ``s`` the time since the plan was made, in knots (>= 0); ``U_plan`` (nv, N), ``X_plan`` (2nv, N+1) that
    plan; ``rows`` (N+1, 4nv) the reference at the new knots ``t + k h``: positions, velocities, the
    model's inputs and the feed-forward. The plan's inputs shifted by ``s`` start the update; ``tau =
    clip(tau_ff(t) + u0 - u_ref,0, ±effort)`` (:class:`~mbctl.ctrl.optimal.controller.MpcController`);
    ``u_plan``, ``x_plan`` are the old plan's input and state at ``t`` (the fallback's); ``check`` the sum of
    every planned input and state and the cost, non-finite when any of them is.
    """
    nu, N = update.size1_in(1), update.size2_in(1)
    nx = update.size1_in(0)
    x0, s = ca.MX.sym("x0", nx), ca.MX.sym("s")
    U_plan, X_plan = ca.MX.sym("U_plan", nu, N), ca.MX.sym("X_plan", nx, N + 1)
    rows = ca.MX.sym("rows", N + 1, 2 * nx)
    guess = U_plan @ shift_weights(s, N, N, N - 1)
    x_plan = X_plan @ shift_weights(s, N + 1, 1, N)
    out = update(x0, guess, rows[:, :nx].T, rows[:N, nx : nx + nu].T)
    big = ca.DM(np.where(np.isfinite(effort), effort, 1e30))
    tau = ca.fmin(ca.fmax(rows[0, nx + nu :].T + out[2] - rows[0, nx : nx + nu].T, -big), big)
    path = out[4] if len(out) > 4 else ca.MX(0)  # the subproblem's path (mbctl.ctrl.optimal.box_qp.PATHS)
    check = ca.sum1(ca.sum2(out[0])) + ca.sum1(ca.sum2(out[1])) + out[3]
    return ca.Function(
        "mpc_cycle", [x0, s, U_plan, X_plan, rows], [out[0], out[1], tau, out[3], path, guess[:, 0], x_plan, check],
        ["x0", "s", "U_plan", "X_plan", "rows"], ["U", "X", "tau", "cost", "path", "u_plan", "x_plan", "check"],
    )  # fmt: skip


class ReferenceRows:
    """A table's rows (n, m) at sample times ``t`` (s) linearly interpolated at ``t0 + k h`` (k = 0..N) into
    :attr:`out` (N+1, m), held beyond the ends (the trajectory starts and ends at rest).

    Nearest samples would not do: a knot a sample off moves the reference by ``dq`` x 1 ms between
    two knots the model's inputs take to be ``h`` apart. On a uniform table whose period divides ``h``
    every knot has the same weight: two strided views and three numpy operations, no allocation.
    """

    def __init__(self, t: np.ndarray, table: np.ndarray, h: float, knots: int, out: np.ndarray | None = None):
        self.t, self.table, self.h = np.asarray(t, dtype=float), np.asarray(table, dtype=float), h
        self.out = np.zeros((knots + 1, table.shape[1])) if out is None else out
        self._offsets = np.arange(knots + 1) * h
        dt = np.diff(self.t)
        period = float(dt.mean()) if len(dt) else 0.0
        stride = h / period if period > 0 else 0.0
        self.uniform = period > 0 and np.allclose(dt, period, rtol=1e-9, atol=0) and abs(stride - round(stride)) < 1e-9
        if self.uniform:
            self._period, self._stride, self._n = period, int(round(stride)), len(self.t)
            pad = knots * self._stride + 2  # rows past the end repeat the last: the hold
            self._padded = np.vstack([self.table, np.repeat(self.table[-1:], pad, axis=0)])
            self._tmp = np.zeros_like(self.out)

    def at(self, t0: float) -> np.ndarray:
        """The rows at ``t0 + k h``, written into :attr:`out` (returned)."""
        if not self.uniform:
            times = t0 + self._offsets
            k = np.clip(np.searchsorted(self.t, times, side="right") - 1, 0, len(self.t) - 2)
            w = np.clip((times - self.t[k]) / (self.t[k + 1] - self.t[k]), 0.0, 1.0)[:, None]
            self.out[...] = (1 - w) * self.table[k] + w * self.table[k + 1]
            return self.out
        i = (t0 - self.t[0]) / self._period
        if i <= 0.0:
            lo, w = 0, 0.0
        elif i >= self._n - 1:
            lo, w = self._n - 1, 0.0
        else:
            lo = int(i)
            w = i - lo
        end = lo + len(self.out) * self._stride
        np.multiply(self._padded[lo : end : self._stride], 1.0 - w, out=self.out)
        np.multiply(self._padded[lo + 1 : end + 1 : self._stride], w, out=self._tmp)
        np.add(self.out, self._tmp, out=self.out)
        return self.out
