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

**Load-dependent friction** (``load = {...}`` on a joint) multiplies the dry part of
the law by the joint's normal load, which comes from the reaction wrench the joint
transmits, which depends on the accelerations being solved for: an algebraic loop,
which :class:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics` resolves at every evaluation
(see there). An element that needs reactions lists the pinocchio joint ids in
``reaction_joints`` and provides :meth:`ForceElement.load_terms` (its force is affine
in the normal loads) and :meth:`~ForceElement.loads_and_gradient`. ``JointFriction(robot, loads=True)``
accepts load-dependent joints for that purpose; by default (semi-implicit plant
steppers) they are refused.

The formulas are module functions over a backend namespace (:mod:`mbctl.dynamics.backend`):
:func:`friction_terms`, :func:`friction_damping`, :func:`normal_load`, :func:`elastic_forces` and
:func:`elastic_diagonal` evaluate floats or numpy arrays here and build the compiled core's CasADi
expressions (:mod:`mbctl.dynamics.simulation.compiled_forces`), so both paths share every line.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any

import numpy as np

from mbctl.dynamics.backend import NUMPY, SCALAR
from mbctl.dynamics.friction.laws import LuGre, lugre_force, lugre_rate, smoothed_dry, smoothed_dry_slope
from mbctl.dynamics.model.frames import KinematicState
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError

__all__ = ["ForceElement", "JointFriction", "elastic_diagonal", "elastic_forces", "friction_damping", "friction_terms", "normal_load", "place_terms"]


class ForceElement(ABC):
    """A generalized force with ``n_states`` internal states.

    Attributes:
        state_names: One name per internal state.
        reaction_joints: Pinocchio joint ids whose reaction wrenches the element needs
            (load-dependent friction); empty for most elements.
    """

    state_names: tuple[str, ...] = ()
    reaction_joints: tuple[int, ...] = ()

    @property
    def n_states(self) -> int:
        return len(self.state_names)

    def initial_state(self) -> np.ndarray:
        """Internal states at the start of a simulation."""
        return np.zeros(self.n_states)

    @abstractmethod
    def __call__(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(Q, ds/dt)``: generalized force (nv,) and the state rates (n_states,)."""

    def evaluate(
        self,
        t: float,
        q: np.ndarray,
        dq: np.ndarray,
        s: np.ndarray,
        kinematics: KinematicState | None = None,
        wrenches: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`__call__`, reusing frame kinematics already computed at ``(q, dq)``
        (elements that need frames override this) and taking the reaction wrenches of
        ``reaction_joints`` ((k, 6), joint frames, N then N·m) when the element needs them."""
        return self(t, q, dq, s)

    def load_terms(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """For elements with ``reaction_joints``: ``(Q0, B, ds/dt)`` with the force
        ``Q = Q0 + B @ N`` affine in the normal loads ``N`` (one per reaction joint; ``B``
        is nv x k)."""
        raise NotImplementedError(f"{type(self).__name__} has no load-dependent terms")

    def loads_and_gradient(self, wrenches: np.ndarray, gradient: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """Normal loads ``N`` (k,) from the reaction wrenches of ``reaction_joints`` (k, 6),
        and (if asked) ``dN_i/dW_i`` (k, 6), each load's gradient with respect to its
        joint's wrench."""
        raise NotImplementedError(f"{type(self).__name__} has no load-dependent terms")

    def state_stiffness(self, dq: np.ndarray, s: np.ndarray) -> tuple[float, str]:
        """Largest decay rate (1/s) of the internal states and the state's name, for
        explicit integrators' stability checks; ``(0, "")`` without states."""
        return 0.0, ""

    def damping(self, dq: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Diagonal of ``-dQ/d(dq)`` (N·m·s/rad, N·s/m), >= 0, for semi-implicit steps;
        zeros unless the element resists velocity."""
        return np.zeros(len(dq))

    def state_jacobian(self, dq: np.ndarray, s: np.ndarray) -> np.ndarray:
        """Diagonal of ``d(ds/dt)/ds`` (1/s) of the internal states, for stiff integrators
        that refresh it at every step; zeros without states."""
        return np.zeros(self.n_states)


class JointFriction(ForceElement):
    """Joint friction of every joint, as generalized forces ``Q_i = -F_i(v_i[, z_i])``.

    Args:
        robot: The robot; its joints' friction laws are used.
        smoothing: ``v_eps`` (rad/s or m/s) of ``tanh(v/v_eps)`` for static laws, > 0.
        loads: Accept load-dependent joints; their normal loads then come from the
            reaction wrenches passed to :meth:`evaluate` (``reaction_joints`` lists
            the joints, in order).

    Raises:
        ConfigError: For load-dependent friction without ``loads``, or a bad smoothing.
    """

    def __init__(self, robot: RobotModel, smoothing: float = 1e-3, *, loads: bool = False):
        if not (smoothing > 0 and math.isfinite(smoothing)):
            raise ConfigError(f"must be > 0, got {smoothing!r}", file=robot.source, field="simulation.friction_smoothing")
        self.nv = robot.nv
        self.smoothing = float(smoothing)
        self._static = []
        self._lugre = []
        loaded = []
        for j in robot.joints:
            if j.friction is None:
                continue
            if j.friction.load is not None:
                if not loads:
                    raise ConfigError(
                        "load-dependent friction is simulated by the constrained dynamics only (mbctl simulate, "
                        "mbctl.dynamics.simulation.integrate), not by this stepper; remove 'load' to simulate with the law alone",
                        file=robot.source,
                        field=f"joints.{j.name}.friction.load",
                    )
                loaded.append(j)
            load_slot = len(loaded) - 1 if j.friction.load is not None else -1
            if isinstance(j.friction.law, LuGre):
                self._lugre.append((j.idx_v, j.friction.law, load_slot))
            else:
                self._static.append((j.idx_v, j.friction.law, load_slot))
        self.reaction_joints = tuple(j.id for j in loaded)
        self._load_dofs = np.array([j.idx_v for j in loaded], dtype=int)
        self._load_axes = np.array([j.axis for j in loaded], dtype=float).reshape(-1, 3)
        self._load_coefficients = np.array([_load_coefficients(j) for j in loaded], dtype=float).reshape(-1, 4)
        self._radial = self._load_coefficients[:, [0, 2]]  # of |normal force|, |normal moment|
        self._axial = self._load_coefficients[:, [1, 3]]  # of |axial force|, |axial moment|
        self.state_names = tuple(f"z.{_joint_name(robot, idx)}" for idx, _, _ in self._lugre)

    def normal_loads(self, wrenches: np.ndarray) -> np.ndarray:
        """Equivalent normal loads (N·m or N) of the load-dependent joints from their
        reaction wrenches ((k, 6), joint frames): both load models of
        :mod:`mbctl.dynamics.friction.loads` are ``c . (f_r, f_a, m_b, m_a)``, evaluated here at once."""
        return self.loads_and_gradient(wrenches, gradient=False)[0]

    def loads_and_gradient(self, W: np.ndarray, gradient: bool = True) -> tuple[np.ndarray, np.ndarray | None]:
        """``(N, dN/dW)``: loads (k,) and, if asked, their gradients (k, 6), by :func:`normal_load`
        for every joint and part (force, moment) at once."""
        k = len(self._load_axes)
        parts, G = normal_load(NUMPY, self._load_axes[:, None, :], W.reshape(k, 2, 3), self._radial[:, :, None], self._axial[:, :, None])
        return parts.sum(axis=(1, 2)), G.reshape(k, 6) if gradient else None

    def _terms(self, dq: np.ndarray, s: np.ndarray) -> tuple[list[tuple[int, int, float, float]], np.ndarray]:
        """:func:`friction_terms` on Python floats (this runs several times per evaluation)."""
        terms, rates = friction_terms(SCALAR, self._static, self._lugre, dq.tolist(), np.asarray(s, dtype=float).tolist(), self.smoothing)
        return terms, np.array(rates, dtype=float)

    def __call__(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray, loads: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Friction forces and bristle rates; ``loads`` are the normal loads of the
        load-dependent joints (required when there are any)."""
        if len(self._load_dofs) and loads is None:
            raise ValueError("load-dependent friction needs the joints' normal loads")
        terms, ds = self._terms(dq, s)
        Q = np.zeros(self.nv)
        for i, slot, mu, viscous in terms:
            Q[i] = -((mu if slot < 0 else float(loads[slot]) * mu) + viscous)
        return Q, ds

    def load_terms(self, t, q, dq, s):
        """``Q = Q0 + B N``: ``Q0`` is the friction with zero loads (viscous terms and
        load-independent joints), ``B[:, i]`` minus the dry friction coefficient of
        load-dependent joint i on its DOF (a function of the state)."""
        terms, ds = self._terms(dq, s)
        Q0, B = place_terms(terms, np.zeros(self.nv), np.zeros((self.nv, len(self._load_dofs))))
        return Q0, B, ds

    def evaluate(self, t, q, dq, s, kinematics=None, wrenches=None):
        loads = self.normal_loads(wrenches) if len(self._load_dofs) else None
        return self(t, q, dq, s, loads)

    def damping(self, dq: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``dF/dv`` of every joint: ``level*(1 - tanh^2(v/v_eps))/v_eps + fv`` for static
        laws (the Stribeck level's own slope left out, so it stays >= 0), and the
        presliding damping ``sigma1 + fv`` for LuGre joints."""
        C = np.zeros(self.nv)
        for i, c in friction_damping(SCALAR, self._static, self._lugre, dq.tolist(), self.smoothing):
            C[i] = c
        return C

    def step_states(self, dq: np.ndarray, s: np.ndarray, dt: float) -> np.ndarray:
        """The bristle states ``dt`` seconds later at the velocities held (exact, any ``dt``)."""
        return np.array([law.z_step(float(s[k]), float(dq[i]), dt, SCALAR) for k, (i, law, _) in enumerate(self._lugre)], dtype=float)

    def state_jacobian(self, dq: np.ndarray, s: np.ndarray) -> np.ndarray:
        """``d(dz/dt)/dz = -sigma0*|v|/g(v)`` (1/s) of every bristle state."""
        return np.array([-law.decay(float(dq[i]), SCALAR) for i, law, _ in self._lugre], dtype=float)

    def state_stiffness(self, dq: np.ndarray, s: np.ndarray) -> tuple[float, str]:
        """Largest ``sigma0*|v|/g(v)`` (1/s) over the LuGre joints: the bristle states' decay rate."""
        worst, name = 0.0, ""
        for k, (i, law, _) in enumerate(self._lugre):
            rate = law.decay(float(dq[i]), SCALAR)
            if rate > worst:
                worst, name = rate, self.state_names[k]
        return worst, name


def normal_load(xp: Any, axis: Any, x: Any, radial: Any, axial: Any) -> tuple[Any, Any]:
    """One part ``x`` (the force, N, or the moment, N·m; joint frame) of a load-dependent joint's
    equivalent normal load and its gradient with respect to ``x``, over the backend ``xp``:

    ``radial |x - (n.x) n| + axial |n.x|`` and ``radial u + axial sgn(n.x) n`` with ``u`` the unit
    normal part (0 where it vanishes: a zero subgradient); ``n`` the unit ``axis``; ``radial``,
    ``axial`` the load model's coefficients of the normal and axial magnitudes
    (:func:`_load_coefficients`). The load is the sum over force and moment. Vectors may be
    stacked along leading axes (numpy: the last axis holds the 3 components) or CasADi columns.
    """
    along = xp.rowdot(axis, x)
    normal = x - along * axis
    size = xp.sqrt(xp.rowdot(normal, normal))
    return radial * size + axial * xp.abs(along), radial * (normal / xp.where(size > 0, size, 1.0)) + axial * xp.sign(along) * axis


def friction_terms(
    xp: Any, static: Sequence[tuple[int, Any, int]], lugre: Sequence[tuple[int, Any, int]], dq: Any, z: Any, smoothing: float
) -> tuple[list[tuple[int, int, Any, Any]], list[Any]]:
    """The friction of :class:`JointFriction`, over the backend ``xp`` (floats for the
    interpreted element, CasADi for the compiled core): per joint ``(idx_v, load slot or -1,
    mu, fv*v)`` with ``F = load*mu + fv*v``, and the LuGre rates ``dz/dt``.

    ``mu = level(v)*tanh(v/v_eps)`` for static laws (``v_eps = smoothing``), ``sigma0*z +
    sigma1*dz/dt`` with ``dz/dt = v - sigma0*|v|*z/g(v)`` for LuGre. ``static`` and ``lugre``
    are ``(idx_v, law, load slot)`` as the element's ``_static`` and ``_lugre`` (the laws'
    fields may be symbols); ``dq`` the velocities, ``z`` the bristle states in ``lugre`` order.
    """
    terms, rates = [], []
    for i, law, slot in static:
        v = dq[i]
        terms.append((i, slot, smoothed_dry(xp, law.level(v, xp), v, smoothing), law.fv * v))
    for k, (i, law, slot) in enumerate(lugre):
        v = dq[i]
        rate = lugre_rate(xp, v, z[k], law.sigma0, law.g(v, xp))
        rates.append(rate)
        terms.append((i, slot, lugre_force(z[k], rate, law.sigma0, law.sigma1), law.fv * v))
    return terms, rates


def place_terms(terms: Sequence[tuple[int, int, Any, Any]], Q0: Any, B: Any) -> tuple[Any, Any]:
    """Fill ``Q0`` (nv) and ``B`` (nv x loads) from :func:`friction_terms` so that the generalized
    friction force is ``Q = Q0 + B N`` for normal loads ``N``; numpy arrays or CasADi matrices."""
    for i, slot, mu, viscous in terms:
        if slot < 0:
            Q0[i] = -(mu + viscous)
        else:
            Q0[i] = -viscous
            B[i, slot] = -mu
    return Q0, B


def friction_damping(
    xp: Any, static: Sequence[tuple[int, Any, int]], lugre: Sequence[tuple[int, Any, int]], dq: Any, smoothing: float
) -> list[tuple[int, Any]]:
    """``(idx_v, dF/dv)`` per friction joint (N·m·s/rad, N·s/m), as :meth:`JointFriction.damping`:
    ``level(v)*(1 - tanh^2(v/v_eps))/v_eps + fv`` for static laws (the level's own slope left out,
    so it stays >= 0), the presliding damping ``sigma1 + fv`` for LuGre; arguments as
    :func:`friction_terms`."""
    out = []
    for i, law, _ in static:
        v = dq[i]
        out.append((i, smoothed_dry_slope(xp, law.level(v, xp), v, smoothing) + law.fv))
    out.extend((i, law.sigma1 + law.fv) for i, law, _ in lugre)
    return out


def elastic_forces(Q: Any, q: Any, dq: Any, idx: Sequence[int], k: Any, c: Any, supports: Sequence[tuple[Any, ...]]) -> Any:
    """Add the spring–damper forces of :class:`~mbctl.dynamics.flexible.elastic.ElasticForces` to ``Q``
    (N·m, N), on numpy arrays or CasADi matrices:

    - sde springs and dampers ``Q_i -= k_i d_i + c_i d_dot_i`` on the DOF ``idx`` (``k``, ``c``
      vectors in that order);
    - per base support point ``(p, J, p0, S, D)``: ``Q += J^T (-S (p - p0) - D J dq)``, with ``p`` its
      position (m, world), ``J = dp/dq`` and ``S``, ``D`` the per-axis stiffness (N/m) and damping
      (N·s/m). Whoever calls supplies ``p`` and ``J`` (pinocchio numbers or symbolic kinematics).
    """
    if len(idx):
        Q[idx] -= k * q[idx] + c * dq[idx]
    for p, J, p0, S, D in supports:
        Q += J.T @ (-S * (p - p0) - D * (J @ dq))
    return Q


def elastic_diagonal(out: Any, idx: Sequence[int], sde: Any, supports: Sequence[tuple[Any, Any]]) -> Any:
    """Add the diagonal of ``-dQ/dq`` (``sde = k``, supports ``(J, S)``) or ``-dQ/d(dq)`` (``c``,
    ``(J, D)``) of :func:`elastic_forces` to ``out``: the sde coefficients on their DOF plus
    ``diag(J^T C J) = sum_r C_r J_r^2`` per support point (``J`` 3 x nv)."""
    if len(idx):
        out[idx] += sde
    for J, C in supports:
        out += sum((C[r] * J[r, :] * J[r, :]).T for r in range(3))
    return out


def _load_coefficients(joint) -> np.ndarray:
    """``c`` with ``normal_load(w) = c . (f_r, f_a, m_b, m_a)`` for the joint's load model,
    read off unit wrenches and checked on a generic one."""
    n = joint.axis
    u = np.cross(n, [1.0, 0.0, 0.0])
    if np.linalg.norm(u) < 0.5:
        u = np.cross(n, [0.0, 1.0, 0.0])
    u = u / np.linalg.norm(u)
    model, kind = joint.friction.load, joint.kind
    units = [np.concatenate([u, 0 * n]), np.concatenate([n, 0 * n]), np.concatenate([0 * n, u]), np.concatenate([0 * n, n])]
    c = np.array([float(model.normal_load(w, n, kind)) for w in units])
    w = np.array([0.3, -1.7, 2.9, -0.4, 1.1, 0.8])
    f, m = w[:3], w[3:]
    parts = [np.linalg.norm(f - (f @ n) * n), abs(f @ n), np.linalg.norm(m - (m @ n) * n), abs(m @ n)]
    if not math.isclose(float(model.normal_load(w, n, kind)), float(c @ parts), rel_tol=1e-9, abs_tol=1e-12):
        raise ValueError(f"the load model of joint {joint.name!r} is not a combination of wrench component magnitudes")
    return c


def _joint_name(robot: RobotModel, idx_v: int) -> str:
    return next(j.name for j in robot.joints if j.idx_v == idx_v)
