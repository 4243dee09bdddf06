"""Whole-arm dynamic identification: inertial parameters and joint friction from logs of motion.

The measured torque of joint ``j`` at sample ``k`` is modelled as::

    tau_kj = Y_kj(q, dq, ddq) @ theta + a_j ddq_kj + f_j(dq_kj, ddq_kj) + e_kj

with ``theta`` the ten inertial parameters of every body (:mod:`mbctl.dynamics.regressor`),
``a_j`` the joint's armature (the rotor's inertia reflected through the gear, ``N^2 J``; kg·m²,
kg for a prismatic joint) and ``f_j`` a friction law of :mod:`mbctl.dynamics.friction.laws`:

- ``coulomb-viscous``: ``fc*s + fv*dq`` with ``s = sgn(dq)`` (``sgn(ddq)`` where ``dq = 0``,
  as inverse dynamics evaluates it), linear in ``(fc, fv)``;
- ``stribeck`` (``delta = 2``): ``[fc + (fs - fc)*exp(-(dq/vs)^2)]*s + fv*dq``, linear in
  ``(fc, fs, fv)`` for a fixed ``vs``; ``vs`` of each joint is chosen from a grid by
  minimising the residual (a separable least-squares search, joint by joint).

**Armature.** Each joint's armature is one more parameter, its column the joint's own
acceleration on its own row. Where a body's column is the same (the first joint of an arm on
a vertical axis, and on the UR5 and the Panda the second too: the body's inertia about the
joint's axis acts on that joint alone) the two form one base parameter, and the log tells only
their sum: the consistent fit keeps the body near the prior (its pull) and the armature takes
the rest. A torque measured on the link side of the gear (the Panda's joint torque sensors)
contains no rotor inertia; its armature comes out near zero.

**Parallel filtering.** Every column of the regressor and of the friction terms, and the
measured torques, pass the same zero-phase low-pass (``parallel_cutoff_hz``, 5 Hz by
default) before the fit: the equation stays exact for the filtered
signals, while the noise of the differentiated acceleration and the smear of each
Coulomb step at a velocity reversal (tens of milliseconds in the filtered torque, a
bias of the order of ``fc`` against a sharp ``sgn(dq)`` column) leave the residual.

Rows are weighted by ``1/sigma_j``, each joint's residual standard deviation in a first
ordinary fit, so a noisy joint does not dominate a quiet one.

Two estimates are computed:

1. **Unconstrained** (printed, never written back): weighted least squares on the base
   parameters, with standard errors and the condition number of the column-scaled base
   regressor. The filtered samples are correlated; the standard errors count
   ``rate / (2 * cutoff)`` samples as one.
2. **Physically consistent** (written back): every body keeps a positive mass, a positive
   definite inertia and its triangle inequalities, pulled toward the prior (the model's own
   inertials) by ``lambda`` (default 1e-2, stated in the report with how far each body
   moved), and every armature is >= 0: :mod:`mbctl.identification.arm_consistent`.

With ``free_bodies`` only those bodies change (the others keep the model's values):
``free_bodies=(last,)`` and ``payload=True`` identifies a payload added to the last body,
itself physically consistent (a mass >= 0), whose mass a full fit cannot separate; the
armature is then the model's unless asked for.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mbctl.dynamics.friction.laws import CoulombViscous, Stribeck, motion_direction
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.regressor import (
    BaseParameters,
    about_com,
    base_parameters,
    body_names,
    inertial_parameters,
    joint_torque_regressor,
    parameter_names,
)
from mbctl.errors import DataError
from mbctl.identification.arm_consistent import consistent_fit
from mbctl.identification.arm_friction import friction_matrix, parallel_filter, stribeck_speeds
from mbctl.identification.arm_log import ConditionedLog

__all__ = ["ARM_FRICTION_LAWS", "OFFSET_VIF_LIMIT", "ArmFit", "ArmFitSettings", "BodyChange", "fit_arm", "predict_torques"]

ARM_FRICTION_LAWS = ("coulomb-viscous", "stribeck", "none")


@dataclass(frozen=True)
class ArmFitSettings:
    """Choices of the fit.

    Attributes:
        friction: ``"coulomb-viscous"``, ``"stribeck"`` or ``"none"``.
        regularisation: ``lambda``, the weight of the pull toward the prior (dimensionless,
            relative to the mean weighted squared residual).
        weighting: ``"noise"`` (rows by ``1/sigma_j``) or ``"none"``.
        free_bodies: Names of the bodies (their joints) to identify; None for all.
        payload: Identify a physically consistent *addition* to the free body (one body).
        offsets: Constant torque-sensor biases to fit (reported, never written back): ``"none"``,
            ``"all"``, or ``"separable"``: only on joints where a constant is not nearly a
            combination of the other columns (variance inflation below
            :data:`OFFSET_VIF_LIMIT`), e.g. a vertical first axis, where gravity never acts.
            Elsewhere an offset trades against the gravity parameters and extrapolates badly.
        parallel_cutoff_hz: Low-pass of the fit's columns and torques (Hz), see "Parallel filtering".
        armature: Identify each joint's armature (True), keep the model's (False), or None:
            identify it when every body is free (``free_bodies`` None), else keep it.
    """

    friction: Literal["coulomb-viscous", "stribeck", "none"] = "coulomb-viscous"
    regularisation: float = 1e-2
    weighting: Literal["noise", "none"] = "noise"
    free_bodies: tuple[str, ...] | None = None
    payload: bool = False
    offsets: Literal["none", "separable", "all"] = "none"
    parallel_cutoff_hz: float = 5.0
    armature: bool | None = None

    @property
    def fits_armature(self) -> bool:
        """Whether the fit identifies the armature (see ``armature``)."""
        return self.free_bodies is None if self.armature is None else self.armature

    def __post_init__(self) -> None:
        if self.friction not in ARM_FRICTION_LAWS:
            raise DataError(f"must be one of {', '.join(ARM_FRICTION_LAWS)}, got {self.friction!r}", field="friction")
        if not (np.isfinite(self.regularisation) and self.regularisation > 0):
            raise DataError(f"must be a positive number, got {self.regularisation!r}", field="regularisation")
        if self.weighting not in ("noise", "none"):
            raise DataError(f"must be noise or none, got {self.weighting!r}", field="weighting")
        if self.payload and (self.free_bodies is None or len(self.free_bodies) != 1):
            raise DataError("a payload is identified on exactly one body", field="payload")
        if self.offsets not in ("none", "separable", "all"):
            raise DataError(f"must be none, separable or all, got {self.offsets!r}", field="offsets")
        if not (np.isfinite(self.parallel_cutoff_hz) and self.parallel_cutoff_hz > 0):
            raise DataError(f"must be a positive number of Hz, got {self.parallel_cutoff_hz!r}", field="parallel_cutoff_hz")


@dataclass(frozen=True)
class BodyChange:
    """How far the consistent fit moved one body from the prior.

    Attributes:
        body: The joint that moves the body.
        mass_prior, mass: kg.
        com_shift: Distance between the prior's and the fit's centre of mass (m).
        inertia_change: Largest change of the inertia about the centre of mass relative to
            the prior's largest principal moment (dimensionless).
    """

    body: str
    mass_prior: float
    mass: float
    com_shift: float
    inertia_change: float


@dataclass(frozen=True, eq=False)
class ArmFit:
    """The result of :func:`fit_arm` (SI units; arrays in joint or body order).

    Attributes:
        joint_names: Joints whose torques were fitted.
        bodies: Body names (their joints), the order of ``theta``.
        settings: The settings used.
        base: Base parameters of the free bodies and, where fitted, the armature (of the
            unconstrained fit), over the parameters ``(theta, armature)``.
        theta: Physically consistent inertial parameters of every body (10 per body).
        theta_prior: The model's own parameters.
        armature: Each joint's armature (kg·m², kg), the consistent fit's where
            ``settings.fits_armature``, else the model's.
        armature_prior: The model's own armature of each joint.
        dof_of_joint: Each joint's DOF index (the order of the armature in ``base``).
        friction: The consistent fit's friction law per joint (None for ``"none"``).
        beta_ols, beta_ols_stderr: Unconstrained base parameters and their standard errors.
        friction_ols: Unconstrained friction parameters per joint (name -> value).
        condition_number: Of the weighted, column-scaled base regressor with friction columns.
        sigma: Residual standard deviation per joint of the first ordinary fit (N·m, N).
        rms_consistent, rms_ols: RMS residual per joint on the fitted samples.
        changes: How far each free body moved.
        offsets: Each joint's torque-sensor bias (N·m, N; zero where none was fitted):
            measured = model + offset. Not part of the robot: a drive need not produce it.
        offset_joints: The joints that got an offset.
        payload_mass, payload_com: With ``settings.payload``: the payload (kg, m in the body's frame).
        solver_status: IPOPT's return status.
        seconds: Wall time of the fit (regressor, both solves).
        samples: Samples fitted.
    """

    joint_names: tuple[str, ...]
    bodies: tuple[str, ...]
    settings: ArmFitSettings
    base: BaseParameters
    theta: np.ndarray
    theta_prior: np.ndarray
    armature: np.ndarray
    armature_prior: np.ndarray
    dof_of_joint: np.ndarray
    friction: dict[str, CoulombViscous | Stribeck | None]
    beta_ols: np.ndarray
    beta_ols_stderr: np.ndarray
    friction_ols: dict[str, dict[str, float]]
    condition_number: float
    sigma: np.ndarray
    rms_consistent: np.ndarray
    rms_ols: np.ndarray
    changes: tuple[BodyChange, ...]
    offsets: np.ndarray
    offset_joints: tuple[str, ...]
    payload_mass: float | None = None
    payload_com: np.ndarray | None = None
    solver_status: str = ""
    seconds: float = 0.0
    samples: int = 0

    def body(self, name: str) -> np.ndarray:
        """The consistent fit's ten parameters of the body moved by joint ``name``."""
        i = self.bodies.index(name)
        return self.theta[10 * i : 10 * i + 10]

    @property
    def armature_by_joint(self) -> dict[str, float]:
        """``armature`` by joint name (kg·m², kg)."""
        return {j: float(a) for j, a in zip(self.joint_names, self.armature)}

    @property
    def beta(self) -> np.ndarray:
        """The consistent fit's base parameters ``K @ (theta, armature)``."""
        return self.base.base(np.concatenate([self.theta, self._by_dof(self.armature)]))

    @property
    def beta_prior(self) -> np.ndarray:
        """The model's base parameters ``K @ (theta_prior, armature_prior)``."""
        return self.base.base(np.concatenate([self.theta_prior, self._by_dof(self.armature_prior)]))

    def _by_dof(self, per_joint: np.ndarray) -> np.ndarray:
        """A per-joint array in the velocity order of ``theta``'s armature (``dof_of_joint``)."""
        out = np.empty(len(per_joint))
        out[self.dof_of_joint] = per_joint
        return out


def _friction_law(law: str, p: dict[str, float]) -> CoulombViscous | Stribeck | None:
    # IPOPT may leave a bounded parameter a round-off below its bound (bound relaxation)
    if law == "coulomb-viscous":
        return CoulombViscous(fc=max(p["fc"], 0.0), fv=max(p["fv"], 0.0))
    if law == "stribeck":
        fc = max(p["fc"], 0.0)
        return Stribeck(fc=fc, fs=max(p["fs"], fc), vs=p["vs"], fv=max(p["fv"], 0.0), delta=2.0)
    return None


def predict_torques(
    robot: RobotModel,
    theta: np.ndarray,
    friction: dict[str, CoulombViscous | Stribeck | None],
    log: ConditionedLog,
    offsets: np.ndarray | None = None,
    *,
    armature: Mapping[str, float] | None = None,
) -> np.ndarray:
    """Torques the model ``(theta, armature, friction)`` predicts along ``log``, shape (N, len(log.joint_names)),
    plus ``offsets`` (per joint of the log) to predict what a biased sensor reads. ``armature``
    (kg·m², kg) by joint name; a joint it does not name has the robot's own (``robot.model.armature``)."""
    idx = [robot.joint(j).idx_v for j in log.joint_names]
    if len(idx) != robot.nv:
        raise DataError("the log must hold every DOF of the robot", file=log.source)
    q = np.empty((len(log), robot.nv))
    dq, ddq = np.empty_like(q), np.empty_like(q)
    q[:, idx], dq[:, idx], ddq[:, idx] = log.q, log.dq, log.ddq
    a = np.array(robot.model.armature, dtype=float)
    for name, value in (armature or {}).items():
        a[robot.joint(name).idx_v] = value
    tau = (joint_torque_regressor(robot, q, dq, ddq) @ theta + ddq * a)[:, idx]
    for c, j in enumerate(log.joint_names):
        law = friction.get(j)
        if law is not None:
            tau[:, c] += law.steady(log.dq[:, c], motion_direction(log.dq[:, c], log.ddq[:, c]))
    return tau if offsets is None else tau + offsets


def _body_change(name: str, prior: np.ndarray, fit: np.ndarray) -> BodyChange:
    m0, c0, i0 = about_com(prior)
    m1, c1, i1 = about_com(fit)
    scale = max(np.linalg.eigvalsh(i0).max(), 1e-12)
    return BodyChange(name, m0, m1, float(np.linalg.norm(c1 - c0)), float(np.abs(np.linalg.eigvalsh(i1 - i0)).max() / scale))


def fit_arm(
    robot: RobotModel,
    logs: Sequence[ConditionedLog],
    settings: ArmFitSettings = ArmFitSettings(),
) -> ArmFit:
    """Identify the inertial parameters and joint friction of ``robot`` from conditioned logs.

    Every log must hold every DOF of the robot with torques. See the module docstring for
    the model, the weighting and the two estimates.

    Raises:
        DataError: For a log without torques or joints, an unknown body, or too few samples.
        MbctlError: If IPOPT fails.
    """
    start = time.perf_counter()
    if not logs:
        raise DataError("no log to fit", field="logs")
    joints = logs[0].joint_names
    for log in logs:
        if log.tau is None:
            raise DataError("the log has no tau.<joint> columns", file=log.source, field="tau")
        if log.joint_names != joints:
            raise DataError("all logs must hold the same joints", file=log.source)
    idx = [robot.joint(j).idx_v for j in joints]
    if sorted(idx) != list(range(robot.nv)):
        missing = [j.name for j in robot.joints if j.idx_v not in idx]
        raise DataError(f"the logs lack joints {', '.join(missing)}: lock them in the robot TOML (locked = {{...}})", file=logs[0].source)
    bodies = body_names(robot)
    free = bodies if settings.free_bodies is None else settings.free_bodies
    for b in free:
        if b not in bodies:
            raise DataError(f"no body {b!r} (bodies are named by their joints: {', '.join(bodies)})", field="free_bodies")
    nth = 10 * len(bodies)
    fit_armature = settings.fits_armature
    # the parameters (theta, armature): every body's ten, then each DOF's armature (velocity order)
    free_mask = np.concatenate([np.repeat([b in free for b in bodies], 10), np.full(robot.nv, fit_armature)])
    prior = inertial_parameters(robot, armature=True)
    n = len(joints)

    q = np.concatenate([lg.q for lg in logs])
    dq = np.concatenate([lg.dq for lg in logs])
    ddq = np.concatenate([lg.ddq for lg in logs])
    tau = np.concatenate([lg.tau for lg in logs])  # type: ignore[misc]
    N = len(q)
    cutoff = settings.parallel_cutoff_hz
    Y_full = parallel_filter(_regressor(robot, idx, q, dq, ddq), logs, cutoff)
    tau = parallel_filter(tau, logs, cutoff)
    rhs = tau - Y_full[:, :, ~free_mask] @ prior[~free_mask]
    base = _base(robot, free_mask, fit_armature) if settings.free_bodies is None else _free_base(free_mask, parameter_names(robot, armature=True))

    # friction columns, block-diagonal over joints
    law = settings.friction
    vs = stribeck_speeds(base.reduce(Y_full), logs, rhs, cutoff) if law == "stribeck" else np.full(n, np.nan)
    F, names = friction_matrix(law, logs, vs, cutoff)
    k = len(names)
    offset_joints = _offset_joints(settings.offsets, np.concatenate([base.reduce(Y_full), F], axis=2))
    if offset_joints:  # one constant column per such joint: the torque sensor's bias
        F = np.concatenate([F, np.broadcast_to(np.eye(n)[:, offset_joints], (N, n, len(offset_joints)))], axis=2)

    # 1. unconstrained, weighted by each joint's noise
    A = np.concatenate([base.reduce(Y_full), F], axis=2)
    z0, *_ = np.linalg.lstsq(A.reshape(N * n, -1), rhs.ravel(), rcond=None)
    sigma = np.sqrt(np.mean((A @ z0 - rhs) ** 2, axis=0))
    w = 1.0 / np.maximum(sigma, 1e-9) if settings.weighting == "noise" else np.ones(n)
    Aw = (A * w[None, :, None]).reshape(N * n, -1)
    bw = (rhs * w).ravel()
    z_ols, *_ = np.linalg.lstsq(Aw, bw, rcond=None)
    res = Aw @ z_ols - bw
    dof = max(len(bw) - len(z_ols), 1)
    col = np.linalg.norm(Aw, axis=0)
    col[col == 0] = 1.0
    scaled = Aw / col
    condition = float(np.linalg.cond(scaled))
    # the filtered samples are correlated: rate / (2 * cutoff) of them carry one sample's information
    correlated = max(logs[0].conditioning.rate_hz / (2 * settings.parallel_cutoff_hz), 1.0)
    cov = np.linalg.pinv(scaled.T @ scaled) / np.outer(col, col) * (res @ res / dof) * correlated
    stderr = np.sqrt(np.clip(np.diag(cov), 0, None))
    nb = len(base)
    rms_ols = np.sqrt(np.mean((A @ z_ols - rhs) ** 2, axis=0))

    # 2. physically consistent
    body_mask, armature_mask = free_mask[:nth], free_mask[nth:]
    theta, armature_free, phi, status = consistent_fit(
        Y_full[:, :, :nth][:, :, body_mask],
        Y_full[:, :, nth:][:, :, armature_mask],
        F,
        rhs,
        w,
        prior[:nth],
        body_mask,
        z_ols[nb:],
        k,
        stribeck=law == "stribeck",
        payload=settings.payload,
        regularisation=settings.regularisation,
        armature_start=prior[nth:][armature_mask],
    )
    armature = prior[nth:].copy()  # by DOF
    armature[armature_mask] = np.maximum(armature_free, 0.0)  # IPOPT may leave it a round-off below its bound
    friction_fit = {}
    friction_ols = {}
    for c, j in enumerate(joints):
        p = dict(zip(names, phi[c * k : (c + 1) * k]))
        p_ols = dict(zip(names, z_ols[nb + c * k : nb + (c + 1) * k]))
        if law == "stribeck":
            p["vs"] = p_ols["vs"] = float(vs[c])
        friction_fit[j] = _friction_law(law, p)
        friction_ols[j] = {key: float(v) for key, v in p_ols.items()}
    offsets = np.zeros(n)
    offsets[offset_joints] = phi[n * k :]
    rms_consistent = np.sqrt(np.mean((Y_full @ np.concatenate([theta, armature]) + F @ phi - tau) ** 2, axis=0))
    theta_prior = prior[:nth]
    changes = tuple(_body_change(b, theta_prior[10 * i : 10 * i + 10], theta[10 * i : 10 * i + 10]) for i, b in enumerate(bodies) if b in free)
    payload_mass = payload_com = None
    if settings.payload:
        i = bodies.index(free[0])
        delta = theta[10 * i : 10 * i + 10] - theta_prior[10 * i : 10 * i + 10]
        payload_mass = float(delta[0])
        payload_com = delta[1:4] / delta[0] if delta[0] > 1e-12 else np.zeros(3)
    return ArmFit(
        joint_names=joints,
        bodies=bodies,
        settings=settings,
        base=base,
        theta=theta,
        theta_prior=theta_prior,
        armature=armature[idx],
        armature_prior=prior[nth:][idx],
        dof_of_joint=np.asarray(idx),
        friction=friction_fit,
        beta_ols=z_ols[:nb],
        beta_ols_stderr=stderr[:nb],
        friction_ols=friction_ols,
        condition_number=condition,
        sigma=sigma,
        rms_consistent=rms_consistent,
        rms_ols=rms_ols,
        changes=changes,
        offsets=offsets,
        offset_joints=tuple(joints[c] for c in offset_joints),
        payload_mass=payload_mass,
        payload_com=payload_com,
        solver_status=status,
        seconds=time.perf_counter() - start,
        samples=N,
    )


OFFSET_VIF_LIMIT = 10.0


def _offset_joints(which: str, A: np.ndarray) -> list[int]:
    """Joints (indices) that get an offset column; ``A`` (N, n, p): the other columns."""
    n = A.shape[1]
    if which != "separable":
        return list(range(n)) if which == "all" else []
    flat = A.reshape(-1, A.shape[2])
    out = []
    for c in range(n):
        ones = np.zeros((A.shape[0], n))
        ones[:, c] = 1.0
        column = ones.ravel()
        x, *_ = np.linalg.lstsq(flat, column, rcond=None)
        unexplained = np.sum((column - flat @ x) ** 2) / np.sum(column**2)  # 1 - R^2 (uncentred)
        if unexplained > 1.0 / OFFSET_VIF_LIMIT:
            out.append(c)
    return out


def _regressor(robot: RobotModel, idx: list[int], q: np.ndarray, dq: np.ndarray, ddq: np.ndarray) -> np.ndarray:
    """The regressor of ``(theta, armature)`` with rows (and samples' columns) in the logs' joint order ``idx``."""
    full = [np.empty((len(q), robot.nv)) for _ in range(3)]
    for x, logged in zip(full, (q, dq, ddq)):
        x[:, idx] = logged
    return joint_torque_regressor(robot, *full, armature=True)[:, idx, :]


def _base(robot: RobotModel, free_mask: np.ndarray, armature: bool) -> BaseParameters:
    """The robot's base parameters over ``(theta, armature)``; without ``armature`` the armature
    columns are known (zero in ``K``)."""
    base = base_parameters(robot, armature=armature)
    if armature:
        return base
    return BaseParameters(columns=base.columns, K=np.pad(base.K, ((0, 0), (0, len(free_mask) - base.K.shape[1]))), names=base.names, rows=base.rows)


def _free_base(free_mask: np.ndarray, names: Sequence[str]) -> BaseParameters:
    """The free parameters themselves as the 'base' set (the others are known)."""
    columns = np.flatnonzero(free_mask)
    K = np.eye(len(free_mask))[columns]
    return BaseParameters(columns=columns, K=K, names=tuple(names[c] for c in columns), rows=())
