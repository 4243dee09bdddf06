"""Why a path cannot be timed: the limits that no path acceleration keeps, even with the path at rest.

At a grid point with the path at rest (``b = 0``) every limit of :mod:`mbctl.ctrl.timing.stages`
is a line in the path acceleration ``a``: the torque ``tau_a a + tau_0 + f`` (gravity and the
friction of starting forward, ``f``) against the torque limit, and the joint acceleration
``q' a`` against the acceleration limit. Scaled by its limit, each is ``|G_k a + R_k| <= 1``,
and the least demand over ``a``

    rho = min_a max_k |G_k a + R_k|

is a convex piecewise-linear minimum, reached where two lines meet (``|l_k| = |l_m|``) or one
vanishes: those few candidates are evaluated at every grid point at once. ``rho > 1`` at a point
means no timing exists. Holding the path there without acceleration (``a = 0``) asks ``|R_k|``,
at least ``rho`` of some torque limit: that joint is named first, the lines binding at the best
``a`` after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbctl.ctrl.timing.dynamics import PathDynamics
from mbctl.ctrl.timing.reachability import Infeasible
from mbctl.ctrl.timing.stages import GridLimits

__all__ = ["RestDemand", "rest_demand", "explain"]

_KINDS = ("torque", "acceleration")
_BLOCK = 512  # grid points at a time: 2 nv lines, about 8 nv² candidates each (6 DOF: 15 MB a block)


@dataclass(frozen=True)
class RestDemand:
    """The demand on the limits with the path at rest, per grid point.

    Attributes:
        ratio: ``rho`` (N+1,): the largest ``|value| / limit`` at the best path acceleration (1 = at a limit).
        demand: ``|value| / limit`` of every line at the best acceleration (N+1, 2 nv): the torque limits
            of the DOF, then their acceleration limits.
        hold: ``|value|`` of every line without acceleration (N+1, 2 nv) (N·m or N; the accelerations are 0).
        limit: The limit of every line (N+1, 2 nv), the margin included.
    """

    ratio: np.ndarray
    demand: np.ndarray
    hold: np.ndarray
    limit: np.ndarray


def rest_demand(pd: PathDynamics, lim: GridLimits) -> RestDemand:
    """:class:`RestDemand` of the path ``pd`` under the limits ``lim`` (module docstring)."""
    n, nv = pd.q.shape
    friction = pd.friction(np.ones(n), np.zeros(n))  # as the first solve takes it: the motion starting forward
    g = np.hstack([pd.tau_a, pd.dq_ds])
    r = np.hstack([pd.tau_0 + friction, np.zeros((n, nv))])
    limit = np.hstack([lim.torque, lim.acceleration])
    used = np.isfinite(limit) & (limit > 0)
    G = np.where(used, g / np.where(used, limit, 1.0), 0.0)
    R = np.where(used, r / np.where(used, limit, 1.0), 0.0)
    best = np.concatenate([_best(G[k : k + _BLOCK], R[k : k + _BLOCK]) for k in range(0, n, _BLOCK)])
    return RestDemand(ratio=best.max(axis=1), demand=best, hold=np.where(used, np.abs(r), 0.0), limit=limit)


def _best(G: np.ndarray, R: np.ndarray) -> np.ndarray:
    """``|G a + R|`` (points, lines) at the ``a`` of each point that makes the largest of them least."""
    n = len(G)
    with np.errstate(divide="ignore", invalid="ignore"):
        meet = [-(R[:, :, None] - s * R[:, None, :]) / (G[:, :, None] - s * G[:, None, :]) for s in (1.0, -1.0)]
        candidates = np.concatenate([np.zeros((n, 1)), -R / G, *(m.reshape(n, -1) for m in meet)], axis=1)
    candidates = np.where(np.isfinite(candidates), candidates, 0.0)
    demand = np.abs(G[:, None, :] * candidates[:, :, None] + R[:, None, :])  # (points, candidates, lines)
    return demand[np.arange(n), np.argmin(demand.max(axis=2), axis=1)]


def explain(exc: Infeasible, pd: PathDynamics, lim: GridLimits) -> Infeasible:
    """``exc`` naming the joints and limits that make the path infeasible where holding it at rest already
    exceeds a limit (at the point the solver stopped at, else the worst point); else ``exc`` as it is."""
    rest = rest_demand(pd, lim)
    over = rest.ratio > 1.0 + 1e-9
    if not over.any():
        return exc
    i = exc.index if over[exc.index] else int(np.argmax(rest.ratio))
    names, nv = pd.robot.joint_names, len(pd.robot.joint_names)
    held = int(np.argmax(rest.hold[i] / rest.limit[i]))  # a torque line: the accelerations are 0 at a = 0
    unit = "N" if pd.robot.joints[held].kind == "prismatic" else "N·m"
    binding = np.flatnonzero(rest.demand[i] >= rest.ratio[i] * (1 - 1e-9))
    lines = " and ".join(f"the {_KINDS[k // nv]} limit of {names[k % nv]}" for k in binding[:3])
    return Infeasible(
        f"the limits cannot be met at s = {pd.s[i]:.4g} (grid point {i} of {len(pd.s) - 1}), even with the path at rest there: holding it "
        f"asks {rest.hold[i, held]:.4g} {unit} of {names[held]} against its torque limit {rest.limit[i, held]:.4g} {unit} (gravity and "
        f"friction, the torque margin included), and no path acceleration brings every joint within its limits (the best asks "
        f"{rest.ratio[i]:.3g} times {lines})",
        i,
    )
