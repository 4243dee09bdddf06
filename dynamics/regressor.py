"""Joint torques linear in the inertial parameters: the regressor and the base parameters.

Rigid-body inverse dynamics is linear in each body's ten inertial parameters,
``tau = Y(q, dq, ddq) @ theta``. Body ``b`` (the body moved by pinocchio joint ``b + 1``,
every fixed link merged in) contributes, in its joint frame, in pinocchio's order::

    theta_b = [m, m*cx, m*cy, m*cz, Ixx, Ixy, Iyy, Ixz, Iyz, Izz]

with ``m`` in kg, ``c`` the centre of mass (m) and ``I`` the rotational inertia about the
joint frame's *origin* (kg·m², not about the centre of mass).

**Armature.** A drive's rotor turns ``N`` times faster than its joint, so its inertia ``J``
reaches the joint as ``N^2 J``, the reflected inertia (pinocchio's ``model.armature``, kg·m²,
kg for a prismatic joint). It adds ``armature_j * ddq_j`` to joint ``j``'s own torque only,
so with ``armature=True`` the regressor gets one more column per DOF, that DOF's own
acceleration on its own row, and ``theta`` one more parameter per DOF after the bodies'::

    tau = Y(q, dq, ddq) @ theta + diag(ddq) @ armature

Not every combination of parameters moves the torques: a body's mass on a joint that
only turns about a fixed axis, parameters of the base body, ... Those columns of ``Y``
are zero or linearly dependent. :func:`base_parameters` finds an independent set by a
rank-revealing QR of the regressor stacked over random states (Gautier's numerical
method): ``Y @ theta = Y_b @ beta`` with ``beta = K @ theta``, ``Y_b`` the independent
columns. ``beta`` is what a log of motions can identify; the rest needs prior knowledge.

A set ``theta_b`` is physically consistent when the body's pseudo-inertia matrix::

    J = [[ (tr(I)/2)*1 - I,  m*c ],
         [ (m*c)^T,          m   ]]       (4 x 4, kg·m², kg·m, kg)

is positive definite; this is mass > 0, a positive definite inertia about the centre
of mass and its triangle inequalities together (a density of mass exists).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pinocchio as pin
import scipy.linalg

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import DataError

__all__ = [
    "INERTIAL_NAMES",
    "BaseParameters",
    "about_com",
    "base_parameters",
    "body_names",
    "inertial_parameters",
    "joint_torque_regressor",
    "pseudo_inertia",
    "from_pseudo_inertia",
    "parameter_names",
    "random_states",
]

INERTIAL_NAMES = ("m", "mx", "my", "mz", "ixx", "ixy", "iyy", "ixz", "iyz", "izz")


def body_names(robot: RobotModel) -> tuple[str, ...]:
    """Name of each body, the joint that moves it (pinocchio joint order, universe excluded)."""
    return tuple(robot.model.names[i] for i in range(1, robot.model.njoints))


def inertial_parameters(robot: RobotModel, *, armature: bool = False) -> np.ndarray:
    """The model's inertial parameters ``theta``, shape (10 * n_bodies,), order as in the module
    docstring; with ``armature``, each DOF's armature after them (kg·m², kg; velocity order)."""
    theta = np.concatenate([robot.model.inertias[i].toDynamicParameters() for i in range(1, robot.model.njoints)])
    return np.concatenate([theta, np.asarray(robot.model.armature, dtype=float)]) if armature else theta


def parameter_names(robot: RobotModel, *, armature: bool = False) -> tuple[str, ...]:
    """``"<body>.<parameter>"`` for every entry of :func:`inertial_parameters` (``"<joint>.armature"`` for the armature)."""
    names = tuple(f"{b}.{p}" for b in body_names(robot) for p in INERTIAL_NAMES)
    if not armature:
        return names
    by_dof = {j.idx_v: j.name for j in robot.joints}
    return names + tuple(f"{by_dof[v]}.armature" for v in range(robot.nv))


def joint_torque_regressor(robot: RobotModel, q: np.ndarray, dq: np.ndarray, ddq: np.ndarray, *, armature: bool = False) -> np.ndarray:
    """``Y`` with ``tau[k] = Y[k] @ theta`` for every sample, shape (N, nv, 10 * n_bodies), or with
    ``armature`` (N, nv, 10 * n_bodies + nv): the armature columns ``Y[k, j, 10 nb + j] = ddq[k, j]``.

    Args:
        q, dq, ddq: DOF positions (rad, m), velocities and accelerations, shape (N, nv),
            in the robot's joint order.
    """
    q, dq, ddq = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, dq, ddq))
    model = robot.model
    if not q.shape == dq.shape == ddq.shape or q.shape[1] != model.nv:
        raise DataError(f"q, dq, ddq must all have shape (N, {model.nv}); got {q.shape}, {dq.shape}, {ddq.shape}", field="q")
    data = model.createData()
    config = robot.configuration(q)
    out = np.empty((len(q), model.nv, 10 * (model.njoints - 1)))
    for k in range(len(q)):
        out[k] = pin.computeJointTorqueRegressor(model, data, config[k], dq[k], ddq[k])
    if armature:  # pinocchio's regressor leaves model.armature out (its RNEA keeps it)
        out = np.concatenate([out, ddq[:, :, None] * np.eye(model.nv)], axis=2)
    return out


def pseudo_inertia(theta_body: np.ndarray) -> np.ndarray:
    """The 4 x 4 pseudo-inertia matrix of one body's ten parameters (see the module docstring)."""
    m, mx, my, mz, ixx, ixy, iyy, ixz, iyz, izz = np.asarray(theta_body, dtype=float)
    inertia = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    J = np.empty((4, 4))
    J[:3, :3] = 0.5 * np.trace(inertia) * np.eye(3) - inertia
    J[:3, 3] = J[3, :3] = (mx, my, mz)
    J[3, 3] = m
    return J


