"""The box-constrained subproblem by a primal–dual interior point (Mehrotra's predictor–corrector).

Each bound ``l <= v`` gets a slack ``t = v - l >= 0`` and a multiplier ``λ >= 0`` (likewise ``u - v``);
the Newton step on the perturbed conditions ``t λ = σ μ`` (``μ`` the mean complementarity) is the
unconstrained LQ problem with the Hessian's diagonal raised by ``Σ = λ_l/t_l + λ_u/t_u`` and the
gradient by ``-σμ/t_l + σμ/t_u + (λ_l/t_l) r_l - (λ_u/t_u) r_u - Σ v`` (``r`` the slacks' residuals,
for a start outside the box): one factorisation of the Riccati recursion
(:class:`~mbctl.ctrl.optimal.riccati.Factors`) and two solves per iteration, the affine step then
the centred one with ``σ = (μ_aff / μ)³`` and the second-order correction; primal and dual steps are
cut apart at 0.995 of the distance to the boundary.

**Start** from the last active-set pass of :func:`~mbctl.ctrl.optimal.box_qp.solve` (which calls
the interior point only when its passes do not settle): the pass's inputs moved into their box, the
states their rollout; each bound the pass held starts with the push-back it measured as its
multiplier ``λ`` and the slack ``μ₀ / λ``, centred near its boundary, the others at a hundredth of
their box's width with ``λ = μ₀ / t``. ``μ₀`` sets how much of the start is kept: :data:`START_MU`
forgets most of it and takes :data:`IPM_ITERATIONS` to the optimum from far away (the double
integrator's step in ``tests/test_mpc_constraints.py``: 16 to 20); a real-time update, capped at
:data:`REALTIME_ITERATIONS`, starts warm at :data:`WARM_MU`. With the former start of the passes
(two more, every state bound the plan passed held), 12 UR5 subproblems were left to the interior
point: 5 settled within 3 iterations so, none with ``μ₀`` = 1.

**Cap.** A fixed number of iterations (the generated code is straight-line), each one factorisation
and two solves (about 100 µs on the UR5 at 20 knots). The iterate it stops at is the optimum when its
complementarity and residuals are below :data:`CONVERGED_MU` and :data:`CONVERGED_RESIDUAL`; if not,
:func:`~mbctl.ctrl.optimal.box_qp.solve` tries the active sets it points at.
"""

from __future__ import annotations

import casadi as ca

from mbctl.ctrl.optimal.riccati import Factors, LqStages, riccati_functions

__all__ = [
    "CONVERGED_MU", "CONVERGED_RESIDUAL", "IPM_ITERATIONS", "MU_FLOOR", "REALTIME_ITERATIONS", "START_MU", "START_SLACK", "WARM_MU", "interior_point",
]  # fmt: skip

IPM_ITERATIONS = 30
"""Iterations of an exact solve (each one factorisation and two solves)."""
REALTIME_ITERATIONS = 3
"""The cap in the control loop (:class:`~mbctl.ctrl.optimal.controller.MpcController`)."""
MU_FLOOR = 1e-12
"""The least complementarity aimed at (the cost's units)."""
START_SLACK = 1e-2
"""The start's least slack, as a fraction of the box's width (the inputs', and a bound's the pass did not hold)."""
START_MU = 1.0
"""The start's complementarity ``t λ`` (the cost's units) of an exact solve."""
WARM_MU = 1e-4
"""A real-time solve's (3e-4 and 1e-3: 2 and none of those 12 within 3 iterations)."""
CONVERGED_MU = 1e-9
"""The mean complementarity (the cost's units) under which an iterate is the optimum (its inputs then
within about as much of a dense solver's on the double integrator of ``tests/test_mpc_constraints.py``)."""
CONVERGED_RESIDUAL = 1e-9
"""The largest slack residual ``|v - l - t|`` (the variables' units) of an iterate taken as the optimum."""


def _boundary_step(v: ca.MX, dv: ca.MX) -> ca.MX:
    """The largest ``α <= 1`` with ``v + α dv >= 0.005 v`` (fraction to the boundary, 0.995)."""
    ratio = ca.if_else(dv < 0, -0.995 * v / ca.fmin(dv, -1e-300), 1.0)
    return ca.fmin(1.0, ca.mmin(ratio))


