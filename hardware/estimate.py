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

    @property
    def friction_share(self) -> float:
        """1: the observer's torque input is a drive torque, which the model's friction opposes; 0: a
        joint torque sensor's, measured behind the friction."""
        return self.estimator.friction_share

    @friction_share.setter
    def friction_share(self, value: float) -> None:
        self.estimator.friction_share = value

    @property
    def q_pred(self) -> np.ndarray:
        return self.estimator.q_pred

    @property
    def dq_pred(self) -> np.ndarray:
        return self.estimator.dq_pred

    @property
    def threshold(self) -> np.ndarray:
        return self.estimator.threshold

    def __call__(self, t: float, state: JointState, tau: np.ndarray, bound: np.ndarray | float = 0.0, horizon: float = 0.0,
                 tau_next: np.ndarray | None = None) -> JointState:  # fmt: skip
        """The measurement at time ``t`` (s) with the estimated velocity (the estimator's buffer: valid
        for this cycle), given the torque that acted since the last one and its error bound, and the
        state predicted ``horizon`` seconds on under ``tau_next`` (:attr:`q_pred`, :attr:`dq_pred`); a
        repeated time is no step."""
        self.estimator.update(t, state.q, state.dq, tau, bound, horizon, tau_next)
        return JointState(t=state.t, q=state.q, dq=self.dq_hat, effort=state.effort)

    def detection(self, t: float) -> str:
        return self.describe_detection(t, self.tau_ext, self.threshold) if self.estimator.worst > 1.0 else ""

    def describe_detection(self, t: float, tau_ext: np.ndarray, threshold: np.ndarray) -> str:
        """The detection at ``t`` (s) of the external torques ``tau_ext`` beyond ``threshold`` (N·m, N), in one line."""
        i = self.estimator.detected_joint(tau_ext, threshold)
        return f"tau_ext.{self.names[i]} = {tau_ext[i]:.3g} beyond the threshold {threshold[i]:.3g} at t = {t:.3f} s"

    def hold(self, q_hold: np.ndarray) -> np.ndarray:
        return self.estimator.hold_torque(q_hold)
