"""The MPC's subproblem solved exactly: a linear–quadratic problem with boxes on the inputs and states.

**Problem** (one real-time iteration's Gauss–Newton step; ``δx_0 = 0``, the current state)::

    min  Σ_{k<N} ½ δu_kᵀ R δu_k + r_kᵀ δu_k + Σ_{1<=k<=N} ½ δx_kᵀ W_k δx_k + q_kᵀ δx_k
    s.t. δx_{k+1} = A_k δx_k + B_k δu_k,   lu_k <= δu_k <= uu_k,   lx_k <= δx_k <= ux_k

with ``W_N`` the terminal weight. The inputs' boxes are the torque limits (N·m, N) and the states'
the joints' position range (rad, m) and speed limits (rad/s, m/s), both as deviations from the
point of linearisation.

**Solver** (:func:`solve`): a primal–dual interior point in the Riccati form. Each bound ``l <= v``
gets a slack ``t = v - l >= 0`` and a multiplier ``λ >= 0`` (likewise ``u - v``); the Newton step on
the perturbed conditions ``t λ = σ μ`` (``μ`` the mean complementarity, ``σ`` = :data:`CENTERING`)
is the unconstrained LQ problem with the Hessian's diagonal raised by ``Σ = λ_l/t_l + λ_u/t_u`` and
the gradient by ``-σμ/t_l + σμ/t_u + (λ_l/t_l) r_l - (λ_u/t_u) r_u - Σ v`` (``r`` the slacks'
residuals, for a start outside the box), solved by one Riccati recursion, ``O(N n³)``; the step is
cut at 0.995 of the distance to the boundary of ``t, λ > 0``. It starts from the unconstrained
optimum (the plain Riccati solve, :data:`Σ` = 0); when that optimum is inside every box it is the
answer and no iteration runs (a short-circuit in the generated code): the problem's constrained
solution otherwise, to about ``1e-6`` of the torques after :data:`IPM_ITERATIONS` iterations (checked
against a dense active-set QP in ``tests/test_mpc_constraints.py``).

Why our own and not CasADi's ``hpipm`` or ``fatrop`` plugins: both ship in the casadi wheel, but
generating C that calls them needs their headers and libraries on the compile line of
:func:`~mbctl.dynamics.codegen.compile_function`, which builds one self-contained library per
function; a fixed number of Riccati iterations generates straight-line C and keeps the update one
call, with the same cache and fallback as every other compiled law.
"""

from __future__ import annotations

import casadi as ca
import numpy as np

__all__ = ["CENTERING", "IPM_ITERATIONS", "BIG", "LqStages", "riccati_functions", "solve"]

IPM_ITERATIONS = 12
"""Interior-point iterations when the unconstrained optimum leaves a box (each one Riccati solve)."""
CENTERING = 0.1
"""``σ``: each iteration aims at a tenth of the current mean complementarity."""
START_SLACK = 1e-2
"""The slacks' least start, as a fraction of the box's width."""
START_MU = 1.0
"""The start's complementarity ``t λ`` (the cost's units)."""
BIG = 1e6
"""Stands for an infinite bound (a joint with no limit): far enough never to be met, finite for the slacks."""


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


class _Factors:
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


def _boundary_step(v: ca.MX, dv: ca.MX) -> ca.MX:
    """The largest ``α <= 1`` with ``v + α dv >= 0.005 v`` (fraction to the boundary, 0.995)."""
    ratio = ca.if_else(dv < 0, -0.995 * v / ca.fmin(dv, -1e-300), 1.0)
    return ca.fmin(1.0, ca.mmin(ratio))


