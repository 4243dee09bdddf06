"""The two-stage Rosenbrock-W method ROS2, written once for every model that steps with it.

ROS2 (Verwer, Spee, Blom, Hundsdorfer 1999) advances ``dx/dt = f(t, x)`` by a fixed step
``h`` (s) with ``gamma = 1 + 1/sqrt(2)`` (:data:`GAMMA`)::

    W  = I - gamma h J
    k1 = W^-1 f(t, x)
    k2 = W^-1 (f(t + h, x + h k1) - 2 k1)
    x' = x + h (3/2 k1 + 1/2 k2)

(``k1``, ``k2`` in the units of ``dx/dt``). Two evaluations of ``f`` per step, no Newton
iteration. It is second-order accurate for *any* matrix ``J`` (a W-method) and L-stable when
``J`` is the Jacobian ``df/dx``, so ``J`` only has to hold the stiff parts, where it must be
fresh. How ``J`` is kept and how the stages solve ``W k = b`` is a pluggable
:class:`JacobianUpdate`:

- :class:`StateDiagonalUpdate` (rigid, RFE and flexible-base robots of
  :mod:`mbctl.dynamics.simulation.integrate`): a full Jacobian ``J_ref`` (by forward
  differences) refreshed every ``jacobian_interval``; between refreshes the diagonal of the
  force elements' states (LuGre bristles, ``d = -sigma0 |v| / g(v)`` 1/s, which changes with
  every velocity) follows the state, through the Woodbury identity on
  ``W_inv = (I - gamma h J_ref)^-1`` with ``C = -gamma h (d(x) - d_ref)`` on the state rows ``S``:
  ``W^-1 b = y - W_inv[:, S] (C * (I + W_inv[S, S] diag(C))^-1 y[S])``, ``y = W_inv b``.
- :class:`StiffBlockUpdate` (the planar FEM mechanisms of
  :mod:`mbctl.dynamics.flexible.planar`): for ``x = [q, v]`` with ``M(q) a + A^T lam = Q - K~ q
  - D~ v + ...``, ``A a = b`` (constant stiffness ``K~`` and damping ``D~`` on the stiff
  coordinates), ``J`` is the stiff block taken at every step's state, ``J = [[0, I], [-G K~,
  -G D~]]`` with ``G`` the coordinates' block of the KKT matrix's inverse. ``W k = r`` is then
  one KKT solve with ``M + g C``, ``C = D~ + g K~``, ``g = gamma h``::

      [M + g C  A^T] [d]   [-g (C r_v + K~ r_q)]
      [A        0  ] [mu] = [0                  ],   k_v = r_v + d,   k_q = r_q + g k_v

  (no Jacobian by differences, no matrix inverse: on the 3-RRR the KKT matrix is three
  11 x 11 blocks and four loop rows).

:func:`ros2_stepper` generates ``k`` steps of a CasADi ``f(t, x, *extra)`` as one C function;
``extra`` inputs (a force history, a parameter vector) go unchanged to every call of ``f``.
:func:`python_steps` steps the same arithmetic in numpy (the interpreted reference), and
:func:`integrate` drives either: chunks of steps between output samples and refreshes,
the refresh policy, sampling and progress.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence

import casadi as ca
import numpy as np
import scipy.linalg

from mbctl.dynamics.codegen import CompiledFunction, compile_function

__all__ = [
    "GAMMA",
    "JacobianUpdate",
    "MAX_CHUNK_STEPS",
    "StateDiagonalUpdate",
    "StiffBlockUpdate",
    "chunk_steps",
    "integrate",
    "python_steps",
    "ros2_step",
    "ros2_stepper",
]

# steps per call into C at most: a signal is handled between calls, so this bounds how long a
# Ctrl-C waits (1000 steps of the 23-DOF chain take about a millisecond)
MAX_CHUNK_STEPS = 1000

GAMMA = 1.0 + 1.0 / math.sqrt(2.0)
"""ROS2's ``gamma``: the root ``1 + 1/sqrt(2)`` of its order conditions (L-stable)."""

