"""The physically consistent estimate of whole-arm identification (:mod:`mbctl.identification.arm_fit`).

Each free body's pseudo-inertia is ``J = U U^T`` with ``U`` upper triangular and an
exponential on its diagonal (a log-Cholesky parametrisation), so every body keeps a positive
mass, a positive definite inertia and its triangle inequalities whatever the solver does.
Solved by IPOPT (through CasADi):

    min (1/n) |W (Y theta + Y_a a + F phi - tau)|^2 + lambda * sum_b D(J_b, J_b_prior)

``D(J, J0) = tr(J0^-1 J) - log det(J0^-1 J) - 4`` is the log-determinant divergence between
pseudo-inertias: zero at the prior, free of units and scales, and infinite on the boundary
of consistency, so no body ends as a degenerate line or plane of mass. The friction
parameters are bounded (``fc, fv >= 0``, ``fs >= fc``), and so is each joint's armature
``a >= 0`` (no pull: where the logs see only its sum with a body's inertia, the body's pull
decides the split). The data term is compressed to its
QR factor first, so the solve does not grow with the log. The prior (the model's own
inertials) fixes what the logs cannot see.
"""

from __future__ import annotations

import numpy as np

from mbctl.dynamics.regressor import from_pseudo_inertia, pseudo_inertia
from mbctl.errors import MbctlError

__all__ = ["body_from_log_cholesky", "consistent_fit", "log_cholesky"]


def log_cholesky(theta_body: np.ndarray) -> np.ndarray:
    """The ten log-Cholesky coordinates of a body with a positive definite pseudo-inertia."""
    J = pseudo_inertia(theta_body)
    flip = np.eye(4)[::-1]
    U = flip @ np.linalg.cholesky(flip @ J @ flip) @ flip  # upper triangular, J = U U^T
    return np.array([np.log(U[0, 0]), U[0, 1], U[0, 2], U[0, 3], np.log(U[1, 1]), U[1, 2], U[1, 3], np.log(U[2, 2]), U[2, 3], np.log(U[3, 3])])


def body_from_log_cholesky(x):  # noqa: ANN001, ANN202  (CasADi SX in and out)
    """One body's ten parameters and pseudo-inertia ``J = U U^T`` from its log-Cholesky coordinates (CasADi)."""
    import casadi as ca

    U = ca.SX.zeros(4, 4)
    U[0, 0], U[0, 1], U[0, 2], U[0, 3] = ca.exp(x[0]), x[1], x[2], x[3]
    U[1, 1], U[1, 2], U[1, 3] = ca.exp(x[4]), x[5], x[6]
    U[2, 2], U[2, 3] = ca.exp(x[7]), x[8]
    U[3, 3] = ca.exp(x[9])
    J = U @ U.T
    S = J[:3, :3]
    inertia = ca.trace(S) * ca.SX.eye(3) - S
    theta = ca.vertcat(J[3, 3], J[0, 3], J[1, 3], J[2, 3], inertia[0, 0], inertia[0, 1], inertia[1, 1], inertia[0, 2], inertia[1, 2], inertia[2, 2])
    return theta, J


