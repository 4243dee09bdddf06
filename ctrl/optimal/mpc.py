"""Nonlinear model predictive control: one real-time iteration per cycle, compiled to C.

**Model.** The robot's forward dynamics with friction, the acceleration held over each step ``h``
(s), state ``x = (q, dq)``, input the motor torques ``u`` (N·m or N)::

    ddq = M(q)⁻¹ (u - h(q, dq) - tau_f(v)),   dq' = dq + h ddq,   q' = q + h (dq + dq') / 2

with friction taken at the reference's velocity ``v`` at the knot, as computed torque takes it
(``friction_velocity = "desired"``), its dry sign smoothed by ``tanh(v / 0.01 rad/s)``
(:func:`~mbctl.ctrl.optimal.point_to_point.smooth_direction`); a load-dependent law takes its
normal load at zero acceleration. Friction at the state's own velocity would put the dry sign's
jump (or a steep smoothed one) into every linearisation near rest: one Gauss–Newton iteration then
no longer converges and the first input jumps by tens of N·m at µrad errors; and its slope on a
light wrist is a damping the plant has only above its Stribeck speed. The position update is the
trapezoid, exact for the held acceleration: semi-implicit Euler's ``q' = q + h dq'`` moves the
positions ``h² ddq / 2`` per step ahead of the motion, and the plan lagged behind every
acceleration to make up for it.

**Problem.** Over ``N`` knots, ``min Σ_k ½|x_k - r_k|²_W + ½|u_k - u_ref,k|²_R + ½|x_N - r_N|²_W``
subject to the model, ``|u| <= effort`` and, at knots 1..N, the state's bounds (the controller's:
the joints' position ranges and speed limits with the planners' margin), from the measured
(estimated) state, with ``r`` the reference trajectory at the knots and ``u_ref`` the model's own
input along it (:func:`reference_input_function`), so that a state on the reference has the
reference as its plan.

**Update** (one CasADi ``Function``, generated to C and called once per cycle): the previous plan's
inputs, shifted to the current time, are rolled out from the current state; then ``iterations``
real-time (Gauss–Newton) iterations: every stage linearised once (``A_k``, ``B_k``, the cost's
gradients), the box-constrained linear–quadratic subproblem solved exactly by
:func:`~mbctl.ctrl.optimal.box_qp.solve` (Riccati recursion; active-set passes warm-started from
the plan's own bounds, the interior point when they do not settle, capped, and the clamped plan
when that does not settle either), and a forward pass through the
nonlinear model with ``u_k = clip(û_k + K_k (x_k - x̂_k), ±effort)`` around the subproblem's
solution ``(x̂, û)``; an input on its bound has a near-zero row of ``K`` (its stiff bound, or its
barrier, dominates ``Q_uu``). Where no bound is met the subproblem is the unconstrained Riccati
solve, and the update is the clamped iLQR's of before to round-off.
"""

from __future__ import annotations

from dataclasses import dataclass

import casadi as ca
import numpy as np

from mbctl.ctrl.optimal import box_qp
from mbctl.ctrl.optimal.box_ipm import IPM_ITERATIONS, START_MU
from mbctl.ctrl.optimal.point_to_point import SMOOTHING, smooth_direction
from mbctl.ctrl.optimal.riccati import LqStages
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import InputError

__all__ = ["MpcWeights", "linearisation_function", "reference_input_function", "step_function", "update_function"]


@dataclass(frozen=True)
class MpcWeights:
    """Cost weights per DOF (arrays (nv,)): position ``q`` (1/rad² or 1/m²), velocity ``dq``
    (s²/rad²), torque deviation from the feed-forward ``tau`` (1/(N·m)²; (nv,) a diagonal, or a full
    (nv, nv) matrix); ``terminal`` scales the final knot's state weights."""

    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    terminal: float = 1.0


