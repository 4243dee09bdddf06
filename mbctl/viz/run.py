"""The figure of a closed-loop run: tracking error, torque commands and loop timing from its log."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.errors import DataError
from mbctl.viz.figures import check_figure_path, new_figure, save_figure

if TYPE_CHECKING:
    from mbctl.hardware.loop import RunSummary

__all__ = ["plot_run", "read_run_log"]

RUN_LOG_KEYS = ("columns", "t", "period", "compute", "q", "q_ref", "tau")  # what the figure reads


def read_run_log(log: str | Path | Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The arrays of a run log written by ``mbctl run --log`` (or :func:`mbctl.run_session`), from its
    path or from the mapping :func:`numpy.load` gives.

    Raises:
        DataError: Naming the file, if it cannot be read or is not such a log.
    """
    file = None if isinstance(log, Mapping) else Path(log)
    if file is not None:
        try:
            with np.load(file, allow_pickle=False) as npz:
                log = {key: npz[key] for key in npz.files}
        except (OSError, ValueError) as exc:
            raise DataError(f"cannot read the run log ({exc})", file=file) from None
    missing = [key for key in RUN_LOG_KEYS if key not in log]
    if missing:
        raise DataError(f"not a run log of mbctl run (no {', '.join(missing)})", file=file)
    return dict(log)


def plot_run(log: str | Path | Mapping[str, np.ndarray], path: str | Path, *, summary: RunSummary | None = None, title: str | None = None) -> Path:
    """Three panels of a closed-loop run against time t (s): the tracking error q - q_ref (mrad,
    mm), the torque commands (N·m, N) and the loop timing (period and compute time, µs; with the
    ``summary``, also the nominal period and its figures in the title). Returns ``path``.

    Args:
        log: The run log (``.npz`` path, or its arrays as :func:`numpy.load` gives them).
        summary: What :func:`mbctl.run_session` returned for the run.
        title: Default: the log file's name (``"closed-loop run"`` for arrays).

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
        DataError: Naming the log, if it is not a run log.
    """
    check_figure_path(path)
    data = read_run_log(log)
    title = title or (Path(log).name if not isinstance(log, Mapping) else "closed-loop run")
    t = data["t"]
    names = [c.split(".", 1)[1] for c in map(str, data["columns"]) if c.startswith("q.")]
    q, q_ref, tau = (np.atleast_2d(data[k].T).T for k in ("q", "q_ref", "tau"))
    fig = new_figure((8, 8))
    ax_e, ax_tau, ax_t = fig.subplots(3, 1, sharex=True)
    for i, name in enumerate(names):
        ax_e.plot(t, (q[:, i] - q_ref[:, i]) * 1e3, label=name, lw=1)
        ax_tau.plot(t, tau[:, i], label=name, lw=1)
    ax_e.set_ylabel("q - q_ref [mrad, mm]")
    ax_tau.set_ylabel("torque command [N·m, N]")
    ax_e.legend(loc="best", fontsize="small", ncol=min(len(names), 4))
    ax_t.plot(t, data["period"] * 1e6, lw=0.6, label="period")
    ax_t.plot(t, data["compute"] * 1e6, lw=0.6, label="compute")
    if summary is not None:
        ax_t.axhline(1e6 / summary.rate_hz, color="k", ls="--", lw=0.8)
        title = (
            f"{title}\n{summary.stop_reason}; overruns {summary.overruns}/{summary.cycles}, "
            f"period p99 {summary.period_p99_us:.0f} µs, compute p99 {summary.compute_p99_us:.0f} µs"
        )
    ax_t.set_ylabel("loop timing [µs]")
    ax_t.set_xlabel("t [s]")
    ax_t.legend(loc="best", fontsize="small")
    for ax in (ax_e, ax_tau, ax_t):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    return save_figure(fig, path)
