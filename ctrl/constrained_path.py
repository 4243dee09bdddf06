"""Joint trajectories of mechanisms whose constraints fix every DOF (inverse kinematics along a path).

When the constraint rows (loop closures plus programmed paths, e.g. the 3-RRR's end
point following a spiral) have as many independent rows as the model has DOF, the
motion is determined by kinematics alone. At every sample time ``t_k``:

1. ``Phi(t_k, q) = 0`` by Newton from the previous sample extrapolated with its
   velocity (:meth:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics.assemble`, to ``tol``);
2. ``Phi_q dq = -Phi_t`` (velocity);
3. ``Phi_q ddq = gamma`` (acceleration).

The result is exact to the Newton tolerance at every sample (no integration drift).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.errors import SingularConstraintError
from mbctl.errors import ConfigError

__all__ = ["trajectory_from_constraints"]


def trajectory_from_constraints(
    dynamics: ConstrainedDynamics,
    t: np.ndarray,
    q_guess: np.ndarray,
    *,
    tol: float = 1e-12,
    min_sigma_ratio: float = 1e-6,
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
            f"the constraints have {cs.m} rows for {nv} DOF; sampling a motion from constraints needs exactly "
            f"{nv} position-level rows that fix every DOF",
            file=robot.source,
            field="constraints",
        )
    t = np.asarray(t, dtype=float)
    n = len(t)
    q = np.empty((n, nv))
    dq = np.empty((n, nv))
    ddq = np.empty((n, nv))
    guess, velocity = np.asarray(q_guess, dtype=float).copy(), np.zeros(nv)
    for k, tk in enumerate(t):
        if k > 0:
            guess = q[k - 1] + dq[k - 1] * (tk - t[k - 1])
        qk, dqk = dynamics.assemble(tk, guess, velocity, tol=tol)
        cv = dynamics.constraints.evaluate(dynamics.kinematics(qk, dqk), tk)
        s = np.linalg.svd(cv.jac, compute_uv=False)
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
        dq[k] = np.linalg.solve(cv.jac, -cv.phi_t)
        ddq[k] = np.linalg.solve(cv.jac, cv.gamma)
        velocity = dq[k]
        if progress is not None and (k + 1) % 1000 == 0:
            progress(k + 1, n)
    return Trajectory(t=t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)
