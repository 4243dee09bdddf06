"""Constraint analysis of a mechanism at one configuration: rows, ranks, redundancy, mobility, unique reactions.

Stack every constraint row at velocity level, ``C dq + b = 0`` (``C = Phi_q`` for the
position-level rows, ``Psi`` for the velocity-level ones; m rows, n coordinates):

- ranks by singular values, ``s_i > rtol * s_1`` with ``s_1`` the largest singular
  value of the whole ``C`` (the same threshold for every subset, so the holonomic and
  velocity-level ranks are comparable with the total): ``r_h`` of the holonomic rows,
  ``r_v`` of the velocity-level (Pfaffian) rows, ``r`` of all rows;
- degree of redundancy ``p = m - r`` (``p_h = m_h - r_h`` among the holonomic rows
  alone); ``r < r_h + r_v`` means some velocity-level rows depend on holonomic ones;
- mobility ``f = n - r``: the degrees of freedom the constraints leave (driving
  constraints included, so a fully driven mechanism has ``f = 0``); and
  ``f_m = n - rank(C_material)``, the mobility of the mechanism without its
  programmed (operator-imposed) rows;
- the rows QR with column pivoting of ``C^T`` finds dependent on the others (those the
  Lagrange solver eliminates unless told which);
- per kinematic pair (each constraint, each tree joint) whether its reaction is
  uniquely determined: :func:`~mbctl.dynamics.constraints.reactions.reaction_solvability`
  on :func:`~mbctl.dynamics.constraints.reactions.pair_matrix`.

All of this holds at the configuration given; singular configurations change it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import scipy.linalg

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.reactions import pair_matrix, reaction_solvability

__all__ = ["ConstraintAnalysis", "ConstraintEntry", "analyse_constraints"]


@dataclass(frozen=True)
class ConstraintEntry:
    """One constraint (kinematic pair) or tree joint in :class:`ConstraintAnalysis`.

    Attributes:
        name: Constraint or joint name.
        kind: Constraint class (``LoopClosure``, ``FrameVelocity``, ...) or ``"tree joint"``.
        level: 2 position-level (holonomic), 1 velocity-level (Pfaffian), 0 tree joint.
        programmed: True for programmed constraints (their force is a drive's).
        rows: Its row names (empty for tree joints).
        rank: Rank of its own rows (6 for a tree joint's weld).
        unique: True when its reaction is uniquely determined; None when not analysed.
    """

    name: str
    kind: str
    level: int
    programmed: bool
    rows: tuple[str, ...]
    rank: int
    unique: bool | None


@dataclass(frozen=True)
class ConstraintAnalysis:
    """Result of :func:`analyse_constraints` (see the module docstring for the formulas).

    Attributes:
        robot: Robot name.
        t: Time of the analysis (s).
        coordinates: Number of coordinates ``n``.
        rows: Number of rows ``m``.
        holonomic_rows, holonomic_rank: ``m_h``, ``r_h``.
        velocity_rows, velocity_rank: ``m_v``, ``r_v`` (Pfaffian rows).
        rank: ``r`` of all rows.
        redundancy: ``p = m - r``.
        mobility: ``f = n - r``.
        mechanism_mobility: ``n - rank(material rows)`` (programmed rows left out).
        dependent_rows: Rows found dependent on the others (QR with column pivoting).
        constraints: Per constraint, in declaration order.
        joints: Per tree joint, in pinocchio order.
        rtol: Rank tolerance used.
    """

    robot: str
    t: float
    coordinates: int
    rows: int
    holonomic_rows: int
    holonomic_rank: int
    velocity_rows: int
    velocity_rank: int
    rank: int
    redundancy: int
    mobility: int
    mechanism_mobility: int
    dependent_rows: tuple[str, ...]
    constraints: tuple[ConstraintEntry, ...]
    joints: tuple[ConstraintEntry, ...]
    rtol: float

    @property
    def programmed_rows(self) -> int:
        """Rows of programmed constraints (the rest, ``rows - programmed_rows``, are material)."""
        return sum(len(e.rows) for e in self.constraints if e.programmed)

    @property
    def unique(self) -> tuple[str, ...]:
        """Constraints and joints whose reaction is uniquely determined."""
        return tuple(e.name for e in (*self.constraints, *self.joints) if e.unique)

    @property
    def not_unique(self) -> tuple[str, ...]:
        """Constraints and joints whose reaction is not uniquely determined."""
        return tuple(e.name for e in (*self.constraints, *self.joints) if e.unique is False)

    def to_dict(self) -> dict:
        """Plain-JSON form (lists instead of tuples)."""
        return asdict(self)


def _rank(M: np.ndarray, threshold: float) -> int:
    if M.size == 0:
        return 0
    return int(np.sum(np.linalg.svd(M, compute_uv=False) > threshold))


def analyse_constraints(
    system: ConstrainedDynamics, q: np.ndarray, t: float = 0.0, rtol: float = 1e-9, *, reactions: bool = True
) -> ConstraintAnalysis:
    """Rows, ranks, redundancy, mobility and reaction solvability at ``(t, q)``.

    Args:
        system: The constrained dynamics (its constraint set and robot).
        q: Coordinates (rad, m), ideally on the constraints (assembled).
        t: Time (s) at which rheonomic rows are evaluated.
        rtol: Relative rank tolerance (singular values ``<= rtol * s_1`` count as zero).
        reactions: Also decide which reactions are unique (the costlier part); False
            leaves every entry's ``unique`` None.
    """
    robot = system.robot
    cs = system.constraints
    q = np.asarray(q, dtype=float)
    A = cs.evaluate(system.kinematics(q, np.zeros(robot.nv)), t).jac
    m, n = A.shape
    s1 = float(np.linalg.svd(A, compute_uv=False)[0]) if m else 0.0
    threshold = rtol * s1
    hol = cs.level == 2
    vel = cs.level == 1
    rank = _rank(A, threshold)
    dependent: tuple[str, ...] = ()
    if 0 < rank < m:
        _, _, piv = scipy.linalg.qr(A.T, mode="economic", pivoting=True)
        dependent = tuple(cs.rows[i] for i in sorted(piv[rank:]))
    if not reactions:
        unique: dict[str, bool | None] = dict.fromkeys([*(c.name for c in cs), *(j.name for j in robot.joints)])
    elif m:
        C, groups = pair_matrix(system, t, q)
        unique = dict(reaction_solvability(C, groups, rtol=rtol).unique)
    else:
        unique = {j.name: True for j in robot.joints}
    entries = []
    for c in cs:
        sl = cs.slices[c.name]
        entries.append(
            ConstraintEntry(
                name=c.name,
                kind=type(c).__name__,
                level=int(c.level),
                programmed=bool(c.programmed),
                rows=tuple(cs.rows[sl]),
                rank=_rank(A[sl], threshold),
                unique=unique[c.name],
            )
        )
    joints = tuple(ConstraintEntry(j.name, "tree joint", 0, False, (), 6, unique[j.name]) for j in robot.joints)
    material = ~cs.programmed
    return ConstraintAnalysis(
        robot=robot.name,
        t=float(t),
        coordinates=n,
        rows=m,
        holonomic_rows=int(hol.sum()),
        holonomic_rank=_rank(A[hol], threshold),
        velocity_rows=int(vel.sum()),
        velocity_rank=_rank(A[vel], threshold),
        rank=rank,
        redundancy=m - rank,
        mobility=n - rank,
        mechanism_mobility=n - _rank(A[material], threshold),
        dependent_rows=dependent,
        constraints=tuple(entries),
        joints=joints,
        rtol=rtol,
    )