class _Box:
    """The bounds ``l <= v <= u`` of one block of variables (the inputs, or the states), with slacks
    ``t_l = v - l``, ``t_u = u - v`` and multipliers ``λ_l``, ``λ_u`` (interior-point iterates)."""

    def __init__(self, v: ca.MX, lower: ca.MX, upper: ca.MX) -> None:
        width = ca.fmax(upper - lower, 1e-9)
        self.lower, self.upper = lower, upper
        self.tl, self.tu = ca.fmax(v - lower, START_SLACK * width), ca.fmax(upper - v, START_SLACK * width)
        self.ll, self.lu = START_MU / self.tl, START_MU / self.tu

    def gap(self) -> ca.MX:
        return ca.sum1(ca.sum2(self.tl * self.ll + self.tu * self.lu))

    def residuals(self, v: ca.MX) -> None:
        self.rl, self.ru = v - self.lower - self.tl, self.upper - v - self.tu
        self.sigma = self.ll / self.tl + self.lu / self.tu

    def gradient(self, v: ca.MX, target_l: ca.MX, target_u: ca.MX) -> ca.MX:
        """The Newton system's gradient term for the complementarity targets ``t λ = target``."""
        return -target_l / self.tl + target_u / self.tu + self.ll / self.tl * self.rl - self.lu / self.tu * self.ru - self.sigma * v

    def direction(self, dv: ca.MX, target_l: ca.MX, target_u: ca.MX) -> tuple[ca.MX, ca.MX, ca.MX, ca.MX]:
        dtl, dtu = dv + self.rl, -dv + self.ru
        return dtl, dtu, target_l / self.tl - self.ll - self.ll / self.tl * dtl, target_u / self.tu - self.lu - self.lu / self.tu * dtu

    @staticmethod
    def steps(d: tuple, box: _Box) -> tuple[ca.MX, ca.MX]:
        return ca.fmin(_boundary_step(box.tl, d[0]), _boundary_step(box.tu, d[1])), ca.fmin(_boundary_step(box.ll, d[2]), _boundary_step(box.lu, d[3]))

    def move(self, d: tuple, a: ca.MX, b: ca.MX) -> None:
        self.tl, self.tu = self.tl + a * d[0], self.tu + a * d[1]
        self.ll, self.lu = self.ll + b * d[2], self.lu + b * d[3]


def _interior_point(stages: LqStages, U: ca.MX, boxes: tuple[_Box, _Box], W: ca.DM, Wn: ca.DM, R: ca.DM, iterations: int) -> tuple[ca.MX, ca.MX, list]:
    """Mehrotra's predictor–corrector from the inputs ``U`` (inside their box): each iteration one
    factorisation and two solves (the affine step, then the centred and corrected one)."""
    functions = riccati_functions(W, Wn, R)
    nx, nu, N = W.shape[0], R.shape[0], len(stages.A)
    X = _rollout(stages, U, functions[2])
    bu, bx = boxes
    bu.__init__(U, bu.lower, bu.upper)
    bx.__init__(X, bx.lower, bx.upper)
    m = 2 * (nu * N + nx * (N + 1))
    factors = None
    for _ in range(iterations):
        mu = (bu.gap() + bx.gap()) / m
        bu.residuals(U)
        bx.residuals(X)
        factors = _Factors(stages, bx.sigma, bu.sigma, Wn, functions)

        def newton(tlu, tuu, tlx, tux):  # noqa: ANN001, ANN202
            cu, cx = bu.gradient(U, tlu, tuu), bx.gradient(X, tlx, tux)
            U1, X1 = factors.solve([stages.q[k] + cx[:, k] for k in range(N + 1)], [stages.r[k] + cu[:, k] for k in range(N)])
            return U1 - U, X1 - X

        zu, zx = ca.MX.zeros(nu, N), ca.MX.zeros(nx, N + 1)
        dU, dX = newton(zu, zu, zx, zx)
        du, dx = bu.direction(dU, zu, zu), bx.direction(dX, zx, zx)
        (a1, b1), (a2, b2) = _Box.steps(du, bu), _Box.steps(dx, bx)
        a, b = ca.fmin(a1, a2), ca.fmin(b1, b2)
        gap = ca.sum1(ca.sum2((bu.tl + a * du[0]) * (bu.ll + b * du[2]) + (bu.tu + a * du[1]) * (bu.lu + b * du[3])))
        gap += ca.sum1(ca.sum2((bx.tl + a * dx[0]) * (bx.ll + b * dx[2]) + (bx.tu + a * dx[1]) * (bx.lu + b * dx[3])))
        smu = (gap / m / mu) ** 3 * mu
        tu_l, tu_u = smu - du[0] * du[2], smu - du[1] * du[3]
        tx_l, tx_u = smu - dx[0] * dx[2], smu - dx[1] * dx[3]
        dU, dX = newton(tu_l, tu_u, tx_l, tx_u)
        du, dx = bu.direction(dU, tu_l, tu_u), bx.direction(dX, tx_l, tx_u)
        (a1, b1), (a2, b2) = _Box.steps(du, bu), _Box.steps(dx, bx)
        a, b = ca.fmin(a1, a2), ca.fmin(b1, b2)
        U, X = U + a * dU, X + a * dX
        bu.move(du, a, b)
        bx.move(dx, a, b)
    return U, X, factors.K


