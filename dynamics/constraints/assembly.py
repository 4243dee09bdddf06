"""States on the constraints: assembly (``Phi = 0``, ``dPhi/dt = 0``) and static equilibrium.

Newton's method for both, written once and used by
:meth:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics.assemble` and
:meth:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics.equilibrate` (the interpreted
rows), by :func:`mbctl.ctrl.constrained_path.trajectory_from_constraints` (the generated rows)
and by :func:`mbctl.dynamics.flexible.modal.static_equilibrium` (no rows, drives held).

**Assembly** (:func:`assemble`). Gauss–Newton on the position-level rows over the free
coordinates, ``dq_free = -A_free^+ Phi`` (minimum-norm steps, or LU for square independent
rows), each step halved until ``max|Phi|`` decreases, until ``max|Phi| < tol`` (m, rad); then
the minimum-norm velocity correction that makes ``A dq + Phi_t = 0``. A guess near the wanted
branch (e.g. elbow up) converges to that branch.

**Static equilibrium** (:func:`equilibrium`). At rest, with the force elements ``Q(q, 0)``
(springs; friction is zero at rest), the generalized gravity ``g(q)`` (N·m, N) and the
constraint forces ``A^T lambda``,

```
R(q, lambda) = Q(q, 0) - g(q) - A(q)^T lambda = 0     (rows of the free coordinates)
Phi(t, q) = 0                                         (position-level rows)
```

solved by Newton's method on ``(q_free, lambda)`` with minimum-norm steps (redundant rows
allowed), ``dR/dq`` by central differences (:func:`central_differences`), the other blocks exact
(``-A^T``, ``A``), each step halved until the largest scaled residual decreases. Without rows
it is the held-joint balance ``Q - g = 0`` of the free coordinates, whose ``-dR/dq`` is the
stiffness of the modal check.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.dynamics.forces import ForceElement
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["Assembly", "Equilibrium", "RestForces", "assemble", "central_differences", "equilibrium"]

#: ``(q, dq) -> (phi, jac, phi_t)`` of the rows (m or rad, (m, nv), m/s or rad/s).
RowsAt = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]

_HALVINGS = 30  # step halvings before a Newton step counts as stalled


@dataclass(frozen=True, eq=False)
class Assembly:
    """Result of :func:`assemble`.

    Attributes:
        q: Coordinates (rad, m) after the position Newton.
        dq: Velocities (rad/s, m/s) after the velocity correction.
        position_error: ``max|Phi|`` over the position-level rows (m, rad).
        velocity_error: ``max|A dq + Phi_t|`` over every row (m/s, rad/s).
        iterations: Newton steps taken.
        converged: ``position_error < tol`` (the velocities are then corrected).
    """

    q: np.ndarray
    dq: np.ndarray
    position_error: float
    velocity_error: float
    iterations: int
    converged: bool

    @property
    def consistent_velocity(self) -> bool:
        """``max|A dq + Phi_t| <= 1e-9 max(1, max|dq|)``: the velocity rows hold together."""
        return self.velocity_error <= 1e-9 * max(1.0, float(np.abs(self.dq).max(initial=0.0)))


def _min_norm(J: np.ndarray, r: np.ndarray, rcond: float) -> np.ndarray:
    return np.linalg.lstsq(J, r, rcond=rcond)[0]


def assemble(
    rows: RowsAt,
    q: np.ndarray,
    dq: np.ndarray,
    *,
    position: np.ndarray | None = None,
    free: np.ndarray | None = None,
    tol: float = 1e-12,
    max_iterations: int = 50,
    square: bool = False,
) -> Assembly:
    """Move ``(q, dq)`` onto the rows (module docstring).

    Args:
        rows: The rows at ``(q, dq)``.
        q: Start coordinates (rad, m).
        dq: Start velocities (rad/s, m/s).
        position: Mask of the position-level rows (default: every row).
        free: Indices of the coordinates that may move (default: every one).
        tol: Largest ``|Phi|`` accepted (m, rad).
        max_iterations: Newton steps allowed.
        square: The position rows are as many as the free coordinates and independent:
            LU steps (a singular matrix stops the Newton, not converged) instead of the
            SVD's minimum-norm ones.

    Returns:
        The :class:`Assembly`; not converged when Newton runs out of steps, stalls or
        meets a non-finite ``Phi`` (the caller raises or falls back).
    """
    q = np.array(q, dtype=float)
    dq = np.array(dq, dtype=float)
    free = np.arange(len(q)) if free is None else free
    phi, jac, phi_t = rows(q, dq)
    pos = np.ones(len(phi), dtype=bool) if position is None else position
    err = float(np.abs(phi[pos]).max(initial=0.0))
    iteration = 0
    while not err < tol:
        if iteration == max_iterations or not math.isfinite(err):
            return Assembly(q, dq, err, math.nan, iteration, False)
        J, r = jac[pos][:, free], -phi[pos]
        if square:
            try:
                step = np.linalg.solve(J, r)
            except np.linalg.LinAlgError:
                return Assembly(q, dq, err, math.nan, iteration, False)
        else:
            step = _min_norm(J, r, 1e-10)
        for _ in range(_HALVINGS):  # far starts diverge with full steps
            trial = q.copy()
            trial[free] += step
            phi_trial, jac_trial, phi_t_trial = rows(trial, dq)
            trial_err = float(np.abs(phi_trial[pos]).max(initial=0.0))
            if trial_err < err:
                break
            step = 0.5 * step
        else:
            return Assembly(q, dq, err, math.nan, iteration, False)
        q, phi, jac, phi_t, err = trial, phi_trial, jac_trial, phi_t_trial, trial_err
        iteration += 1
    dphi = jac @ dq + phi_t
    if square:
        try:
            dq[free] -= np.linalg.solve(jac[:, free], dphi)
        except np.linalg.LinAlgError:
            return Assembly(q, dq, err, math.nan, iteration, False)
    else:
        dq[free] -= _min_norm(jac[:, free], dphi, 1e-10)
    velocity_error = float(np.abs(jac @ dq + phi_t).max(initial=0.0))
    return Assembly(q, dq, err, velocity_error, iteration, True)


class RestForces:
    """``q -> (Q(q, 0), g(q))``: the force elements at rest in their initial states and the
    generalized gravity (each (nv,), N·m, N), at time ``t`` (s). Owns one pinocchio ``Data``."""

    def __init__(self, robot: RobotModel, elements: Sequence[ForceElement], t: float = 0.0):
        self.robot = robot
        self.t = t
        self._elements = [(element, element.initial_state()) for element in elements]
        self._data = robot.create_data()
        self._zero = np.zeros(robot.nv)

    def __call__(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Q = np.zeros(self.robot.nv)
        for element, s0 in self._elements:
            Q += element(self.t, q, self._zero, s0)[0]
        return Q, pin.computeGeneralizedGravity(self.robot.model, self._data, self.robot.configuration(q))


def central_differences(fun: Callable[[np.ndarray], np.ndarray], q: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """``d fun/dq`` over the coordinates ``columns``, ``(fun(q + h e_i) - fun(q - h e_i)) / 2h``
    with ``h = 1e-7 max(1, |q_i|)`` (rad, m); shape ``(len(fun(q)), len(columns))``."""
    out = None
    for c, i in enumerate(columns):
        h = 1e-7 * max(1.0, abs(q[i]))
        qp, qm = q.copy(), q.copy()
        qp[i] += h
        qm[i] -= h
        d = (fun(qp) - fun(qm)) / (2 * h)
        if out is None:
            out = np.empty((len(d), len(columns)))
        out[:, c] = d
    return np.zeros((0, 0)) if out is None else out


@dataclass(frozen=True, eq=False)
class Equilibrium:
    """Result of :func:`equilibrium`.

    Attributes:
        q: Coordinates (rad, m).
        lam: Multipliers (m,): the rows' static forces (N, N·m), ``A^T lambda`` in ``R``.
        force_residual: ``max|R|`` over the free coordinates (N·m, N).
        position_error: ``max|Phi|`` over the position-level rows (m, rad).
        scale: ``1 + max(max|Q|, max|g|)`` at the start (N·m, N): ``tol`` is relative to it.
        converged: Both residuals within their tolerances.
    """

    q: np.ndarray
    lam: np.ndarray
    force_residual: float
    position_error: float
    scale: float
    converged: bool


def equilibrium(
    rest: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]],
    q: np.ndarray,
    free: np.ndarray,
    rows: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None,
    *,
    position: np.ndarray | None = None,
    tol: float = 1e-10,
    max_iterations: int = 50,
) -> Equilibrium:
    """Static equilibrium near ``q`` (module docstring).

    Args:
        rest: ``q -> (Q(q, 0), g(q))`` (:class:`RestForces`).
        q: Start (nv,) (rad, m); the coordinates not in ``free`` keep their values.
        free: Indices of the coordinates to solve for.
        rows: ``q -> (A, Phi)`` of the constraint rows ((m, nv), (m,); NaN ``Phi`` for
            velocity-level rows), or None for none.
        position: Mask of the position-level rows (default: every row).
        tol: Largest ``|R|`` accepted relative to :attr:`Equilibrium.scale`; the position rows
            must also vanish to 1e-12 (m, rad).
        max_iterations: Newton steps allowed.
    """
    q = np.array(q, dtype=float)
    nf = len(free)

    def terms(qq: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        Q, g = rest(qq)
        A, phi = rows(qq) if rows is not None else (np.zeros((0, len(qq))), np.zeros(0))
        return Q, g, A, phi

    Q, g, A, phi = terms(q)
    pos = np.ones(len(phi), dtype=bool) if position is None else position
    F = Q - g
    lam = _min_norm(A[:, free].T, F[free], None) if len(phi) else np.zeros(0)
    scale = 1.0 + max(np.abs(Q).max(initial=0.0), np.abs(g).max(initial=0.0))

    def residual(F: np.ndarray, A: np.ndarray, phi: np.ndarray, lam: np.ndarray) -> np.ndarray:
        return np.concatenate([(F[free] - A[:, free].T @ lam) / scale, phi[pos]])

    def balance(qq: np.ndarray) -> np.ndarray:  # R(q, lambda) / scale at fixed lambda
        Q, g, A, _ = terms(qq)
        return ((Q - g)[free] - A[:, free].T @ lam) / scale

    res = residual(F, A, phi, lam)
    for iteration in range(max_iterations + 1):
        force_residual = float(np.abs(res[:nf]).max(initial=0.0)) * scale
        position_error = float(np.abs(res[nf:]).max(initial=0.0))
        if force_residual <= tol * scale and position_error < 1e-12:
            return Equilibrium(q, lam, force_residual, position_error, scale, True)
        if iteration == max_iterations:
            break
        J = np.zeros((len(res), nf + len(lam)))
        J[:nf, :nf] = central_differences(balance, q, free)
        J[:nf, nf:] = -A[:, free].T / scale
        J[nf:, :nf] = A[pos][:, free]
        step = _min_norm(J, -res, 1e-12)
        err = np.abs(res).max()
        for _ in range(_HALVINGS):  # far starts diverge with full steps
            q_trial = q.copy()
            q_trial[free] += step[:nf]
            lam_trial = lam + step[nf:]
            Q, g, A_trial, phi_trial = terms(q_trial)
            res_trial = residual(Q - g, A_trial, phi_trial, lam_trial)
            if np.abs(res_trial).max() < err:
                break
            step = 0.5 * step
        q, lam, A, res = q_trial, lam_trial, A_trial, res_trial
    return Equilibrium(q, lam, force_residual, position_error, scale, False)
