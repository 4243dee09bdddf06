"""Figures of trajectories and feed-forward torques: joint motion, drive torques with their
friction part, torque distributions of closed chains, overlays of torque tables."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.errors import InputError
from mbctl.viz.figures import check_figure_path, grid, new_figure, save_figure

if TYPE_CHECKING:
    from mbctl.ctrl.closed_chain import ClosedChainTorques
    from mbctl.ctrl.feedforward import FeedforwardResult
    from mbctl.ctrl.trajectory import Trajectory
    from mbctl.fileio import CsvTable

__all__ = ["plot_feedforward", "plot_redundancy", "plot_torque_tables", "plot_trajectory"]


def plot_trajectory(traj: Trajectory, path: str | Path, *, title: str = "trajectory") -> Path:
    """Positions q (rad, m), velocities dq (rad/s, m/s) and accelerations ddq (rad/s², m/s²) of
    every joint against time t (s), three panels. Returns ``path``.

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    fig = new_figure((7, 7))
    axes = fig.subplots(3, 1, sharex=True)
    for ax, data, label in zip(axes, (traj.q, traj.dq, traj.ddq), ("q [rad, m]", "dq [rad/s, m/s]", "ddq [rad/s², m/s²]")):
        for i, name in enumerate(traj.joint_names):
            ax.plot(traj.t, data[:, i], label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize="small", ncol=2)
    axes[-1].set_xlabel("t [s]")
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_feedforward(ff: FeedforwardResult, path: str | Path, *, title: str | None = None) -> Path:
    """One panel per actuated joint: the drive torque ``tau`` and its friction part against
    time t (s), in N·m (N for prismatic joints), with the effort limit drawn where the peak
    comes within half of it. Returns ``path``.

    Args:
        title: Default: ``"<robot>: feed-forward torques"``.

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    joints = [j for j in ff.robot.joints if j.actuated]
    fig, axes = grid(len(joints), title or f"{ff.robot.name}: feed-forward torques")
    t = ff.trajectory.t
    for ax, j in zip(axes, joints):
        unit = "N·m" if j.kind == "revolute" else "N"
        tau = ff.dynamics.tau[:, j.idx_v]
        ax.plot(t, tau, label="total", color="C0")
        ax.plot(t, ff.dynamics.tau_friction[:, j.idx_v], label="friction", color="C3", lw=1)
        peak = np.abs(tau).max()
        if math.isfinite(j.limits.effort) and peak > 0.5 * j.limits.effort:
            for sign in (-1, 1):
                ax.axhline(sign * j.limits.effort, color="k", ls="--", lw=0.8)
        ax.set_ylabel(f"{j.name} [{unit}]")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize="small")
    return save_figure(fig, path)


def plot_redundancy(result: ClosedChainTorques, path: str | Path, *, title: str = "drive torques by distribution mode") -> Path:
    """Left column: each drive's torque (N·m) in every distribution mode of a closed chain
    (:func:`mbctl.ctrl.closed_chain.closed_chain_feedforward`); right column: the norm of the
    passive-joint reaction forces (N) and of the drive powers (W) in every mode; the chosen
    mode drawn thicker. Returns ``path``.

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    joints = result.chosen.joints
    rows = max(len(joints), 2)
    fig = new_figure((12, 2.2 * rows + 0.8))
    axes = fig.subplots(rows, 2, sharex=True, squeeze=False)
    left, right = axes[: len(joints), 0], axes[:2, 1]
    for ax in [*axes[len(joints) :, 0], *axes[2:, 1]]:
        ax.set_visible(False)
    for mode, d in result.modes.items():
        style = {"label": mode, "lw": 2.0 if mode == result.mode else 1.2}
        for i, ax in enumerate(left):
            ax.plot(d.t, d.tau[:, i], **style)
        right[0].plot(d.t, d.internal_force, **style)
        right[1].plot(d.t, d.power_norm, **style)
    for ax, name in zip(left, joints):
        ax.set_ylabel(f"tau.{name} [N·m]")
    right[0].set_ylabel("passive-joint forces |F| [N]")
    right[1].set_ylabel("drive powers |P| [W]")
    for ax in (*left, *right):
        ax.grid(alpha=0.3)
    left[-1].set_xlabel("t [s]")
    right[-1].set_xlabel("t [s]")
    right[1].xaxis.set_tick_params(labelbottom=True)
    left[0].legend(loc="best", fontsize="small")
    fig.suptitle(title)
    return save_figure(fig, path)


def plot_torque_tables(tables: Sequence[CsvTable], labels: Sequence[str], path: str | Path, *, title: str = "drive torques") -> Path:
    """Overlay the ``tau.<joint>`` columns (N·m or N) of several torque tables (:func:`mbctl.fileio.read_csv`
    of what ``mbctl feedforward`` writes) against ``t`` (s), one panel per joint shared by all. Returns ``path``.

    Raises:
        InputError: Naming ``path`` for a bad suffix; naming the first table if the tables share no
            ``tau.`` column or the labels do not match the tables.
    """
    check_figure_path(path)
    if len(labels) != len(tables):
        raise InputError(f"{len(labels)} labels for {len(tables)} tables", field="labels")
    names = [c for c in tables[0].header if c.startswith("tau.")]
    names = [c for c in names if all(tb.has(c) for tb in tables)]
    if not names:
        raise InputError("the torque files share no tau.<joint> column", file=tables[0].path)
    fig, axes = grid(len(names), title)
    for ax, col in zip(axes, names):
        for tb, label in zip(tables, labels):
            ax.plot(tb.column("t"), tb.column(col), label=label)
        ax.set_ylabel(f"{col.removeprefix('tau.')} [N·m or N]")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize="small")
    return save_figure(fig, path)
