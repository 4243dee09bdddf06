"""The MPC's subproblem solved exactly: a linear–quadratic problem with boxes on the inputs and states.

**Problem** (one real-time iteration's Gauss–Newton step; ``δx_0 = 0``, the current state)::

    min  Σ_{k<N} ½ δu_kᵀ R δu_k + r_kᵀ δu_k + Σ_{1<=k<=N} ½ δx_kᵀ W_k δx_k + q_kᵀ δx_k
    s.t. δx_{k+1} = A_k δx_k + B_k δu_k,   lu_k <= δu_k <= uu_k,   lx_k <= δx_k <= ux_k

with ``W_N`` the terminal weight. The inputs' boxes are the torque limits (N·m, N) and the states'
the joints' position range (rad, m) and speed limits (rad/s, m/s), both as deviations from the
point of linearisation.

**Solver** (:func:`solve`), three paths, each stage behind a conditional of the generated code:

1. *Active set* (:data:`PATH_ACTIVE_SET`): Riccati solves (:mod:`~mbctl.ctrl.optimal.riccati`) with the
   bounds of a guessed active set held by a stiff quadratic ``½ ρ (v - b)²``, first the input bounds
   the point of linearisation (the shifted plan) sits on and the state bounds it passes by more than
   :data:`START_BEYOND` of their box; the next guess is the entries beyond a bound (a held one stays
   while it pushes back). When a guess reproduces itself it is the optimum (to ``λ / ρ``): the usual
   case, a plan saturated last cycle is saturated at the same knots this one. Up to ``passes`` more.
2. *Interior point* (:data:`PATH_INTERIOR_POINT`): when they do not settle, Mehrotra's
   predictor–corrector (:func:`~mbctl.ctrl.optimal.box_ipm.interior_point`) started from the last pass,
   for ``iterations``; its iterate when it has converged, else the active sets it points at held
   exactly when they settle.
3. *Clamped* (:data:`PATH_CLAMPED`): neither, within the cap: the unconstrained optimum (the plain
   Riccati solve), whose inputs the update's forward pass clamps to the torque limits, the update
   before the exact constraints.

Of 76 hard subproblems along the UR5's saturating references (72 the former solver left to its
interior point, from noisy states and from the plan a run starts with) four passes settle 70; the other 6 are
each a run's first call, from a plan that holds the first sample's feed-forward, where the
controller's interior point (3 warm iterations) settles none (6 would settle 3) and the clamped
plan's first input is within 0.29 N·m of the optimum's. Holding every state bound the shifted plan
passed, as the former start did, left 11 of the 76 to more than four passes: a plan that rode a
speed bound is moved a little past it by the new measurement, and held there the neighbouring
bounds did not settle; far past it (a state the torque cannot bring back in time) the bound is held
from the start, and the plan brakes.

Where the unconstrained optimum is inside every box the first pass is that solve, and the update is
the clamped one's to round-off. The worst case is fixed: ``1 + passes`` factorisations, then
``iterations`` of the interior point and 2 more (UR5, 20 knots: 50 µs each, an interior-point
iteration 100 µs).

**Stiffness.** ``ρ`` is :data:`STIFFNESS` times an entry's own weight, for a state at most
:data:`STATE_STIFFNESS`: a held state enters the recursion's cost-to-go ``P`` and cancels in ``P' =
Q_xx - Q_uxᵀ Q_uu⁻¹ Q_ux``, where a held input only raises ``Q_uu``'s diagonal. Uncapped (1e12 on
the UR5's positions, 3e10 on its speeds) the passes' guesses were round-off: each of 72 subproblems
along its saturating references that exact passes settle in 1 to 7 went to the interior point, 2.3
ms; capped at 1e8 every one settles as the exact passes do, to 0.012 N·m of them (1e7: 3e-4 N·m,
1e9: 0.75), the bounds met to 4e-7.

Why our own and not CasADi's ``hpipm`` or ``fatrop`` plugins: both ship in the casadi wheel, but
generating C that calls them needs their headers and libraries on the compile line of
:func:`~mbctl.dynamics.codegen.compile_function`, which builds one self-contained library per
function; a fixed number of Riccati solves generates straight-line C and keeps the update one
call, with the same cache and fallback as every other compiled law.
"""

