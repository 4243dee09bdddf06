"""The rank of the constraint rows at the initial state, the rows the Lagrange and null-space solvers keep,
and the report of a singular configuration (used by :class:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics`).

At the initial state the singular values ``s_1 >= s_2 >= ...`` of ``A = Phi_q`` give the rank
``r = #{s_i > rank_tolerance*s_1}``. With redundant rows (``r < m``) the rows the Jacobian cannot
move independently must already agree: with ``U_p`` the last ``m - r`` left singular vectors,
``U_p^T Phi = 0`` and ``U_p^T dPhi/dt = 0`` (to ``consistency_tolerance``). The Lagrange and
null-space solvers keep ``r`` independent rows: those not named in ``eliminate``, or those QR with
column pivoting of ``A^T`` picks. When the rows fix every DOF, the sign of ``det A`` on the kept
rows is the branch the motion must stay on.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import scipy.linalg

from mbctl.config.simulation import SingularityPolicy
from mbctl.dynamics.constraints.errors import InconsistentConstraintsError, SingularConstraintError
from mbctl.errors import ConfigError

__all__ = ["RowSetup", "Where", "row_setup", "singular_error"]


@dataclass
class RowSetup:
    """Decisions taken once, at the first evaluation (the initial state)."""

    rank: int
    kept: np.ndarray  # rows given to lagrange / nullspace
    eliminated: tuple[str, ...] = field(default_factory=tuple)
    orientation: int = 0  # sign of det(A[kept]) when the constraints fix every DOF, else 0


@dataclass(frozen=True)
class Where:
    """Where a check runs, for its messages: time ``t`` (s), coordinates ``q``, them described, the robot's file."""

    t: float
    q: np.ndarray
    described: str
    source: Path | str | None


def row_setup(
    A: np.ndarray,
    phi: np.ndarray,
    dphi: np.ndarray,
    rows: tuple[str, ...],
    *,
    nv: int,
    solver: str,
    rank_tolerance: float,
    singularity: SingularityPolicy,
    consistency_tolerance: float,
    eliminate: tuple[int, ...] | None,
    independent: np.ndarray | None,
    where: Where,
) -> RowSetup:
    """Rank, kept rows and branch at the initial state (module docstring) from the rows' Jacobian ``A``
    (m, nv), ``Phi`` and ``dPhi/dt`` there.

    Raises:
        SingularConstraintError: If ``A`` is zero or already near-singular (``singularity.action = "stop"``).
        InconsistentConstraintsError: If redundant rows disagree.
        ConfigError: If the eliminated rows or the independent coordinates do not fit the rank.
    """
    m = len(rows)
    t, source = where.t, where.source
    if m == 0:
        return RowSetup(rank=0, kept=np.arange(0))
    U, s, _ = np.linalg.svd(A)
    rank = int(np.sum(s > rank_tolerance * s[0])) if s[0] > 0 else 0
    if rank == 0:
        raise SingularConstraintError(f"constraint Jacobian is zero at t = {t:.6g} s, q = ({where.described})", file=source, field="constraints")
    if s[rank - 1] < singularity.tolerance * s[0] and singularity.action == "stop":
        raise singular_error(A, s, rank, rows, singularity.tolerance, where)
    if rank < m:
        # rows the Jacobian cannot move independently must agree already: U_p^T Phi = 0, U_p^T dPhi = 0
        Up = U[:, rank:]
        residual = np.abs(Up.T @ np.nan_to_num(phi)).max() + np.abs(Up.T @ dphi).max()
        if residual > consistency_tolerance:
            weight = np.abs(Up).max(axis=1)
            involved = ", ".join(rows[i] for i in np.flatnonzero(weight > 0.3 * weight.max()))
            raise InconsistentConstraintsError(
                f"inconsistent constraints at t = {t:.6g} s: the Jacobian has rank {rank} for {m} rows (redundant "
                f"rows or a singular configuration) and rows {involved} cannot hold together (residual "
                f"{residual:.3g}) at q = ({where.described})",
                file=source,
                field="constraints",
            )
    if eliminate is not None:
        kept = np.setdiff1d(np.arange(m), eliminate)
        r_kept = np.linalg.matrix_rank(A[kept], tol=rank_tolerance * s[0]) if len(kept) else 0
        if len(kept) != rank or r_kept != rank:
            raise ConfigError(
                f"eliminating {len(eliminate)} row(s) leaves {len(kept)} rows of rank {r_kept}; the constraints "
                f"have rank {rank} of {m} rows, so eliminate exactly {m - rank} rows whose removal keeps the rank",
                file=source,
                field="simulation.eliminate",
            )
    elif rank < m:
        _, _, piv = scipy.linalg.qr(A.T, mode="economic", pivoting=True)
        kept = np.sort(piv[:rank])
    else:
        kept = np.arange(m)
    if independent is not None and len(independent) != nv - rank:
        raise ConfigError(
            f"{len(independent)} independent coordinates named, but the constraints (rank {rank}) leave {nv - rank}",
            file=source,
            field="simulation.independent",
        )
    eliminated = tuple(rows[i] for i in np.setdiff1d(np.arange(m), kept)) if solver != "udwadia-kalaba" else ()
    # fully constrained: the motion must stay on the branch (sign of det A) it starts on
    orientation = int(np.sign(np.linalg.det(A[kept]))) if rank == nv else 0
    return RowSetup(rank=rank, kept=kept, eliminated=eliminated, orientation=orientation)


def singular_error(
    A: np.ndarray, s: np.ndarray, rank: int, rows: tuple[str, ...], tolerance: float, where: Where, *, crossed: bool = False
) -> SingularConstraintError:
    """The error of a near-singular Jacobian ``A`` (singular values ``s``, rank ``rank`` at the start), naming the
    rows of the vanishing direction; ``crossed``: ``det A`` changed sign since the last evaluation."""
    U, _, _ = np.linalg.svd(A)
    u = np.abs(U[:, rank - 1])
    involved = ", ".join(rows[i] for i in np.flatnonzero(u > 0.3 * u.max()))
    t = where.t
    if crossed:
        what = (
            f"the motion passed through a singular configuration of the constraint Jacobian just before t = {t:.6g} s "
            f"(its determinant changed sign; rows involved: {involved}; s_{rank}/s_1 = {s[rank - 1] / s[0]:.3g} now)"
        )
    else:
        what = (
            f"constraint Jacobian is near-singular at t = {t:.6g} s (singular values s_{rank}/s_1 = "
            f"{s[rank - 1] / s[0]:.3g} < tolerance {tolerance:g}; rows involved: {involved})"
        )
    return SingularConstraintError(
        f"{what} at q = ({where.described}); the constraints cannot be followed there "
        '(set simulation.singularity.action = "damped" to continue with damped least squares)',
        file=where.source,
        field="constraints",
        time=t,
        q=where.q,
    )
