"""Forward dynamics with joint friction, stepped semi-implicitly for real-time plants.

Equations of motion (pinocchio order, SI units), with the joint friction
``Q_f(dq, s) = -F`` of :class:`mbctl.dynamics.forces.JointFriction` (LuGre bristle states
``s``)::

    M(q) ddq + h(q, dq) = tau + Q_f(dq, s) + Q_e(q, dq)

with ``Q_e`` the springs and dampers of elastic DOF (flexible base, rigid finite
elements; :class:`mbctl.dynamics.flexible.elastic.ElasticForces`), if the robot has any.
A joint with a servo (``[joints.<name>.actuator]``, :mod:`mbctl.dynamics.actuator`) adds
the servo's torque for its goal position to ``tau``, its damping to ``C`` and its
armature to ``M``'s diagonal; a servo with LuGre gearbox friction adds its bristle state
to ``s``, after the joints' (:attr:`FrictionStepper.servo_states`), advanced like theirs.

One step of length ``dt`` (:meth:`FrictionStepper.step`):

1. LuGre states advance exactly at the current velocity (:meth:`LuGre.z_step`);
2. velocities solve ``(M + dt*C + dt^2*K) (dq' - dq) = dt*(tau + Q_f + Q_e - h)``, where
   ``C`` is the diagonal friction and elastic damping ``dF/dv`` and ``K`` the diagonal
   spring stiffness — implicit in the stiff terms, so bristle damping, the smoothed
   Coulomb sign and stiff elastic elements (kHz modes of a flexible link) stay stable
   at any ``dt`` (modes far above ``1/dt`` are damped, not resolved);
3. positions follow the new velocities: ``q' = q + dt*dq'`` (symplectic Euler).

The method is first-order accurate; use substeps (``dt`` of 0.1–0.5 ms) for
accuracy. Static laws are set-valued at rest; their sign is smoothed as
``tanh(v/v_smooth)`` (``v_smooth`` default 1e-3 rad/s), so a joint held below
break-away creeps at a speed of order ``v_smooth*tau/fs``; use LuGre for true
sticking. For accurate constrained or adaptive simulation use :mod:`mbctl.dynamics.simulation.integrate`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.dynamics.actuator import ServoActuator, robot_servos
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["FrictionStepper", "PlantState"]


@dataclass
class PlantState:
    """DOF positions (rad, m), velocities (rad/s, m/s) and LuGre bristle states (rad, m)."""

    q: np.ndarray
    dq: np.ndarray
    s: np.ndarray


class FrictionStepper:
    """Semi-implicit stepper of a robot's forward dynamics with friction.

    Args:
        robot: The (truth) model, with its friction laws.
        v_smooth: Velocity scale of the smoothed sign of static laws (rad/s or m/s).
        servos: Servo of a joint by name (default: the robot's ``[joints.<name>.actuator]``);
            :attr:`servo_names` lists them in the robot's joint order. The plant state's
            ``s`` holds the joints' LuGre states, then those of the servos with LuGre
            friction (:attr:`servo_states`: their positions in :attr:`servo_names`).
    """

    def __init__(self, robot: RobotModel, *, v_smooth: float = 1e-3, servos: Mapping[str, ServoActuator] | None = None):
        self.robot = robot
        self.friction = JointFriction(robot, smoothing=v_smooth)
        self.elastic = ElasticForces(robot) if robot.is_elastic else None
        self._data = robot.create_data()
        servos = robot_servos(robot) if servos is None else servos
        self.servo_names = tuple(j.name for j in robot.joints if j.name in servos)
        self.servos = tuple(servos[n] for n in self.servo_names)
        self._servo_v = np.array([robot.joint(n).idx_v for n in self.servo_names], dtype=int)
        self._servo_armature = np.array([s.joint_armature() for s in self.servos])
        self.servo_states = tuple(k for k, s in enumerate(self.servos) if s.stateful)
        self._joint_states = len(self.friction.initial_state())

    def initial(self, q0: np.ndarray) -> PlantState:
        """At rest at ``q0`` with relaxed bristles."""
        s = np.concatenate([self.friction.initial_state(), np.zeros(len(self.servo_states))])
        return PlantState(q=np.array(q0, dtype=float), dq=np.zeros(self.robot.nv), s=s)

    def step(self, state: PlantState, tau: np.ndarray, dt: float, goal: np.ndarray | None = None) -> PlantState:
        """Advance ``dt`` seconds holding the generalized forces ``tau`` (N·m, N) and the servos'
        goal positions ``goal`` (rad, one per :attr:`servo_names`; NaN or None: the servo's
        motor is off, its friction stays)."""
        model, data = self.robot.model, self._data
        nf = self._joint_states
        s = self.friction.step_states(state.dq, state.s[:nf], dt)
        servo_z = np.zeros(len(self.servos))
        for j, k in enumerate(self.servo_states):
            servo_z[k] = self.servos[k].z_step(float(state.s[nf + j]), float(state.dq[self._servo_v[k]]), dt)
        qp = self.robot.configuration(state.q)
        M = pin.crba(model, data, qp)
        M = np.triu(M) + np.triu(M, 1).T
        h = pin.nonLinearEffects(model, data, qp, state.dq)
        Q, _ = self.friction(0.0, state.q, state.dq, s)
        C = self.friction.damping(state.dq, s)
        if self.elastic is not None:
            Qe, _ = self.elastic(0.0, state.q, state.dq, np.zeros(0))
            Q = Q + Qe
            C = C + self.elastic.damping(state.dq, s) + dt * self.elastic.stiffness(state.q)
        if self.servos:
            tau, C = np.array(tau, dtype=float), np.array(C, dtype=float)
            M[self._servo_v, self._servo_v] += self._servo_armature
            for k, (servo, iv) in enumerate(zip(self.servos, self._servo_v)):
                target = math.nan if goal is None else float(goal[k])
                on = 0.0 if math.isnan(target) else 1.0
                torque, damping = servo.torque(float(state.q[iv]), float(state.dq[iv]), 0.0 if on == 0.0 else target, on, servo_z[k])
                tau[iv] += torque
                C[iv] += damping
        dq = state.dq + np.linalg.solve(M + dt * np.diag(C), dt * (tau + Q - h))
        if self.servo_states:
            s = np.concatenate([s, servo_z[list(self.servo_states)]])
        return PlantState(q=state.q + dt * dq, dq=dq, s=s)