from __future__ import annotations

import casadi as ca

from mbctl.ctrl.optimal.box_ipm import IPM_ITERATIONS, START_MU, interior_point
from mbctl.ctrl.optimal.riccati import Factors, LqStages, riccati_functions
from mbctl.errors import InputError

__all__ = [
    "ACTIVE_SET_PASSES", "BIG", "PATHS", "PATH_ACTIVE_SET", "PATH_CLAMPED", "PATH_INTERIOR_POINT", "START_BEYOND", "STATE_STIFFNESS", "STIFFNESS",
    "solve",
]  # fmt: skip

ACTIVE_SET_PASSES = 3
"""Active-set passes after the first before the interior point takes over (each one factorisation)."""
START_BEYOND = 0.1
"""A state bound the first pass holds: the shifted plan passes it by more than this fraction of the box
(every input bound it sits on or passes is held)."""
STIFFNESS = 1e8
"""``ρ`` over the entry's own weight: an active bound is met to about ``λ / ρ`` (``λ`` its multiplier)."""
STATE_STIFFNESS = 1e8
"""The largest ``ρ`` of a state (module docstring)."""
BIG = 1e6
"""Stands for an infinite bound (a joint with no limit): far enough never to be met, finite for the slacks."""
PATH_ACTIVE_SET, PATH_INTERIOR_POINT, PATH_CLAMPED = 0, 1, 2
"""The path :func:`solve` took (module docstring)."""
PATHS = ("active_set", "interior_point", "clamped")
"""The paths' names, by number."""


def _sets(v: ca.MX, lower: ca.MX, upper: ca.MX) -> tuple[ca.MX, ca.MX]:
    """The bounds ``v`` passes: ``(v > upper, v < lower)`` as 0/1 matrices."""
    return v > upper, v < lower


