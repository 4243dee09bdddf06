"""Excitation trajectories for identifying an arm: periodic Fourier series, optimised for the
condition number of the identification regressor within the joint limits.

Each excited joint ``j`` follows a finite Fourier series with ``L`` harmonics of the base
frequency ``w = 2 pi / T`` (Swevers' form; ``T`` the period in s)::

    q_j(t)   = q0_j + sum_l  a_jl/(w l) sin(w l t) - b_jl/(w l) cos(w l t)
    dq_j(t)  =        sum_l  a_jl cos(w l t) + b_jl sin(w l t)
    ddq_j(t) =        sum_l -a_jl w l sin(w l t) + b_jl w l cos(w l t)

(rad, rad/s, rad/s², or m ... for a prismatic joint). The series is periodic, so the
ends agree; it *starts and ends at rest* because the coefficients are constrained:
``dq_j(0) = sum_l a_jl = 0`` and ``ddq_j(0) = w sum_l l b_jl = 0``. The constraint is
eliminated, not imposed numerically: the first harmonic is solved from the others
(``a_j1 = -sum_{l>=2} l (a_jl/l)``, likewise ``b_j1``), so rest holds to round-off and
at least two harmonics are needed. The variables are ``q0_j`` and the position
amplitudes ``a_jl/(w l)``, ``b_jl/(w l)`` for ``l >= 2`` (all in rad or m: one scale).

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
torque is not. The variables start from random amplitudes (seeded; decaying as
``1/l``) at half the tightest kinematic limit of each joint, around mid range, halved
until the torque limits hold; constraints enter as fractions of their limits in an
elastic form (a slack ``s >= 0`` with a penalty), so an infeasible start still gives the
optimiser compatible linearisations.

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

Between grid samples a limit can be exceeded: the result is checked at every sample of
the written trajectory with the full model (dynamic LuGre states as ``mbctl
feedforward`` integrates them), and samples that leave the limits tightened by half
the margin are added to the constraint grid and the problem solved again (at most
``rounds`` times) until none does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
from threadpoolctl import threadpool_limits

from mbctl.dynamics.inverse import InverseDynamics
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.regressor import base_parameters, inertial_parameters, joint_torque_regressor
from mbctl.errors import DataError, InputError

from .trajectory import Trajectory

__all__ = ["Excitation", "ExcitationLimits", "design_excitation", "excitation_condition", "fourier_basis"]

Progress = Callable[[int, int], None]

DEFAULT_SPEED = 2.0  # rad/s or m/s where a joint has no velocity limit (as mbctl.dynamics.regressor.random_states)
DEFAULT_ACCELERATION = 10.0  # rad/s² or m/s² unless given: a URDF has no acceleration limits
_UNBOUNDED = np.pi  # position range ±pi (rad, or m) where a joint has no position limit
_DQ_STEP = 1e-5  # finite-difference step in q (rad, m) and dq (rad/s, m/s)


def fourier_basis(t: np.ndarray, period: float, harmonics: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Basis rows for one joint's variables ``z = [q0, alpha_2..alpha_L, beta_2..beta_L]``.

    ``alpha_l = a_l/(w l)`` and ``beta_l = b_l/(w l)`` are position amplitudes (rad or m);
    ``alpha_1 = -sum_l l alpha_l`` and ``beta_1 = -sum_l l^2 beta_l`` (l >= 2) make the
    motion start and end at rest. Returns ``(P, V, A)``, each (len(t), 2L - 1), with
    ``q = P z``, ``dq = V z``, ``ddq = A z``.
    """
    t = np.asarray(t, dtype=float)[:, None]
    w = 2.0 * np.pi / period
    ell = np.arange(1, harmonics + 1)
    s, c = np.sin(w * ell * t), np.cos(w * ell * t)
    wl = w * ell
    # full rows over [q0, alpha_1..alpha_L, beta_1..beta_L]
    P = np.hstack([np.ones_like(t), s, -c])
    V = np.hstack([np.zeros_like(t), wl * c, wl * s])
    A = np.hstack([np.zeros_like(t), -(wl**2) * s, wl**2 * c])
    # eliminate alpha_1 and beta_1 (rest at t = 0 and t = T)
    N = np.zeros((2 * harmonics + 1, 2 * harmonics - 1))
    N[0, 0] = 1.0
    rest = ell[1:]
    for k, l_ in enumerate(rest):
        N[1 + l_ - 1, 1 + k] = 1.0
        N[1, 1 + k] = -float(l_)
        N[1 + harmonics + l_ - 1, harmonics + k] = 1.0
        N[1 + harmonics, harmonics + k] = -float(l_) ** 2
    return P @ N, V @ N, A @ N


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


