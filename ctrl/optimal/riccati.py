"""The Riccati recursion of a linear–quadratic problem over stages, as CasADi functions generated to C.

Stage ``k`` of ``N``: ``δx_{k+1} = A_k δx_k + B_k δu_k``, cost ``½ δu_kᵀ (R + diag s_u) δu_k + r_kᵀ δu_k +
½ δx_kᵀ (W + diag s_x) δx_k + q_kᵀ δx_k`` (``W_N`` on the last knot), ``δx_0 = 0``. The raised diagonals
``s_x``, ``s_u`` are how the box solvers (:mod:`~mbctl.ctrl.optimal.box_qp`,
:mod:`~mbctl.ctrl.optimal.box_ipm`) hold bounds: a factorisation per set of them (:class:`Factors`),
then any number of cheap solves for new gradients.
"""

from __future__ import annotations

import casadi as ca

__all__ = ["Factors", "LqStages", "riccati_functions"]


class LqStages:
    """The stage data of one subproblem (CasADi MX, column lists over the stages).

    Attributes:
        A, B: Per stage k < N, the step's Jacobians (nx, nx), (nx, nu).
        q: Per knot k = 0..N, the state cost's gradient (nx,) (knot 0's unused).
        r: Per stage k < N, the input cost's gradient (nu,).
    """

    def __init__(self, A: list, B: list, q: list, r: list):
        self.A, self.B, self.q, self.r = A, B, q, r


def riccati_functions(W: ca.DM, Wn: ca.DM, R: ca.DM) -> tuple[ca.Function, ca.Function, ca.Function]:
    """The recursion's stage functions, SX (straight-line C):

    - ``factor(A, B, s_x, s_u, P) -> (K, Q_uu⁻¹, Q_ux, P')``: with ``Q_uu = R + diag(s_u) + BᵀPB``,
      ``Q_ux = BᵀPA``, ``Q_xx = W + diag(s_x) + AᵀPA``: ``K = -Q_uu⁻¹ Q_ux``, ``P' = Q_xx + Q_uxᵀ K``;
    - ``solve(A, B, q, r, Q_uu⁻¹, Q_ux, p) -> (k, p')``: ``k = -Q_uu⁻¹ (r + Bᵀp)``, ``p' = q + Aᵀp + Q_uxᵀ k``
      (a second right-hand side costs no second factorisation);
    - ``forward(k, K, A, B, δx) -> (δu, δx')``, ``δu = k + K δx``.

    The terminal value is ``P_N = W_N + diag(s_x)``, ``p_N = q_N``.
    """
    nx, nu = W.shape[0], R.shape[0]
    A, B = ca.SX.sym("A", nx, nx), ca.SX.sym("B", nx, nu)
    q, r, sx, su = ca.SX.sym("q", nx), ca.SX.sym("r", nu), ca.SX.sym("s_x", nx), ca.SX.sym("s_u", nu)
    P, p = ca.SX.sym("P", nx, nx), ca.SX.sym("p", nx)
    PA = P @ A
    Quu = R + ca.diag(su) + B.T @ P @ B
    Qux = B.T @ PA
    sol = ca.solve(Quu, ca.horzcat(Qux, ca.SX.eye(nu)))  # one factorisation for the gains and the inverse
    K, inverse = -sol[:, :nx], sol[:, nx:]
    P_new = W + ca.diag(sx) + A.T @ PA + Qux.T @ K
    factor = ca.Function("lq_factor", [A, B, sx, su, P], [K, 0.5 * (inverse + inverse.T), Qux, 0.5 * (P_new + P_new.T)])
    Qi, Qx = ca.SX.sym("Q_uu_inv", nu, nu), ca.SX.sym("Q_ux", nu, nx)
    k = -Qi @ (r + B.T @ p)
    solve = ca.Function("lq_solve", [A, B, q, r, Qi, Qx, p], [k, q + A.T @ p + Qx.T @ k])
    kk, KK, dx = ca.SX.sym("k", nu), ca.SX.sym("K", nu, nx), ca.SX.sym("dx", nx)
    du = kk + KK @ dx
    forward = ca.Function("lq_forward", [kk, KK, A, B, dx], [du, A @ dx + B @ du])
    return factor, solve, forward


class Factors:
    """One factorisation of the recursion (the diagonal raised by ``s_x``, ``s_u``), solved for any gradient."""

    def __init__(self, stages: LqStages, sx: ca.MX, su: ca.MX, Wn: ca.DM, functions: tuple) -> None:  # noqa: ANN001
        factor, self._solve, self._forward = functions
        self.stages, self.N, self.nx = stages, len(stages.A), Wn.shape[0]
        self.K, self.inverse, self.Qux = [None] * self.N, [None] * self.N, [None] * self.N
        P = Wn + ca.diag(sx[:, self.N])
        for k in range(self.N - 1, -1, -1):
            self.K[k], self.inverse[k], self.Qux[k], P = factor(stages.A[k], stages.B[k], sx[:, k], su[:, k], P)

    def solve(self, q: list, r: list) -> tuple[ca.MX, ca.MX]:
        """``(δU, δX)`` for the gradients ``q`` (N+1 knots) and ``r`` (N stages), ``δx_0 = 0``."""
        st, p, ks = self.stages, q[self.N], [None] * self.N
        for k in range(self.N - 1, -1, -1):
            ks[k], p = self._solve(st.A[k], st.B[k], q[k], r[k], self.inverse[k], self.Qux[k], p)
        dx, dus, dxs = ca.MX.zeros(self.nx), [], [ca.MX.zeros(self.nx)]
        for k in range(self.N):
            du, dx = self._forward(ks[k], self.K[k], st.A[k], st.B[k], dx)
            dus.append(du)
            dxs.append(dx)
        return ca.horzcat(*dus), ca.horzcat(*dxs)
