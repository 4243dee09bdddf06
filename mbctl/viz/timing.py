"""Figures of a time-optimal path timing: the path-speed profile against each limit's boundary,
and the drive torques against their limits."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.viz.figures import check_figure_path, new_figure, save_figure

if TYPE_CHECKING:
    from mbctl.ctrl.timing.solve import TimingResult

__all__ = ["plot_timing"]

_COLORS = {"velocity": "tab:green", "acceleration": "tab:orange", "torque": "tab:red"}


def plot_timing(result: TimingResult, path: str | Path, *, title: str = "time-optimal timing") -> Path:
    """Two panels: the path speed ``sdot`` (1/s) against ``s`` with the largest speed each limit kind
    allows alone (its maximum velocity curve), and every joint's drive torque as a fraction of its
    limit against time t (s), with the ±1 lines. Returns ``path``.

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    fig = new_figure((7.5, 6.5))
    top, bottom = fig.subplots(2, 1)
    sdot = np.sqrt(np.maximum(result.b, 0.0))
    ceiling = 1.6 * float(sdot.max()) if sdot.max() > 0 else 1.0
    for kind, bound in result.boundaries.items():
        if np.isfinite(bound).any():
            top.plot(result.s, np.minimum(bound, ceiling), color=_COLORS.get(kind), lw=1.0, ls="--", label=f"{kind} limit")
    top.plot(result.s, sdot, color="k", lw=1.6, label="optimal sdot")
    top.set_ylim(0, ceiling)
    top.set_xlabel("s [-]")
    top.set_ylabel("sdot [1/s]")
    top.legend(loc="best", fontsize="small")
    top.grid(alpha=0.3)
    traj = result.trajectory
    if result.torque is not None:
        limit = result.limits.torque
        for i, name in enumerate(traj.joint_names):
            if np.isfinite(limit[i]):
                bottom.plot(traj.t, result.torque[:, i] / limit[i], lw=1.0, label=name)
        for y in (-1.0, 1.0):
            bottom.axhline(y, color="k", lw=0.8, ls=":")
        bottom.legend(loc="best", fontsize="x-small", ncol=2)
    bottom.set_xlabel("t [s]")
    bottom.set_ylabel("tau / limit [-]")
    bottom.grid(alpha=0.3)
    fig.suptitle(f"{title}: {result.duration:.3f} s")
    return save_figure(fig, path)
