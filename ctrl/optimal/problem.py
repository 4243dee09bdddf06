"""Optimal control over a robot's inverse dynamics: direct multiple shooting, solved by IPOPT.

**Transcription.** ``N`` intervals of length ``h`` (fixed, or ``h = T / N`` with the final time
``T`` a variable). The state at knot ``k`` is ``x_k = (q_k, dq_k)``, the input on interval ``k``
is its constant acceleration ``u_k = ddq`` (rad/s² or m/s²), and the shooting of each interval
is exact::

    q_{k+1}  = q_k + h dq_k + h²/2 u_k
    dq_{k+1} = dq_k + h u_k

The motor torques are the robot's own inverse dynamics, friction included,
``tau = ID(q, dq, ddq)`` (N·m or N), evaluated at both ends of every interval
(``tau_k⁻ = ID(q_k, dq_k, u_k)``, ``tau_k⁺ = ID(q_{k+1}, dq_{k+1}, u_k)``): the torque limits
are path constraints on both, and the motion the solution describes is exactly the sampled
trajectory (piecewise-quadratic positions), so a check by feed-forward on its samples tests
the model, not an integrator. Writing the input as an acceleration rather than a torque keeps
friction, whose sign at rest follows the acceleration, an explicit function of the unknowns.

**Costs** (added before :meth:`OptimalControlProblem.build`): the final time ``T``
(:meth:`~OptimalControlProblem.minimize_time`), the effort ``∫ tauᵀ W tau dt`` (copper losses
of the drives grow with ``tau²``; trapezoid over the two ends of each interval:
:meth:`~OptimalControlProblem.add_effort`), tracking ``∫ (q - q_ref)ᵀ W (q - q_ref) dt`` at the
knots (:meth:`~OptimalControlProblem.add_tracking`), and any stage cost or path constraint a
caller writes over a :class:`Stage` (:meth:`~OptimalControlProblem.add_stage_cost`,
:meth:`~OptimalControlProblem.add_path_constraint`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import casadi as ca
import numpy as np

from mbctl.errors import InputError

__all__ = ["Dynamics", "Stage", "OcpSolution", "OptimalControlProblem"]


@dataclass(frozen=True, eq=False)
class Dynamics:
    """What the transcription needs of a system; SI units, arrays (nv,).

    Attributes:
        inverse: CasADi ``Function (q, dq, ddq) -> tau``, the torques (friction included).
        lower, upper: Position limits (rad or m; ±inf for none).
        velocity: Speed limits ``|dq|`` (rad/s or m/s; inf for none).
        effort: Torque limits ``|tau|`` (N·m or N; inf for none).
        names: Names of the DOF.
    """

    inverse: ca.Function
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    effort: np.ndarray
    names: tuple[str, ...]

    @property
    def nv(self) -> int:
        return len(self.names)


@dataclass(frozen=True)
class Stage:
    """The symbols of interval ``k`` a stage cost or path constraint is written over.

    Attributes:
        k: Interval index (0 .. N-1).
        t: Start time of the interval (s, symbolic with a free final time).
        h: Interval length (s).
        q, dq: State at the start of the interval; ``q_end``, ``dq_end`` at its end.
        ddq: Acceleration on the interval.
        tau, tau_end: Torques at the start and end of the interval (N·m or N).
    """

    k: int
    t: ca.MX
    h: ca.MX
    q: ca.MX
    dq: ca.MX
    ddq: ca.MX
    q_end: ca.MX
    dq_end: ca.MX
    tau: ca.MX
    tau_end: ca.MX


@dataclass(frozen=True)
class OcpSolution:
    """A solved problem; knot arrays in DOF order.

    Attributes:
        t: Knot times (N+1,) (s).
        q, dq: Knot states (N+1, nv).
        ddq: Interval accelerations (N, nv).
        tau_start, tau_end: Torques at the two ends of every interval (N, nv).
        duration: Final time ``T`` (s).
        cost: Objective value.
        success: True when the solver reports an optimal point.
        status: The solver's return status.
        iterations: Solver iterations.
        solve_time: Wall time of the solve (s).
    """

    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    tau_start: np.ndarray
    tau_end: np.ndarray
    duration: float
    cost: float
    success: bool
    status: str
    iterations: int
    solve_time: float

    def sample(self, times: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, dq, ddq)`` at ``times`` (s) of the piecewise-constant-acceleration motion; a time on a
        knot belongs to the interval it starts, the final time to the last interval."""
        times = np.asarray(times, dtype=float)
        h = self.duration / len(self.ddq)
        k = np.clip(np.floor(times / h + 1e-9).astype(int), 0, len(self.ddq) - 1)
        s = (times - k * h)[:, None]
        u = self.ddq[k]
        return self.q[k] + self.dq[k] * s + 0.5 * u * s**2, self.dq[k] + u * s, u


