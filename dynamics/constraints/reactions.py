"""Joint reactions under constraints, constraint rank and redundancy, reaction solvability.

**Reactions.** Loop-closure rows act on the bodies of their two frames: a row's
multiplier ``lambda`` puts the wrench ``-lambda*g_A`` on A's body and
``-lambda*g_B`` on B's (:class:`~mbctl.dynamics.constraints.loops.LoopClosure`). With these as
external forces, pinocchio's RNEA at ``(q, dq, ddq)`` leaves in ``data.f`` the wrench
every tree joint transmits (parent on child, joint frame, force N then moment
N·m). Programmed constraints are realised by the drives: their force is a
generalized force on the joint coordinates and shows up in the joint torques
(the axis components), not as body wrenches. The cut joint's reaction is the loop
wrench on frame B's body, at B's origin, in B's axes.

**Solvability** (the reaction-solvability study). Stack the velocity-level constraints as ``C dq + b = 0``
(C is rows x n). With redundant rows, ``rank(C) = r < rows`` and the degree of
redundancy is ``p = rows - r``: the accelerations stay unique but some reactions do
not. Group the rows by kinematic pair X. With QR with column pivoting
``C E = Q R``, the last ``p`` columns of ``Q`` span the multiplier combinations that
produce no generalized force; ``B_X = C_X^T Q[X rows, last p columns]`` (n x p)
shows whether such a combination changes the reaction of pair X:
``B_X = 0  <=>  the reaction in pair X is uniquely determined``.

For a mechanism modelled as a spanning tree plus loop closures, the tree joints'
reactions are not rows of ``Phi_q``. :func:`pair_matrix` exposes them: it augments
the coordinates with a 6-D weld displacement after every tree joint (the idea of
:mod:`mbctl.dynamics.model.wrenches`), whose multipliers are the joint wrenches, so
:func:`reaction_solvability` covers tree joints and cut joints alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pinocchio as pin
import scipy.linalg

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.loops import LoopClosure, acts_on_bodies

__all__ = ["Reactions", "Solvability", "joint_reactions", "pair_matrix", "reaction_solvability"]


@dataclass(frozen=True)
class Solvability:
    """Result of :func:`reaction_solvability`.

    Attributes:
        rank: Rank ``r`` of ``C``.
        redundancy: Degree of redundancy ``p = rows - r``.
        unique: Pair name -> True when its reaction is uniquely determined.
        B: Pair name -> ``B_X`` (n x p); zero (to tolerance) for unique reactions.
    """

    rank: int
    redundancy: int
    unique: dict[str, bool]
    B: dict[str, np.ndarray]


def reaction_solvability(C: np.ndarray, groups: Mapping[str, Sequence[int]], rtol: float = 1e-9) -> Solvability:
    """Which kinematic pairs have uniquely determined reactions (see module docstring).

    Args:
        C: Constraint matrix (rows x n) of ``C dq + b = 0``.
        groups: Pair name -> its row indices in ``C``.
        rtol: Rank tolerance: ``|R_ii| <= rtol*|R_00|`` counts as zero; ``B_X`` counts
            as zero when ``max|B_X| <= rtol*max|C|*sqrt(rows)``.

    Raises:
        ValueError: For a non-2-D ``C`` or row indices out of range.
    """
    C = np.asarray(C, dtype=float)
    if C.ndim != 2:
        raise ValueError(f"C must be 2-D, got shape {C.shape}")
    m, n = C.shape
    for name, rows in groups.items():
        if any(not 0 <= int(i) < m for i in rows):
            raise ValueError(f"group {name!r} has row indices outside 0..{m - 1}")
    if m == 0:
        return Solvability(0, 0, {name: True for name in groups}, {name: np.zeros((n, 0)) for name in groups})
    Q, R, _ = scipy.linalg.qr(C, mode="full", pivoting=True)
    diag = np.abs(np.diag(R))
    rank = int(np.sum(diag > rtol * diag[0])) if diag.size and diag[0] > 0 else 0
    p = m - rank
    Qp = Q[:, rank:]
    tol = rtol * max(np.abs(C).max(), np.finfo(float).tiny) * np.sqrt(m)
    B = {}
    unique = {}
    for name, rows in groups.items():
        idx = np.asarray(rows, dtype=int)
        B[name] = C[idx].T @ Qp[idx]
        unique[name] = bool(p == 0 or np.abs(B[name]).max(initial=0.0) <= tol)
    return Solvability(rank=rank, redundancy=p, unique=unique, B=B)


@dataclass(frozen=True)
class Reactions:
    """Reaction wrenches along a run (force N then moment N·m).

    Attributes:
        joint_names: Tree joints, in pinocchio order.
        joint_wrench: (N, joints, 6) wrench each tree joint transmits (parent on child), joint frame.
        loop_names: Loop-closure constraints (cut joints).
        loop_wrench: (N, loops, 6) wrench A's side exerts on B's body, at B's origin, B's axes.
    """

    joint_names: tuple[str, ...]
    joint_wrench: np.ndarray
    loop_names: tuple[str, ...]
    loop_wrench: np.ndarray


def _loops(system: ConstrainedDynamics) -> list[tuple[LoopClosure, slice]]:
    cs = system.constraints
    return [(c, cs.slices[c.name]) for c in cs if isinstance(c, LoopClosure)]


def joint_reactions(
    system: ConstrainedDynamics,
    t: np.ndarray,
    q: np.ndarray,
    dq: np.ndarray,
    ddq: np.ndarray,
    lam: np.ndarray,
) -> Reactions:
    """Reaction wrenches of the tree joints and cut joints along samples (see module docstring).

    Args:
        t: (N,) times (s); q, dq, ddq: (N, nv); lam: (N, m) multipliers with
            ``Q_c = -Phi_q^T lambda`` (e.g. :attr:`SimulationResult.lam`).

    Raises:
        ValueError: If a multiplier is NaN (the null-space solver gives none).
    """
    robot = system.robot
    model = robot.model
    t = np.atleast_1d(np.asarray(t, dtype=float))
    q, dq, ddq, lam = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, dq, ddq, lam))
    loops = _loops(system)
    if loops and np.isnan(np.concatenate([lam[:, sl] for _, sl in loops], axis=1)).any():
        raise ValueError("loop multipliers are NaN (the nullspace solver gives none); use lagrange or udwadia-kalaba")
    data = model.createData()
    n = len(t)
    joint_wrench = np.empty((n, len(robot.joints), 6))
    loop_wrench = np.empty((n, len(loops), 6))
    ids = [j.id for j in robot.joints]
    for k in range(n):
        ks = system.kinematics(q[k], dq[k])
        joint_wrench[k], on_b = system.constraints.joint_wrenches(model, data, ks, system.configuration(q[k]), dq[k], ddq[k], lam[k], ids)
        if loops:
            loop_wrench[k] = on_b
    return Reactions(
        joint_names=robot.joint_names,
        joint_wrench=joint_wrench,
        loop_names=tuple(c.name for c, _ in loops),
        loop_wrench=loop_wrench,
    )


def pair_matrix(system: ConstrainedDynamics, t: float, q: np.ndarray) -> tuple[np.ndarray, dict[str, list[int]]]:
    """Constraint matrix over every kinematic pair at ``(t, q)``, for :func:`reaction_solvability`.

    Coordinates are ``q`` plus a 6-D weld twist after each tree joint; rows are the
    constraint rows (``[Phi_q, G^T]``, ``G_j`` mapping loop multipliers to the
    wrench transmitted by joint j) and 6 weld rows per tree joint (``[0, I]``),
    whose multipliers are the joint wrenches.

    Returns:
        ``(C, groups)``: groups are every constraint (its rows) and every tree joint
        (its 6 weld rows).
    """
    robot = system.robot
    model = robot.model
    q = np.asarray(q, dtype=float)
    zero = np.zeros(robot.nv)
    ks = system.kinematics(q, zero)
    A = system.constraints.evaluate(ks, t).jac
    m, nj = A.shape[0], len(robot.joints)
    # loop multipliers -> joint wrenches: RNEA without motion and gravity, one unit multiplier at a time
    model0 = pin.Model(model)
    model0.gravity = pin.Motion.Zero()
    data0 = model0.createData()
    qp = system.configuration(q)
    G = np.zeros((nj, 6, m))
    ids = [j.id for j in robot.joints]
    body_forces = [system.constraints.slices[c.name] for c in system.constraints if acts_on_bodies(c)]
    for sl in body_forces:
        for row in range(sl.start, sl.stop):
            unit = np.zeros(m)
            unit[row] = 1.0
            G[:, :, row] = system.constraints.joint_wrenches(model0, data0, ks, qp, zero, zero, unit, ids)[0]
    C = np.zeros((m + 6 * nj, robot.nv + 6 * nj))
    C[:m, : robot.nv] = A
    for i in range(nj):
        cols = slice(robot.nv + 6 * i, robot.nv + 6 * i + 6)
        C[:m, cols] = G[i].T
        C[m + 6 * i : m + 6 * i + 6, cols] = np.eye(6)
    slices = system.constraints.slices
    groups = {c.name: list(range(slices[c.name].start, slices[c.name].stop)) for c in system.constraints}
    for i, j in enumerate(robot.joints):
        if j.name in groups:
            raise ValueError(f"constraint and joint share the name {j.name!r}; rename the constraint")
        groups[j.name] = list(range(m + 6 * i, m + 6 * i + 6))
    return C, groups