@dataclass(frozen=True)
class Excitation:
    """An optimised excitation and its diagnostics.

    Attributes:
        trajectory: Every joint of the robot over ``periods`` periods (held joints constant).
        joint_names: The excited joints.
        held: Position (rad or m) of every joint that is not excited.
        period: ``T`` (s); base frequency ``w = 2 pi / T``.
        q0: Offsets ``q0_j`` of the excited joints (rad or m), shape (n,).
        a, b: Swevers' coefficients (rad/s or m/s), shape (n, L), as in the module docstring.
        condition_initial: Condition number of the column-normalised regressor for the
            random start (what a random Fourier trajectory of this size gives).
        condition: The same for the result, on the same grid.
        iterations: SLSQP iterations over all rounds (of the start kept).
        rounds: Times the problem was solved (constraint samples added in between).
        converged: SLSQP's last solve reported success.
        message: SLSQP's last message.
        limits: The limits the trajectory keeps to (before the margin).
        starts: Random starts tried; the lowest condition number is kept.
        usage: Largest fraction of each limit used, per kind (``"position"`` is of the
            half range around the mid position), over the written samples.
    """

    trajectory: Trajectory
    joint_names: tuple[str, ...]
    held: dict[str, float]
    period: float
    q0: np.ndarray
    a: np.ndarray
    b: np.ndarray
    condition_initial: float
    condition: float
    iterations: int
    rounds: int
    converged: bool
    message: str
    limits: ExcitationLimits
    usage: dict[str, float] = field(default_factory=dict)
    starts: int = 1

    @property
    def harmonics(self) -> int:
        return int(self.a.shape[1])


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


def _violations(
    robot: RobotModel, limits: ExcitationLimits, traj: Trajectory, tau: np.ndarray
) -> tuple[np.ndarray, dict[str, float], str]:
    """Per sample, the largest fraction of any limit used (1 = at the limit); the largest per
    kind; and which limit is used most (``"torque of j2"``)."""
    q, dq, ddq = traj.columns(robot.joint_names)
    mid, half = 0.5 * (limits.upper + limits.lower), 0.5 * (limits.upper - limits.lower)
    with np.errstate(divide="ignore", invalid="ignore"):
        used = {
            "position": np.abs(q - mid) / half,
            "velocity": np.abs(dq) / limits.velocity,
            "acceleration": np.abs(ddq) / limits.acceleration,
            "torque": np.where(np.isfinite(limits.effort), np.abs(tau) / limits.effort, 0.0),
        }
    stack = np.stack(list(used.values()))  # (kind, sample, joint)
    kind, _, joint = np.unravel_index(int(np.argmax(stack)), stack.shape)
    most = f"{list(used)[kind]} of {robot.joint_names[joint]}"
    return stack.max(axis=(0, 2)), {kind: float(u.max()) for kind, u in used.items()}, most


