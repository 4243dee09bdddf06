"""Assembly and static equilibrium on constraint rows (dynamics/constraints/assembly.py) against closed forms."""

from __future__ import annotations

import numpy as np

from mbctl.dynamics.constraints.assembly import assemble, central_differences, equilibrium


def _circle(q: np.ndarray, dq: np.ndarray):
    """One row ``x^2 + y^2 - 1`` (m²), scleronomic."""
    return np.array([q @ q - 1.0]), 2.0 * q[None, :], np.zeros(1)


def test_minimum_norm_assembly_projects_radially_onto_a_circle():
    """Minimum-norm Gauss-Newton steps on x^2 + y^2 = 1 stay on the start's ray, so they land on p0/|p0|; the
    velocity correction removes exactly the radial component."""
    q0, dq0 = np.array([2.0, 0.5]), np.array([0.3, -0.7])
    found = assemble(_circle, q0, dq0)
    n = q0 / np.linalg.norm(q0)
    assert found.converged and found.consistent_velocity
    assert np.abs(found.q - n).max() < 1e-12
    assert np.abs(found.dq - (dq0 - n * (n @ dq0))).max() < 1e-12


def test_square_lu_assembly_equals_the_minimum_norm_one():
    """With two independent rows for two coordinates (circle and x = y) the LU and the SVD steps reach the same
    point, (1, 1)/sqrt(2) from a start in the first quadrant."""

    def rows(q, dq):
        phi, jac, phi_t = _circle(q, dq)
        return np.append(phi, q[0] - q[1]), np.vstack([jac, [1.0, -1.0]]), np.zeros(2)

    a = assemble(rows, np.array([1.5, 0.2]), np.zeros(2), square=True)
    b = assemble(rows, np.array([1.5, 0.2]), np.zeros(2))
    assert a.converged and b.converged
    assert np.abs(a.q - np.sqrt(0.5)).max() < 1e-12 and np.abs(b.q - a.q).max() < 1e-12


def test_assembly_reports_unreachable_rows():
    """x^2 + y^2 = -1 has no solution: not converged, no exception."""

    def rows(q, dq):
        return np.array([q @ q + 1.0]), 2.0 * q[None, :], np.zeros(1)

    assert not assemble(rows, np.array([1.0, 1.0]), np.zeros(2)).converged


K = np.array([[4.0, -1.0, 0.0], [-1.0, 3.0, -0.5], [0.0, -0.5, 2.0]])  # spring stiffness, N·m/rad
G = np.array([0.7, -0.2, 1.1])  # constant generalized gravity, N·m


def _rest(q: np.ndarray):
    """Linear springs ``Q = -K q`` and constant gravity ``g``: the potential ``1/2 q^T K q + g^T q``."""
    return -K @ q, G.copy()


def test_held_equilibrium_is_the_spring_balance():
    """Without rows, the free coordinates balance ``-K q - g = 0`` with the held one fixed (closed form)."""
    q0 = np.array([0.0, 0.0, 0.3])
    free = np.array([0, 1])
    found = equilibrium(_rest, q0, free, tol=1e-13)
    expected = np.linalg.solve(K[np.ix_(free, free)], -G[free] - K[free, 2] * 0.3)
    assert found.converged and found.q[2] == 0.3
    assert np.abs(found.q[free] - expected).max() < 1e-10


def test_constrained_equilibrium_is_the_kkt_minimum_of_the_potential():
    """With the row ``q0 + q1 + q2 = 0.4`` the equilibrium minimises the potential on the plane: the KKT system
    ``[[K, a], [a^T, 0]] [q; lambda] = [-g; 0.4]``, and ``R = Q - g - A^T lambda`` fixes the multiplier's sign."""
    a = np.ones(3)

    def rows(q):
        return a[None, :], np.array([a @ q - 0.4])

    found = equilibrium(_rest, np.zeros(3), np.arange(3), rows, tol=1e-13)
    kkt = np.block([[K, a[:, None]], [a[None, :], np.zeros((1, 1))]])
    solution = np.linalg.solve(kkt, np.append(-G, 0.4))
    assert found.converged
    assert np.abs(found.q - solution[:3]).max() < 1e-10
    assert abs(found.lam[0] - solution[3]) < 1e-9  # -K q - g - a lambda = 0 is the KKT row K q + a lambda = -g


def test_central_differences_of_a_quadratic_are_exact():
    """The central difference of ``K q`` over chosen columns is ``K`` there (exact for linear maps up to round-off)."""
    q = np.array([0.2, -1.5, 3.0])
    J = central_differences(lambda x: K @ x, q, np.array([0, 2]))
    assert np.abs(J - K[:, [0, 2]]).max() < 1e-7
