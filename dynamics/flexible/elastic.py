"""Springs and dampers of the elastic DOF, as one force element.

- Rigid-finite-element links (:mod:`mbctl.dynamics.flexible.rfe`): a linear spring–damper on every
  sde coordinate, ``Q_i = -k_i d_i - c_i d_dot_i`` (N·m, with ``k`` in N·m/rad and ``c``
  in N·m·s/rad), potential energy ``1/2 sum k_i d_i^2``.
- Flexible base (:mod:`mbctl.dynamics.flexible.base`): at every support point E the deflection from
  its rest position in world axes, ``d_E = p_E(q) - p_E(0)``, and its velocity
  ``v_E = J_E dq`` give the force ``F_E = -S_E d_E - D_E v_E`` and the generalized force
  ``J_E^T F_E`` (``J_E``: translational, world-aligned frame Jacobian from pinocchio);
  potential energy ``1/2 sum d_E^T S_E d_E``.

Both are conservative springs plus dissipative dampers, so with the dampers at zero the
total energy ``T + V_gravity + V_elastic`` of a free robot is conserved (tested).
"""

from __future__ import annotations

import numpy as np
import pinocchio as pin

from mbctl.dynamics.forces import ForceElement, elastic_diagonal, elastic_forces
from mbctl.dynamics.model.frames import KinematicState
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["ElasticForces"]


class ElasticForces(ForceElement):
    """Spring–damper forces of a robot's RFE links and flexible base.

    Args:
        robot: The robot; empty forces when it has no elastic DOF.
        damping: False drops every damper (for conservation checks).
    """

    def __init__(self, robot: RobotModel, *, damping: bool = True):
        self.robot = robot
        self.nv = robot.nv
        idx, k, c = [], [], []
        for link in robot.rfe_links:
            idx += [robot.joint(n).idx_v for n in link.names]
            k.append(link.stiffness)
            c.append(link.damping if damping else np.zeros_like(link.damping))
        self._idx = np.array(idx, dtype=int)
        self._k = np.concatenate(k) if k else np.zeros(0)
        self._c = np.concatenate(c) if c else np.zeros(0)
        base = robot.flexible_base
        if base is not None:
            model = robot.model
            self._fids = [model.getFrameId(n) for n in base.frame_names]
            self._S = base.support.stiffness
            self._D = base.support.damping if damping else np.zeros_like(base.support.damping)
            data = model.createData()
            pin.framesForwardKinematics(model, data, robot.configuration(np.zeros(robot.nv)))
            self._p0 = np.array([data.oMf[f].translation for f in self._fids])
        else:
            self._fids = []
        self._data = robot.model.createData()

    @property
    def empty(self) -> bool:
        """True when the robot has no elastic DOF."""
        return not len(self._idx) and not self._fids

    def _kinematics(self, q: np.ndarray, dq: np.ndarray) -> KinematicState:
        pin.computeAllTerms(self.robot.model, self._data, self.robot.configuration(q), dq)
        return KinematicState(self.robot.model, self._data, q, dq)

    def __call__(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return self.evaluate(t, q, dq, s, self._kinematics(q, dq) if self._fids else None)

    def evaluate(self, t, q, dq, s, kinematics=None, wrenches=None):
        """``Q`` by :func:`~mbctl.dynamics.forces.elastic_forces` with pinocchio's support kinematics."""
        supports = []
        if self._fids:
            ks = kinematics if kinematics is not None else self._kinematics(q, dq)
            model, data = ks.model, ks.data
            for fid, p0, S, D in zip(self._fids, self._p0, self._S, self._D):
                p = pin.updateFramePlacement(model, data, fid).translation
                supports.append((p, pin.getFrameJacobian(model, data, fid, pin.LOCAL_WORLD_ALIGNED)[:3], p0, S, D))
        return elastic_forces(np.zeros(self.nv), q, dq, self._idx, self._k, self._c, supports), np.zeros(0)

    def potential_energy(self, q: np.ndarray) -> float:
        """Energy stored in the springs (J) at coordinates ``q``."""
        energy = 0.5 * float(self._k @ q[self._idx] ** 2) if len(self._idx) else 0.0
        if self._fids:
            model, data = self.robot.model, self._data
            pin.framesForwardKinematics(model, data, self.robot.configuration(q))
            for fid, p0, S in zip(self._fids, self._p0, self._S):
                d = data.oMf[fid].translation - p0
                energy += 0.5 * float(d @ (S * d))
        return energy

    def damping(self, dq: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Diagonal of ``-dQ/d(dq)`` (N·m·s/rad, N·s/m): sde dampers, and
        ``diag(sum_E J_E^T D_E J_E)`` of the base supports at the last evaluated state."""
        return elastic_diagonal(np.zeros(self.nv), self._idx, self._c, self._support_jacobians(self._D) if self._fids else [])

    def stiffness(self, q: np.ndarray) -> np.ndarray:
        """Diagonal of ``-dQ/dq`` (N·m/rad, N/m): sde springs, and
        ``diag(sum_E J_E^T S_E J_E)`` of the base supports at ``q``."""
        if self._fids:
            pin.computeJointJacobians(self.robot.model, self._data, self.robot.configuration(q))
            pin.updateFramePlacements(self.robot.model, self._data)
        return elastic_diagonal(np.zeros(self.nv), self._idx, self._k, self._support_jacobians(self._S) if self._fids else [])

    def _support_jacobians(self, coefficients: np.ndarray) -> list[tuple[np.ndarray, np.ndarray]]:
        """``(J_E, C_E)`` per support point, ``J_E`` from the last kinematics in ``_data``."""
        return [(pin.getFrameJacobian(self.robot.model, self._data, fid, pin.LOCAL_WORLD_ALIGNED)[:3], c) for fid, c in zip(self._fids, coefficients)]