def design_excitation(
    robot: RobotModel,
    *,
    harmonics: int,
    period: float,
    joints: Sequence[str] | None = None,
    rate_hz: float = 1000.0,
    periods: int = 1,
    grid: int | None = None,
    acceleration: float | Sequence[float] | None = None,
    speed: float = DEFAULT_SPEED,
    margin: float = 0.1,
    friction: bool = True,
    seed: int = 0,
    starts: int = 1,
    max_iterations: int = 200,
    rounds: int = 5,
    progress: Progress | None = None,
) -> Excitation:
    """Design a periodic, rest-to-rest Fourier excitation (see the module docstring).

    Args:
        robot: The robot (rigid; its URDF inertials and friction give the torques).
        harmonics: ``L`` >= 2, harmonics of the base frequency per joint.
        period: ``T`` (s), > 0.
        joints: Joints to excite (default: every actuated joint); the others are held at
            the middle of their position range (0 where unbounded).
        rate_hz: Sampling rate of the written trajectory (Hz).
        periods: Number of periods the written trajectory repeats (each starts and ends at rest).
        grid: Samples per period for the objective (default ``max(40, 12 L)``).
        acceleration: |ddq| limit, one value or one per robot joint (rad/s², m/s²);
            default :data:`DEFAULT_ACCELERATION`.
        speed: |dq| limit where a joint has none (rad/s or m/s).
        margin: Fraction of each limit left free, in [0, 0.5): headroom for tracking errors
            (`mbctl run` stops where a measured velocity or torque reaches its limit).
        friction: Include the friction columns ``[dq, sgn(dq), 1]`` of each excited joint.
        seed: Seed of the random starts (and of the states the base columns are found on).
        starts: Random starts to optimise from; the lowest condition number is kept.
        max_iterations: SLSQP iterations per round.
        rounds: Largest number of solves with samples added to the constraint grid.
        progress: Called with ``(iterations, max_iterations)`` every 10 iterations of a round.

    Raises:
        InputError: For bad options (naming the option).
        DataError: When no trajectory within the limits is found.
    """
    if not isinstance(harmonics, (int, np.integer)) or harmonics < 2:
        raise InputError(f"must be an integer >= 2 (one harmonic cannot start and end at rest), got {harmonics}", field="harmonics")
    if not (np.isfinite(period) and period > 0):
        raise InputError(f"must be > 0 s, got {period}", field="period")
    if not (np.isfinite(rate_hz) and rate_hz > 0):
        raise InputError(f"must be > 0 Hz, got {rate_hz}", field="rate")
    if not (isinstance(periods, (int, np.integer)) and periods >= 1):
        raise InputError(f"must be an integer >= 1, got {periods}", field="periods")
    if not 0 <= margin < 0.5:
        raise InputError(f"must be in [0, 0.5), got {margin}", field="margin")
    if robot.is_elastic:
        raise InputError(f"robot {robot.name} has elastic DOF ({', '.join(robot.elastic_names)}): excitation design needs a rigid model")
    names = list(robot.actuated_names) if joints is None else list(joints)
    for name in names:
        if name not in robot.joint_names:
            raise InputError(f"no joint {name!r} in robot {robot.name} (joints: {', '.join(robot.joint_names)})", field="joints")
    passive = [n for n in names if not robot.joint(n).actuated]
    if passive:
        raise InputError(f"joint {passive[0]!r} has no drive: only actuated joints can be excited", field="joints")
    if not names or len(set(names)) != len(names):
        raise InputError(f"need distinct joint names, got {names}", field="joints")
    m = max(40, 12 * harmonics) if grid is None else int(grid)
    if m < 4 * harmonics:
        raise InputError(f"needs at least 4 samples per period per harmonic ({4 * harmonics}), got {m}", field="grid")
    if rate_hz * period < 4 * harmonics:
        raise InputError(f"{rate_hz} Hz samples a {period} s period too coarsely for {harmonics} harmonics", field="rate")

    # one BLAS thread: on these small matrices more threads only wait on each other (10x slower on 2 busy cores)
    if not (isinstance(starts, (int, np.integer)) and starts >= 1):
        raise InputError(f"must be an integer >= 1, got {starts}", field="starts")
    best: Excitation | None = None
    failure: DataError | None = None
    with threadpool_limits(limits=1, user_api="blas"):
        for start in range(starts):
            try:
                result = _design(
                    robot, names, harmonics, period, rate_hz, periods, m, acceleration, speed, margin, friction,
                    (seed, start), max_iterations, rounds, progress,
                )
            except DataError as exc:  # this start found nothing within the limits; another may
                failure = exc
                continue
            if best is None or result.condition < best.condition:
                best = result
    if best is None:
        assert failure is not None
        raise failure
    return dataclasses.replace(best, starts=starts)


