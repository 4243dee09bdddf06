"""Figures of a parameter study (``mbctl sweep``): every quantity against each varied parameter,
their histograms, and the percentile bands of the drive torques over time."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.errors import DataError, InputError
from mbctl.viz.figures import check_figure_path, grid, panels, save_figure

if TYPE_CHECKING:
    from mbctl.study.summary import Bands

__all__ = ["PLOT_LIMIT", "plot_sweep", "plot_sweep_histograms", "plot_sweep_scatter", "plot_torque_bands"]

PLOT_LIMIT = 12  # scatter figures: one per varied parameter, at most this many
BOOKKEEPING = ("run", "status", "reason", "compile_time_s", "wall_time_s")  # the table's columns that are not quantities


def plot_sweep(
    sweep: str | Path | Mapping[str, np.ndarray], out_dir: str | Path | None = None, *, title: str | None = None, bands: Bands | None = None
) -> list[Path]:
    """The figures ``mbctl sweep`` draws: ``scatter-<parameter>.png`` per varied parameter (the first
    :data:`PLOT_LIMIT`), ``histograms.png`` and, with torque bands, ``torque-bands.png``.

    Args:
        sweep: A sweep's output directory (its ``runs.parquet``; ``sweep.json`` names the robot and
            workflow for the titles, ``bands.npz`` gives the bands), or the table's columns
            (:func:`mbctl.study.summary.read_table`).
        out_dir: Where the figures go (default: the sweep's directory; needed for a table).
        title: What the titles start with (default: ``"<robot>: <workflow>"``, or ``"sweep"``).
        bands: Torque bands (:func:`mbctl.study.summary.torque_bands`; default: the directory's).

    Returns:
        The files written.

    Raises:
        InputError: Naming the directory or file, for a missing or unreadable table, no
            successful run, or no ``out_dir`` for a table.
    """
    from mbctl.study.summary import read_table

    directory = None if isinstance(sweep, Mapping) else Path(sweep)
    if directory is None:
        if out_dir is None:
            raise InputError("a table needs an output directory", field="out_dir")
        columns = dict(sweep)
    else:
        if not (directory / "runs.parquet").is_file():
            raise InputError("no sweep table here (runs.parquet)", file=directory)
        columns = read_table(directory / "runs.parquet")
    if "status" not in columns:
        raise DataError("not a sweep table (no status column)", file=directory)
    out = Path(out_dir) if out_dir is not None else directory
    if not out.is_dir():
        raise InputError("output directory does not exist", file=out)
    ok = int(np.sum(columns["status"] == "ok"))
    if ok == 0:
        raise DataError("no successful run to plot", file=directory)
    if directory is not None:
        if title is None and (directory / "sweep.json").is_file():
            manifest = json.loads((directory / "sweep.json").read_text())
            title = f"{Path(manifest['robot']).stem}: {manifest['workflow']}"
        if bands is None and (directory / "bands.npz").is_file():
            bands = _read_bands(directory / "bands.npz", runs=ok)
    title = title or "sweep"
    parameters = [c.removeprefix("param.") for c in columns if c.startswith("param.")]
    quantities = [c for c in columns if c not in BOOKKEEPING and not c.startswith("param.")]
    written = []
    for parameter in parameters[:PLOT_LIMIT]:
        target = out / f"scatter-{parameter}.png"
        written.append(plot_sweep_scatter(columns, parameter, quantities, target, title=f"{title} quantities against {parameter} ({ok} runs)"))
    written.append(plot_sweep_histograms(columns, quantities, out / "histograms.png", title=f"{title} quantities ({ok} runs)"))
    if bands is not None:
        name = title.split(":", 1)[0]
        bands_title = f"{name}: drive torque percentiles over {bands.runs} runs (N·m; N for prismatic joints)"
        written.append(plot_torque_bands(bands, out / "torque-bands.png", title=bands_title))
    return written


def _read_bands(path: Path, runs: int) -> Bands:
    """The torque bands ``mbctl sweep`` kept in ``bands.npz`` (taken over ``runs`` successful runs)."""
    from mbctl.study.summary import Bands

    with np.load(path, allow_pickle=False) as z:
        return Bands(t=z["t"], joints=tuple(str(j) for j in z["joints"]), percentiles=tuple(float(p) for p in z["percentiles"]), values=z["values"], runs=runs)


def _by_kind(quantities: Sequence[str]) -> dict[str, list[str]]:
    """Quantity names grouped by kind (``tau_peak.j1`` -> ``tau_peak``), in first-seen order."""
    groups: dict[str, list[str]] = {}
    for q in quantities:
        groups.setdefault(q.split(".", 1)[0], []).append(q)
    return groups


def plot_sweep_scatter(columns: Mapping[str, np.ndarray], parameter: str, quantities: Sequence[str], path: str | Path, *, title: str = "") -> Path:
    """Every quantity of interest against the varied ``parameter`` (successful runs of a sweep table):
    one panel per kind of quantity, one colour per joint (or fitted parameter), in the table's units.
    Returns ``path``."""
    check_figure_path(path)
    ok = columns["status"] == "ok"
    x = np.asarray(columns[f"param.{parameter}"], dtype=float)[ok]
    groups = _by_kind(quantities)
    fig, axes = panels(len(groups), title)
    for ax, (kind, names) in zip(axes, groups.items()):
        for k, q in enumerate(names):
            label = q.split(".", 1)[1] if "." in q else None
            ax.scatter(x, np.asarray(columns[q], dtype=float)[ok], s=5, alpha=0.6, color=f"C{k % 10}", linewidths=0, label=label)
        ax.set_xlabel(parameter, fontsize="small")
        ax.set_ylabel(kind, fontsize="small")
        ax.tick_params(labelsize="small")
        ax.grid(alpha=0.3)
        if len(names) > 1:
            ax.legend(fontsize="x-small", markerscale=2, loc="upper left", framealpha=0.6)
    return save_figure(fig, path)


def plot_sweep_histograms(columns: Mapping[str, np.ndarray], quantities: Sequence[str], path: str | Path, *, title: str = "") -> Path:
    """Histograms of every quantity of interest over the successful runs of a sweep table: one panel
    per kind. Returns ``path``."""
    check_figure_path(path)
    ok = columns["status"] == "ok"
    groups = _by_kind(quantities)
    fig, axes = panels(len(groups), title)
    for ax, (kind, names) in zip(axes, groups.items()):
        for k, q in enumerate(names):
            x = np.asarray(columns[q], dtype=float)[ok]
            x = x[np.isfinite(x)]
            label = q.split(".", 1)[1] if "." in q else None
            ax.hist(x, bins=min(50, max(5, int(np.sqrt(x.size)))), color=f"C{k % 10}", histtype="step", label=label)
        ax.set_xlabel(kind, fontsize="small")
        ax.tick_params(labelsize="small")
        ax.grid(alpha=0.3)
        if len(names) > 1:
            ax.legend(fontsize="x-small", loc="upper right", framealpha=0.6)
    return save_figure(fig, path)


def plot_torque_bands(bands: Bands, path: str | Path, *, title: str = "drive torque percentiles") -> Path:
    """Per joint: the median torque (N·m, N) over time (s) and the bands between symmetric
    percentiles (5-95, 25-75). Returns ``path``."""
    check_figure_path(path)
    fig, axes = grid(len(bands.joints), title)
    p = list(bands.percentiles)
    for k, (ax, name) in enumerate(zip(axes, bands.joints)):
        v = bands.values[:, :, k]
        for lo, hi, alpha in ((5.0, 95.0, 0.25), (25.0, 75.0, 0.45)):
            if lo in p and hi in p:
                ax.fill_between(bands.t, v[p.index(lo)], v[p.index(hi)], color="C0", alpha=alpha, lw=0, label=f"{lo:g}-{hi:g} %")
        if 50.0 in p:
            ax.plot(bands.t, v[p.index(50.0)], color="C0", lw=1.2, label="median")
        ax.set_ylabel(name, fontsize="small")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize="small")
    return save_figure(fig, path)
