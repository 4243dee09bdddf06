"""A compiled control law that follows a trajectory: what the real-time loop calls each cycle.

Per cycle (``t`` in s since the start, measured ``q``, ``dq`` of the actuated joints):

1. reference ``q_d, dq_d, ddq_d = trajectory.at(t)`` (held at the end points);
2. LuGre bristle states, which the laws take as an input, are estimated by
   integrating their state equation (:meth:`LuGre.z_step` over the time since the
   last cycle) on the velocity the law compensates friction at: the desired one,
   or the measured one with ``[control] friction_velocity = "measured"``;
3. the compiled law (:mod:`mbctl.ctrl.controllers`, :mod:`mbctl.dynamics.codegen`) runs on
   preallocated buffers; its saturation flags are counted.
"""

from __future__ import annotations

import numpy as np

from mbctl.ctrl.controllers import Controller
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.friction.laws import LuGre
from mbctl.errors import ConfigError

__all__ = ["TrackingController"]


class TrackingController:
    """Callable ``(t, state) -> tau`` for :func:`mbctl.hardware.loop.run_loop`.

    Args:
        controller: A control law of the robot (:func:`mbctl.ctrl.controllers.build_controller`).
        trajectory: Reference, covering every DOF.
        compiled: Compile the law to C (falls back to CasADi's interpreter with a
            warning when there is no compiler).

    Attributes:
        controller: The law.
        compiled: The law runs as generated C.
        lugre: ``(DOF index, law)`` of the joints whose LuGre bristle states the law takes.
        measured_friction: The bristles step at the measured velocity (else at the desired one).
        saturated_cycles: Cycles in which the law clipped at least one joint.
    """

    def __init__(self, controller: Controller, trajectory: Trajectory, *, compiled: bool = True):
        robot = controller.robot
        if any(not j.actuated for j in robot.joints):
            raise ConfigError(
                "closed-loop control needs the state of every DOF; this robot has unactuated DOF", file=robot.source
            )
        self.robot = robot
        self.controller = controller
        self.law = controller.law
        q, dq, ddq = trajectory.columns(robot.joint_names)
        self.trajectory = Trajectory(t=trajectory.t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)
        self._f = controller.compile() if compiled else None
        self.compiled = self._f is not None and self._f.compiled
        self._function = controller.function
        self.lugre = [(j.idx_v, j.friction.law) for j in robot.joints if j.friction is not None and isinstance(j.friction.law, LuGre)]
        self._z = np.zeros(robot.nv)
        self.measured_friction = controller.settings.friction_velocity == "measured"
        self._t_last: float | None = None
        self.saturated_cycles = 0

    def reference(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Desired positions and velocities at ``t`` (s)."""
        q, dq, _ = self.trajectory.at(t)
        return q, dq

    def _observe_friction(self, t: float, dq: np.ndarray) -> None:
        dt = 0.0 if self._t_last is None else t - self._t_last
        self._t_last = t
        for k, law in self.lugre:
            self._z[k] = law.z_step(self._z[k], dq[k], dt)

    def __call__(self, t: float, state) -> np.ndarray:  # noqa: ANN001  (mbctl.hardware.interface.JointState)
        q_d, dq_d, ddq_d = self.trajectory.at(t)
        self._observe_friction(t, state.dq if self.measured_friction else dq_d)
        args = (state.q, state.dq, q_d, dq_d, ddq_d, self._z)
        if self._f is not None:
            for buf, value in zip(self._f.inputs, args):
                buf[...] = value
            self._f.eval()
            tau, _, flags = self._f.outputs
        else:
            tau, _, flags = (np.asarray(x).ravel() for x in self._function(*args))
        if flags.any():
            self.saturated_cycles += 1
        return tau.copy()
