"""Generalized forces for forward simulation: force elements with optional internal states.

The unconstrained dynamics are ``M(q) ddq + h(q, dq) = Q``; ``Q`` is the sum of the
force elements of a simulation. An element maps ``(t, q, dq, s)`` to its generalized
force (N·m or N per DOF) and the rates ``ds/dt`` of its own states ``s`` (LuGre
bristle deflections now; later e.g. actuator or filter states), which are integrated
with ``q`` and ``dq``. Elastic DOF (spring–damper supports, rigid finite elements)
fit the same interface: a stateless element returning ``-K q - D dq`` on their DOF.

:class:`JointFriction` applies every joint's friction law against the motion:

- Coulomb–viscous and Stribeck laws are set-valued at ``v = 0``; the simulation
  replaces ``sgn(v)`` by ``tanh(v/v_eps)`` (``smoothing = v_eps`` in rad/s or m/s).
  Below ``v_eps`` the dry friction acts as a steep viscous damper, so a joint with
  ``|v| << v_eps`` creeps instead of sticking; choose ``v_eps`` well below the
  speeds of interest (the ODE stiffens as ``fc/v_eps`` grows).
- LuGre joints carry their bristle state ``z`` (rad or m, from ``z = 0``),
  ``dz/dt = v - sigma0*|v|*z/g(v)``; no smoothing is needed (the state itself
  regularizes the zero-velocity crossing). Its rate ``sigma0*|v|/g(v)`` makes the
  ODE stiff at high speed: RK4 needs ``h*sigma0*|v|/g < ~2.7``.

Load-dependent friction needs the joint reaction wrenches, which depend on the
accelerations being solved for; it is refused here (a later extension can iterate
on the load).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from dynamics.friction import LuGre
from dynamics.model import RobotModel
from mbctl.errors import ConfigError

__all__ = ["ForceElement", "JointFriction"]


class ForceElement(ABC):
    """A generalized force with ``n_states`` internal states.

    Attributes:
        state_names: One name per internal state.
    """

    state_names: tuple[str, ...] = ()

    @property
    def n_states(self) -> int:
        return len(self.state_names)

    def initial_state(self) -> np.ndarray:
        """Internal states at the start of a simulation."""
        return np.zeros(self.n_states)

    @abstractmethod
    def __call__(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(Q, ds/dt)``: generalized force (nv,) and the state rates (n_states,)."""

    def state_stiffness(self, dq: np.ndarray, s: np.ndarray) -> tuple[float, str]:
        """Largest decay rate (1/s) of the internal states and the state's name, for
        explicit integrators' stability checks; ``(0, "")`` without states."""
        return 0.0, ""

    def damping(self, dq: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Diagonal of ``-dQ/d(dq)`` (N·m·s/rad, N·s/m), >= 0, for semi-implicit steps;
        zeros unless the element resists velocity."""
        return np.zeros(len(dq))


class JointFriction(ForceElement):
    """Joint friction of every joint, as generalized forces ``Q_i = -F_i(v_i[, z_i])``.

    Args:
        robot: The robot; its joints' friction laws are used.
        smoothing: ``v_eps`` (rad/s or m/s) of ``tanh(v/v_eps)`` for static laws, > 0.

    Raises:
        ConfigError: For load-dependent friction (not simulated yet) or a bad smoothing.
    """

    def __init__(self, robot: RobotModel, smoothing: float = 1e-3):
        if not (smoothing > 0 and math.isfinite(smoothing)):
            raise ConfigError(f"must be > 0, got {smoothing!r}", file=robot.source, field="simulation.friction_smoothing")
        self.nv = robot.nv
        self.smoothing = float(smoothing)
        self._static = []
        self._lugre = []
        for j in robot.joints:
            if j.friction is None:
                continue
            if j.friction.load is not None:
                raise ConfigError(
                    "load-dependent friction is not simulated yet (it needs the reactions being solved for); "
                    "remove 'load' to simulate with the law alone",
                    file=robot.source,
                    field=f"joints.{j.name}.friction.load",
                )
            if isinstance(j.friction.law, LuGre):
                self._lugre.append((j.idx_v, j.friction.law))
            else:
                self._static.append((j.idx_v, j.friction.law))
        self.state_names = tuple(f"z.{_joint_name(robot, idx)}" for idx, _ in self._lugre)

    def __call__(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        Q = np.zeros(self.nv)
        for i, law in self._static:
            v = float(dq[i])
            Q[i] = -float(law.steady(v, math.tanh(v / self.smoothing)))
        ds = np.empty(len(self._lugre))
        for k, (i, law) in enumerate(self._lugre):
            v, z = float(dq[i]), float(s[k])
            ds[k] = float(law.z_rate(v, z))
            Q[i] = -float(law.torque(v, z))
        return Q, ds

    def damping(self, dq: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``dF/dv`` of every joint: ``level*(1 - tanh^2(v/v_eps))/v_eps + fv`` for static
        laws (the Stribeck level's own slope left out, so it stays >= 0), and the
        presliding damping ``sigma1 + fv`` for LuGre joints."""
        C = np.zeros(self.nv)
        for i, law in self._static:
            v = float(dq[i])
            level = float(law.steady(v, 1.0)) - law.fv * v  # the dry level at |v|
            C[i] = level * (1.0 - math.tanh(v / self.smoothing) ** 2) / self.smoothing + law.fv
        for i, law in self._lugre:
            C[i] = law.sigma1 + law.fv
        return C

    def step_states(self, dq: np.ndarray, s: np.ndarray, dt: float) -> np.ndarray:
        """The bristle states ``dt`` seconds later at the velocities held (exact, any ``dt``)."""
        return np.array([float(law.z_step(float(s[k]), float(dq[i]), dt)) for k, (i, law) in enumerate(self._lugre)])

    def state_stiffness(self, dq: np.ndarray, s: np.ndarray) -> tuple[float, str]:
        """Largest ``sigma0*|v|/g(v)`` (1/s) over the LuGre joints: the bristle states' decay rate."""
        worst, name = 0.0, ""
        for k, (i, law) in enumerate(self._lugre):
            v = float(dq[i])
            rate = law.sigma0 * abs(v) / float(law.g(v))
            if rate > worst:
                worst, name = rate, self.state_names[k]
        return worst, name


def _joint_name(robot: RobotModel, idx_v: int) -> str:
    return next(j.name for j in robot.joints if j.idx_v == idx_v)
