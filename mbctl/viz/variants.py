"""Figures comparing runs of one robot: the structural variants of ``mbctl variants`` (rigid or
flexible base and links, with or without friction) and the distribution modes of ``mbctl
flexfeed`` (rigid-model torques fed into flexible levers)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from mbctl.fileio import check_output
from mbctl.viz.figures import grid, new_figure, save_figure
from mbctl.viz.simulation import FLOOR

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from mbctl.ctrl.flexible_feedforward import FlexFeedResult
    from mbctl.dynamics.simulation.variants import Variant, VariantRun

__all__ = ["FLEXFEED_PLOTS", "VARIANT_PLOTS", "plot_flexfeed", "plot_variants"]


#: File name -> what it shows, one PNG per quantity.
VARIANT_PLOTS = {
    "paths.png": "tool paths against the programmed path",
    "joints.png": "joint coordinates (elastic ones excluded)",
    "forces.png": "joint force magnitudes |f|",
    "rms.png": "RMS of |f| per joint (bar chart)",
    "violation.png": "constraint violation (log scale)",
    "deflection.png": "flexible links: deflection from the chord (written when a variant has one)",
}


def _variant_style(variant: Variant) -> dict:
    """Colour by structure (base, link), solid without friction, dashed with it."""
    colour = {("rigid", "rigid"): "C0", ("rigid", "flexible"): "C1", ("flexible", "rigid"): "C2", ("flexible", "flexible"): "C3"}
    return {
        "color": colour[(variant.support, variant.links)],
        "ls": "-" if variant.friction == "none" else "--",
        "lw": 1.0,
        "label": variant.label,
    }


def plot_variants(runs: Sequence[VariantRun], directory: str | Path, *, title: str | None = None) -> list[Path]:
    """The comparison figures of ``mbctl variants`` (:data:`VARIANT_PLOTS`) in ``directory``: tool
    paths (m), joint coordinates (rad, m), joint force magnitudes |f| (N) and their RMS, the
    constraint violation (m), and the flexible links' deflection (mm or µm) when a variant has them.

    Args:
        runs: One :class:`~mbctl.dynamics.simulation.variants.VariantRun` per variant
            (:func:`mbctl.dynamics.simulation.variants.run_variant`).
        title: Default: the robot's name.

    Returns:
        The files written.

    Raises:
        InputError: Naming the file, if ``directory`` does not exist.
    """
    directory = Path(directory)
    for name in VARIANT_PLOTS:
        check_output(directory / name)
    title = title or runs[0].robot.name
    written = []
    joints = runs[0].joints

    # tool paths, in the plane of the two coordinates the target moves most in
    fig = new_figure((7.5, 6.5))
    ax = fig.subplots()
    ref = runs[0]
    if ref.tool is not None and ref.tool.shape[1] >= 2:
        spread = np.ptp(ref.tool_target, axis=0)
        a, b = sorted(np.argsort(spread)[-2:])
        ax.plot(ref.tool_target[:, a], ref.tool_target[:, b], "k:", lw=1.5, label="programmed path")
        for run in runs:
            ax.plot(run.tool[:, a], run.tool[:, b], **_variant_style(run.variant))
            ax.plot(run.tool[0, a], run.tool[0, b], "o", color=_variant_style(run.variant)["color"], ms=3)
        ax.set_xlabel(f"{ref.tool_axes[a]} [m]")
        ax.set_ylabel(f"{ref.tool_axes[b]} [m]")
        ax.set_aspect("equal", adjustable="datalim")
    ax.set_title("tool path (dots: start)")
    ax.grid(alpha=0.3)
    if ax.lines:  # no tool: an empty panel, no legend
        ax.legend(loc="best", fontsize="x-small")
    fig.suptitle(title)
    written.append(directory / "paths.png")
    save_figure(fig, written[-1])

    for name, quantity, ylabel in (
        ("joints.png", "q", "q [rad, m]"),
        ("forces.png", "joint_force", "|f| [N]"),
    ):
        fig, axes = grid(len(joints), f"{title}: {VARIANT_PLOTS[name]}")
        for i, (ax, joint) in enumerate(zip(axes, joints)):
            for run in runs:
                ax.plot(run.result.t, getattr(run, quantity)[:, i], **_variant_style(run.variant))
            ax.set_ylabel(f"{joint}: {ylabel}")
            ax.grid(alpha=0.3)
        axes[0].legend(loc="best", fontsize="x-small")
        written.append(directory / name)
        save_figure(fig, written[-1])

    fig = new_figure((max(7.0, 1.6 * len(joints)), 4.8))
    ax = fig.subplots()
    width = 0.8 / len(runs)
    x = np.arange(len(joints))
    for k, run in enumerate(runs):
        style = _variant_style(run.variant)
        ax.bar(
            x + (k - (len(runs) - 1) / 2) * width,
            run.joint_force_rms,
            width,
            color=style["color"],
            hatch="//" if run.variant.friction != "none" else None,
            edgecolor="white" if run.variant.friction != "none" else style["color"],
            label=style["label"],
        )
    ax.set_xticks(x, joints)
    ax.set_ylabel("RMS of |f| [N]")
    ax.set_title(f"{title}: {VARIANT_PLOTS['rms.png']}")
    ax.grid(alpha=0.3, axis="y")
    ax.legend(loc="best", fontsize="x-small")
    written.append(directory / "rms.png")
    save_figure(fig, written[-1])

    fig = new_figure((8, 5))
    ax = fig.subplots()
    for run in runs:
        ax.semilogy(run.result.t, np.maximum(run.violation, FLOOR), **_variant_style(run.variant))
    ax.set_xlabel("t [s]")
    ax.set_ylabel("max |Phi| [m]")
    ax.set_title(f"{title}: {VARIANT_PLOTS['violation.png']}")
    ax.grid(alpha=0.3, which="both")
    ax.legend(loc="best", fontsize="x-small")
    written.append(directory / "violation.png")
    save_figure(fig, written[-1])

    flexible = [run for run in runs if run.robot.rfe_links]
    if flexible:
        written.append(directory / "deflection.png")
        _plot_deflection(flexible, written[-1], title)
    return written


def _plot_deflection(runs: Sequence[VariantRun], path: Path, title: str) -> None:
    """Per flexible link: the largest distance of its elastic line from the chord over
    time for every run (mm), and the shape at five instants for the first run."""
    from mbctl.dynamics.flexible.rfe import chord_deflection

    links = [r.spec.link for r in runs[0].robot.rfe_links]
    fig = new_figure((11, 3.6 * len(links) + 0.6))
    axes = fig.subplots(len(links), 2, squeeze=False)
    for (ax_t, ax_s), link in zip(axes, links):
        found = [(run, chord_deflection(run.robot, link, run.result.q)) for run in runs]
        scale, unit = (1e3, "mm") if max(d.w.max() for _, d in found) >= 1e-4 else (1e6, "µm")
        for run, d in found:
            ax_t.plot(run.result.t, scale * d.peak, **_variant_style(run.variant))
            if run is runs[0]:
                t = run.result.t
                for tk in np.linspace(t[0], t[-1], 5):
                    i = int(np.argmin(np.abs(t - tk)))
                    ax_s.plot(d.s, scale * d.w[i], "o-", ms=3, label=f"t = {t[i]:.2f} s")
                ax_s.set_title(f"{link}: shape, {run.variant.label}", fontsize="small")
        ax_t.set_xlabel("t [s]")
        ax_t.set_ylabel(f"{link}: max distance from chord [{unit}]")
        ax_t.grid(alpha=0.3)
        ax_t.legend(loc="best", fontsize="x-small")
        ax_s.set_xlabel("position along the link [m]")
        ax_s.set_ylabel(f"distance from chord [{unit}]")
        ax_s.grid(alpha=0.3)
        ax_s.legend(loc="best", fontsize="x-small")
    fig.suptitle(f"{title}: {VARIANT_PLOTS['deflection.png'].split(' (')[0]}")
    save_figure(fig, path)


FLEXFEED_PLOTS = ("flexfeed_path.png", "flexfeed_levers.png", "flexfeed_tips.png", "flexfeed_rfe.png")
_MODE_COLORS = {"non-redundant": "tab:red", "min-internal-force": "tab:blue", "min-power": "tab:green", "min-norm": "tab:purple"}


def plot_flexfeed(result: FlexFeedResult, directory: str | Path) -> list[Path]:
    """The figures of ``mbctl flexfeed`` (:data:`FLEXFEED_PLOTS`) in ``directory``: the end-effector
    path and its error (mm), the lever angles' error (mrad), rates (rad/s) and accelerations
    (rad/s²), the levers' tip deformation (µm, mm, mrad) and, with a cross-check, FEM against RFE.

    Args:
        result: What :func:`mbctl.ctrl.flexible_feedforward.flexible_feedforward` returned.

    Returns:
        The files written (the RFE figure only with a cross-check).

    Raises:
        InputError: Naming the file, if ``directory`` does not exist.
    """
    directory = Path(directory)
    for name in FLEXFEED_PLOTS:
        check_output(directory / name)
    written = []
    t = result.t
    color = lambda mode: _MODE_COLORS.get(mode, None)  # noqa: E731

    fig = new_figure((11.0, 6.5))
    layout = fig.add_gridspec(2, 2)
    ax = fig.add_subplot(layout[:, 0])
    ax.plot(result.p_rigid[:, 0] * 1e3, result.p_rigid[:, 1] * 1e3, "k:", lw=1.5, label="rigid (programmed path)")
    for mode, r in result.runs.items():
        ax.plot(r.p[:, 0] * 1e3, r.p[:, 1] * 1e3, color=color(mode), lw=1, label=mode)
    ax.set_xlabel("x [mm]")
    ax.set_ylabel("y [mm]")
    ax.set_aspect("equal", adjustable="datalim")
    ax.set_title("end-effector path")
    ax.grid(alpha=0.3)
    ax.legend(fontsize="x-small")
    for i, axis in enumerate("xy"):
        ax = fig.add_subplot(layout[i, 1])
        for mode, r in result.runs.items():
            ax.plot(t, r.error[:, i] * 1e3, color=color(mode), lw=1, label=mode)
        ax.set_ylabel(f"{axis} error [mm]")
        ax.grid(alpha=0.3)
        if i == 1:
            ax.set_xlabel("t [s]")
    fig.suptitle(f"{result.name}: rigid-model torques fed forward into the flexible levers")
    save_figure(fig, directory / FLEXFEED_PLOTS[0])
    written.append(directory / FLEXFEED_PLOTS[0])

    def mode_grid(rows: Sequence[str], height: float, columns: Sequence[tuple[str, float, Callable[[Any, int], np.ndarray]]]) -> tuple[Figure, np.ndarray]:
        """One panel per row and column: ``get(run, row) * scale`` of every mode against time."""
        fig = new_figure((13.0, height * len(rows) + 0.8))
        axes = fig.subplots(len(rows), len(columns), sharex=True, squeeze=False)
        for i, row in enumerate(rows):
            for c, (label, scale, get) in enumerate(columns):
                for mode, r in result.runs.items():
                    axes[i, c].plot(t, get(r, i) * scale, color=color(mode), lw=0.8, label=mode)
                axes[i, c].set_ylabel(f"{row}\n{label}", fontsize="small")
                axes[i, c].grid(alpha=0.3)
        for c in range(len(columns)):
            axes[-1, c].set_xlabel("t [s]")
        axes[0, 0].legend(fontsize="x-small")
        return fig, axes

    joints = result.lever_joints
    fig, axes = mode_grid(
        [f"lever {i + 1} ({joint})" for i, joint in enumerate(joints)],
        1.9,
        [
            ("angle error [mrad]", 1e3, lambda r, i: r.angle_error[:, i]),
            ("ω [rad/s]", 1.0, lambda r, i: r.omega[:, i]),
            ("α [rad/s²]", 1.0, lambda r, i: r.alpha[:, i]),
        ],
    )
    for i in range(len(joints)):
        # the torque step at t = 0 gives the flexible levers' root sections a spike of
        # acceleration (high modes) that would flatten the rest: scale to t > 5 ms
        late = t > min(5e-3, t[-1] / 2)
        values = np.concatenate([r.alpha[late, i] for r in result.runs.values()])
        if values.size and np.ptp(values) > 0:
            pad = 0.08 * np.ptp(values)
            axes[i, 2].set_ylim(values.min() - pad, values.max() + pad)
    fig.suptitle(f"{result.name}: lever frame angles (error against the rigid model), rates and accelerations (scaled to t > 5 ms)")
    save_figure(fig, directory / FLEXFEED_PLOTS[1])
    written.append(directory / FLEXFEED_PLOTS[1])

    links = result.links
    fig, _ = mode_grid(
        [f"{link} tip" for link in links],
        2.3,
        [
            (label, scale, lambda r, i, c=c: r.tip[:, i, c])
            for c, (label, scale) in enumerate((("axial u [µm]", 1e6), ("transverse v [mm]", 1e3), ("elastic angle [mrad]", 1e3)))
        ],
    )
    fig.suptitle(f"{result.name}: tip deformation of the flexible levers (floating frame)")
    save_figure(fig, directory / FLEXFEED_PLOTS[2])
    written.append(directory / FLEXFEED_PLOTS[2])

    if result.rfe is not None and result.rfe.mode in result.runs:
        c, fem = result.rfe, result.runs[result.rfe.mode]
        n = len(c.error)
        fig = new_figure((11.0, 2.2 * (len(links) + 1) + 0.8))
        axes = fig.subplots(len(links) + 1, 1, sharex=True, squeeze=False)[:, 0]
        for i, link in enumerate(links):
            axes[i].plot(t[:n], fem.tip[:n, i, 1] * 1e3, color="tab:blue", lw=1, label=f"FEM ({fem.run.integrator})")
            axes[i].plot(t[:n], c.tip[:, i, 1] * 1e3, "--", color="tab:orange", lw=1, label=f"RFE, {c.elements} segments")
            axes[i].set_ylabel(f"{link} tip v [mm]", fontsize="small")
            axes[i].grid(alpha=0.3)
        axes[-1].plot(t[:n], np.linalg.norm(fem.error[:n], axis=1) * 1e3, color="tab:blue", lw=1, label="FEM")
        axes[-1].plot(t[:n], np.linalg.norm(c.error, axis=1) * 1e3, "--", color="tab:orange", lw=1, label="RFE")
        axes[-1].set_ylabel("|EE error| [mm]", fontsize="small")
        axes[-1].set_xlabel("t [s]")
        axes[-1].grid(alpha=0.3)
        axes[0].legend(fontsize="x-small")
        fig.suptitle(f"{result.name}: FEM and RFE levers under the same torques (mode {c.mode})")
        save_figure(fig, directory / FLEXFEED_PLOTS[3])
        written.append(directory / FLEXFEED_PLOTS[3])
    return written
