"""The robot's dynamics as the estimators and the momentum observer use them (CasADi SX).

Equations (pinocchio order, SI units), with friction ``Q_f(dq) = -F(dq)`` of every joint's law::

    M(q) ddq + C(q, dq) dq + g(q) = tau + Q_f(dq) + tau_ext
    p = M(q) dq,   dp/dt = tau + C(q, dq)^T dq - g(q) + Q_f(dq) + tau_ext

``C^T dq`` is the gradient of the kinetic energy ``T = dq^T M(q) dq / 2`` with respect to ``q``
(``dM/dt = C + C^T``), so no Christoffel symbols are built.

Friction: the laws of :class:`~mbctl.dynamics.forces.JointFriction` with the sign smoothed as
``tanh(v / v_eps)``, ``v_eps`` = :data:`FRICTION_SMOOTHING` (an estimated velocity dithers
around zero at rest: a sharp sign would make a torque of ``2 fc`` out of noise); a LuGre joint by
its steady curve (the estimator carries no bristle state); load-dependent friction at unit load.
The velocity prediction is semi-implicit in friction, as the plant's steps
(:mod:`mbctl.dynamics.simulation.stepper`): ``(M + h D) dv = h (tau - h(q, dq) + Q_f)`` with
``D`` the diagonal friction slope, stable for any friction stiffness.
"""

from __future__ import annotations

from functools import cached_property

import casadi as ca

from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.friction.laws import JointFriction as JointLaw
from mbctl.dynamics.friction.laws import LuGre, simplify_law
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.compiled_forces import friction_damping_of, friction_of
from mbctl.dynamics.simulation.structure import ParameterVector, parametrize_robot, twin
from mbctl.dynamics.symbolic import SymbolicDynamics

__all__ = ["FRICTION_SMOOTHING", "EstimationModel", "estimation_robot"]

FRICTION_SMOOTHING = 0.01
"""``v_eps`` (rad/s, m/s) of the smoothed friction sign in the estimators' and observer's model."""


def estimation_robot(robot: RobotModel) -> RobotModel:
    """``robot`` with LuGre laws replaced by their steady curves and load models dropped."""
    changed = {}
    for j in robot.joints:
        if j.friction is None or (j.friction.load is None and not isinstance(j.friction.law, LuGre)):
            continue
        changed[j.name] = JointLaw(simplify_law(j.friction.law, "stribeck"))
    return robot.with_friction(changed) if changed else robot


class EstimationModel:
    """Symbolic dynamics with friction of a robot, for the estimation step (see the module docstring).

    Args:
        robot: The controller's model.
        vec: Collects the robot's numbers (inertial parameters, rotor inertias, friction
            coefficients; the order of :func:`~mbctl.dynamics.simulation.structure.parametrize_robot`)
            as parameters: symbols, so that one generated function serves every robot of the
            same structure, or values, to fill that input. None: the numbers are constants.
    """

    def __init__(self, robot: RobotModel, vec: ParameterVector | None = None):
        self.robot = estimation_robot(robot)
        self.nv = robot.nv
        self.friction = JointFriction(self.robot, smoothing=FRICTION_SMOOTHING)
        self._parameters = ca.SX(0, 1)  # the parameter symbols, when there are any
        if vec is None:
            self.sd = SymbolicDynamics(self.robot)
            self._static = [law for _, law, _ in self.friction._static]
            return
        params = parametrize_robot(self.robot, (), vec)
        self.sd = SymbolicDynamics(self.robot, bodies=params.bodies, armature=params.armature)
        names = self.robot.joint_names
        self._static = [twin(law, f"{names[i]}.friction", vec) for i, law, _ in self.friction._static]
        self._parameters = vec.symbols if vec.symbolic else ca.SX(0, 1)

    def friction_force(self, dq: ca.SX) -> ca.SX:
        """``Q_f(dq) = -F(dq)`` (N·m, N per DOF)."""
        Q, _, _ = friction_of(self.friction, dq, ca.SX(0, 1), self.nv, self._static, [])
        return Q

    def friction_slope(self, dq: ca.SX) -> ca.SX:
        """Diagonal ``dF/dv`` (N·m·s/rad, N·s/m; >= 0) per DOF."""
        D = ca.SX.zeros(self.nv)
        for i, slope in friction_damping_of(self.friction, dq, self._static, [], FRICTION_SMOOTHING):
            D[i] = slope
        return D

    def velocity_increment(self, q: ca.SX, dq: ca.SX, tau: ca.SX, h: ca.SX, f: ca.SX | float = 1.0) -> ca.SX:
        """``dv`` over ``h`` seconds under generalized forces ``tau``, friction implicit:
        ``M dv = h (tau - bias(q, dq) + f Q_f(dq + dv))``, ``f`` the share of the joint friction that acts
        beyond ``tau`` (0 where ``tau`` is measured behind it).

        Solved by the semi-implicit step ``(M + h f D(dq)) dv = h (tau - bias + f Q_f(dq))`` (``D`` the
        friction slope), then one Newton step of the implicit equation from there, kept where it brings
        the equation's residual down. The semi-implicit step alone stops a joint that breaks away: at rest
        the smoothed friction's slope is ``fc / v_eps`` (hundreds of N·m·s/rad), which it keeps over the
        whole step, and the estimate then lagged the arm's first millisecond of a minimum-time move by a
        third of its velocity (12 N·m on the UR5's elbow in the momentum observer); the Newton step takes
        the slope where the joint arrives. Unguarded, it overshoots where it arrives on the flat part of
        the friction curve while the joint sticks (a light joint, friction far above its inertia over a
        step: the UR5's wrist 3 diverged within 20 samples of irregular timing)."""
        M = self.sd.mass_matrix_of(q)
        known = tau - self.sd.bias_of(q, dq)

        def residual(dv):  # noqa: ANN001, ANN202
            return h * (known + f * self.friction_force(dq + dv)) - ca.mtimes(M, dv)

        dv = ca.solve(M + h * f * ca.diag(self.friction_slope(dq)), h * (known + f * self.friction_force(dq)))
        before = residual(dv)
        newton = dv + ca.solve(M + h * f * ca.diag(self.friction_slope(dq + dv)), before)
        return ca.if_else(ca.norm_inf(residual(newton)) < ca.norm_inf(before), newton, dv)

    def momentum(self, q: ca.SX, dq: ca.SX, f: ca.SX | float = 1.0) -> tuple[ca.SX, ca.SX, ca.SX, ca.SX]:
        """``(p, beta, g, m)``: momentum ``M dq``, ``beta = C^T dq - g + f Q_f`` (so ``dp/dt = tau + beta +
        tau_ext``; ``f`` as in :meth:`velocity_increment`), gravity ``g(q)`` and the diagonal ``m`` of ``M(q)``."""
        p, beta, friction, g, m = self._momentum_function(q, dq, self._parameters)
        return p, beta + f * friction, g, m

    @cached_property
    def _momentum_function(self) -> ca.Function:
        """``(q, dq, parameters) -> (p, C^T dq - g, Q_f, g, m)`` on symbols (the gradient needs them), called on expressions."""
        q, dq = ca.SX.sym("q", self.nv), ca.SX.sym("dq", self.nv)
        M = self.sd.mass_matrix_of(q)
        g = self.sd.gravity_of(q)
        ct_dq = ca.gradient(0.5 * ca.dot(dq, ca.mtimes(M, dq)), q)
        return ca.Function("momentum", [q, dq, self._parameters], [ca.mtimes(M, dq), ct_dq - g, self.friction_force(dq), g, ca.diag(M)])
