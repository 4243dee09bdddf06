"""Joint trajectories of mechanisms whose constraints fix every DOF (inverse kinematics along a path).

When the constraint rows (loop closures plus programmed paths, e.g. the 3-RRR's end
point following a spiral) have as many independent rows as the model has DOF, the
motion is determined by kinematics alone. At every sample time ``t_k``:

1. ``Phi(t_k, q) = 0`` by Newton from the previous sample extrapolated with its
   velocity (:meth:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics.assemble`, to ``tol``);
2. ``Phi_q dq = -Phi_t`` (velocity);
3. ``Phi_q ddq = gamma`` (acceleration).

The result is exact to the Newton tolerance at every sample (no integration drift).

With ``compiled`` (the default) the rows, their Jacobian, ``Phi_t`` and ``gamma`` come from
one generated function (:func:`~mbctl.dynamics.simulation.compiled.constraint_kinematics_function`)
and the same Newton (:func:`~mbctl.dynamics.constraints.assembly.assemble`) runs on it, the first guess extrapolated to second order
(``q + dq h + ddq h^2/2``): three evaluations of a few µs per sample instead of about
five interpreted ones of ~100 µs. Constraint kinds the generated core does not cover, and
any sample where that Newton fails, use the interpreted assembly; both stop at the same
tolerance, so they agree to it.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.constraints.assembly import assemble
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.errors import SingularConstraintError
from mbctl.errors import ConfigError

__all__ = ["compiled_constraint_rows", "trajectory_from_constraints"]


def trajectory_from_constraints(
    dynamics: ConstrainedDynamics,
    t: np.ndarray,
    q_guess: np.ndarray,
    *,
    tol: float = 1e-12,
    min_sigma_ratio: float = 1e-6,
    compiled: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> Trajectory:
    """Sample the motion the constraints prescribe at the times ``t`` (s).

    Args:
        dynamics: Holds the robot and the constraint rows (its solver is not used).
        t: Sample times (s), strictly increasing.
        q_guess: Guess of the configuration at ``t[0]`` (picks the assembly branch).
        tol: Largest ``|Phi|`` accepted at every sample (m or rad).
        min_sigma_ratio: Smallest ``s_min/s_max`` of ``Phi_q`` accepted (distance from a
            singular configuration).
        compiled: Newton on the generated constraint function where the constraint kinds allow it.

    Raises:
        ConfigError: If the constraints do not fix every DOF (fewer independent rows
            than DOF, or more rows than DOF).
        SingularConstraintError: At a near-singular configuration (time and q named).
        InconsistentConstraintsError: If Newton does not converge at a sample.
    """
    robot = dynamics.robot
    nv = robot.nv
    cs = dynamics.constraints
    if cs.m != nv or np.any(cs.level != 2):
        raise ConfigError(
            f"the constraints have {cs.m} rows for {nv} DOF; sampling a motion from constraints needs exactly {nv} position-level rows that fix every DOF",
            file=robot.source,
            field="constraints",
        )
    t = np.asarray(t, dtype=float)
    n = len(t)
    q = np.empty((n, nv))
    dq = np.empty((n, nv))
    ddq = np.empty((n, nv))
    guess, velocity = np.asarray(q_guess, dtype=float).copy(), np.zeros(nv)
    rows = compiled_constraint_rows(dynamics) if compiled else None
    for k, tk in enumerate(t):
        if k > 0:
            h = tk - t[k - 1]
            guess = q[k - 1] + dq[k - 1] * h + 0.5 * ddq[k - 1] * h * h
        sample = _assemble_compiled(rows, tk, guess, tol) if rows is not None else None
        if sample is None:
            qk, dqk = dynamics.assemble(tk, guess, velocity, tol=tol)
            cv = dynamics.constraints.evaluate(dynamics.kinematics(qk, dqk), tk)
            jac, phi_t, gamma = cv.jac, cv.phi_t, cv.gamma
        else:
            qk, jac, phi_t, gamma = sample
        s = np.linalg.svd(jac, compute_uv=False)
        if not s[-1] > min_sigma_ratio * s[0]:
            raise SingularConstraintError(
                f"the constraint Jacobian is singular at t = {tk:.6g} s (s_min/s_max = {s[-1] / s[0]:.3g}) at q = "
                f"({dynamics.describe(qk)}); the path cannot be followed there",
                file=robot.source,
                field="constraints",
                time=float(tk),
                q=qk,
            )
        q[k] = qk
        dq[k] = np.linalg.solve(jac, -phi_t)
        ddq[k] = np.linalg.solve(jac, gamma)
        velocity = dq[k]
        if progress is not None and (k + 1) % 1000 == 0:
            progress(k + 1, n)
    return Trajectory(t=t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)


def compiled_constraint_rows(dynamics: ConstrainedDynamics) -> CompiledFunction | None:
    """The generated ``(t, q, dq) -> (phi, jac, phi_t, gamma)``, or None where the kinds need the interpreted rows."""
    from mbctl.dynamics.simulation.compiled import NotCompilable, constraint_kinematics_function

    try:
        return compile_function(constraint_kinematics_function(dynamics))
    except NotCompilable:
        return None


def _assemble_compiled(rows: CompiledFunction, t: float, q: np.ndarray, tol: float):
    """``Phi(q, t) = 0`` on the generated rows (:func:`mbctl.dynamics.constraints.assembly.assemble`, square
    Jacobian, LU steps); then ``(q, A, Phi_t, gamma)`` at the solution with ``dq = -A^-1 Phi_t``. None if it does
    not converge (the caller falls back to the interpreted assembly)."""
    nv = len(q)

    def evaluate(qk: np.ndarray, dqk: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        phi, jac, phi_t, gamma = rows(t, qk, dqk)
        return phi.ravel(), jac.reshape(-1, nv, order="F") if jac.ndim == 1 else jac, phi_t.ravel(), gamma.ravel()

    found = assemble(lambda qk, dqk: evaluate(qk, dqk)[:3], q, np.zeros(nv), tol=tol, square=True)
    if not found.converged:
        return None
    _, jac, phi_t, gamma = evaluate(found.q, found.dq)
    return found.q, jac, phi_t, gamma
