"""Joint-space control laws as CasADi functions, built once, with explicit saturation.

Every law is one CasADi ``Function`` with the same signature, so a control loop can
swap them by name::

    (q, dq, q_d, dq_d, ddq_d, z) -> (tau, tau_demand, saturated)

``q, dq`` are the measured DOF positions and velocities (rad, rad/s or m, m/s),
``q_d, dq_d, ddq_d`` the desired trajectory sample, ``z`` the LuGre bristle states
(rad or m; ignored by joints without a LuGre law). With ``e = q_d - q``,
``de = dq_d - dq`` and ``ID(q, dq, ddq, z)`` the inverse dynamics with friction of
:class:`~mbctl.dynamics.symbolic.SymbolicDynamics` (rigid ``M(q) ddq + h(q, dq)`` plus each
joint's friction law, loaded by the joint reactions of the same motion):

| law | ``tau_demand`` | gains |
|---|---|---|
| ``feedforward`` | ``ID(q_d, dq_d, ddq_d, z)`` | none |
| ``computed-torque`` | ``ID(q, dq, a, z)``, ``a = ddq_d + Kd de + Kp e`` | ``[control.computed-torque]`` (1/s², 1/s) |
| ``pd-gravity`` | ``Kp e + Kd de + g(q)`` | ``[control.pd]`` (N·m/rad, N·m·s/rad) |
| ``pd-feedforward`` | ``ID(q_d, dq_d, ddq_d, z) + Kp e + Kd de`` | ``[control.pd]`` |
| ``task-space`` | task-space computed torque with a null-space objective (:mod:`mbctl.ctrl.task_space`) | ``[control.task-space]`` |

Computed torque is evaluated as one RNEA pass at the reference acceleration ``a``,
which equals ``M(q) a + h(q, dq)``. Its friction term (loaded by the reactions of
that pass) is evaluated at the desired velocity ``dq_d`` by default — a measured
velocity is noisy exactly where friction flips sign — or, with
``[control] friction_velocity = "measured"``, at ``dq`` (and ``a`` for the sign at
rest), so that on an exact model the error obeys ``e'' + Kd e' + Kp e = 0``.

**Saturation** is explicit: ``tau = clip(tau_demand, -limit, limit)`` with the
``[control]`` saturation level of each DOF (default its effort limit; none when the
limit is infinite; 0 for unactuated DOF), and ``saturated`` is 1.0 exactly where
``|tau_demand| > limit``, 0.0 elsewhere. Nothing is clipped without being flagged.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import casadi as ca
import numpy as np

from mbctl.config.control import JOINT_LAWS
from mbctl.ctrl.batch import map_rows
from mbctl.ctrl.compiled_laws import compile_law, gains_of, joint_space_demand
from mbctl.ctrl.settings import ControlSettings, control_settings
from mbctl.ctrl.signature import INPUTS, OUTPUTS, saturate
from mbctl.ctrl.task_space import build_task_space_function
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.inverse import check_samples
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics

__all__ = ["Controller", "ControlBatch", "build_controller", "LAWS", "TASK_SPACE", "INPUTS", "OUTPUTS"]

LAWS = JOINT_LAWS
TASK_SPACE = "task-space"  # the task-space law of mbctl.ctrl.task_space, built here too


@dataclass(frozen=True)
class ControlBatch:
    """A control law evaluated along a trajectory; arrays (N, nv) in DOF order.

    Attributes:
        tau: Saturated torques (N·m or N).
        tau_demand: Torques the law asked for before saturation.
        saturated: True where ``tau`` was clipped.
    """

    tau: np.ndarray
    tau_demand: np.ndarray
    saturated: np.ndarray

    @property
    def saturated_samples(self) -> int:
        """Number of samples in which at least one DOF was clipped."""
        return int(self.saturated.any(axis=1).sum())


@dataclass(frozen=True, eq=False)
class Controller:
    """One control law of one robot.

    Attributes:
        law: One of :data:`LAWS`, or :data:`TASK_SPACE`.
        robot: The robot.
        function: ``(q, dq, q_d, dq_d, ddq_d, z) -> (tau, tau_demand, saturated)``.
        settings: Gains and saturation levels it was built with.
    """

    law: str
    robot: RobotModel
    function: ca.Function
    settings: ControlSettings

    def compile(self, cache: str | Path | None = None) -> CompiledFunction:
        """The law as compiled C (:func:`mbctl.dynamics.codegen.compile_function`), called as
        :attr:`function`. A joint-space law is compiled once per structure and thread, with
        the robot's numbers, gains and saturation levels as a bound last input
        (:func:`mbctl.ctrl.compiled_laws.compile_law`)."""
        if self.law == TASK_SPACE:
            return compile_function(self.function, cache=cache)
        return compile_law(self, cache=cache)

    def batch(
        self,
        q: np.ndarray,
        dq: np.ndarray,
        q_d: np.ndarray,
        dq_d: np.ndarray,
        ddq_d: np.ndarray,
        z: np.ndarray | None = None,
        *,
        threads: int = 1,
    ) -> ControlBatch:
        """Evaluate on N samples at once (CasADi ``map``); each input (N, nv), ``z`` optional (zeros).

        Raises:
            DataError: For wrongly shaped or non-finite inputs.
        """
        z = np.zeros_like(np.asarray(q, dtype=float)) if z is None else z
        arrays = check_samples(self.robot.nv, q, dq, q_d, dq_d, ddq_d, z, names=INPUTS)
        tau, demand, flags = map_rows(self.function, list(arrays), threads=threads)
        return ControlBatch(tau=tau, tau_demand=demand, saturated=flags > 0.5)


def build_controller(
    robot: RobotModel,
    law: str,
    *,
    settings: ControlSettings | None = None,
    dynamics: SymbolicDynamics | None = None,
) -> Controller:
    """Build the CasADi function of ``law`` for ``robot`` (see the module docstring).

    Args:
        settings: Gains and saturation levels (default: the robot's ``[control]`` table).
        dynamics: A :class:`SymbolicDynamics` of ``robot`` to reuse (default: a new one,
            LuGre friction with its state).

    Raises:
        ConfigError: If the law needs gains the ``[control]`` table does not give.
        ValueError: For an unknown law.
    """
    if law not in (*LAWS, TASK_SPACE):
        raise ValueError(f"unknown control law {law!r} (expected one of: {', '.join((*LAWS, TASK_SPACE))})")
    settings = control_settings(robot) if settings is None else settings
    sd = SymbolicDynamics(robot) if dynamics is None else dynamics
    if law == TASK_SPACE:
        function, settings, _ = build_task_space_function(robot, settings=settings, dynamics=sd)
        return Controller(law=law, robot=robot, function=function, settings=settings)
    args = [ca.SX.sym(name, robot.nv) for name in INPUTS]
    gains = gains_of(law, settings)
    demand = joint_space_demand(law, sd, settings.friction_velocity, *(None if g is None else ca.DM(g) for g in gains), *args)
    tau, flags = saturate(demand, settings.effort)
    function = ca.Function(law.replace("-", "_"), args, [tau, demand, flags], list(INPUTS), list(OUTPUTS))
    return Controller(law=law, robot=robot, function=function, settings=settings)
