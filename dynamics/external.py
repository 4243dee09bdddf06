"""An external wrench on a body over a time window: a push, a collision, a held load.

The wrench ``w = (f, n)`` (N, N·m; world axes) acts at the origin of a frame between
``start`` and ``start + duration`` (s). Its generalized force is the transposed frame
Jacobian applied to it::

    Q_e(t, q) = J(q)^T w    for start <= t < start + duration, else 0

with ``J`` the frame's 6 x nv Jacobian in world-aligned axes at the frame origin (linear rows
first; pinocchio's ``LOCAL_WORLD_ALIGNED``). The element has no state and no damping, so the
semi-implicit plant steps take it as an explicit force: it is evaluated once per control period
(at the period's start) and held, like the drive torques.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pinocchio as pin

from mbctl.dynamics.forces import ForceElement
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError

__all__ = ["ExternalWrench"]


class ExternalWrench(ForceElement):
    """``Q_e = J(q)^T (f, n)`` on ``frame`` over ``[start_s, start_s + duration_s)``.

    Args:
        robot: The robot the wrench acts on.
        frame: Name of the frame at whose origin it acts.
        force: Force (N), world axes.
        torque: Moment (N·m), world axes.
        start_s, duration_s: The window (s).

    Raises:
        ConfigError: For a frame the model does not have.
    """

    def __init__(
        self,
        robot: RobotModel,
        frame: str,
        force: Sequence[float],
        torque: Sequence[float] = (0.0, 0.0, 0.0),
        start_s: float = 0.0,
        duration_s: float = float("inf"),
    ):
        if not robot.model.existFrame(frame):
            raise ConfigError(f"no frame {frame!r} in the model", file=robot.source, field="plant.contact.frame")
        self.robot = robot
        self.frame = frame
        self.wrench = np.concatenate([np.asarray(force, dtype=float), np.asarray(torque, dtype=float)])
        self.start_s = float(start_s)
        self.end_s = float(start_s) + float(duration_s)
        self._frame_id = robot.model.getFrameId(frame)
        self._data = robot.create_data()

    def active(self, t: float) -> bool:
        """The wrench acts at time ``t`` (s)."""
        return self.start_s <= t < self.end_s

    def generalized(self, q: np.ndarray) -> np.ndarray:
        """``J(q)^T w`` (N·m, N per DOF) at DOF positions ``q``, whether active or not."""
        model, data = self.robot.model, self._data
        J = pin.computeFrameJacobian(model, data, self.robot.configuration(q), self._frame_id, pin.LOCAL_WORLD_ALIGNED)
        return J.T @ self.wrench

    def __call__(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Q = self.generalized(q) if self.active(t) else np.zeros(self.robot.nv)
        return Q, np.zeros(0)
