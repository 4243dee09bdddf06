"""Static equilibrium and natural frequencies about it (modal check of a flexible robot).

With the generalized forces ``Q(q, dq)`` of some force elements (springs and dampers
of the elastic DOF by default) and gravity ``g(q)`` (pinocchio's RNEA at rest), the
*free* coordinates (default: every unactuated DOF) are in equilibrium where

```
R(q) = Q(q, 0) - g(q) = 0        (rows and columns of the free coordinates only)
```

while the others are held (a drive holding its joint). :func:`static_equilibrium`
solves it by Newton's method with a finite-difference Jacobian
(:func:`mbctl.dynamics.constraints.assembly.equilibrium`, the constrained statics without rows). :func:`modes`
linearizes about such a state,

```
M dd(x) + C d(x) + K x = 0,   M = M(q0),  K = -dR/dq,  C = -dQ/d(dq)
```

(``K`` includes the gravity stiffness ``dg/dq``; central differences), and solves
``K phi = omega^2 M phi``: natural frequencies ``omega_i`` (rad/s, Hz), mass-normalized
mode shapes and modal damping ratios ``zeta_i = phi_i^T C phi_i / (2 omega_i)`` (exact for
proportional damping, a first-order estimate otherwise). Friction is left out: it is
not smooth at rest.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pinocchio as pin
import scipy.linalg

from mbctl.dynamics.constraints.assembly import RestForces, central_differences, equilibrium
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.forces import ForceElement
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import MbctlError

__all__ = ["Modes", "EquilibriumError", "modes", "static_equilibrium"]


class EquilibriumError(MbctlError):
    """Newton's method found no static equilibrium."""


@dataclass(frozen=True, eq=False)
class Modes:
    """Linear modes about an equilibrium, in increasing frequency.

    Attributes:
        names: Free coordinates (the rows of ``shapes``).
        eigenvalues: ``omega^2`` (1/s²); negative for an unstable equilibrium.
        frequencies_hz: ``sqrt(omega^2)/(2*pi)`` (Hz); NaN where ``omega^2 < 0``.
        shapes: (n_free, n_modes) mass-normalized mode shapes (``phi^T M phi = 1``).
        damping_ratios: Modal damping ratio of each mode (dimensionless).
        q: The configuration linearized about.
    """

    names: tuple[str, ...]
    eigenvalues: np.ndarray
    frequencies_hz: np.ndarray
    shapes: np.ndarray
    damping_ratios: np.ndarray
    q: np.ndarray

    @property
    def omega(self) -> np.ndarray:
        """Natural angular frequencies (rad/s)."""
        return 2 * math.pi * self.frequencies_hz

    def dominant(self, name: str) -> int:
        """Index of the mode in which coordinate ``name`` moves most (relative to the
        mode's largest component)."""
        i = self.names.index(name)
        share = np.abs(self.shapes[i]) / np.abs(self.shapes).max(axis=0)
        return int(np.argmax(share))


def _free_indices(robot: RobotModel, free: Sequence[str] | None) -> np.ndarray:
    if free is None:
        return np.array([j.idx_v for j in robot.joints if not j.actuated], dtype=int)
    return np.array([robot.joint(n).idx_v for n in free], dtype=int)


def _forces(robot: RobotModel, forces: Sequence[ForceElement] | None) -> list[ForceElement]:
    return [ElasticForces(robot)] if forces is None else list(forces)


def static_equilibrium(
    robot: RobotModel,
    q0: np.ndarray,
    *,
    free: Sequence[str] | None = None,
    forces: Sequence[ForceElement] | None = None,
    tol: float = 1e-10,
    max_iterations: int = 50,
) -> np.ndarray:
    """The configuration near ``q0`` where the free coordinates are in static equilibrium
    (:func:`mbctl.dynamics.constraints.assembly.equilibrium` without constraint rows).

    Args:
        q0: Start (nv,); the other coordinates keep their values.
        free: Names of the coordinates to solve for (default: the unactuated ones).
        forces: Force elements (default: the robot's springs and dampers).
        tol: Stop when ``max|R_free| <= tol*(1 + max(max|Q|, max|g|))`` at the start (N·m, N).

    Raises:
        EquilibriumError: If Newton's method does not converge.
    """
    rest = RestForces(robot, _forces(robot, forces))
    found = equilibrium(rest, q0, _free_indices(robot, free), tol=tol, max_iterations=max_iterations)
    if not found.converged:
        raise EquilibriumError(
            f"no static equilibrium of {robot.name} found near the start after {max_iterations} Newton steps "
            f"(residual {found.force_residual:.3g}); is every free coordinate held by a spring?"
        )
    return found.q


def modes(
    robot: RobotModel,
    q0: np.ndarray,
    *,
    free: Sequence[str] | None = None,
    forces: Sequence[ForceElement] | None = None,
) -> Modes:
    """Natural frequencies and mode shapes of the free coordinates about ``q0``.

    ``q0`` should be a static equilibrium (:func:`static_equilibrium`); elsewhere the
    linearization still describes small motions about a moving state only roughly.
    """
    idx = _free_indices(robot, free)
    elements = _forces(robot, forces)
    q = np.asarray(q0, dtype=float)
    M = pin.crba(robot.model, robot.create_data(), robot.configuration(q))
    M = np.triu(M) + np.triu(M, 1).T
    M = M[np.ix_(idx, idx)]
    rest = RestForces(robot, elements)
    K = -central_differences(lambda qq: np.subtract(*rest(qq))[idx], q, idx)  # -dR/dq, R = Q(q, 0) - g(q)
    K = 0.5 * (K + K.T)  # conservative forces: symmetric up to the differencing error
    C = np.empty_like(K)
    for c, i in enumerate(idx):
        h = 1e-6
        vp, vm = np.zeros(robot.nv), np.zeros(robot.nv)
        vp[i], vm[i] = h, -h
        Qp = sum(e(0.0, q, vp, e.initial_state())[0] for e in elements)
        Qm = sum(e(0.0, q, vm, e.initial_state())[0] for e in elements)
        C[:, c] = -(np.asarray(Qp)[idx] - np.asarray(Qm)[idx]) / (2 * h)
    lam, phi = scipy.linalg.eigh(K, M)
    omega = np.sqrt(np.where(lam > 0, lam, np.nan))
    zeta = np.einsum("ij,ik,kj->j", phi, C, phi) / (2 * omega)
    names = tuple(next(j.name for j in robot.joints if j.idx_v == i) for i in idx)
    return Modes(
        names=names,
        eigenvalues=lam,
        frequencies_hz=omega / (2 * math.pi),
        shapes=phi,
        damping_ratios=zeta,
        q=q.copy(),
    )
