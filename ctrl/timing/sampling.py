"""From a path-speed profile to a timed trajectory sampled at a rate.

With ``a_i = sddot`` constant on ``[s_i, s_{i+1}]`` (the discretisation of
:mod:`mbctl.ctrl.timing.reachability`) the path parameter is quadratic in time on each
interval: the interval lasts ``dt_i = 2 ds / (sqrt(b_i) + sqrt(b_{i+1}))`` and, ``tau`` s into it,
``sdot = sqrt(b_i) + a_i tau``, ``s = s_i + sqrt(b_i) tau + a_i tau^2 / 2``. The joint motion is
``q(s)``, ``dq = q' sdot``, ``ddq = q' sddot + q'' sdot^2``.

With jerk limits the path acceleration must be continuous in time: :func:`sample_profile` with
``smooth=True`` takes ``a = sddot`` linear in ``s`` between the grid values (so ``b = sdot^2`` is
quadratic there, ``sdddot = sdot da/ds``) and, on the first and last interval, a constant
``sdddot`` from and to rest (``s = j t^3 / 6``), as :mod:`mbctl.ctrl.timing.jerk` models it: ``ddq``
is continuous and ``dddq`` bounded.
"""

from __future__ import annotations

import numpy as np

from mbctl.ctrl.timing.path import GeometricPath
from mbctl.ctrl.trajectory import Trajectory

__all__ = ["grid_times", "profile_duration", "smooth_duration", "sample_profile", "path_motion"]