class _Box:
    """The bounds ``l <= v <= u`` of one block of variables (the inputs, or the states), with slacks
    ``t_l = v - l``, ``t_u = u - v`` and multipliers ``λ_l``, ``λ_u`` (interior-point iterates)."""

    def __init__(self, v: ca.MX, lower: ca.MX, upper: ca.MX, held_l: ca.MX, held_u: ca.MX, mu0: float) -> None:
        """The start (module docstring) from ``v`` and the multipliers ``held_l``, ``held_u`` of the bounds
        a pass held (0 where it did not), at the complementarity ``mu0``."""
        self.lower, self.upper = lower, upper
        free = START_SLACK * ca.fmax(upper - lower, 1e-9)

        def slack(distance: ca.MX, held: ca.MX) -> ca.MX:
            return ca.fmax(distance, ca.if_else(held > 0, mu0 / ca.fmax(held, 1e-300), free))

        self.tl, self.tu = slack(v - lower, held_l), slack(upper - v, held_u)
        self.ll, self.lu = ca.fmax(held_l, mu0 / self.tl), ca.fmax(held_u, mu0 / self.tu)

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
    stages: LqStages, U: ca.MX, held: tuple[ca.MX, ca.MX, ca.MX, ca.MX], bounds: tuple[ca.MX, ca.MX, ca.MX, ca.MX], W: ca.DM, Wn: ca.DM, R: ca.DM,
    iterations: int = IPM_ITERATIONS, mu0: float = START_MU,
) -> tuple[ca.MX, ca.MX, list, tuple, ca.MX]:
    """``(δU, δX, K, sets, converged)`` after ``iterations`` from the inputs ``U`` (nu, N; moved into their
    box first) and the multipliers ``held`` of the bounds a pass held (above, below for the inputs, then
    the states; 0 where not held) at the complementarity ``mu0`` (module docstring), with ``bounds =
    (lower_u, upper_u, lower_x, upper_x)`` as in
    :func:`~mbctl.ctrl.optimal.box_qp.solve`; ``K`` the last factorisation's gains, ``sets`` the active
    sets the iterate points at (in the order of ``held``: 0/1 matrices), ``converged`` 1 when the iterate is
    the optimum (:data:`CONVERGED_MU`, :data:`CONVERGED_RESIDUAL`)."""
    functions = riccati_functions(W, Wn, R, stages.h)
    lower_u, upper_u, lower_x, upper_x = bounds
    width = ca.fmax(upper_u - lower_u, 1e-9)
    U = ca.fmin(ca.fmax(U, lower_u + START_SLACK * width), upper_u - START_SLACK * width)
    X = _rollout(stages, U, functions[2])
    bu, bx = _Box(U, lower_u, upper_u, held[1], held[0], mu0), _Box(X, lower_x, upper_x, held[3], held[2], mu0)
    step = _iteration(stages, bounds, W, Wn, R)
    # one iteration generated once and called ``iterations`` times: the code does not grow with them
    rest = [*bounds, *stages.A, *stages.B, *stages.q, *stages.r]
    out = [U, X, bu.tl, bu.tu, bu.ll, bu.lu, bx.tl, bx.tu, bx.ll, bx.lu]
    for _ in range(iterations):
        out = step(*out[:10], *rest)
    # the entries whose multiplier outweighs their slack: the active sets the iterates point at
    sets = (out[5] > out[3], out[4] > out[2], out[9] > out[7], out[8] > out[6])
    bu.tl, bu.tu, bu.ll, bu.lu, bx.tl, bx.tu, bx.ll, bx.lu = out[2:10]
    bu.residuals(out[0])
    bx.residuals(out[1])
    m = 2 * (U.numel() + X.numel())
    residual = ca.mmax(ca.fabs(ca.vertcat(ca.vec(bu.rl), ca.vec(bu.ru), ca.vec(bx.rl), ca.vec(bx.ru))))
    converged = ca.logic_and((bu.gap() + bx.gap()) / m <= CONVERGED_MU, residual <= CONVERGED_RESIDUAL)
    return out[0], out[1], out[10:], sets, converged


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
