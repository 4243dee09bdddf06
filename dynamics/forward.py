"""Forward dynamics with joint friction, stepped semi-implicitly for real-time plants.

Equations of motion (pinocchio order, SI units)::

    M(q) ddq + h(q, dq) = tau - F(dq, z)          F: joint friction (dynamics.friction)
    dz/dt = v - sigma0*|v|*z/g(v)                  LuGre joints only

One step of length ``dt`` (:meth:`FrictionStepper.step`):

1. LuGre states advance exactly at the current velocity (:meth:`LuGre.z_step`);
2. velocities solve ``(M + dt*C) (dq' - dq) = dt*(tau - h - F)``, where ``C`` is the
   diagonal friction damping ``dF/dv`` — implicit in the stiff friction terms, so
   bristle damping and the smoothed Coulomb sign stay stable at any ``dt``;
3. positions follow the new velocities: ``q' = q + dt*dq'`` (symplectic Euler).

The method is first-order accurate; use substeps (``dt`` of 0.1–0.5 ms) for
accuracy. Static laws are set-valued at rest: their sign is smoothed as
``tanh(v/v_smooth)`` (documented, ``v_smooth`` default 1e-3 rad/s), so a joint held
below break-away creeps at a speed of order ``v_smooth*tau/fs``; use LuGre for true
sticking. Load-dependent friction needs the joint reactions inside the step and is
not supported here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from dynamics.friction import LuGre, Stribeck
from dynamics.model import RobotModel
from mbctl.errors import ConfigError

__all__ = ["FrictionStepper", "PlantState"]


@dataclass
class PlantState:
    """State of the plant: DOF positions (rad, m), velocities and LuGre states (rad, m; 0 elsewhere)."""

    q: np.ndarray
    dq: np.ndarray
    z: np.ndarray


class FrictionStepper:
    """Semi-implicit stepper of a robot's forward dynamics with friction.

    Args:
        robot: The (truth) model, with its friction laws.
        v_smooth: Velocity scale of the smoothed sign of static laws (rad/s or m/s).
    """

    def __init__(self, robot: RobotModel, *, v_smooth: float = 1e-3):
        self.robot = robot
        self.v_smooth = v_smooth
        self._data = robot.create_data()
        static, lugre = [], []
        for j in robot.joints:
            if j.friction is None:
                continue
            if j.friction.load is not None:
                raise ConfigError(
                    "load-dependent friction is not supported by the forward stepper (simulated plant)",
                    file=robot.source,
                    field=f"joints.{j.name}.friction.load",
                )
            (lugre if isinstance(j.friction.law, LuGre) else static).append(j)
        self._static = np.array([j.idx_v for j in static], dtype=int)
        laws = [j.friction.law for j in static]
        self._fc = np.array([law.fc for law in laws])
        self._fs = np.array([law.fs if isinstance(law, Stribeck) else law.fc for law in laws])
        self._vs = np.array([law.vs if isinstance(law, Stribeck) else 1.0 for law in laws])
        self._delta = np.array([law.delta if isinstance(law, Stribeck) else 2.0 for law in laws])
        self._fv_static = np.array([law.fv for law in laws])
        self._lugre = np.array([j.idx_v for j in lugre], dtype=int)
        self._lugre_laws = [j.friction.law for j in lugre]

    @property
    def lugre_indices(self) -> np.ndarray:
        """DOF indices of the joints whose state ``z`` is integrated."""
        return self._lugre

    def friction(self, dq: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Friction ``F`` (N·m, N; opposes motion in the equations above) and damping ``dF/dv >= 0``."""
        F = np.zeros(self.robot.nv)
        C = np.zeros(self.robot.nv)
        if self._static.size:
            v = dq[self._static]
            level = self._fc + (self._fs - self._fc) * np.exp(-(np.abs(v / self._vs) ** self._delta))
            s = np.tanh(v / self.v_smooth)
            F[self._static] = level * s + self._fv_static * v
            C[self._static] = level * (1.0 - s * s) / self.v_smooth + self._fv_static
        for k, law in zip(self._lugre, self._lugre_laws):
            F[k] = law.torque(dq[k], z[k])
            C[k] = law.sigma1 + law.fv
        return F, C

    def step(self, state: PlantState, tau: np.ndarray, dt: float) -> PlantState:
        """Advance ``dt`` seconds holding the generalized forces ``tau`` (N·m, N)."""
        model, data = self.robot.model, self._data
        z = state.z.copy()
        for k, law in zip(self._lugre, self._lugre_laws):
            z[k] = law.z_step(z[k], state.dq[k], dt)
        qp = self.robot.configuration(state.q)
        M = pin.crba(model, data, qp)
        M = np.triu(M) + np.triu(M, 1).T
        h = pin.nonLinearEffects(model, data, qp, state.dq)
        F, C = self.friction(state.dq, z)
        A = M + dt * np.diag(C)
        dq = state.dq + np.linalg.solve(A, dt * (tau - h - F))
        return PlantState(q=state.q + dt * dq, dq=dq, z=z)