def _design(
    robot: RobotModel,
    names: list[str],
    harmonics: int,
    period: float,
    rate_hz: float,
    periods: int,
    m: int,
    acceleration: float | Sequence[float] | None,
    speed: float,
    margin: float,
    friction: bool,
    seed: tuple[int, int],
    max_iterations: int,
    rounds: int,
    progress: Progress | None,
) -> Excitation:
    limits = ExcitationLimits.of(robot, acceleration, speed)
    excited = np.array(sorted(robot.joint(n).idx_v for n in names))
    mid = np.where(np.isfinite([j.limits.lower + j.limits.upper for j in robot.joints]), 0.5 * (limits.lower + limits.upper), 0.0)
    reg = _Regressor(robot, excited, mid, friction, seed[0])
    envelope = _friction_envelope(robot)
    target = limits.tightened(margin)
    times_grid = np.arange(m) * (period / m)

    x = _random_start(np.random.default_rng(seed), target, excited, mid, period, harmonics, times_grid)
    extra = np.empty(0)
    problem = _Problem(reg, envelope, target, period, harmonics, times_grid, extra)
    x = _feasible_start(problem, x)
    f0 = problem.log_condition(x)
    done = 0
    t_out = np.linspace(0.0, period, int(np.ceil(period * rate_hz - 1e-9)) + 1)
    check = InverseDynamics(robot)
    slack = limits.tightened(0.5 * margin)
    res = None
    for round_ in range(1, rounds + 1):
        start = done

        def tick(_x: np.ndarray) -> None:
            nonlocal done
            done += 1
            if progress is not None and (done - start) % 10 == 0:
                progress(done - start, max_iterations)

        res = scipy.optimize.minimize(
            problem.objective,
            problem.start(x),
            jac=True,
            method="SLSQP",
            bounds=[(None, None)] * len(x) + [(0.0, None)],
            constraints=[{"type": "ineq", "fun": problem.constraints, "jac": problem.constraints_jac}],
            options={"maxiter": max_iterations, "ftol": 1e-7},
            callback=tick,
        )
        x = res.x[:-1]
        traj = _sample(robot, reg, x, period, harmonics, t_out, names)
        tau = check(traj.q, traj.dq, traj.ddq, traj.t).tau
        worst, _, _ = _violations(robot, slack, traj, tau)
        bad = np.flatnonzero(worst > 1.0)
        if bad.size == 0 or res.x[-1] > 1e-6:  # done, or infeasible even on the grid
            break
        # add the worst sample of each run of violating samples to the constraint grid
        starts = np.flatnonzero(np.diff(np.concatenate([[-2], bad])) > 1)
        runs = np.split(bad, starts[1:])
        extra = np.concatenate([extra, [t_out[r[np.argmax(worst[r])]] for r in runs]])
        problem = _Problem(reg, envelope, target, period, harmonics, times_grid, extra)
    assert res is not None
    worst_real, usage, most = _violations(robot, limits, traj, tau)
    if np.any(worst_real > 1.0):
        k = int(np.argmax(worst_real))
        raise DataError(
            f"no excitation within the limits found after {round_} rounds (at t = {t_out[k]:.4g} s the {most} "
            f"reaches {100 * worst_real[k]:.1f} % of its limit): lower the harmonics, lengthen the period or excite fewer joints",
            field="limits",
        )
    f1 = problem.log_condition(x)
    Z = x.reshape(len(excited), 2 * harmonics - 1)
    q0, alpha, beta = _amplitudes(Z, harmonics)
    wl = (2 * np.pi / period) * np.arange(1, harmonics + 1)
    if periods > 1:
        traj = _repeat(traj, periods)
    return Excitation(
        trajectory=traj,
        joint_names=tuple(robot.joint_names[i] for i in excited),
        held={robot.joint_names[i]: float(mid[i]) for i in range(robot.nv) if i not in set(excited.tolist())},
        period=float(period),
        q0=q0,
        a=alpha * wl,
        b=beta * wl,
        condition_initial=float(np.exp(f0)),
        condition=float(np.exp(f1)),
        iterations=done,
        rounds=round_,
        converged=bool(res.success),
        message=str(res.message),
        limits=limits,
        usage=usage,
    )