def consistent_fit(
    Y: np.ndarray,
    Ya: np.ndarray,
    F: np.ndarray,
    rhs: np.ndarray,
    w: np.ndarray,
    theta_prior: np.ndarray,
    free_mask: np.ndarray,
    phi0: np.ndarray,
    k: int,
    *,
    stribeck: bool,
    payload: bool,
    regularisation: float,
    armature_start: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """The physically consistent fit (module docstring): ``lambda`` = ``regularisation``.

    Args:
        Y: Parallel-filtered regressor columns of the free bodies, (N, n, 10 * free bodies).
        Ya: Those of the free armatures (a joint's acceleration on its row), (N, n, m).
        F: Friction (``k`` per joint, block-diagonal) and offset columns, (N, n, n*k + offsets).
        rhs: Filtered torques minus the known bodies' share (N·m, N), (N, n).
        w: Row weight of each joint (1/sigma_j).
        theta_prior: Every body's ten prior parameters; free_mask: which of them are fitted.
        phi0: Start of the friction and offset parameters (the unconstrained estimate).
        stribeck: Columns ``(fc, fs, fv)`` per joint, with ``fs >= fc``; else ``(fc, fv)`` or none.
        payload: The free body's fit is a payload added to its prior (its own prior: none).
        armature_start: Start of the ``m`` armatures (the model's; kg·m², kg).

    Returns:
        ``(theta, a, phi, status)``: all bodies' parameters (the known ones as given), the free
        armatures, the friction and offset parameters, IPOPT's return status.

    Raises:
        MbctlError: If IPOPT does not converge.
    """
    import casadi as ca

    N, n, p = Y.shape
    A = np.concatenate([Y, Ya, F], axis=2) * w[None, :, None]
    R = np.linalg.qr(np.column_stack([A.reshape(N * n, -1), (rhs * w).ravel()]), mode="r")
    Rz, r = R[:, :-1], R[:, -1]
    prior_free = theta_prior[free_mask].reshape(-1, 10)
    nfree = len(prior_free)
    x = ca.SX.sym("x", 10 * nfree)
    ma = Ya.shape[2]
    a = ca.SX.sym("a", ma)
    phi = ca.SX.sym("phi", F.shape[2])
    parts, x0, divergence = [], [], 0
    for b in range(nfree):
        body, J = body_from_log_cholesky(x[10 * b : 10 * b + 10])
        if payload:  # the payload itself is a body; its prior is nothing, so only its own J is kept interior
            parts.append(ca.DM(prior_free[b]) + body)
            J0 = pseudo_inertia(np.array([0.1, 0, 0, 0, 1e-4, 0, 1e-4, 0, 0, 1e-4]))
        else:
            parts.append(body)
            J0 = pseudo_inertia(prior_free[b])
        x0.append(log_cholesky(from_pseudo_inertia(J0)))
        log_det_J = 2 * (x[10 * b] + x[10 * b + 4] + x[10 * b + 7] + x[10 * b + 9])
        divergence += ca.trace(ca.mtimes(ca.DM(np.linalg.inv(J0)), J)) - log_det_J + np.log(np.linalg.det(J0)) - 4
    theta_free = ca.vertcat(*parts)
    residual = ca.mtimes(ca.DM(Rz), ca.vertcat(theta_free, a, phi)) - ca.DM(r)
    objective = ca.sumsqr(residual) / (N * n) + regularisation * divergence
    lbx = np.r_[np.full(10 * nfree, -np.inf), np.zeros(ma), np.zeros(n * k), np.full(F.shape[2] - n * k, -np.inf)]
    ubx = np.full(len(lbx), np.inf)
    g, lbg = [], []
    if stribeck:  # fs >= fc; fv and fc bounded by lbx
        for c in range(n):
            g.append(phi[c * k + 1] - phi[c * k])
            lbg.append(0.0)
    solver = ca.nlpsol(
        "arm_fit",
        "ipopt",
        {"x": ca.vertcat(x, a, phi), "f": objective, "g": ca.vertcat(*g)},
        {"ipopt.print_level": 0, "print_time": False, "ipopt.sb": "yes", "ipopt.tol": 1e-10, "ipopt.max_iter": 3000},
    )
    x0 = np.r_[np.concatenate(x0), np.maximum(armature_start, 0.0), np.maximum(phi0[: n * k], 0.0), phi0[n * k :]]
    sol = solver(x0=x0, lbx=lbx, ubx=ubx, lbg=lbg, ubg=np.full(len(lbg), np.inf))
    status = str(solver.stats()["return_status"])
    if status not in ("Solve_Succeeded", "Solved_To_Acceptable_Level"):
        raise MbctlError(f"the physically consistent fit did not converge (IPOPT: {status})")
    values = ca.Function("theta", [x], [theta_free])(sol["x"][: 10 * nfree])
    theta = theta_prior.copy()
    theta[free_mask] = np.asarray(values, dtype=float).ravel()
    rest = np.asarray(sol["x"][10 * nfree :], dtype=float).ravel()
    return theta, rest[:ma], rest[ma:], status
