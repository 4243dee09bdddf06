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

from mbctl.ctrl.optimal.box_ipm import IPM_ITERATIONS, interior_point
from mbctl.ctrl.optimal.riccati import Factors, LqStages, riccati_functions

__all__ = ["ACTIVE_SET_PASSES", "BIG", "STIFFNESS", "solve"]

ACTIVE_SET_PASSES = 2
"""Active-set passes after the first before the interior point takes over (each one factorisation)."""
STIFFNESS = 1e8
"""``ρ`` over the entry's own weight: an active bound is met to about ``λ / ρ`` (``λ`` its multiplier)."""
BIG = 1e6
"""Stands for an infinite bound (a joint with no limit): far enough never to be met, finite for the slacks."""


def _sets(v: ca.MX, lower: ca.MX, upper: ca.MX) -> tuple[ca.MX, ca.MX]:
    """The bounds ``v`` passes: ``(v > upper, v < lower)`` as 0/1 matrices."""
    return v > upper, v < lower


class _Penalised:
    """The subproblem with the bounds of the active sets held by a stiff quadratic: ``½ ρ (v - b)²`` on
    each active entry, ``ρ`` = :data:`STIFFNESS` times the entry's own weight."""

    def __init__(self, stages: LqStages, W: ca.DM, Wn: ca.DM, R: ca.DM, bounds: tuple) -> None:  # noqa: ANN001
        self.stages, self.Wn, self.functions = stages, Wn, riccati_functions(W, Wn, R, stages.h)
        N = len(stages.A)
        self.rho_u = STIFFNESS * ca.repmat(ca.diag(R), 1, N)
        self.rho_x = STIFFNESS * ca.repmat(ca.fmax(ca.diag(Wn), ca.diag(W)), 1, N + 1)
        self.lower_u, self.upper_u, self.lower_x, self.upper_x = bounds

    def solve(self, sets: tuple) -> tuple[ca.MX, ca.MX, list]:
        """``(δU, δX, K)`` with the entries of ``sets`` (above, below for the inputs, then the states) at their bounds."""
        hi_u, lo_u, hi_x, lo_x = sets
        su, sx = self.rho_u * (hi_u + lo_u), self.rho_x * (hi_x + lo_x)
        bu = hi_u * self.upper_u + lo_u * self.lower_u
        bx = hi_x * self.upper_x + lo_x * self.lower_x
        factors = Factors(self.stages, sx, su, self.Wn, self.functions)
        N = len(self.stages.A)
        dU, dX = factors.solve([self.stages.q[k] - sx[:, k] * bx[:, k] for k in range(N + 1)], [self.stages.r[k] - su[:, k] * bu[:, k] for k in range(N)])
        return dU, dX, factors.K

    def sets(self, dU: ca.MX, dX: ca.MX) -> tuple:
        """The next active sets: the entries beyond a bound (an active entry stays while its
        multiplier ``ρ (v - b)`` pushes back, i.e. while it is beyond)."""
        return (*_sets(dU, self.lower_u, self.upper_u), *_sets(dX, self.lower_x, self.upper_x))


def _changed(a: tuple, b: tuple) -> ca.MX:
    return ca.mmax(ca.vertcat(*[ca.vec(ca.fabs(x - y)) for x, y in zip(a, b)])) > 0


def solve(
    stages: LqStages,
    W: ca.DM,
    Wn: ca.DM,
    R: ca.DM,
    lower_u: ca.MX,
    upper_u: ca.MX,
    lower_x: ca.MX,
    upper_x: ca.MX,
    passes: int = ACTIVE_SET_PASSES,
    iterations: int = IPM_ITERATIONS,
) -> tuple[ca.MX, ca.MX, list, ca.MX]:
    """The subproblem's solution ``(δU, δX, K, settled)`` (module docstring) as MX expressions.

    ``lower_u``, ``upper_u`` (nu, N) bound ``δU``; ``lower_x``, ``upper_x`` (nx, N+1) bound ``δX`` (column
    0, the current state, is not bounded). ``K`` are the last Riccati solve's feedback gains: an input
    at its bound has its row near zero, as the clamped recursion's. ``settled`` is 1 when an
    active-set pass settled, 0 when the interior point gave the answer.
    """
    nx, N = W.shape[0], len(stages.A)
    lower_x = ca.horzcat(-BIG * ca.MX.ones(nx, 1), lower_x[:, 1:])
    upper_x = ca.horzcat(BIG * ca.MX.ones(nx, 1), upper_x[:, 1:])
    bounds = (lower_u, upper_u, lower_x, upper_x)
    problem = _Penalised(stages, W, Wn, R, bounds)
    # start: the entries the point of linearisation (the shifted plan) holds on or beyond a bound
    start = (upper_u <= 0, lower_u >= 0, upper_x <= 0, lower_x >= 0)
    dU, dX, K = problem.solve(start)
    after = problem.sets(dU, dX)
    state = [dU, dX, *K, *after, 1 - _changed(start, after)]

    # each further pass, and the interior point, a function of its own behind a conditional: the
    # generated code runs them only while the sets have not settled
    syms = [ca.MX.sym(f"v{i}", *e.shape) for i, e in enumerate(state)]
    b_s = [ca.MX.sym(f"b{i}", *e.shape) for i, e in enumerate(bounds)]
    st = LqStages(*[[ca.MX.sym(f"{n}{k}", *e.shape) for k, e in enumerate(getattr(stages, n))] for n in ("A", "B", "q", "r")], h=stages.h)
    ins = [*syms, *b_s, *st.A, *st.B, *st.q, *st.r]
    inner = _Penalised(st, W, Wn, R, tuple(b_s))
    sets = tuple(syms[2 + N : 6 + N])
    U_p, X_p, K_p = inner.solve(sets)
    new = inner.sets(U_p, X_p)
    again = ca.Function("lq_active_set", ins, [U_p, X_p, *K_p, *new, 1 - _changed(sets, new)])
    keep = ca.Function("lq_keep", ins, syms)
    U_i, X_i, K_i, sets_i = interior_point(st, syms[0], tuple(b_s), W, Wn, R, iterations)
    # polish: the active sets the interior point found, held exactly; kept when they settle
    U_q, X_q, K_q = inner.solve(sets_i)
    polished = 1 - _changed(sets_i, inner.sets(U_q, X_q))
    pick = lambda a, b: ca.if_else(polished, a, b)  # noqa: E731
    ipm = ca.Function("lq_interior_point", ins, [pick(U_q, U_i), pick(X_q, X_i), *[pick(a, b) for a, b in zip(K_q, K_i)], *sets, ca.MX(0)])
    rest = [*bounds, *stages.A, *stages.B, *stages.q, *stages.r]
    for f in [again] * passes + [ipm]:
        state = ca.Function.conditional(f"{f.name()}_if", [f], keep)(state[-1], *state, *rest)
    return state[0], state[1], state[2 : 2 + N], state[-1]
