"""The loop's estimate step on the controller's model: :class:`~mbctl.ctrl.estimation.estimator.StateEstimator`
behind the :class:`~mbctl.hardware.loop.Estimator` protocol (joint states in, joint states out)."""

from __future__ import annotations

import numpy as np

from mbctl.ctrl.estimation.estimator import StateEstimator
from mbctl.ctrl.estimation.settings import EstimationSettings
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.interface import JointState

__all__ = ["LoopEstimator"]


class LoopEstimator:
    """Estimated velocity and external torques for :func:`mbctl.hardware.loop.run_loop`.

    The controller sees the measured positions with the estimated velocities; a detection
    (``|tau_ext_i| > threshold_i``) is described once, with the joint, the value and the time.

    Args:
        robot: The controller's model (every DOF actuated, in the backend's joint order).
        period_s: Control period (s).
        settings: Estimation settings (default: the robot's ``[control]``).
        compiled: Run the generated C (False: CasADi's interpreter).
    """

    def __init__(self, robot: RobotModel, period_s: float, settings: EstimationSettings | None = None, *, compiled: bool = True):
        self.estimator = StateEstimator(robot, period_s, settings, compiled=compiled)
        self.period_s = period_s
        self.names = robot.joint_names
        self.reaction = self.estimator.settings.reaction
        self.dq_hat = self.estimator.dq_hat
        self.tau_ext = self.estimator.tau_ext

    def describe(self) -> str:
        """The estimation in one line, for the run summary."""
        return self.estimator.settings.describe()

    def reset(self, t: float, state: JointState) -> None:
        self.estimator.reset(t, state.q, state.dq)

    def __call__(self, t: float, state: JointState, tau_applied: np.ndarray) -> JointState:
        """The measurement at time ``t`` (s) with the estimated velocity (the estimator's buffer:
        valid for this cycle); a repeated time is no step."""
        self.estimator.update(t, state.q, state.dq, tau_applied)
        return JointState(t=state.t, q=state.q, dq=self.dq_hat, effort=state.effort)

    def detection(self, t: float) -> str:
        return self.describe_detection(t, self.tau_ext) if self.estimator.worst > 1.0 else ""

    def describe_detection(self, t: float, tau_ext: np.ndarray) -> str:
        """The detection at ``t`` (s) of the external torques ``tau_ext`` (N·m, N), in one line."""
        i = self.estimator.detected_joint(tau_ext)
        return f"tau_ext.{self.names[i]} = {tau_ext[i]:.3g} beyond the threshold {self.estimator.settings.threshold[i]:.3g} at t = {t:.3f} s"

    def hold(self, q_hold: np.ndarray) -> np.ndarray:
        return self.estimator.hold_torque(q_hold)