Array = np.ndarray | ca.MX


def ros2_step(f: Callable[[float, Array], Array], t: float, x: Array, h: float, solve: Callable[[Array], Array], fx: Array | None = None) -> Array:
    """One ROS2 step of length ``h`` (s) from ``x`` at ``t``: ``f(t, x) -> dx/dt`` (``fx``: its value
    at ``(t, x)`` if known), ``solve(b) -> W^-1 b``; numpy arrays or CasADi symbols alike (the
    formula in the module docstring)."""
    k1 = solve(f(t, x) if fx is None else fx)
    k2 = solve(f(t + h, x + h * k1) - 2.0 * k1)
    return x + h * (1.5 * k1 + 0.5 * k2)


def _symbolic(*values) -> bool:
    return any(isinstance(v, (ca.MX, ca.SX)) for v in values)


class JacobianUpdate(ABC):
    """How ROS2's stages solve ``W k = b``: the numbers refreshed from Python (:meth:`refresh`,
    inputs of the generated steps) and the solve at a step's state (:meth:`solver`)."""

    @abstractmethod
    def inputs(self, n: int) -> tuple[tuple[str, tuple[int, int]], ...]:
        """Names and shapes of the refreshed inputs for a state of size ``n``."""

    @abstractmethod
    def refresh(self, t: float, x: np.ndarray, h: float) -> tuple[np.ndarray, ...]:
        """The inputs at a refresh at ``(t, x)`` for steps of ``h`` (s)."""

    @abstractmethod
    def solver(self, t, x, h, inputs: Sequence) -> Callable:
        """``b -> W^-1 b`` for a step from ``(t, x)``, numpy or CasADi (as ``x`` and ``inputs``)."""

    def first_stage(self, f: ca.Function, t: ca.MX, x: ca.MX, h: ca.MX, extra: Sequence[ca.MX], inputs: Sequence[ca.MX]) -> tuple[list[ca.MX], Callable]:
        """``(outputs of f(t, x, *extra), solve)`` of a generated step from ``(t, x)`` (the first output
        is ``dx/dt``); an update whose solve shares work with ``f`` (the mass matrix) evaluates both
        in one function and gives ``dx/dt`` only."""
        return f.call([t, x, *extra]), self.solver(t, x, h, inputs)


class StateDiagonalUpdate(JacobianUpdate):
    """A full Jacobian at each refresh, the force elements' states' diagonal followed at every step.

    Args:
        jacobian: ``(t, x) -> J`` (n x n), e.g. forward differences of ``f``.
        first_state: Index of the first state row ``S`` in ``x = [q, dq, s]`` (``2 nv``).
        diagonal: ``x -> d``: ``d(ds/dt)/ds`` on the states (1/s) in numpy.
        symbolic_diagonal: ``(dq, *extra) -> d``, the same as a CasADi function of the velocities
            and the right-hand side's extra inputs (a parameter vector), for the generated steps.
    """

    def __init__(
        self,
        jacobian: Callable[[float, np.ndarray], np.ndarray],
        first_state: int,
        diagonal: Callable[[np.ndarray], np.ndarray],
        symbolic_diagonal: ca.Function | None = None,
    ):
        self.jacobian, self.first, self.diagonal, self.symbolic_diagonal = jacobian, first_state, diagonal, symbolic_diagonal

    def inputs(self, n: int) -> tuple[tuple[str, tuple[int, int]], ...]:
        return (("W_inv", (n, n)), ("d_ref", (n - self.first, 1)))

    def refresh(self, t: float, x: np.ndarray, h: float) -> tuple[np.ndarray, ...]:
        J = self.jacobian(t, x)
        d_ref = np.asarray(self.diagonal(x), dtype=float).ravel()
        s = np.arange(self.first, len(x))
        J[s, s] = d_ref
        return np.linalg.inv(np.eye(len(x)) - (GAMMA * h) * J), d_ref

    def first_stage(self, f: ca.Function, t: ca.MX, x: ca.MX, h: ca.MX, extra: Sequence[ca.MX], inputs: Sequence[ca.MX]) -> tuple[list[ca.MX], Callable]:
        return f.call([t, x, *extra]), self.solver(t, x, h, inputs, extra)

    def solver(self, t, x, h, inputs: Sequence, extra: Sequence = ()) -> Callable:
        W_inv, d_ref = inputs
        s, nv = self.first, self.first // 2
        p = x.shape[0] - s
        if not p:
            return lambda b: W_inv @ b
        symbolic = _symbolic(x, W_inv)
        d = self.symbolic_diagonal(x[nv : 2 * nv], *extra) if symbolic else self.diagonal(x)
        C = -GAMMA * h * (d - d_ref)
        K = (ca.MX.eye(p) if symbolic else np.eye(p)) + W_inv[s:, s:] @ (ca.diag(C) if symbolic else np.diag(np.ravel(C)))
        linear_solve = ca.solve if symbolic else np.linalg.solve

        def solve(b):
            y = W_inv @ b
            return y - W_inv[:, s:] @ (C * linear_solve(K, y[s:]))

        return solve


