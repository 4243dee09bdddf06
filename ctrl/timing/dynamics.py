"""The robot's torques along a geometric path, as functions of the path speed and acceleration.

On a path ``q(s)`` with ``b = sdot^2`` and ``a = sddot`` the joint motion is
``dq = q' sqrt(b)``, ``ddq = q' a + q'' b``, and the rigid-body torque is linear in ``(a, b)``::

    tau_rigid = M(q) q' a + (M(q) q'' + C(q, q') q') b + g(q)
              = tau_a a + tau_b b + tau_0

with ``tau_0 = RNEA(q, 0, 0)``, ``tau_a = RNEA(q, 0, q') - tau_0`` and
``tau_b = RNEA(q, q', q'') - tau_0`` (RNEA is quadratic in the velocity, linear in the
acceleration). The friction torque is evaluated with the robot's own inverse dynamics
(:class:`~mbctl.dynamics.inverse.InverseDynamics`: every law of
:mod:`mbctl.dynamics.friction.laws`, LuGre at its steady state, normal loads from the joint
reaction wrenches, which are linear in ``(a, b)`` like the torques) at the joint motion
``(q, q' sqrt(b), q' a + q'' b)``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from mbctl.ctrl.timing.path import GeometricPath
from mbctl.dynamics.friction.laws import CoulombViscous
from mbctl.dynamics.inverse import InverseDynamics
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["PathDynamics", "path_dynamics"]

# friction is evaluated at b >= this (rad²/s² per unit s²) so that a joint starting from rest
# meets the friction of its direction of motion (sgn q') and not the rest value 0
_B_FLOOR = 1e-12


@dataclass(frozen=True, eq=False)
class PathDynamics:
    """Path derivatives and torque coefficients at grid points ``s`` (N+1,); arrays (N+1, nv)
    in the robot's DOF order (N·m or N per unit of ``a``, ``b``).

    Attributes:
        robot: The robot whose friction the torques include.
        s: Grid of path parameters in [0, 1].
        q, dq_ds, ddq_ds, dddq_ds: ``q(s)`` and its first three derivatives.
        tau_a, tau_b, tau_0: Rigid torque ``tau_a a + tau_b b + tau_0``.
    """

    robot: RobotModel
    s: np.ndarray
    q: np.ndarray
    dq_ds: np.ndarray
    ddq_ds: np.ndarray
    dddq_ds: np.ndarray
    tau_a: np.ndarray
    tau_b: np.ndarray
    tau_0: np.ndarray
    inverse: InverseDynamics

    @cached_property
    def has_friction(self) -> bool:
        return any(j.friction is not None for j in self.robot.joints)

    @cached_property
    def friction_is_constant(self) -> bool:
        """True when every joint's friction is Coulomb without load model: then it is
        ``fc sgn(q')`` along the path, the same for every ``(a, b)`` with ``b > 0``."""
        return all(
            j.friction is None or (isinstance(j.friction.law, CoulombViscous) and j.friction.law.fv == 0 and j.friction.load is None)
            for j in self.robot.joints
        )

    @cached_property
    def load_dependent(self) -> bool:
        return any(j.friction is not None and j.friction.load is not None for j in self.robot.joints)

    def friction(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Friction torque (N+1, nv) at path accelerations ``a`` and squared speeds ``b`` (N+1,)."""
        if not self.has_friction:
            return np.zeros_like(self.q)
        b = np.maximum(np.asarray(b, dtype=float), _B_FLOOR)[:, None]
        a = np.asarray(a, dtype=float)[:, None]
        return self.inverse(self.q, self.dq_ds * np.sqrt(b), self.dq_ds * a + self.ddq_ds * b).tau_friction

    def linearised_friction(self, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(f0, fa, fb)`` with ``friction ~ f0 + fa (a' - a) + fb (b' - b)`` near ``(a, b)``, by forward secants
        (relative steps 1e-3). ``fa`` is nonzero only with load-dependent friction. ``fb`` is capped at
        ``|tau_a| / (4 ds)``: a steeper slope (viscous friction near rest, ``d sqrt(b)/db`` unbounded) would let a
        faster profile at one grid point force a slower one at the next, and the reachability passes' greedy
        step would no longer be optimal; the cap changes no fixed point (the model is exact at ``(a, b)``)."""
        f0 = self.friction(a, b)
        hb = 1e-3 * b + 1e-6 * max(float(b.max()), 1.0)
        cap = 0.25 * np.abs(self.tau_a) / (self.s[1] - self.s[0])
        fb = np.clip((self.friction(a, b + hb) - f0) / hb[:, None], -cap, cap)
        fa = np.zeros_like(f0)
        if self.load_dependent:
            ha = 1e-3 * np.abs(a) + 1e-6 * max(float(np.abs(a).max()), 1.0)
            fa = (self.friction(a + ha, b) - f0) / ha[:, None]
        return f0, fa, fb

    def torque(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Total torque (N+1, nv): rigid part plus :meth:`friction`."""
        return self.tau_a * a[:, None] + self.tau_b * b[:, None] + self.tau_0 + self.friction(a, b)


def path_dynamics(robot: RobotModel, path: GeometricPath, s: np.ndarray) -> PathDynamics:
    """Evaluate the path and the torque coefficients of ``robot`` at the grid ``s``.

    ``path`` must hold every DOF of the robot (its columns are reordered to the robot's).
    """
    path = path.columns(robot.joint_names) if path.joint_names != robot.joint_names else path
    q, d1, d2, d3 = path(s)
    inverse = InverseDynamics(robot, lugre="steady", threads=1)  # small batches: threads cost more than they give
    zero = np.zeros_like(q)
    tau_0 = inverse(q, zero, zero).tau_rigid
    tau_a = inverse(q, zero, d1).tau_rigid - tau_0
    tau_b = inverse(q, d1, d2).tau_rigid - tau_0
    return PathDynamics(robot, np.asarray(s, dtype=float), q, d1, d2, d3, tau_a, tau_b, tau_0, inverse)