def grid_times(s: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Times (s) at which the grid points are passed: ``t_0 = 0``, ``t_{i+1} = t_i + 2 ds_i / (sqrt(b_i) + sqrt(b_{i+1}))``."""
    root = np.sqrt(np.maximum(b, 0.0))
    with np.errstate(divide="ignore"):
        dt = 2.0 * np.diff(s) / (root[:-1] + root[1:])
    return np.concatenate([[0.0], np.cumsum(dt)])


def profile_duration(s: np.ndarray, b: np.ndarray) -> float:
    """Duration (s) of the motion with squared path speeds ``b`` at the grid ``s``."""
    return float(grid_times(s, b)[-1])


def _sample_times(duration: float, rate_hz: float) -> np.ndarray:
    return np.linspace(0.0, duration, max(1, int(np.ceil(duration * rate_hz - 1e-9))) + 1)


def path_motion(
    path: GeometricPath, s: np.ndarray, sd: np.ndarray, sdd: np.ndarray, sddd: np.ndarray | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
    """Joint ``(q, dq, ddq, dddq)`` of the path at parameters ``s`` with path speed ``sd``,
    acceleration ``sdd`` and (for ``dddq``; else None) jerk ``sddd``."""
    q, d1, d2, d3 = path(s)
    sd, sdd = sd[:, None], sdd[:, None]
    jerk = None if sddd is None else d3 * sd**3 + 3 * d2 * sd * sdd + d1 * sddd[:, None]
    return q, d1 * sd, d1 * sdd + d2 * sd**2, jerk


def _smooth_times(s: np.ndarray, b: np.ndarray, a: np.ndarray, sub: int = 16) -> tuple[np.ndarray, np.ndarray]:
    """A fine table of ``(t, s)`` for the jerk-limited profile: ``a`` linear and ``b`` quadratic in ``s``
    on the inner intervals (integrated with ``sub`` steps each), ``s = j t^3 / 6`` on the end intervals."""
    ds = s[1] - s[0]
    sig = np.linspace(0.0, ds, sub + 1)
    inner = slice(1, len(s) - 2)
    bb = b[inner, None] + 2 * a[inner, None] * sig + ((a[2:-1] - a[1:-2]) / ds)[:, None] * sig**2
    root = np.sqrt(np.maximum(bb, 0.0))
    dt = 2 * np.diff(sig) / (root[:, :-1] + root[:, 1:])
    h0, h1 = 3 * ds / np.sqrt(b[1]), 3 * ds / np.sqrt(b[-2])
    t_inner = h0 + np.concatenate([[0.0], np.cumsum(dt)])
    s_inner = np.concatenate([[s[1]], (s[inner, None] + sig[1:]).ravel()])
    return np.concatenate([[0.0], t_inner, [t_inner[-1] + h1]]), np.concatenate([[0.0], s_inner, [1.0]])


def _smooth_motion(t: np.ndarray, s: np.ndarray, b: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, ...]:
    """``s, sdot, sddot, sdddot`` of the jerk-limited profile at times ``t``, and its duration."""
    ds = s[1] - s[0]
    t_tab, s_tab = _smooth_times(s, b, a)
    T = t_tab[-1]
    h0, h1 = t_tab[1], T - t_tab[-2]
    j0, j1 = 6 * ds / h0**3, 6 * ds / h1**3
    ss = np.interp(t, t_tab, s_tab)
    k = np.clip(((ss - s[0]) / ds).astype(int), 1, len(s) - 3)
    slope = (a[k + 1] - a[k]) / ds
    sig = ss - s[k]
    sd = np.sqrt(np.maximum(b[k] + 2 * a[k] * sig + slope * sig**2, 0.0))
    sdd = a[k] + slope * sig
    sddd = sd * slope
    first, last = t < h0, t > T - h1
    tau, rest = t[first], T - t[last]
    ss[first], sd[first], sdd[first], sddd[first] = j0 * tau**3 / 6, j0 * tau**2 / 2, j0 * tau, j0
    ss[last], sd[last], sdd[last], sddd[last] = 1.0 - j1 * rest**3 / 6, j1 * rest**2 / 2, -j1 * rest, j1
    return ss, sd, sdd, sddd


def smooth_duration(s: np.ndarray, b: np.ndarray, a: np.ndarray) -> float:
    """Duration (s) of a jerk-limited profile (``a`` per grid point), as :func:`sample_profile` times it."""
    return float(_smooth_times(s, b, a)[0][-1])


def sample_profile(
    path: GeometricPath, s: np.ndarray, b: np.ndarray, a: np.ndarray, rate_hz: float, *, smooth: bool = False
) -> tuple[Trajectory, np.ndarray, np.ndarray | None]:
    """Sample the timed path at ``rate_hz`` Hz from ``t = 0`` to the end (rest at both ends).

    Args:
        s: Grid (N+1,).
        b: Squared path speeds at the grid (N+1,), ``b_0 = b_N = 0``.
        a: Path accelerations: per interval (N,) for the piecewise-quadratic ``s(t)``; per grid
            point (N+1,) with ``smooth=True``.

    Returns:
        The trajectory, the path parameter at every sample, and (``smooth`` only) the joint jerk.
    """
    if smooth:
        t = _sample_times(smooth_duration(s, b, a), rate_hz)
        ss, sdot, sddot, sdddot = _smooth_motion(t, s, b, a)
        q, dq, ddq, jerk = path_motion(path, np.clip(ss, 0.0, 1.0), sdot, sddot, sdddot)
    else:
        t_grid = grid_times(s, b)
        t = _sample_times(float(t_grid[-1]), rate_hz)
        k = np.clip(np.searchsorted(t_grid, t, side="right") - 1, 0, len(s) - 2)
        tau = t - t_grid[k]
        root = np.sqrt(np.maximum(b[k], 0.0))
        sdot = np.maximum(root + a[k] * tau, 0.0)
        ss = np.clip(s[k] + root * tau + 0.5 * a[k] * tau**2, 0.0, 1.0)
        q, dq, ddq, jerk = path_motion(path, ss, sdot, a[k])
    q[-1] = path(np.array([1.0]))[0][0]
    dq[0] = dq[-1] = 0.0
    if not smooth:
        # arrived: at rest, held (the deceleration ends here; with it the friction model would take
        # the direction of the braking for the direction of a new motion)
        ddq[-1] = 0.0
    names = path.joint_names
    return Trajectory(t=t, joint_names=names, q=q, dq=dq, ddq=ddq), ss, jerk