@dataclass
class _Term:
    kind: str
    fn: Callable[[Stage], ca.MX]
    lower: np.ndarray | float = 0.0
    upper: np.ndarray | float = 0.0


class OptimalControlProblem:
    """A point-to-point or tracking problem over :class:`Dynamics` (see the module docstring).

    Args:
        dynamics: The system.
        knots: Number of intervals ``N``.
        duration: Final time ``T`` (s); None makes it a variable (bounded by ``min_duration``,
            ``max_duration``), as a time-optimal problem needs.

    Raises:
        InputError: For ``knots < 2`` or a non-positive duration.
    """

    def __init__(
        self, dynamics: Dynamics, knots: int, duration: float | None = None, *, min_duration: float = 1e-3, max_duration: float = 100.0
    ):
        if int(knots) != knots or knots < 2:
            raise InputError(f"must be an integer >= 2, got {knots!r}", field="knots")
        if duration is not None and not (np.isfinite(duration) and duration > 0):
            raise InputError(f"must be a finite number > 0 s, got {duration!r}", field="duration")
        self.dynamics = dynamics
        self.knots = int(knots)
        self.duration = duration
        self.duration_bounds = (min_duration, max_duration)
        self._terms: list[_Term] = []
        self._time_weight = 0.0
        self._start: tuple[np.ndarray, np.ndarray] | None = None
        self._end: tuple[np.ndarray, np.ndarray | None] | None = None
        self.effort_limit = np.asarray(dynamics.effort, dtype=float).copy()
        self._nlp: dict | None = None

    # ---- problem definition ------------------------------------------------------

    def start_at(self, q: Sequence[float], dq: Sequence[float] | None = None) -> OptimalControlProblem:
        """Fix the initial state (default: at rest)."""
        q = np.asarray(q, dtype=float)
        self._start = (q, np.zeros_like(q) if dq is None else np.asarray(dq, dtype=float))
        return self._changed()

    def end_at(self, q: Sequence[float], dq: Sequence[float] | None = 0.0) -> OptimalControlProblem:
        """Fix the final position and velocity (default: at rest; None leaves the velocity free)."""
        q = np.asarray(q, dtype=float)
        self._end = (q, None if dq is None else np.broadcast_to(np.asarray(dq, dtype=float), q.shape).copy())
        return self._changed()

    def minimize_time(self, weight: float = 1.0) -> OptimalControlProblem:
        """Add ``weight · T`` (needs a free final time)."""
        if self.duration is not None:
            raise InputError("a fixed duration cannot be minimised; build the problem with duration=None", field="duration")
        self._time_weight += float(weight)
        return self._changed()

    def add_effort(self, weight: float | Sequence[float] = 1.0) -> OptimalControlProblem:
        """Add ``∫ Σ w_i tau_i² dt`` (trapezoid over each interval's two ends); ``weight`` per DOF or one."""
        w = ca.DM(np.broadcast_to(np.asarray(weight, dtype=float), (self.dynamics.nv,)))
        return self.add_stage_cost(lambda s: 0.5 * s.h * (ca.dot(w, s.tau**2) + ca.dot(w, s.tau_end**2)))

    def add_tracking(self, reference: np.ndarray, weight: float | Sequence[float] = 1.0) -> OptimalControlProblem:
        """Add ``Σ_k h (q_k - r_k)ᵀ W (q_k - r_k)`` over the knots ``k = 1 .. N`` for a reference
        ``r`` (N+1, nv) at the knots."""
        ref = np.asarray(reference, dtype=float)
        if ref.shape != (self.knots + 1, self.dynamics.nv):
            raise InputError(f"shape {ref.shape} does not match ({self.knots + 1}, {self.dynamics.nv})", field="reference")
        w = ca.DM(np.broadcast_to(np.asarray(weight, dtype=float), (self.dynamics.nv,)))
        return self.add_stage_cost(lambda s: s.h * ca.dot(w, (s.q_end - ca.DM(ref[s.k + 1])) ** 2))

    def add_stage_cost(self, cost: Callable[[Stage], ca.MX]) -> OptimalControlProblem:
        """Add ``Σ_k cost(stage_k)``: ``cost`` returns a scalar expression of a :class:`Stage`."""
        self._terms.append(_Term("cost", cost))
        return self._changed()

    def add_path_constraint(self, g: Callable[[Stage], ca.MX], lower: float | Sequence[float], upper: float | Sequence[float]) -> OptimalControlProblem:
        """Add ``lower <= g(stage_k) <= upper`` on every interval."""
        self._terms.append(_Term("constraint", g, np.asarray(lower, dtype=float), np.asarray(upper, dtype=float)))
        return self._changed()

    def _changed(self) -> OptimalControlProblem:
        self._nlp = None
        return self

    # ---- transcription -------------------------------------------------------------

    def build(self) -> OptimalControlProblem:
        """Transcribe into a nonlinear program (done by :meth:`solve` when needed).

        Raises:
            InputError: Without a start and an end, or with no cost.
        """
        if self._start is None or self._end is None:
            raise InputError("needs a start (start_at) and an end (end_at)", field="boundary")
        if self._time_weight == 0.0 and not any(t.kind == "cost" for t in self._terms):
            raise InputError("needs a cost (minimize_time, add_effort, add_tracking or add_stage_cost)", field="objective")
        dyn, n, nv = self.dynamics, self.knots, self.dynamics.nv
        q = ca.MX.sym("q", nv, n + 1)
        dq = ca.MX.sym("dq", nv, n + 1)
        u = ca.MX.sym("ddq", nv, n)
        variables = [ca.vec(q), ca.vec(dq), ca.vec(u)]
        if self.duration is None:
            T = ca.MX.sym("T")
            variables.append(T)
        else:
            T = ca.MX(self.duration)
        h = T / n
        ID = dyn.inverse
        cost = self._time_weight * T if self.duration is None else ca.MX(0)
        g, lbg, ubg = [], [], []
        tau0, tau1 = [], []

        def constrain(expr: ca.MX, lo, hi) -> None:
            g.append(expr)
            size = expr.numel()
            lbg.append(np.broadcast_to(lo, (size,)))
            ubg.append(np.broadcast_to(hi, (size,)))

        for k in range(n):
            q_next = q[:, k] + h * dq[:, k] + 0.5 * h**2 * u[:, k]
            dq_next = dq[:, k] + h * u[:, k]
            constrain(ca.vertcat(q[:, k + 1] - q_next, dq[:, k + 1] - dq_next), 0.0, 0.0)
            stage = Stage(k, k * h, h, q[:, k], dq[:, k], u[:, k], q[:, k + 1], dq[:, k + 1],
                          ID(q[:, k], dq[:, k], u[:, k]), ID(q[:, k + 1], dq[:, k + 1], u[:, k]))  # fmt: skip
            tau0.append(stage.tau)
            tau1.append(stage.tau_end)
            finite = np.isfinite(self.effort_limit)
            if finite.any():
                idx = np.flatnonzero(finite).tolist()
                lim = self.effort_limit[finite]
                constrain(stage.tau[idx], -lim, lim)
                constrain(stage.tau_end[idx], -lim, lim)
            for term in self._terms:
                if term.kind == "cost":
                    cost = cost + term.fn(stage)
                else:
                    constrain(ca.vec(term.fn(stage)), term.lower, term.upper)
        # simple bounds on the variables: boundary states, positions, speeds, the final time
        inf = np.inf
        lbq = np.tile(np.where(np.isfinite(dyn.lower), dyn.lower, -inf)[:, None], (1, n + 1))
        ubq = np.tile(np.where(np.isfinite(dyn.upper), dyn.upper, inf)[:, None], (1, n + 1))
        vel = np.where(np.isfinite(dyn.velocity), dyn.velocity, inf)
        lbdq, ubdq = np.tile(-vel[:, None], (1, n + 1)), np.tile(vel[:, None], (1, n + 1))
        (q0, dq0), (q1, dq1) = self._start, self._end
        lbq[:, 0] = ubq[:, 0] = q0
        lbdq[:, 0] = ubdq[:, 0] = dq0
        lbq[:, -1] = ubq[:, -1] = q1
        if dq1 is not None:
            lbdq[:, -1] = ubdq[:, -1] = dq1
        lbx = [lbq.ravel(order="F"), lbdq.ravel(order="F"), np.full(nv * n, -inf)]
        ubx = [ubq.ravel(order="F"), ubdq.ravel(order="F"), np.full(nv * n, inf)]
        if self.duration is None:
            lbx.append([self.duration_bounds[0]])
            ubx.append([self.duration_bounds[1]])
        x = ca.vertcat(*variables)
        outputs = ca.Function("outputs", [x], [q, dq, u, ca.horzcat(*tau0), ca.horzcat(*tau1), T])
        self._nlp = {
            "problem": {"x": x, "f": cost, "g": ca.vertcat(*g)},
            "lbx": np.concatenate(lbx), "ubx": np.concatenate(ubx),
            "lbg": np.concatenate(lbg), "ubg": np.concatenate(ubg), "outputs": outputs,
        }  # fmt: skip
        return self

    def initial_guess(self, q: np.ndarray, dq: np.ndarray, ddq: np.ndarray, duration: float) -> np.ndarray:
        """The variable vector of a guess: knots ``q``, ``dq`` (N+1, nv), ``ddq`` (N, nv), ``T`` (s)."""
        parts = [np.asarray(q, float).T.ravel(order="F"), np.asarray(dq, float).T.ravel(order="F"), np.asarray(ddq, float).T.ravel(order="F")]
        if self.duration is None:
            parts.append([duration])
        return np.concatenate(parts)

    def solve(self, guess: np.ndarray | None = None, *, max_iterations: int = 500, tolerance: float = 1e-8) -> OcpSolution:
        """Solve with IPOPT (exact Hessian, MUMPS) from ``guess`` (:meth:`initial_guess`; default the
        straight line from start to end, timed by a quintic of the given or a unit duration)."""
        if self._nlp is None:
            self.build()
        nlp = self._nlp
        if guess is None:
            guess = self.initial_guess(*self._line_guess(), self.duration or 1.0)
        options = {
            "ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes", "ipopt.max_iter": int(max_iterations),
            "ipopt.tol": float(tolerance), "ipopt.constr_viol_tol": 1e-9,
        }  # fmt: skip
        solver = ca.nlpsol("ocp", "ipopt", nlp["problem"], options)
        start = time.perf_counter()
        res = solver(x0=guess, lbx=nlp["lbx"], ubx=nlp["ubx"], lbg=nlp["lbg"], ubg=nlp["ubg"])
        wall = time.perf_counter() - start
        stats = solver.stats()
        q, dq, u, t0, t1, T = (np.array(v) for v in nlp["outputs"](res["x"]))
        T = float(T.item())
        return OcpSolution(
            t=np.linspace(0.0, T, self.knots + 1), q=q.T, dq=dq.T, ddq=u.T, tau_start=t0.T, tau_end=t1.T, duration=T,
            cost=float(res["f"]), success=bool(stats["success"]), status=str(stats["return_status"]),
            iterations=int(stats["iter_count"]), solve_time=wall,
        )  # fmt: skip

    def _line_guess(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The quintic rest-to-rest line from start to end over a unit time, at the knots."""
        (q0, _), (q1, _) = self._start, self._end
        T = self.duration or 1.0
        s = np.linspace(0.0, 1.0, self.knots + 1)
        p = 10 * s**3 - 15 * s**4 + 6 * s**5
        dp = (30 * s**2 - 60 * s**3 + 30 * s**4) / T
        ddp = (60 * s - 180 * s**2 + 120 * s**3) / T**2
        d = (q1 - q0)[None, :]
        return q0 + p[:, None] * d, dp[:, None] * d, (0.5 * (ddp[:-1] + ddp[1:]))[:, None] * d

