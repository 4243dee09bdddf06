"""The finite Fourier series of an excitation trajectory (Swevers' form), at rest at both ends.

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
"""

from __future__ import annotations

import numpy as np

from .trajectory import Trajectory

__all__ = ["amplitudes", "fourier_basis", "repeat_periods"]


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


def amplitudes(Z: np.ndarray, harmonics: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``q0`` and the full amplitudes ``alpha_l, beta_l`` (l = 1..L) from the variables.

    ``Z`` holds one joint's variables ``[q0, alpha_2..alpha_L, beta_2..beta_L]`` per row
    (rad or m), shape (n, 2L - 1); the eliminated ``alpha_1 = -sum_l l alpha_l`` and
    ``beta_1 = -sum_l l^2 beta_l`` are restored. Returns ``q0`` (n,) and ``alpha``, ``beta``
    (n, L), position amplitudes (rad or m): Swevers' ``a_l = alpha_l w l`` (rad/s or m/s).
    """
    ell = np.arange(2, harmonics + 1)
    alpha_rest, beta_rest = Z[:, 1:harmonics], Z[:, harmonics:]
    alpha = np.hstack([-(alpha_rest @ ell)[:, None], alpha_rest])
    beta = np.hstack([-(beta_rest @ ell**2)[:, None], beta_rest])
    return Z[:, 0].copy(), alpha, beta


def repeat_periods(traj: Trajectory, periods: int) -> Trajectory:
    """``traj`` (one period, first and last samples at the same state) repeated ``periods``
    times: the times shifted by multiples of its duration (s), the shared end samples kept once."""
    T = traj.duration
    n = len(traj) - 1
    t = np.concatenate([traj.t[:n] + p * T for p in range(periods)] + [[periods * T]])
    tile = lambda x: np.vstack([np.tile(x[:n], (periods, 1)), x[-1:]])  # noqa: E731
    return Trajectory(t=t, joint_names=traj.joint_names, q=tile(traj.q), dq=tile(traj.dq), ddq=tile(traj.ddq))