class _Penalised:
    """The subproblem with the bounds of the active sets held by a stiff quadratic: ``½ ρ (v - b)²`` on
    each active entry, ``ρ`` = :data:`STIFFNESS` times the entry's own weight (a state's at most
    :data:`STATE_STIFFNESS`)."""

    def __init__(self, stages: LqStages, W: ca.DM, Wn: ca.DM, R: ca.DM, bounds: tuple) -> None:  # noqa: ANN001
        self.stages, self.Wn, self.functions = stages, Wn, riccati_functions(W, Wn, R, stages.h)
        N = len(stages.A)
        self.rho_u = STIFFNESS * ca.repmat(ca.diag(R), 1, N)
        self.rho_x = ca.fmin(STIFFNESS * ca.repmat(ca.fmax(ca.diag(Wn), ca.diag(W)), 1, N + 1), STATE_STIFFNESS)
        self.lower_u, self.upper_u, self.lower_x, self.upper_x = bounds

    def multipliers(self, sets: tuple, dU: ca.MX, dX: ca.MX) -> tuple:
        """The push-back ``ρ |v - b|`` of the bounds ``sets`` held where it pushes, 0 elsewhere: their
        multipliers (in the order of ``sets``)."""
        hi_u, lo_u, hi_x, lo_x = sets
        return (
            hi_u * self.rho_u * ca.fmax(dU - self.upper_u, 0), lo_u * self.rho_u * ca.fmax(self.lower_u - dU, 0),
            hi_x * self.rho_x * ca.fmax(dX - self.upper_x, 0), lo_x * self.rho_x * ca.fmax(self.lower_x - dX, 0),
        )  # fmt: skip

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
    mu0: float = START_MU,
) -> tuple[ca.MX, ca.MX, list, ca.MX]:
    """The subproblem's solution ``(δU, δX, K, path)`` (module docstring) as MX expressions.

    ``lower_u``, ``upper_u`` (nu, N) bound ``δU``; ``lower_x``, ``upper_x`` (nx, N+1) bound ``δX`` (column
    0, the current state, is not bounded). ``K`` are the last Riccati solve's feedback gains: an input
    at its bound has its row near zero, as the clamped recursion's. ``path`` is the one taken,
    :data:`PATH_ACTIVE_SET`, :data:`PATH_INTERIOR_POINT` or :data:`PATH_CLAMPED`. ``passes`` (>= 0) and
    ``iterations`` (>= 1, the interior point's cap) bound the work; ``mu0`` is the interior point's start
    (:mod:`~mbctl.ctrl.optimal.box_ipm`: :data:`~mbctl.ctrl.optimal.box_ipm.START_MU` for an exact solve,
    :data:`~mbctl.ctrl.optimal.box_ipm.WARM_MU` with a real-time cap).
    """
    if passes < 0 or iterations < 1:
        raise InputError(f"passes must be >= 0 and iterations >= 1, got {passes} and {iterations}", field="passes" if passes < 0 else "iterations")
    nx, N = W.shape[0], len(stages.A)
    lower_x = ca.horzcat(-BIG * ca.MX.ones(nx, 1), lower_x[:, 1:])
    upper_x = ca.horzcat(BIG * ca.MX.ones(nx, 1), upper_x[:, 1:])
    bounds = (lower_u, upper_u, lower_x, upper_x)
    problem = _Penalised(stages, W, Wn, R, bounds)
    # start: the inputs the point of linearisation (the shifted plan) holds on or beyond their bound,
    # and the states it holds far beyond theirs (START_BEYOND); a state a little past its bound, where
    # the new measurement moved a plan that rode it, joins when the solution passes it
    far = START_BEYOND * (upper_x - lower_x)
    start = (upper_u <= 0, lower_u >= 0, upper_x < -far, lower_x > far)
    dU, dX, K = problem.solve(start)
    after = problem.sets(dU, dX)
    # the state between the stages: the solution, the next sets, the held bounds' multipliers and
    # ``todo``, 0 while unsettled, else 1 + the path (the conditionals run a stage only at 0)
    state = [dU, dX, *K, *after, *problem.multipliers(start, dU, dX), 1 - _changed(start, after)]

    syms = [ca.MX.sym(f"v{i}", *e.shape) for i, e in enumerate(state)]
    b_s = [ca.MX.sym(f"b{i}", *e.shape) for i, e in enumerate(bounds)]
    st = LqStages(*[[ca.MX.sym(f"{n}{k}", *e.shape) for k, e in enumerate(getattr(stages, n))] for n in ("A", "B", "q", "r")], h=stages.h)
    ins = [*syms, *b_s, *st.A, *st.B, *st.q, *st.r]
    inner = _Penalised(st, W, Wn, R, tuple(b_s))
    sets, held = tuple(syms[2 + N : 6 + N]), tuple(syms[6 + N : 10 + N])
    U_p, X_p, K_p = inner.solve(sets)
    new = inner.sets(U_p, X_p)
    again = ca.Function("lq_active_set", ins, [U_p, X_p, *K_p, *new, *inner.multipliers(sets, U_p, X_p), 1 - _changed(sets, new)])
    keep = ca.Function("lq_keep", ins, syms)
    U_i, X_i, K_i, sets_i, converged = interior_point(st, syms[0], held, tuple(b_s), W, Wn, R, iterations, mu0)
    # the iterate when it has converged, else the active sets it points at held exactly when they
    # settle, else the clamped plan
    U_q, X_q, K_q = inner.solve(sets_i)
    polished = 1 - _changed(sets_i, inner.sets(U_q, X_q))
    U_c, X_c, K_c = inner.solve(tuple(ca.MX.zeros(*e.shape) for e in sets))

    def pick(a: ca.MX, b: ca.MX, c: ca.MX) -> ca.MX:
        return ca.if_else(converged, a, ca.if_else(polished, b, c))

    todo = 1 + ca.if_else(ca.logic_or(converged, polished), PATH_INTERIOR_POINT, PATH_CLAMPED)
    K_out = [pick(*k) for k in zip(K_i, K_q, K_c)]
    ipm = ca.Function("lq_interior_point", ins, [pick(U_i, U_q, U_c), pick(X_i, X_q, X_c), *K_out, *sets, *held, todo])
    rest = [*bounds, *stages.A, *stages.B, *stages.q, *stages.r]
    for f in [again] * passes + [ipm]:
        state = ca.Function.conditional(f"{f.name()}_if", [f], keep)(state[-1], *state, *rest)
    return state[0], state[1], state[2 : 2 + N], state[-1] - 1
