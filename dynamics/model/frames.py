"""Frame kinematics of one state, as constraint equations need them.

:class:`KinematicState` wraps a pinocchio ``Data`` on which
``pinocchio.computeAllTerms(model, data, q, dq)`` has run. That call leaves joint
placements, Jacobians and velocities, the mass matrix, the nonlinear effects and the
*drift* accelerations ``data.a`` obtained with ``ddq = 0``. Frame quantities are then
read on demand and cached per frame:

- ``p``, ``R``: origin (m) and rotation of the frame in the world;
- ``J``: 6 x nv Jacobian in ``LOCAL_WORLD_ALIGNED`` (world axes at the frame origin),
  linear rows first: ``[v; w] = J dq`` (m/s, rad/s);
- ``v``: ``J dq``, the classical velocity of the origin and the angular velocity;
- ``a0``: classical acceleration of the origin and angular acceleration at
  ``ddq = 0``, i.e. ``(dJ/dt) dq`` (m/s², rad/s²), so that ``a = J ddq + a0``.

Local-frame variants (``J_local``, ``a0_local``, pinocchio ``LOCAL``) serve
velocity-level constraints written in the frame's own axes: the time derivative of
the local velocity components is the local *spatial* acceleration.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

__all__ = ["FrameState", "KinematicState"]

_LWA = pin.LOCAL_WORLD_ALIGNED


@dataclass(frozen=True, eq=False)
class FrameState:
    """World-aligned kinematics of one frame (see module docstring)."""

    p: np.ndarray
    R: np.ndarray
    J: np.ndarray
    v: np.ndarray
    a0: np.ndarray


class KinematicState:
    """Frame kinematics at one state ``(q, dq)`` after ``computeAllTerms``.

    Args:
        model: Pinocchio model.
        data: Its data, on which ``computeAllTerms(model, data, q_pin, dq)`` has run.
        q: DOF coordinates (nv,) (rad or m), for constraints written in them.
        dq: Joint velocities (nv,).
    """

    def __init__(self, model: pin.Model, data: pin.Data, q: np.ndarray, dq: np.ndarray):
        self.model = model
        self.data = data
        self.q = q
        self.dq = dq
        self._frames: dict[int, FrameState] = {}
        self._local: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def frame(self, fid: int) -> FrameState:
        """World-aligned position, rotation, Jacobian, velocity and drift of frame ``fid``."""
        fs = self._frames.get(fid)
        if fs is None:
            m, d = self.model, self.data
            placement = pin.updateFramePlacement(m, d, fid)
            J = pin.getFrameJacobian(m, d, fid, _LWA)
            fs = FrameState(
                p=placement.translation.copy(),
                R=placement.rotation.copy(),
                J=J,
                v=J @ self.dq,
                a0=pin.getFrameClassicalAcceleration(m, d, fid, _LWA).vector,
            )
            self._frames[fid] = fs
        return fs

    def frame_local(self, fid: int) -> tuple[np.ndarray, np.ndarray]:
        """``(J_local, a0_local)``: Jacobian in the frame's own axes and the drift of
        ``d/dt (J_local dq)``, which is pinocchio's LOCAL spatial acceleration at ``ddq = 0``."""
        out = self._local.get(fid)
        if out is None:
            m, d = self.model, self.data
            pin.updateFramePlacement(m, d, fid)
            J = pin.getFrameJacobian(m, d, fid, pin.LOCAL)
            out = (J, pin.getFrameAcceleration(m, d, fid, pin.LOCAL).vector)
            self._local[fid] = out
        return out