def _model(robot: RobotModel, smoothing: float) -> tuple[ca.SX, ca.SX, ca.SX, ca.SX]:
    """``(x, v, M, b)``: the state and reference-velocity symbols, the mass matrix and the drift torque
    ``h(q, dq) + tau_f(v)`` (module docstring), so that ``ddq = M⁻¹ (u - b)``."""
    sd = SymbolicDynamics(robot, lugre="steady")
    nv = robot.nv
    x, v = ca.SX.sym("x", 2 * nv), ca.SX.sym("v", nv)
    q, dq = x[:nv], x[nv:]
    friction = ca.SX.zeros(nv)
    loaded = any(j.friction is not None and j.friction.load is not None for j in robot.joints)
    load = sd.inverse_dynamics_of(q, dq, ca.SX.zeros(nv), ca.SX.zeros(nv))[4] if loaded else None
    for j in robot.joints:
        if j.friction is not None:
            k = j.idx_v
            direction = smooth_direction(v[k], ca.SX(0), smoothing)
            friction[k] = j.friction.law.steady(v[k], direction, load[k] if j.friction.load is not None else 1.0)
    return x, v, sd.mass_matrix_of(q), sd.bias_of(q, dq) + friction


def step_function(robot: RobotModel, h: float, smoothing: float = SMOOTHING) -> ca.Function:
    """``(x, u, v) -> x'``: one step of ``h`` (s) of the forward dynamics with friction taken at the
    reference velocity ``v`` (rad/s, m/s), the acceleration held over the step (``dq' = dq + h ddq``,
    ``q' = q + h (dq + dq') / 2``)."""
    x, v, M, b = _model(robot, smoothing)
    nv = robot.nv
    u = ca.SX.sym("u", nv)
    dq = x[nv:]
    dq_next = dq + h * ca.solve(M, u - b)
    return ca.Function("step", [x, u, v], [ca.vertcat(x[:nv] + 0.5 * h * (dq + dq_next), dq_next)], ["x", "u", "v"], ["x_next"])


def reference_input_function(robot: RobotModel, h: float, smoothing: float = SMOOTHING) -> ca.Function:
    """``(x, a) -> u``: the input under which :func:`step_function` moves from ``x`` (its velocity the
    reference velocity) with the acceleration ``a`` (rad/s², m/s²), ``u = M a + b``: with ``a =
    (dq(t + h) - dq(t)) / h`` of a reference, the model's step lands on the reference's velocity
    exactly and on its position to ``h³ |d³q| / 12`` (the trapezoid's error), so that the reference
    is (nearly) a trajectory of the model and the plan at zero error costs nothing."""
    x, v, M, b = _model(robot, smoothing)
    nv = robot.nv
    a = ca.SX.sym("a", nv)
    u = ca.substitute(M @ a + b, v, x[nv:])
    return ca.Function("reference_input", [x, a], [u], ["x", "a"], ["u"])


def linearisation_function(robot: RobotModel, h: float, smoothing: float = SMOOTHING) -> ca.Function:
    """``(x, u, v) -> (x', A, B, D, M⁻¹)``: :func:`step_function` and its Jacobians in ``x`` and ``u`` from
    the inverse dynamics' derivatives at the step's acceleration, ``∂ddq/∂x = -M⁻¹ ∂(M a + b)/∂x``
    (``a`` held), ``∂ddq/∂u = M⁻¹``, all from one factorisation of ``M``: a third fewer operations
    than differentiating through the solve (9 144 against 13 654 for the UR5)."""
    x, v, M, b = _model(robot, smoothing)
    nv = robot.nv
    u, a = ca.SX.sym("u", nv), ca.SX.sym("a", nv)
    sol = ca.solve(M, ca.horzcat(u - b, ca.jacobian(M @ a + b, x), ca.SX.eye(nv)))
    ddq = sol[:, 0]
    dx = -ca.substitute(sol[:, 1 : 1 + 2 * nv], a, ddq)
    du = sol[:, 1 + 2 * nv :]
    q, dq = x[:nv], x[nv:]
    eye, zero = ca.SX.eye(nv), ca.SX.zeros(nv, nv)
    # dq' = dq + h ddq, q' = q + h (dq + dq') / 2 = q + h dq + h² ddq / 2
    A = ca.vertcat(ca.horzcat(eye, h * eye), ca.horzcat(zero, eye)) + ca.vertcat(0.5 * h**2 * dx, h * dx)
    B = ca.vertcat(0.5 * h**2 * du, h * du)
    x_next = ca.vertcat(q + h * dq + 0.5 * h**2 * ddq, dq + h * ddq)
    return ca.Function("step_linearised", [x, u, v], [x_next, A, B, dx, du], ["x", "u", "v"], ["x_next", "A", "B", "D", "Mi"])