def _rollout(stages: LqStages, U: ca.MX, forward: ca.Function) -> ca.MX:
    """``δX`` (nx, N+1) of the inputs ``U`` through the stages from ``δx_0 = 0``."""
    nx, nu = stages.A[0].shape[0], U.shape[0]
    dx, xs = ca.MX.zeros(nx), [ca.MX.zeros(nx)]
    for k in range(len(stages.A)):
        _, dx = forward(U[:, k], ca.MX.zeros(nu, nx), stages.A[k], stages.B[k], dx)
        xs.append(dx)
    return ca.horzcat(*xs)



def solve(
    stages: LqStages, W: ca.DM, Wn: ca.DM, R: ca.DM, lower_u: ca.MX, upper_u: ca.MX, lower_x: ca.MX, upper_x: ca.MX, iterations: int = IPM_ITERATIONS
) -> tuple[ca.MX, ca.MX, list]:
    """The subproblem's solution ``(δU, δX, K)`` (module docstring) as MX expressions.

    ``lower_u``, ``upper_u`` (nu, N) bound ``δU``; ``lower_x``, ``upper_x`` (nx, N+1) bound ``δX`` (column
    0, the current state, is not bounded). ``K`` are the last Riccati solve's feedback gains: on an
    input at its bound ``Σ`` is large and its row of ``K`` near zero, as the clamped recursion's.
    """
    functions = riccati_functions(W, Wn, R)
    nx, nu, N = W.shape[0], R.shape[0], len(stages.A)
    free = _Factors(stages, ca.MX.zeros(nx, N + 1), ca.MX.zeros(nu, N), Wn, functions)
    dU, dX = free.solve(stages.q, stages.r)
    # the unconstrained optimum inside every box (the current state's column excepted) is the answer
    margin_u = ca.fmin(ca.mmin(dU - lower_u), ca.mmin(upper_u - dU))
    margin_x = ca.fmin(ca.mmin(dX[:, 1:] - lower_x[:, 1:]), ca.mmin(upper_x[:, 1:] - dX[:, 1:]))
    inside = ca.fmin(margin_u, margin_x) >= 0

    # the iterations as a function of their own, so that the generated code runs them only when needed
    sym = [ca.MX.sym(n, *e.shape) for n, e in (("dU", dU), ("lu", lower_u), ("uu", upper_u), ("lx", lower_x), ("ux", upper_x))]
    A_s = [ca.MX.sym(f"A{k}", nx, nx) for k in range(N)]
    B_s = [ca.MX.sym(f"B{k}", nx, nu) for k in range(N)]
    q_s = [ca.MX.sym(f"q{k}", nx) for k in range(N + 1)]
    r_s = [ca.MX.sym(f"r{k}", nu) for k in range(N)]
    U, lu, uu, lx, ux = sym
    # the current state's column is fixed at zero: its bounds opened wide, no slack ever binds there
    lx = ca.horzcat(-BIG * ca.MX.ones(nx, 1), lx[:, 1:])
    ux = ca.horzcat(BIG * ca.MX.ones(nx, 1), ux[:, 1:])
    width = ca.fmax(uu - lu, 1e-9)
    U0 = ca.fmin(ca.fmax(U, lu + START_SLACK * width), uu - START_SLACK * width)
    boxes = (_Box(U0, lu, uu), _Box(ca.MX.zeros(nx, N + 1), lx, ux))
    U, X, Ks = _interior_point(LqStages(A_s, B_s, q_s, r_s), U0, boxes, W, Wn, R, iterations)
    ipm = ca.Function("lq_ipm", [*sym, *A_s, *B_s, *q_s, *r_s], [U, X, *Ks])
    args = [dU, lower_u, upper_u, lower_x, upper_x, *stages.A, *stages.B, *stages.q, *stages.r]
    chosen = ca.Function.conditional("lq_constrained", [ipm], _passthrough(ipm, N))(ca.if_else(inside, 1, 0), *args)
    U_out = ca.if_else(inside, dU, chosen[0])
    X_out = ca.if_else(inside, dX, chosen[1])
    K_out = [ca.if_else(inside, free.K[k], chosen[2 + k]) for k in range(N)]
    return U_out, X_out, K_out


def _passthrough(ipm: ca.Function, N: int) -> ca.Function:
    """The conditional's default case, not evaluated for its values (zeros of the outputs' shapes)."""
    ins = [ca.MX.sym(ipm.name_in(i), ipm.size1_in(i), ipm.size2_in(i)) for i in range(ipm.n_in())]
    outs = [ca.MX.zeros(ipm.size1_out(i), ipm.size2_out(i)) for i in range(ipm.n_out())]
    return ca.Function("lq_unconstrained", ins, outs)
