"""The optimisation problem of an excitation design: the limits, the condition number of the
identification regressor (the objective) with its gradient, and the constraints, in the
variables of the Fourier series of :mod:`mbctl.ctrl.fourier`.

Objective: the log of the condition number of the *column-normalised* identification
regressor stacked over a grid of ``M`` samples of one period::

    W = [ Y_b(q_k, dq_k, ddq_k) | friction columns ]   (M * n rows, nb + 3 n columns)
    kappa = cond(W D^-1),  D = diag(column norms of W)

with ``Y_b`` the independent (base) columns of the joint-torque regressor
(:mod:`mbctl.dynamics.regressor`) in the rows of the excited joints, and, by default,
each excited joint's friction columns ``[dq_j, sgn(dq_j), 1]`` (viscous, Coulomb,
offset: the linear friction model of the arm fit). Normalising the columns makes
``kappa`` independent of units (kg against kg·m²). The base columns are found for the
motion actually possible: held joints stay at their position with zero velocity.

Constraints at every sample of a constraint grid: positions within the limits,
``|dq| <= v_max``, ``|ddq| <= a_max``, and, for every joint with an effort limit (held
joints included), ``|tau_rigid| + F(|dq|) <= effort``: ``tau_rigid`` the model's RNEA
torque (gravity included) and ``F`` the friction's largest magnitude at that speed, the
law's steady curve raised to its break-away level (``fs + fv |dq|`` for Stribeck and
LuGre, load-dependent friction loaded by the same RNEA). Counting friction whichever its
sign is conservative where it opposes the rigid torque, but smooth: the true torque
jumps by ``2 fs`` at every velocity reversal, which no grid sees and no gradient method
survives. Each limit is tightened by ``margin`` (a fraction of the limit; positions: of
the half range). Positions, velocities and accelerations are linear in the variables;
torque is not. Constraints enter as fractions of their limits in an elastic form (a
slack ``s >= 0`` with a penalty), so an infeasible start still gives the optimiser
compatible linearisations.

Solver and why: the condition number is a function of the extreme singular values of a
matrix of ~50 columns; no CasADi expression gives it (its symbolic eigenvalues stop at
a few columns), so the objective and its gradient are computed numerically anyway:
``d log kappa = (v_max^T dZ^T Z v_max / s_max^2 - v_min^T dZ^T Z v_min / s_min^2)`` from
the SVD of ``Z = W D^-1``, with ``dW`` from the regressor's derivatives with respect to
the states (finite differences of pinocchio's regressor: exact for ``ddq``, where it is
linear, central in ``q`` and ``dq``). The rigid torque's derivatives come from the same
differences (``dtau = dY theta``), the friction bound's from its slope in ``|dq|``. With ~60
variables, a few hundred linear and ~1000 torque constraints, scipy's SLSQP solves the
problem in seconds; IPOPT (through CasADi) would need the same numeric callbacks and
a quasi-Newton Hessian, and gains nothing here.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from mbctl.dynamics.inverse import InverseDynamics
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.regressor import base_parameters, inertial_parameters, joint_torque_regressor
from mbctl.errors import InputError

from .fourier import fourier_basis
from .trajectory import Trajectory

__all__ = ["DEFAULT_ACCELERATION", "DEFAULT_SPEED", "ExcitationLimits", "excitation_condition"]

DEFAULT_SPEED = 2.0  # rad/s or m/s where a joint has no velocity limit (as mbctl.dynamics.regressor.random_states)
DEFAULT_ACCELERATION = 10.0  # rad/s² or m/s² unless given: a URDF has no acceleration limits
_UNBOUNDED = np.pi  # position range ±pi (rad, or m) where a joint has no position limit
_DQ_STEP = 1e-5  # finite-difference step in q (rad, m) and dq (rad/s, m/s)


@dataclass(frozen=True)
class ExcitationLimits:
    """The limits an excitation keeps to, per robot joint (SI units), and how they were chosen.

    Attributes:
        lower, upper: Position limits (rad or m); ±pi where the robot has none.
        velocity: |dq| limits (rad/s or m/s); the robot's, or a default where it has none.
        acceleration: |ddq| limits (rad/s² or m/s²).
        effort: |tau| limits (N·m or N); inf where the robot has none.
    """

    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    acceleration: np.ndarray
    effort: np.ndarray

    @classmethod
    def of(cls, robot: RobotModel, acceleration: float | Sequence[float] | None = None, speed: float = DEFAULT_SPEED) -> ExcitationLimits:
        """The robot's limits, with ``acceleration`` (one value or one per joint; default
        :data:`DEFAULT_ACCELERATION`) and ``speed`` where a joint has no velocity limit."""
        acc = np.broadcast_to(np.asarray(DEFAULT_ACCELERATION if acceleration is None else acceleration, dtype=float), (robot.nv,))
        if not (np.all(np.isfinite(acc)) and np.all(acc > 0)):
            raise InputError(f"accelerations must be finite and > 0, got {acc.tolist()}", field="acceleration")
        if not (np.isfinite(speed) and speed > 0):
            raise InputError(f"must be finite and > 0, got {speed}", field="speed")
        lim = [j.limits for j in robot.joints]
        return cls(
            lower=np.array([max(x.lower, -_UNBOUNDED) if np.isfinite(x.lower) else -_UNBOUNDED for x in lim]),
            upper=np.array([min(x.upper, _UNBOUNDED) if np.isfinite(x.upper) else _UNBOUNDED for x in lim]),
            velocity=np.array([x.velocity if np.isfinite(x.velocity) else speed for x in lim]),
            acceleration=acc.copy(),
            effort=np.array([x.effort for x in lim]),
        )

    def tightened(self, margin: float) -> ExcitationLimits:
        """Every limit tightened by the fraction ``margin`` (positions: of the half range)."""
        half = 0.5 * (self.upper - self.lower)
        return ExcitationLimits(
            lower=self.lower + margin * half,
            upper=self.upper - margin * half,
            velocity=self.velocity * (1 - margin),
            acceleration=self.acceleration * (1 - margin),
            effort=self.effort * (1 - margin),
        )


# ---------------------------------------------------------------------------------
# the identification regressor and its derivatives


class _Regressor:
    """The stacked identification regressor ``W`` of a robot for a set of excited joints."""

    def __init__(self, robot: RobotModel, excited: Sequence[int], hold: np.ndarray, friction: bool, seed: int):
        self.robot = robot
        self.excited = np.asarray(excited, dtype=int)
        self.hold = hold
        self.friction = friction
        self.theta = inertial_parameters(robot)
        self.armature = np.asarray(robot.model.armature, dtype=float)
        self.columns = self._independent_columns(seed)

    def states(self, qe: np.ndarray, dqe: np.ndarray, ddqe: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Full-robot states from the excited joints' (M, n) states; held joints at rest."""
        m = len(qe)
        q = np.tile(self.hold, (m, 1))
        dq, ddq = np.zeros_like(q), np.zeros_like(q)
        q[:, self.excited], dq[:, self.excited], ddq[:, self.excited] = qe, dqe, ddqe
        return q, dq, ddq

    def _independent_columns(self, seed: int) -> np.ndarray:
        """Base columns for this motion: the excited joints' rows, held joints locked."""
        held = {i: float(self.hold[i]) for i in range(self.robot.nv) if i not in set(self.excited.tolist())}
        return base_parameters(self.robot, self.excited, seed=seed, held=held).columns

    def matrix(self, Y: np.ndarray, dqe: np.ndarray) -> np.ndarray:
        """``W`` (M, n, ncols) from the full regressor ``Y`` (M, nv, 10 nb) and the excited velocities."""
        Wb = Y[:, self.excited][:, :, self.columns]
        if not self.friction:
            return Wb
        m, n = dqe.shape
        F = np.zeros((m, n, 3 * n))
        rows = np.arange(n)
        F[:, rows, 3 * rows] = dqe
        F[:, rows, 3 * rows + 1] = np.sign(dqe)
        F[:, rows, 3 * rows + 2] = 1.0
        return np.concatenate([Wb, F], axis=2)

    def derivatives(self, q: np.ndarray, dq: np.ndarray, ddq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``Y`` (M, nv, 10 nb) and its derivatives w.r.t. the excited joints' q, dq, ddq,
        shape (3, n, M, nv, 10 nb): central differences in q and dq, exact in ddq (Y is linear in it)."""
        robot, h = self.robot, _DQ_STEP
        Y = joint_torque_regressor(robot, q, dq, ddq)
        dY = np.empty((3, len(self.excited)) + Y.shape)
        for i, j in enumerate(self.excited):
            step = np.zeros_like(q)
            step[:, j] = h
            dY[0, i] = (joint_torque_regressor(robot, q + step, dq, ddq) - joint_torque_regressor(robot, q - step, dq, ddq)) / (2 * h)
            dY[1, i] = (joint_torque_regressor(robot, q, dq + step, ddq) - joint_torque_regressor(robot, q, dq - step, ddq)) / (2 * h)
            dY[2, i] = (joint_torque_regressor(robot, q, dq, ddq + step / h) - Y)
        return Y, dY


def _log_condition(W: np.ndarray) -> tuple[float, np.ndarray]:
    """``log cond(W D^-1)`` of the stacked matrix and its gradient with respect to ``W``."""
    shape = W.shape
    X = W.reshape(-1, shape[-1])
    norm = np.linalg.norm(X, axis=0)
    norm = np.where(norm > 0, norm, 1.0)
    Z = X / norm
    # singular values of the small triangular factor (an SVD of the tall matrix is far slower)
    _, s, Vt = np.linalg.svd(np.linalg.qr(Z, mode="r"))
    if s[-1] <= s[0] * 1e-14:
        return float(np.log(1e14)), np.zeros(shape)
    # d log s_i = u_i^T dZ v_i with u_i = Z v_i / s_i
    G = np.outer(Z @ Vt[0], Vt[0]) / s[0] ** 2 - np.outer(Z @ Vt[-1], Vt[-1]) / s[-1] ** 2
    # through the normalisation Z_i = X_i / |X_i|: dX_i = (G_i - Z_i (Z_i . G_i)) / |X_i|
    GX = (G - Z * np.sum(Z * G, axis=0)) / norm
    return float(np.log(s[0] / s[-1])), GX.reshape(shape)


def excitation_condition(
    robot: RobotModel, traj: Trajectory, joints: Sequence[str] | None = None, *, friction: bool = True, seed: int = 0
) -> float:
    """Condition number of the column-normalised identification regressor along ``traj``.

    The rows are those of ``joints`` (default: every joint the trajectory moves); joints the
    trajectory does not name stay at zero. Columns as :func:`design_excitation` uses them.
    """
    q, dq, ddq = traj.columns(robot.joint_names) if set(robot.joint_names) <= set(traj.joint_names) else _fill(robot, traj)
    moving = [j.idx_v for j in robot.joints if np.ptp(q[:, j.idx_v]) > 0] if joints is None else [robot.joint(n).idx_v for n in joints]
    with threadpool_limits(limits=1, user_api="blas"):
        reg = _Regressor(robot, moving, q[0].copy(), friction, seed)
        W = reg.matrix(joint_torque_regressor(robot, q, dq, ddq), dq[:, moving])
        return float(np.exp(_log_condition(W)[0]))


def _fill(robot: RobotModel, traj: Trajectory) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    out = [np.zeros((len(traj), robot.nv)) for _ in range(3)]
    for k, name in enumerate(traj.joint_names):
        i = robot.joint(name).idx_v
        out[0][:, i], out[1][:, i], out[2][:, i] = traj.q[:, k], traj.dq[:, k], traj.ddq[:, k]
    return out[0], out[1], out[2]


# ---------------------------------------------------------------------------------
# the optimisation problem


class _Problem:
    """Objective and constraints of one round, cached per variable vector.

    Elastic form, so that SLSQP's linearised constraints are always compatible (an
    infeasible start, torque limits below gravity at the start): the variables are ``y =
    (x, s)`` with a slack ``s >= 0``, each constraint is a fraction of its limit ``c(x)
    >= -s``, and the objective ``log kappa + PENALTY s``; at a feasible solution ``s = 0``.
    """

    PENALTY = 100.0

    def __init__(
        self, reg: _Regressor, torque_robot: RobotModel, limits: ExcitationLimits, period: float, harmonics: int, grid: np.ndarray, extra: np.ndarray
    ):
        self.reg = reg
        self.torque_robot = torque_robot
        self.limits = limits
        self.n = len(reg.excited)
        self.k = 2 * harmonics - 1
        self.m = len(grid)
        times = np.concatenate([grid, extra])
        self.P, self.V, self.A = fourier_basis(times, period, harmonics)
        self.inverse = InverseDynamics(torque_robot, lugre="steady", threads=0)
        self.effort_rows = np.flatnonzero(np.isfinite(limits.effort))
        self._key: bytes | None = None
        self._lin = self._linear_constraints()

    def _joint_states(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        Z = x.reshape(self.n, self.k).T
        return self.P @ Z, self.V @ Z, self.A @ Z

    def _linear_constraints(self) -> tuple[np.ndarray, np.ndarray]:
        """``C x + d >= 0`` for positions, velocities and accelerations at every sample."""
        lim, ex = self.limits, self.reg.excited
        rows, offsets = [], []
        for i, j in enumerate(ex):
            for basis, lo, hi in (
                (self.P, lim.lower[j], lim.upper[j]),
                (self.V, -lim.velocity[j], lim.velocity[j]),
                (self.A, -lim.acceleration[j], lim.acceleration[j]),
            ):
                scale = 0.5 * (hi - lo)  # as a fraction of the limit (positions: of the half range)
                block = np.zeros((len(basis), self.n * self.k))
                block[:, i * self.k : (i + 1) * self.k] = basis / scale
                rows += [block, -block]
                offsets += [np.full(len(basis), -lo / scale), np.full(len(basis), hi / scale)]
        return np.vstack(rows), np.concatenate(offsets)

    def _evaluate(self, x: np.ndarray) -> None:
        key = x.tobytes()
        if key == self._key:
            return
        reg, n, k = self.reg, self.n, self.k
        qe, dqe, ddqe = self._joint_states(x)
        q, dq, ddq = reg.states(qe, dqe, ddqe)
        Y, dY = reg.derivatives(q, dq, ddq)
        m = self.m
        # objective on the grid
        W = reg.matrix(Y[:m], dqe[:m])
        f, G = _log_condition(W)
        Gb = G[:, :, : len(reg.columns)]
        # d f / d state_j at sample t: sum over rows of excited joints and base columns
        dW = dY[:, :, :m][:, :, :, reg.excited][..., reg.columns]  # (3, n, m, n, nb)
        gstate = np.einsum("snmrc,mrc->snm", dW, Gb)
        if reg.friction:
            rows = np.arange(n)
            gstate[1] += G[:, rows, len(reg.columns) + 3 * rows].T  # viscous column dq_j
        grad = np.zeros((n, k))
        for i in range(n):
            grad[i] = self.P[:m].T @ gstate[0, i] + self.V[:m].T @ gstate[1, i] + self.A[:m].T @ gstate[2, i]
        # rigid torque at every sample and its derivatives (dtau = dY theta, armature on ddq)
        result = self.inverse(q, dq, ddq)
        rows = self.effort_rows
        tau = result.tau_rigid[:, rows]
        dtau = np.einsum("snmrc,c->snmr", dY[..., rows, :], reg.theta)  # (3, n, M, r)
        dfriction = np.zeros(tau.shape + (n,))
        friction = np.zeros_like(tau)  # largest friction magnitude at each speed
        for r, j in enumerate(rows):
            joint = self.torque_robot.joints[j]
            i = np.flatnonzero(reg.excited == j)
            if i.size and self.armature[j]:
                dtau[2, i[0], :, r] += self.armature[j]
            if joint.friction is not None:
                load = result.normal_load[:, j] if joint.friction.load is not None else 1.0
                speed = np.abs(dq[:, j])
                friction[:, r] = joint.friction.law.steady(speed, np.ones_like(speed), load)
                if i.size:  # d|F|/d dq on the smooth branch (the load's dependence left out)
                    h = _DQ_STEP
                    slope = (joint.friction.law.steady(speed + h, np.ones_like(speed), load) - friction[:, r]) / h
                    dfriction[:, r, i[0]] = slope * np.where(dq[:, j] >= 0, 1.0, -1.0)
        lim = self.limits.effort[rows]
        jac = np.zeros((len(tau), len(rows), n, k))
        djac = np.zeros((len(tau), len(rows), n, k))
        for i in range(n):
            jac[:, :, i, :] = (
                dtau[0, i][:, :, None] * self.P[:, None, :]
                + dtau[1, i][:, :, None] * self.V[:, None, :]
                + dtau[2, i][:, :, None] * self.A[:, None, :]
            )
            djac[:, :, i, :] = dfriction[:, :, i][:, :, None] * self.V[:, None, :]
        jac = (jac / lim[None, :, None, None]).reshape(len(tau) * len(rows), n * k)
        djac = (djac / lim[None, :, None, None]).reshape(len(tau) * len(rows), n * k)
        self._key = key
        self.f, self.grad = f, grad.ravel()
        # |tau_rigid| + |F| <= limit, as two smooth constraints
        self.torque = np.concatenate([(1 - (tau + friction) / lim).ravel(), (1 + (tau - friction) / lim).ravel()])
        self.torque_jac = np.vstack([-jac - djac, jac - djac])

    @property
    def armature(self) -> np.ndarray:
        return self.reg.armature

    def log_condition(self, x: np.ndarray) -> float:
        self._evaluate(x)
        return self.f

    def start(self, x: np.ndarray) -> np.ndarray:
        """``y = (x, s)`` with the smallest slack that makes ``x`` feasible."""
        return np.append(x, max(0.0, -float(self.constraints(np.append(x, 0.0)).min())))

    def objective(self, y: np.ndarray) -> tuple[float, np.ndarray]:
        self._evaluate(y[:-1])
        return self.f + self.PENALTY * y[-1], np.append(self.grad, self.PENALTY)

    def constraints(self, y: np.ndarray) -> np.ndarray:
        self._evaluate(y[:-1])
        C, d = self._lin
        return np.concatenate([C @ y[:-1] + d, self.torque]) + y[-1]

    def constraints_jac(self, y: np.ndarray) -> np.ndarray:
        self._evaluate(y[:-1])
        J = np.vstack([self._lin[0], self.torque_jac])
        return np.hstack([J, np.ones((len(J), 1))])


def _friction_envelope(robot: RobotModel) -> RobotModel:
    """The robot with each Stribeck (and steady LuGre) curve raised to its break-away level
    (``fc = fs``): ``|F(v)| <= fs + fv |v|`` bounds the friction at every speed, so grid samples
    on either side of a velocity reversal bound the torque jump between them."""
    flat = {}
    for j in robot.joints:
        if j.friction is not None and hasattr(j.friction.law, "fs"):
            flat[j.name] = dataclasses.replace(j.friction, law=dataclasses.replace(j.friction.law, fc=j.friction.law.fs))
    return robot.with_friction(flat)