def _amplitudes(Z: np.ndarray, harmonics: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``q0`` and the full amplitudes ``alpha_l, beta_l`` (l = 1..L) from the variables."""
    ell = np.arange(2, harmonics + 1)
    alpha_rest, beta_rest = Z[:, 1:harmonics], Z[:, harmonics:]
    alpha = np.hstack([-(alpha_rest @ ell)[:, None], alpha_rest])
    beta = np.hstack([-(beta_rest @ ell**2)[:, None], beta_rest])
    return Z[:, 0].copy(), alpha, beta


def _random_start(
    rng: np.random.Generator, limits: ExcitationLimits, excited: np.ndarray, mid: np.ndarray, period: float, harmonics: int, grid: np.ndarray
) -> np.ndarray:
    """Random amplitudes (decaying as 1/l), each joint scaled to half its tightest limit, at mid range."""
    P, V, A = fourier_basis(grid, period, harmonics)
    ell = np.arange(2, harmonics + 1)
    k = 2 * harmonics - 1
    x = np.zeros((len(excited), k))
    for i, j in enumerate(excited):
        z = np.concatenate([[0.0], rng.standard_normal(harmonics - 1) / ell, rng.standard_normal(harmonics - 1) / ell**2])
        centre = 0.5 * (limits.lower[j] + limits.upper[j])
        half = 0.5 * (limits.upper[j] - limits.lower[j])
        scale = 0.5 * min(
            half / np.abs(P @ z).max(), limits.velocity[j] / np.abs(V @ z).max(), limits.acceleration[j] / np.abs(A @ z).max()
        )
        x[i] = scale * z
        x[i, 0] = centre
    return x.ravel()


def _feasible_start(problem: _Problem, x: np.ndarray, halvings: int = 8) -> np.ndarray:
    """The random start with its amplitudes halved until every constraint holds on the grid
    (the motion shrinks toward rest at ``q0``); unchanged if none does."""
    z = x.reshape(problem.n, problem.k)
    for h in range(halvings + 1):
        trial = z.copy()
        trial[:, 1:] *= 0.5**h
        if problem.constraints(np.append(trial.ravel(), 0.0)).min() >= 0:
            return trial.ravel()
    return x


def _sample(robot: RobotModel, reg: _Regressor, x: np.ndarray, period: float, harmonics: int, t: np.ndarray, names: Sequence[str]) -> Trajectory:
    P, V, A = fourier_basis(t, period, harmonics)
    Z = x.reshape(len(reg.excited), -1).T
    q, dq, ddq = reg.states(P @ Z, V @ Z, A @ Z)
    # the ends are exactly at rest (round-off of the eliminated harmonic aside)
    dq[[0, -1]] = 0.0
    ddq[[0, -1]] = 0.0
    q[-1] = q[0]
    return Trajectory(t=t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)


def _repeat(traj: Trajectory, periods: int) -> Trajectory:
    T = traj.duration
    n = len(traj) - 1
    t = np.concatenate([traj.t[:n] + p * T for p in range(periods)] + [[periods * T]])
    tile = lambda x: np.vstack([np.tile(x[:n], (periods, 1)), x[-1:]])  # noqa: E731
    return Trajectory(t=t, joint_names=traj.joint_names, q=tile(traj.q), dq=tile(traj.dq), ddq=tile(traj.ddq))