class StiffBlockUpdate(JacobianUpdate):
    """The stiff block of a constrained second-order system, at every step's state (nothing refreshed).

    Args:
        kkt: ``q -> (M, A)`` (CasADi SX function): mass matrix (n x n) and constraint rows (m x n).
        stiffness, damping: ``K~``, ``D~`` (n x n): constant stiffness and damping of the
            generalized forces ``Q = -K~ q - D~ v + ...`` (N/m, N·s/m, or per rad).
        compiled_kkt: ``kkt`` compiled, for the numpy solves (default: compiled here).
    """

    def __init__(self, kkt: ca.Function, stiffness: np.ndarray, damping: np.ndarray, compiled_kkt: CompiledFunction | None = None):
        self.kkt, self.K, self.D = kkt, np.asarray(stiffness, float), np.asarray(damping, float)
        self.n, self.m = kkt.size1_in(0), kkt.size1_out(1)
        self._numeric_kkt = compiled_kkt
        self._functions: tuple[ca.Function, ca.Function] | None = None
        self._fused: dict[str, ca.Function] = {}

    def inputs(self, n: int) -> tuple[tuple[str, tuple[int, int]], ...]:
        return ()

    def refresh(self, t: float, x: np.ndarray, h: float) -> tuple[np.ndarray, ...]:
        return ()

    def _rhs(self, g, r):
        """The right-hand side ``-g (C r_v + K~ r_q)`` of the KKT solve."""
        n = self.n
        if _symbolic(r):
            D, K = (ca.sparsify(ca.DM(a)) for a in (self.D, self.K))  # the zeros cost nothing in the generated code
            return -g * (D @ r[n:] + g * (K @ r[n:]) + K @ r[:n])
        return -g * ((self.D + g * self.K) @ r[n:] + self.K @ r[:n])

    def functions(self) -> tuple[ca.Function, ca.Function]:
        """``factor: (q, g) -> F`` and ``apply: (F, g, r) -> k`` solving ``(I - g J) k = r`` for the
        stiff block ``J`` at ``q``, as SX functions: ``F`` holds the Cholesky factor of ``M + g C``
        (its nonzeros: the KKT matrix's zeros are skipped), ``Y = (M + g C)^-1 A^T`` and
        ``(A Y)^-1 A`` (the ``m x m`` Schur complement), so a step factors once for its two stages."""
        if self._functions is None:
            from mbctl.dynamics.simulation.compiled_constraints import cholesky, cholesky_solve

            n, m = self.n, self.m
            q, g = ca.SX.sym("q", n), ca.SX.sym("g")
            M, A = self.kkt(q)
            L = cholesky(M + g * (ca.sparsify(ca.DM(self.D)) + g * ca.sparsify(ca.DM(self.K))))
            pattern = [(r, c) for r in range(n) for c in range(r + 1) if not L[r][c].is_zero()]
            Y = cholesky_solve(L, A.T)
            SA = ca.solve(A @ Y, A) if m else ca.SX(0, n)
            parts = ca.cse(ca.vertcat(*(L[r][c] for r, c in pattern), ca.vec(Y), ca.vec(SA)))
            factor = ca.Function(f"{self.kkt.name()}_w_factor", [q, g], [parts], ["q", "g"], ["F"])
            F, r = ca.SX.sym("F", parts.numel()), ca.SX.sym("r", 2 * n)
            Lf = [[ca.SX(0.0)] * n for _ in range(n)]
            for i, (row, col) in enumerate(pattern):
                Lf[row][col] = F[i]
            p = len(pattern)
            Yf, SAf = ca.reshape(F[p : p + n * m], n, m), ca.reshape(F[p + n * m :], m, n)
            z = cholesky_solve(Lf, self._rhs(g, r))
            d = z - Yf @ (SAf @ z) if m else z
            kv = r[n:] + d
            apply = ca.Function(f"{self.kkt.name()}_w_apply", [F, g, r], [ca.vertcat(r[:n] + g * kv, kv)], ["F", "g", "r"], ["k"])
            self._functions = factor, apply
        return self._functions

    def first_stage(self, f: ca.Function, t: ca.MX, x: ca.MX, h: ca.MX, extra: Sequence[ca.MX], inputs: Sequence[ca.MX]) -> tuple[list[ca.MX], Callable]:
        if not f.is_a("SXFunction"):
            return super().first_stage(f, t, x, h, extra, inputs)
        if f.name() not in self._fused:
            # f and the factorization in one SX function: the mass matrix, evaluated by both, once
            factor, _ = self.functions()
            args = [ca.SX.sym(f.name_in(i), f.sparsity_in(i)) for i in range(f.n_in())]
            g = ca.SX.sym("g")
            fx, F = f.call(args)[0], factor(args[1][: self.n], g)
            both = ca.cse(ca.vertcat(fx, F))
            n = fx.numel()
            self._fused[f.name()] = ca.Function(f"{f.name()}_and_w_factor", [*args, g], [both[:n], both[n:]])
        g = GAMMA * h
        fx, F = self._fused[f.name()](t, x, *extra, g)
        apply = self.functions()[1]
        return [fx], lambda b: apply(F, g, b)

    def solver(self, t, x, h, inputs: Sequence) -> Callable:
        n, g = self.n, GAMMA * h
        if _symbolic(x):
            factor, apply = self.functions()
            F = factor(x[:n], g)
            return lambda b: apply(F, g, b)
        if self._numeric_kkt is None:
            self._numeric_kkt = compile_function(self.kkt)
        M, A = (np.asarray(a) for a in self._numeric_kkt(x[:n]))
        m = self.m
        K = np.zeros((n + m, n + m))
        K[:n, :n], K[:n, n:], K[n:, :n] = M + g * (self.D + g * self.K), A.T, A

        def solve(b: np.ndarray) -> np.ndarray:
            d = scipy.linalg.solve(K, np.concatenate([self._rhs(g, b), np.zeros(m)]))[:n]
            kv = b[n:] + d
            return np.concatenate([b[:n] + g * kv, kv])

        return solve


