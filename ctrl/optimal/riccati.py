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
        A, B: Per stage k < N, the step's Jacobians (nx, nx), (nx, nu); with ``h`` set, the
            second-order step's ``D`` (nv, nx) and ``M⁻¹`` (nv, nv) instead (:class:`_SecondOrder`).
        q: Per knot k = 0..N, the state cost's gradient (nx,) (knot 0's unused).
        r: Per stage k < N, the input cost's gradient (nu,).
        h: None, or the step (s) of a second-order step.
    """

    def __init__(self, A: list, B: list, q: list, r: list, h: float | None = None):
        self.A, self.B, self.q, self.r, self.h = A, B, q, r, h


class _Dense:
    """Stage data ``(A, B)`` as they are: ``A`` (nx, nx), ``B`` (nx, nu)."""

    def __init__(self, nx: int, nu: int) -> None:
        self.A, self.B = ca.SX.sym("A", nx, nx), ca.SX.sym("B", nx, nu)
        self.data = [self.A, self.B]

    def products(self, P: ca.SX) -> tuple[ca.SX, ca.SX, ca.SX]:
        """``(BᵀPB, BᵀPA, AᵀPA)``."""
        PA = P @ self.A
        return self.B.T @ P @ self.B, self.B.T @ PA, self.A.T @ PA

    def transposed(self, p: ca.SX) -> tuple[ca.SX, ca.SX]:
        return self.A.T @ p, self.B.T @ p

    def step(self, dx: ca.SX, du: ca.SX) -> ca.SX:
        return self.A @ dx + self.B @ du


class _SecondOrder:
    """Stage data ``(D, M⁻¹)`` of a step that holds the acceleration ``ddq`` over ``h`` (s):
    ``A = E + G D``, ``B = G M⁻¹`` with ``E = [[I, h I], [0, I]]``, ``G = [h²/2 I; h I]``, ``D = ∂ddq/∂x``
    (nv, nx) and ``M⁻¹ = ∂ddq/∂u`` (nv, nv). ``AᵀPA = EᵀPE + (GᵀPE)ᵀD + Dᵀ(GᵀPE + GᵀPG D)``: products
    with ``E`` and ``G`` are sums of blocks."""

    def __init__(self, nx: int, h: float) -> None:
        self.nv, self.h = nx // 2, h
        self.D, self.Mi = ca.SX.sym("D", self.nv, nx), ca.SX.sym("Mi", self.nv, self.nv)
        self.data = [self.D, self.Mi]

    def _g(self, Y: ca.SX) -> ca.SX:
        """``Gᵀ Y`` for ``Y`` with nx rows."""
        n = self.nv
        return 0.5 * self.h**2 * Y[:n, :] + self.h * Y[n:, :]

    def products(self, P: ca.SX) -> tuple[ca.SX, ca.SX, ca.SX]:
        n, h = self.nv, self.h
        PE = ca.horzcat(P[:, :n], P[:, n:] + h * P[:, :n])
        EPE = ca.vertcat(PE[:n, :], PE[n:, :] + h * PE[:n, :])
        GPE = self._g(PE)
        GPG = self._g(0.5 * h**2 * P[:, :n] + h * P[:, n:])
        T = GPG @ self.D
        # DᵀGᵀPE + (DᵀGᵀPE)ᵀ + DᵀGᵀPG D = DᵀZ + (DᵀZ)ᵀ with Z = GᵀPE + ½ GᵀPG D: one product of that size, not two
        DZ = self.D.T @ (GPE + 0.5 * T)
        return self.Mi.T @ GPG @ self.Mi, self.Mi.T @ (GPE + T), EPE + DZ + DZ.T

    def transposed(self, p: ca.SX) -> tuple[ca.SX, ca.SX]:
        n, gp = self.nv, self._g(p)
        return ca.vertcat(p[:n], p[n:] + self.h * p[:n]) + self.D.T @ gp, self.Mi.T @ gp

    def step(self, dx: ca.SX, du: ca.SX) -> ca.SX:
        n, h = self.nv, self.h
        z = self.D @ dx + self.Mi @ du
        return ca.vertcat(dx[:n] + h * dx[n:] + 0.5 * h**2 * z, dx[n:] + h * z)


def riccati_functions(W: ca.DM, Wn: ca.DM, R: ca.DM, h: float | None = None) -> tuple[ca.Function, ca.Function, ca.Function]:
    """The recursion's stage functions, SX (straight-line C), on stage data ``(A, B)``, or with ``h`` (s)
    the second-order step's ``(D, M⁻¹)`` (:class:`_SecondOrder`):

    - ``factor(A, B, s_x, s_u, P) -> (K, Q_uu⁻¹, Q_ux, P')``: with ``Q_uu = R + diag(s_u) + BᵀPB``,
      ``Q_ux = BᵀPA``, ``Q_xx = W + diag(s_x) + AᵀPA``: ``K = -Q_uu⁻¹ Q_ux``, ``P' = Q_xx + Q_uxᵀ K``;
    - ``solve(A, B, q, r, Q_uu⁻¹, Q_ux, p) -> (k, p')``: ``k = -Q_uu⁻¹ (r + Bᵀp)``, ``p' = q + Aᵀp + Q_uxᵀ k``
      (a second right-hand side costs no second factorisation);
    - ``forward(k, K, A, B, δx) -> (δu, δx')``, ``δu = k + K δx``.

    The terminal value is ``P_N = W_N + diag(s_x)``, ``p_N = q_N``.
    """
    nx, nu = W.shape[0], R.shape[0]
    stage = _Dense(nx, nu) if h is None else _SecondOrder(nx, h)
    q, r, sx, su = ca.SX.sym("q", nx), ca.SX.sym("r", nu), ca.SX.sym("s_x", nx), ca.SX.sym("s_u", nu)
    P, p = ca.SX.sym("P", nx, nx), ca.SX.sym("p", nx)
    BPB, Qux, APA = stage.products(P)
    # Cholesky Q_uu = LLᵀ: Q_uu⁻¹ = L⁻ᵀL⁻¹, K = -L⁻ᵀY and Q_uxᵀK = -YᵀY with Y = L⁻¹Q_ux
    Quu = R + ca.diag(su) + BPB
    Li = ca.solve(ca.chol(0.5 * (Quu + Quu.T)).T, ca.SX.eye(nu))
    Y = Li @ Qux
    K, inverse = -Li.T @ Y, Li.T @ Li
    P_new = W + ca.diag(sx) + APA - Y.T @ Y
    factor = ca.Function("lq_factor", [*stage.data, sx, su, P], [K, 0.5 * (inverse + inverse.T), Qux, 0.5 * (P_new + P_new.T)])
    Qi, Qx = ca.SX.sym("Q_uu_inv", nu, nu), ca.SX.sym("Q_ux", nu, nx)
    Atp, Btp = stage.transposed(p)
    k = -Qi @ (r + Btp)
    solve = ca.Function("lq_solve", [*stage.data, q, r, Qi, Qx, p], [k, q + Atp + Qx.T @ k])
    kk, KK, dx = ca.SX.sym("k", nu), ca.SX.sym("K", nu, nx), ca.SX.sym("dx", nx)
    du = kk + KK @ dx
    forward = ca.Function("lq_forward", [kk, KK, *stage.data, dx], [du, stage.step(dx, du)])
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
