"""The box-constrained subproblem by a primal–dual interior point (Mehrotra's predictor–corrector).

Each bound ``l <= v`` gets a slack ``t = v - l >= 0`` and a multiplier ``λ >= 0`` (likewise ``u - v``);
the Newton step on the perturbed conditions ``t λ = σ μ`` (``μ`` the mean complementarity) is the
unconstrained LQ problem with the Hessian's diagonal raised by ``Σ = λ_l/t_l + λ_u/t_u`` and the
gradient by ``-σμ/t_l + σμ/t_u + (λ_l/t_l) r_l - (λ_u/t_u) r_u - Σ v`` (``r`` the slacks' residuals,
for a start outside the box): one factorisation of the Riccati recursion
(:class:`~mbctl.ctrl.optimal.riccati.Factors`) and two solves per iteration, the affine step then
the centred one with ``σ = (μ_aff / μ)³`` and the second-order correction; primal and dual steps are
cut apart at 0.995 of the distance to the boundary. Robust from any start, but
:data:`IPM_ITERATIONS` factorisations: :func:`~mbctl.ctrl.optimal.box_qp.solve` calls it only when
its active-set pass does not settle.
"""

from __future__ import annotations

import casadi as ca

from mbctl.ctrl.optimal.riccati import Factors, LqStages, riccati_functions

__all__ = ["IPM_ITERATIONS", "MU_FLOOR", "START_MU", "START_SLACK", "interior_point"]

IPM_ITERATIONS = 16
"""Iterations (each one factorisation and two solves): within 1e-9 of a dense QP solver on saturated double integrators."""
MU_FLOOR = 1e-12
"""The least complementarity aimed at (the cost's units)."""
START_SLACK = 1e-2
"""The slacks' least start, as a fraction of the box's width."""
START_MU = 1.0
"""The start's complementarity ``t λ`` (the cost's units)."""


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


def interior_point(
    stages: LqStages, U: ca.MX, bounds: tuple[ca.MX, ca.MX, ca.MX, ca.MX], W: ca.DM, Wn: ca.DM, R: ca.DM, iterations: int = IPM_ITERATIONS
) -> tuple[ca.MX, ca.MX, list, tuple]:
    """``(δU, δX, K, sets)``: the subproblem's optimum from the inputs ``U`` (nu, N; moved into their box
    first), with ``bounds = (lower_u, upper_u, lower_x, upper_x)`` as in
    :func:`~mbctl.ctrl.optimal.box_qp.solve`; ``K`` the last factorisation's gains, ``sets`` the active
    sets it points at (above, below for the inputs, then the states: 0/1 matrices)."""
    functions = riccati_functions(W, Wn, R, stages.h)
    lower_u, upper_u, lower_x, upper_x = bounds
    width = ca.fmax(upper_u - lower_u, 1e-9)
    U = ca.fmin(ca.fmax(U, lower_u + START_SLACK * width), upper_u - START_SLACK * width)
    X = _rollout(stages, U, functions[2])
    bu, bx = _Box(U, lower_u, upper_u), _Box(X, lower_x, upper_x)
    step = _iteration(stages, bounds, W, Wn, R)
    # one iteration generated once and called ``iterations`` times: a sixteenth of the unrolled code
    rest = [*bounds, *stages.A, *stages.B, *stages.q, *stages.r]
    out = [U, X, bu.tl, bu.tu, bu.ll, bu.lu, bx.tl, bx.tu, bx.ll, bx.lu]
    for _ in range(iterations):
        out = step(*out[:10], *rest)
    # the entries whose multiplier outweighs their slack: the active sets the iterates point at
    sets = (out[5] > out[3], out[4] > out[2], out[9] > out[7], out[8] > out[6])
    return out[0], out[1], out[10:], sets


def _iteration(stages: LqStages, bounds: tuple, W: ca.DM, Wn: ca.DM, R: ca.DM) -> ca.Function:
    """``(U, X, t_l, t_u, λ_l, λ_u of the inputs then of the states, bounds…, stages…) -> (the same
    ten after one iteration, K…)``."""
    functions = riccati_functions(W, Wn, R, stages.h)
    nx, nu, N = W.shape[0], R.shape[0], len(stages.A)
    b_s = [ca.MX.sym(f"b{i}", *e.shape) for i, e in enumerate(bounds)]
    st = LqStages(*[[ca.MX.sym(f"{n}{k}", *e.shape) for k, e in enumerate(getattr(stages, n))] for n in ("A", "B", "q", "r")], h=stages.h)
    U, X = ca.MX.sym("U", nu, N), ca.MX.sym("X", nx, N + 1)
    box = [ca.MX.sym(f"box{i}", *(U.shape if i < 4 else X.shape)) for i in range(8)]
    bu, bx = _Box.__new__(_Box), _Box.__new__(_Box)
    bu.lower, bu.upper, bx.lower, bx.upper = b_s
    bu.tl, bu.tu, bu.ll, bu.lu = box[:4]
    bx.tl, bx.tu, bx.ll, bx.lu = box[4:]
    ins = [U, X, *box, *b_s, *st.A, *st.B, *st.q, *st.r]
    stages = st
    m = 2 * (nu * N + nx * (N + 1))
    mu = (bu.gap() + bx.gap()) / m
    bu.residuals(U)
    bx.residuals(X)
    factors = Factors(stages, bx.sigma, bu.sigma, Wn, functions)

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
    # Mehrotra's centring, kept above a floor: converged iterates stay put instead of dividing by ever smaller slacks
    smu = ca.fmax((gap / m / mu) ** 3 * mu, MU_FLOOR)
    tu_l, tu_u = smu - du[0] * du[2], smu - du[1] * du[3]
    tx_l, tx_u = smu - dx[0] * dx[2], smu - dx[1] * dx[3]
    dU, dX = newton(tu_l, tu_u, tx_l, tx_u)
    du, dx = bu.direction(dU, tu_l, tu_u), bx.direction(dX, tx_l, tx_u)
    (a1, b1), (a2, b2) = _Box.steps(du, bu), _Box.steps(dx, bx)
    a, b = ca.fmin(a1, a2), ca.fmin(b1, b2)
    U, X = U + a * dU, X + a * dX
    bu.move(du, a, b)
    bx.move(dx, a, b)
    outs = [U, X, bu.tl, bu.tu, bu.ll, bu.lu, bx.tl, bx.tu, bx.ll, bx.lu, *factors.K]
    return ca.Function("lq_ipm_iteration", ins, outs)


def _rollout(stages: LqStages, U: ca.MX, forward: ca.Function) -> ca.MX:
    """``δX`` (nx, N+1) of the inputs ``U`` through the stages from ``δx_0 = 0``."""
    nx, nu = stages.q[0].shape[0], U.shape[0]
    dx, xs = ca.MX.zeros(nx), [ca.MX.zeros(nx)]
    for k in range(len(stages.A)):
        _, dx = forward(U[:, k], ca.MX.zeros(nu, nx), stages.A[k], stages.B[k], dx)
        xs.append(dx)
    return ca.horzcat(*xs)