def ros2_stepper(
    f: ca.Function, steps: int, update: JacobianUpdate, *, outputs: int = 1, per_step: Sequence[int] = (), diagnostics: bool = False, cache=None
) -> CompiledFunction:
    """``(t0, x0, h, *extra, *inputs) -> X``: ``steps`` ROS2 steps of length ``h`` (s) of
    ``f(t, x, *extra)`` (its first output is ``dx/dt``) from ``x0`` at ``t0``, in C.

    ``X`` (n x ``outputs``) holds the states after every ``steps / outputs`` steps (the last
    column the final state). ``extra`` (``f``'s further inputs) go to every evaluation
    unchanged, except those numbered in ``per_step`` (0 is ``f``'s third input), column vectors
    given as one column per step (e.g. a force sampled at each step's ends). ``inputs`` are
    ``update``'s refreshed inputs (:meth:`JacobianUpdate.inputs`).

    ``diagnostics``: a second output ``D`` holds, per column, every output of ``f`` (each as a
    column, stacked) at the *start* of each group of ``steps / outputs`` steps: the evaluation
    the step makes there anyway, so samples at those states cost no further evaluation (it is
    the same generated arithmetic as calling ``f`` there: the numbers are equal). The step
    time there is ``t0 + k h`` as the generated code computes it."""
    if steps % outputs:
        raise ValueError(f"{outputs} outputs do not divide {steps} steps")
    n = f.size1_in(1)
    names = [f.name_in(i) for i in range(2, f.n_in())]
    held = [ca.MX.sym(name, f.sparsity_in(2 + i)) for i, name in enumerate(names)]
    extra = [ca.MX.sym(name, f.size1_in(2 + i), steps) if i in per_step else held[i] for i, name in enumerate(names)]
    inputs = [ca.MX.sym(name, *shape) for name, shape in update.inputs(n)]
    t, x, h = ca.MX.sym("t0"), ca.MX.sym("x0", n), ca.MX.sym("h")

    def rate(t, x):
        return f.call([t, x, *held])[0]

    first, solve = update.first_stage(f, t, x, h, held, inputs)
    step = ros2_step(rate, t, x, h, solve, first[0])
    one = ca.Function("ros2_step", [t, x, h, *held, *inputs], [step])
    if diagnostics:
        if len(first) != f.n_out():
            raise ValueError(f"{type(update).__name__} gives only dx/dt of its first stage: no diagnostics")
        sampled = ca.Function("ros2_step_sampled", [t, x, h, *held, *inputs], [step, ca.vertcat(*(ca.vec(o) for o in first))])
    out, states, samples = x, [], []
    for k in range(steps):
        args = (t + k * h, out, h, *(e[:, k] if i in per_step else e for i, e in enumerate(extra)), *inputs)
        if diagnostics and k % (steps // outputs) == 0:
            out, d = sampled(*args)
            samples.append(d)
        else:
            out = one(*args)
        if (k + 1) % (steps // outputs) == 0:
            states.append(out)
    g = ca.Function(
        f"ros2x{steps}o{outputs}{'d' if diagnostics else ''}_{f.name()}",
        [t, x, h, *extra, *inputs],
        [ca.horzcat(*states), *([ca.horzcat(*samples)] if diagnostics else [])],
        ["t0", "x0", "h", *names, *(m for m, _ in update.inputs(n))],
        ["X", *(["D"] if diagnostics else [])],
    )
    return compile_function(g, cache=cache)


Advance = Callable[[float, np.ndarray, float, int, tuple, tuple], np.ndarray]


def python_steps(f: Callable[..., np.ndarray], update: JacobianUpdate, *, outputs: int = 1, per_step: Sequence[int] = ()) -> Advance:
    """``advance(t, x, h, count, extra, inputs) -> X``: ``count`` ROS2 steps stepped in numpy with
    ``f(t, x, *extra) -> dx/dt``, the arithmetic of :func:`ros2_stepper` (its reference), with the
    same ``outputs`` and ``per_step``."""

    def advance(t: float, x: np.ndarray, h: float, count: int, extra: tuple, inputs: tuple) -> np.ndarray:
        states = []
        for i in range(count):
            ti = t + i * h
            args = [e[:, i] if j in per_step else e for j, e in enumerate(extra)]
            x = ros2_step(lambda t, x: f(t, x, *args), ti, x, h, update.solver(ti, x, h, inputs))
            if (i + 1) % (count // outputs) == 0:
                states.append(x)
        return np.stack(states, axis=1)

    return advance


def chunk_steps(n: int, every: int, refresh_every: int, most: int, *, several: bool = False) -> int:
    """Steps per call of the stepper, at most ``most`` (a signal waits that long at most): the
    largest divisor of ``gcd(n, every, refresh_every)``, so that no chunk passes an output sample
    or refresh; with ``several``, when ``every`` is less than ``most``, the largest multiple of
    ``every`` that divides ``gcd(n, refresh_every)`` (several samples per chunk)."""
    whole = math.gcd(every, refresh_every, n)
    chunk = max(d for d in range(1, min(whole, most) + 1) if whole % d == 0)
    if several and chunk == every:
        span = math.gcd(n, refresh_every)
        chunk = max(d for d in range(every, min(span, most) + 1, every) if span % d == 0)
    return chunk


def integrate(
    advance: Advance,
    update: JacobianUpdate,
    x0: np.ndarray,
    t0: float,
    h: float,
    n: int,
    chunk: int,
    *,
    every: int,
    refresh_every: int,
    record: Callable[[float, np.ndarray], None],
    check: Callable[[float, np.ndarray], None],
    extra: Callable[[float, float], tuple] | None = None,
    progress: Callable[[int, int], None] | None = None,
    record_block: Callable[[np.ndarray, np.ndarray, np.ndarray], None] | None = None,
) -> np.ndarray:
    """``n`` ROS2 steps of ``h`` (s) from ``x0`` at ``t0`` in calls of ``chunk`` steps (see
    :func:`chunk_steps`); returns the final state.

    ``advance`` returns the states after every ``chunk / outputs`` steps (n x ``outputs``, see
    :func:`ros2_stepper`); ``record(t, x)`` gets the first state, every ``every``-th and the
    last one; ``update.refresh`` runs every ``refresh_every`` steps; ``extra(t_a, t_b)`` gives
    ``f``'s extra inputs over each chunk (default none); ``check(t, X)`` sees the states after
    each chunk (and raises to stop); ``progress(done, n)`` about 20 times per run.

    With ``record_block``, the samples come from the stepper in blocks: ``advance`` returns
    ``(X, D)`` (``ros2_stepper(..., diagnostics=True)`` with ``outputs = chunk / every``, so that
    each group of steps starts at a sample), and ``record_block(times, states, D)`` gets each
    chunk's samples (times in s, one state and one column of ``D`` per sample, taken before the
    chunk's steps from them); ``record`` gets the last state only."""
    x = np.array(x0, dtype=float)
    inputs: tuple = ()
    report = max(1, n // 20)
    if record_block is None:
        record(t0, x)
    elif chunk % every:
        raise ValueError(f"chunks of {chunk} steps do not start every sample (every {every} steps)")
    for k in range(0, n, chunk):
        t = t0 + k * h
        if k % refresh_every == 0:
            inputs = update.refresh(t, x, h)
        advanced = advance(t, x, h, chunk, extra(t, t + chunk * h) if extra is not None else (), inputs)
        X = (advanced[0] if record_block is not None else advanced).reshape(len(x), -1, order="F")
        check(t + chunk * h, X)
        if record_block is not None:
            starts = np.column_stack([x, X[:, :-1]])
            record_block(t + np.arange(X.shape[1]) * every * h, starts, np.asarray(advanced[1]).reshape(-1, X.shape[1], order="F"))
            x = X[:, -1]
            if progress is not None and ((k + chunk) % report < chunk or k + chunk == n):
                progress(k + chunk, n)
            continue
        segment = chunk // X.shape[1]
        for j in range(X.shape[1] - 1):
            done = k + (j + 1) * segment
            if done % every == 0:
                record(t0 + done * h, X[:, j])
        x = X[:, -1]
        if k + chunk < n and (k + chunk) % every == 0:
            record(t0 + (k + chunk) * h, x)
        if progress is not None and ((k + chunk) % report < chunk or k + chunk == n):
            progress(k + chunk, n)
    record(t0 + n * h, x)
    return x