def update_function(
    step: ca.Function,
    knots: int,
    weights: MpcWeights,
    effort: np.ndarray,
    iterations: int = 1,
    linearisation: ca.Function | None = None,
    lower: np.ndarray | None = None,
    upper: np.ndarray | None = None,
    qp_iterations: int = IPM_ITERATIONS,
    step_size: float | None = None,
    qp_passes: int = box_qp.ACTIVE_SET_PASSES,
    qp_mu0: float = START_MU,
) -> ca.Function:
    """The whole update as one function (see the module docstring)::

        (x0, U_guess, R_x, U_ref) -> (U, X, u0, cost, path)

    ``x0`` (2nv,) the current state, ``U_guess`` (nv, N) the inputs to start from (the previous
    plan shifted to the current time), ``R_x`` (2nv, N+1) the reference states at the
    knots, ``U_ref`` (nv, N) its feed-forward torques; ``U``, ``X`` the new plan, ``u0`` its first
    input, ``cost`` its objective, ``path`` the subproblem's (:data:`~mbctl.ctrl.optimal.box_qp.PATHS`; over
    several iterations the furthest down that list). ``effort`` (nu,) bounds ``|u|``; ``lower``, ``upper``
    (nx,) bound the states of knots 1..N (positions, velocities; None or ±inf: no bound). ``linearisation``
    (:func:`linearisation_function`) gives the stages' Jacobians; None: CasADi's differentiation of
    ``step``. ``qp_passes``, ``qp_iterations``, ``qp_mu0``: the subproblem's active-set passes after the
    first, its interior point's iterations and start (:func:`~mbctl.ctrl.optimal.box_qp.solve`; the
    defaults solve it exactly, a real-time update caps them).
    """
    if iterations < 1:
        raise InputError(f"must be >= 1, got {iterations}", field="iterations")
    nx, nu = step.size1_in(0), step.size1_in(1)
    N = knots
    W = ca.DM(np.diag(np.concatenate([weights.q, weights.dq])))
    Wn = weights.terminal * W
    R = ca.DM(np.diag(weights.tau) if np.ndim(weights.tau) == 1 else np.asarray(weights.tau))
    big = ca.DM(_finite(effort, nu))
    x_lo = ca.DM(-_finite(None if lower is None else -np.asarray(lower, dtype=float), nx))
    x_hi = ca.DM(_finite(upper, nx))
    structured = linearisation is not None and step_size is not None
    stage, forward = _stage_functions(step, W, R, big, linearisation, structured)

    x0 = ca.MX.sym("x0", nx)
    U_prev = ca.MX.sym("U_guess", nu, N)
    Rx = ca.MX.sym("R_x", nx, N + 1)
    Uref = ca.MX.sym("U_ref", nu, N)

    U = [ca.fmin(ca.fmax(U_prev[:, k], -big), big) for k in range(N)]
    X = [x0]
    for k in range(N):
        X.append(_advance(step, X[k], U[k], Rx[:, k]))
    path = ca.MX(box_qp.PATH_ACTIVE_SET)
    for _ in range(iterations):
        A, B, q, r = [], [], [], []
        for k in range(N):
            a, b, qk, rk = stage(X[k], U[k], Rx[:, k], Uref[:, k])
            A.append(a)
            B.append(b)
            q.append(qk)
            r.append(rk)
        q.append(Wn @ (X[N] - Rx[:, N]))
        Ubar, Xbar = ca.horzcat(*U), ca.horzcat(*X)
        dU, dX, K, taken = box_qp.solve(
            LqStages(A, B, q, r, step_size if structured else None), W, Wn, R, -big - Ubar, big - Ubar, x_lo - Xbar, x_hi - Xbar, qp_passes, qp_iterations, qp_mu0
        )  # fmt: skip
        Xn, Un = [x0], []
        for k in range(N):
            u, x_next = forward(Xn[k], Xbar[:, k] + dX[:, k], Ubar[:, k] + dU[:, k], K[k], Rx[:, k])
            Un.append(u)
            Xn.append(x_next)
        X, U = Xn, Un
        path = ca.fmax(path, taken)
    cost = 0
    for k in range(N):
        e, du = X[k] - Rx[:, k], U[k] - Uref[:, k]
        cost = cost + 0.5 * (e.T @ W @ e + du.T @ R @ du)
    e = X[N] - Rx[:, N]
    cost = cost + 0.5 * e.T @ Wn @ e
    return ca.Function(
        "mpc_update", [x0, U_prev, Rx, Uref], [ca.horzcat(*U), ca.horzcat(*X), U[0], cost, path],
        ["x0", "U_guess", "R_x", "U_ref"], ["U", "X", "u0", "cost", "path"],
    )  # fmt: skip