def from_pseudo_inertia(J: np.ndarray) -> np.ndarray:
    """One body's ten parameters from its pseudo-inertia matrix (inverse of :func:`pseudo_inertia`)."""
    sigma = np.asarray(J, dtype=float)[:3, :3]
    inertia = np.trace(sigma) * np.eye(3) - sigma
    return np.array([J[3, 3], J[0, 3], J[1, 3], J[2, 3], inertia[0, 0], inertia[0, 1], inertia[1, 1], inertia[0, 2], inertia[1, 2], inertia[2, 2]])


def about_com(theta_body: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    """``(m, c, I_c)``: mass (kg), centre of mass (m) and the 3 x 3 inertia about it (kg·m²) of one
    body's ten parameters (parallel-axis theorem: ``I_c = I_o - m (|c|^2 1 - c c^T)``)."""
    m = float(theta_body[0])
    c = np.asarray(theta_body[1:4], dtype=float) / m
    ixx, ixy, iyy, ixz, iyz, izz = theta_body[4:]
    inertia_o = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    return m, c, inertia_o - m * (np.dot(c, c) * np.eye(3) - np.outer(c, c))


def random_states(robot: RobotModel, n: int, *, seed: int = 0, speed: float = 2.0, acceleration: float = 10.0) -> tuple[np.ndarray, ...]:
    """``(q, dq, ddq)`` drawn uniformly: positions within the joint limits (±pi where unbounded),
    velocities within ±``speed`` (or the velocity limit), accelerations within ±``acceleration``."""
    rng = np.random.default_rng(seed)
    lo = np.array([max(j.limits.lower, -np.pi) for j in robot.joints])
    hi = np.array([min(j.limits.upper, np.pi) for j in robot.joints])
    vmax = np.array([min(j.limits.velocity, speed) for j in robot.joints])
    q = rng.uniform(lo, hi, (n, robot.nv))
    dq = rng.uniform(-vmax, vmax, (n, robot.nv))
    ddq = rng.uniform(-acceleration, acceleration, (n, robot.nv))
    return q, dq, ddq


@dataclass(frozen=True)
class BaseParameters:
    """An independent set of parameter combinations, ``beta = K @ theta``.

    Attributes:
        columns: Indices into ``theta`` of the independent regressor columns, shape (nb,).
        K: Map from full to base parameters, shape (nb, len(theta)): identity on
            ``columns`` plus the dependent columns regrouped onto them.
        names: ``"<body>.<parameter>"`` of each base parameter (its leading column).
        rows: Which DOF rows of the regressor the set was found for (indices into ``q``).
    """

    columns: np.ndarray
    K: np.ndarray
    names: tuple[str, ...]
    rows: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.columns)

    def base(self, theta: np.ndarray) -> np.ndarray:
        """``beta = K @ theta``."""
        return self.K @ np.asarray(theta, dtype=float)

    def reduce(self, Y: np.ndarray) -> np.ndarray:
        """The independent columns ``Y_b`` of a regressor (..., 10 * n_bodies) -> (..., nb)."""
        return np.asarray(Y)[..., self.columns]


def base_parameters(
    robot: RobotModel,
    rows: Sequence[int] | None = None,
    *,
    samples: int = 400,
    seed: int = 0,
    tolerance: float = 1e-8,
    held: Mapping[int, float] | None = None,
    armature: bool = False,
) -> BaseParameters:
    """Base parameters of ``robot`` for the regressor rows ``rows`` (DOF indices; default: all).

    ``held`` maps DOF indices to positions (rad or m) of joints that stay there at rest
    (locked): the bodies they join then move as one and regroup accordingly. With
    ``armature`` the parameters are :func:`inertial_parameters` with the armature: a
    joint's armature is a base parameter of its own unless a body's column is the same
    (the first joint turning about the vertical: its armature and its body's inertia about
    the axis act alike, one base parameter).

    The regressor is stacked over ``samples`` random states (:func:`random_states`) and
    factored by QR with column pivoting; a column is independent when its diagonal entry
    of ``R`` exceeds ``tolerance`` times the largest. With ``Y P = Q [R1 R2]`` the dependent
    columns are ``Y_d = Y_b R1^-1 R2``, so ``beta = theta_b + R1^-1 R2 theta_d``.

    Rows matter: a DOF whose torque is not measured (a gripper finger) adds no equation.
    """
    rows = tuple(range(robot.nv)) if rows is None else tuple(int(r) for r in rows)
    q, dq, ddq = random_states(robot, samples, seed=seed)
    for i, position in (held or {}).items():
        q[:, i], dq[:, i], ddq[:, i] = position, 0.0, 0.0
    Y = joint_torque_regressor(robot, q, dq, ddq, armature=armature)[:, rows, :]
    Y = Y.reshape(-1, Y.shape[-1])
    scale = np.linalg.norm(Y, axis=0)
    usable = np.flatnonzero(scale > tolerance * scale.max())
    _, R, perm = scipy.linalg.qr(Y[:, usable], mode="economic", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > tolerance * diag[0]))
    independent = usable[perm[:rank]]
    dependent = usable[perm[rank:]]
    regroup = scipy.linalg.solve_triangular(R[:rank, :rank], R[:rank, rank:])
    order = np.argsort(independent)  # keep theta's order among the base parameters
    K = np.zeros((rank, Y.shape[1]))
    K[np.arange(rank), independent] = 1.0
    K[:, dependent] = regroup
    K[np.abs(K) < 1e-10] = 0.0
    every = parameter_names(robot, armature=armature)
    names = tuple(every[c] for c in independent[order])
    return BaseParameters(columns=independent[order], K=K[order], names=names, rows=rows)