def _finite(bound: np.ndarray | None, n: int) -> np.ndarray:
    """An upper bound (n,) with no bound (None, inf) as :data:`~mbctl.ctrl.optimal.box_qp.BIG`."""
    values = np.full(n, np.inf) if bound is None else np.broadcast_to(np.asarray(bound, dtype=float), (n,))
    return np.where(np.isfinite(values), values, box_qp.BIG)


def _advance(step: ca.Function, x, u, r):  # noqa: ANN001, ANN202  (SX or MX alike)
    """``step(x, u)``, or ``step(x, u, v)`` with the reference's velocity ``v`` (the lower half of ``r``)
    for a step that takes it (:func:`step_function`)."""
    return step(x, u, r[x.shape[0] // 2 :]) if step.n_in() == 3 else step(x, u)


def _stage_functions(
    step: ca.Function, W: ca.DM, R: ca.DM, big: ca.DM, linearisation: ca.Function | None, structured: bool = False
) -> tuple[ca.Function, ca.Function]:
    """One stage's linearisation and one step of the forward pass as SX functions (straight-line C):

    - ``stage(x, u, r, u_ref) -> (A, B, q, r_u)``, the step's Jacobians at ``(x, u)`` and the cost's
      gradients ``W (x - r)``, ``R (u - u_ref)``;
    - ``forward(x, x̂, û, K, r) -> (u, x')``, ``u = clip(û + K (x - x̂))`` with ``(x̂, û)`` the
      subproblem's solution at the stage, and ``x'`` the nonlinear step.
    """
    nx, nu = step.size1_in(0), step.size1_in(1)
    x, u, r, ur = ca.SX.sym("x", nx), ca.SX.sym("u", nu), ca.SX.sym("r", nx), ca.SX.sym("u_ref", nu)
    if linearisation is None:
        nxt = _advance(step, x, u, r)
        A, B = ca.jacobian(nxt, x), ca.jacobian(nxt, u)
    else:
        _, A, B, D, Mi = linearisation(x, u, r[nx // 2 :])
        if structured:
            A, B = D, Mi
    stage = ca.Function("stage_linearised", [x, u, r, ur], [A, B, W @ (x - r), R @ (u - ur)])
    xhat, uhat, K = ca.SX.sym("x_hat", nx), ca.SX.sym("u_hat", nu), ca.SX.sym("K", nu, nx)
    u_new = ca.fmin(ca.fmax(uhat + K @ (x - xhat), -big), big)
    forward = ca.Function("stage_forward", [x, xhat, uhat, K, r], [u_new, _advance(step, x, u_new, r)])
    return stage, forward
