"""Figures for the command line: torques along a trajectory, trajectories, comparisons.

Uses matplotlib's object API (no pyplot state, no display needed) and writes files
atomically.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.errors import InputError
from mbctl.fileio import CsvTable, atomic_output, check_output

if TYPE_CHECKING:  # matplotlib and the result types load only when a figure is drawn
    from matplotlib.figure import Figure

    from mbctl.ctrl.closed_chain import ClosedChainTorques
    from mbctl.ctrl.feedforward import FeedforwardResult
    from mbctl.ctrl.trajectory import Trajectory
    from mbctl.dynamics.constraints.reactions import Reactions
    from mbctl.dynamics.model.robot import RobotModel
    from mbctl.dynamics.simulation.integrate import SimulationResult
    from mbctl.hardware.loop import RunSummary
    from mbctl.identification.report import IdentificationResult
    from mbctl.identification.servo import ServoFit, ServoLog
    from mbctl.study.summary import Bands

__all__ = [
    "FORMATS",
    "VARIANT_PLOTS",
    "plot_arm_fit",
    "plot_feedforward",
    "plot_identification",
    "plot_reactions",
    "plot_redundancy",
    "plot_run",
    "plot_servo_fit",
    "plot_simulation",
    "plot_sweep_histograms",
    "plot_sweep_scatter",
    "plot_torque_bands",
    "plot_trajectory",
    "plot_torque_tables",
    "plot_variants",
    "save_figure",
    "FLEXFEED_PLOTS",
    "plot_flexfeed",
]

FORMATS = (".png", ".pdf", ".svg")


def _figure(figsize: tuple[float, float]) -> Figure:
    """A new figure with constrained layout (object API: no pyplot state, no display)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def save_figure(fig: Figure, path: str | Path) -> None:
    """Save a figure atomically; the format follows the file suffix.

    Raises:
        InputError: For a suffix other than .png, .pdf or .svg.
    """
    with atomic_output(check_output(path, FORMATS)) as tmp:
        fig.savefig(tmp, dpi=120)


def _grid(n: int, title: str) -> tuple[Figure, list]:
    cols = 1 if n <= 3 else 2
    rows = math.ceil(n / cols)
    fig = _figure((6.5 * cols, 2.2 * rows + 0.8))
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    for i, ax in enumerate(axes[:n]):
        if i + cols >= n:  # lowest visible panel of its column
            ax.set_xlabel("t [s]")
    fig.suptitle(title)
    return fig, axes[:n]


def plot_feedforward(ff: FeedforwardResult, path: str | Path, title: str | None = None) -> None:
    """One panel per actuated joint: total drive torque and its friction part vs time."""
    joints = [j for j in ff.robot.joints if j.actuated]
    fig, axes = _grid(len(joints), title or f"{ff.robot.name}: feed-forward torques")
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
    save_figure(fig, path)


def plot_arm_fit(logs: Sequence, predicted: Sequence[np.ndarray], path: str | Path) -> None:
    """Measured (filtered) against predicted joint torques, one panel per joint, logs one after another."""
    names = logs[0].joint_names
    fig, axes = _grid(len(names), "measured (grey) and identified model (colour) torques")
    for log, tau in zip(logs, predicted):
        for c, ax in enumerate(axes):
            ax.plot(log.t, log.tau[:, c], color="0.6", lw=1.0)
            ax.plot(log.t, tau[:, c], lw=0.9)
            ax.set_ylabel(f"{names[c]} (N·m)")
    for ax in axes[-2:]:
        ax.set_xlabel("t (s)")
    save_figure(fig, path)


def plot_trajectory(traj: Trajectory, path: str | Path, title: str = "trajectory") -> None:
    """Positions, velocities and accelerations of every joint (three panels)."""
    fig = _figure((7, 7))
    axes = fig.subplots(3, 1, sharex=True)
    for ax, data, label in zip(axes, (traj.q, traj.dq, traj.ddq), ("q [rad, m]", "dq [rad/s, m/s]", "ddq [rad/s², m/s²]")):
        for i, name in enumerate(traj.joint_names):
            ax.plot(traj.t, data[:, i], label=name)
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize="small", ncol=2)
    axes[-1].set_xlabel("t [s]")
    fig.suptitle(title)
    save_figure(fig, path)


def plot_torque_tables(tables: Sequence[CsvTable], labels: Sequence[str], path: str | Path, title: str) -> None:
    """Overlay the ``tau.<joint>`` columns of several torque CSVs, one panel per joint.

    Raises:
        InputError: If the files share no ``tau.`` column.
    """
    names = [c for c in tables[0].header if c.startswith("tau.")]
    names = [c for c in names if all(tb.has(c) for tb in tables)]
    if not names:
        raise InputError("the torque files share no tau.<joint> column", file=tables[0].path)
    fig, axes = _grid(len(names), title)
    for ax, col in zip(axes, names):
        for tb, label in zip(tables, labels):
            ax.plot(tb.column("t"), tb.column(col), label=label)
        ax.set_ylabel(f"{col.removeprefix('tau.')} [N·m or N]")
        ax.grid(alpha=0.3)
    axes[0].legend(loc="best", fontsize="small")
    save_figure(fig, path)


def plot_run(log: Mapping[str, np.ndarray], summary: RunSummary, path: str | Path, title: str) -> None:
    """Tracking error, torque commands and loop timing of a closed-loop run (three panels)."""
    t = log["t"]
    names = [c.split(".", 1)[1] for c in log["columns"] if str(c).startswith("q.")]
    q, q_ref, tau = (np.atleast_2d(log[k].T).T for k in ("q", "q_ref", "tau"))
    fig = _figure((8, 8))
    ax_e, ax_tau, ax_t = fig.subplots(3, 1, sharex=True)
    for i, name in enumerate(names):
        ax_e.plot(t, (q[:, i] - q_ref[:, i]) * 1e3, label=name, lw=1)
        ax_tau.plot(t, tau[:, i], label=name, lw=1)
    ax_e.set_ylabel("q - q_ref [mrad, mm]")
    ax_tau.set_ylabel("torque command [N·m, N]")
    ax_e.legend(loc="best", fontsize="small", ncol=min(len(names), 4))
    ax_t.plot(t, log["period"] * 1e6, lw=0.6, label="period")
    ax_t.plot(t, log["compute"] * 1e6, lw=0.6, label="compute")
    ax_t.axhline(1e6 / summary.rate_hz, color="k", ls="--", lw=0.8)
    ax_t.set_ylabel("loop timing [µs]")
    ax_t.set_xlabel("t [s]")
    ax_t.legend(loc="best", fontsize="small")
    for ax in (ax_e, ax_tau, ax_t):
        ax.grid(alpha=0.3)
    fig.suptitle(
        f"{title}\n{summary.stop_reason}; overruns {summary.overruns}/{summary.cycles}, "
        f"period p99 {summary.period_p99_us:.0f} µs, compute p99 {summary.compute_p99_us:.0f} µs"
    )
    save_figure(fig, path)


def plot_simulation(
    run: SimulationResult,
    path: str | Path,
    title: str,
    tool_rows: Sequence[int] = (),
    tool_label: str = "tool",
    joints: Sequence[str] | None = None,
) -> None:
    """Four panels: joint coordinates, tool path against its target, constraint
    violation |Phi| (log scale) and constraint forces.

    Args:
        tool_rows: Constraint rows (one to three) of a frame-position constraint whose
            actual value ``target + Phi`` is drawn against the target; a path in the
            plane of the two rows whose targets move most, or against time for a single row.
        joints: Joints drawn in the coordinate and force panels (default: all; elastic
            robots pass their non-elastic joints).
    """
    fig = _figure((12, 8))
    (ax_q, ax_path), (ax_phi, ax_f) = fig.subplots(2, 2)
    shown = [i for i, name in enumerate(run.joint_names) if joints is None or name in joints]
    for i in shown:
        name = run.joint_names[i]
        ax_q.plot(run.t, run.q[:, i], label=name)
    ax_q.set_xlabel("t [s]")
    ax_q.set_ylabel("q [rad, m]")
    ax_q.set_title("joint coordinates")
    ax_q.legend(loc="best", fontsize="small")

    rows = list(tool_rows)
    if len(rows) > 2:
        spread = np.ptp(run.target[:, rows], axis=0)
        rows = [rows[i] for i in sorted(np.argsort(spread)[-2:])]
    if rows:
        actual = run.target[:, rows] + run.phi[:, rows]
        names = [run.row_names[r].rsplit(".", 1)[-1] for r in rows]
        if len(rows) >= 2:
            ax_path.plot(run.target[:, rows[0]], run.target[:, rows[1]], "k--", lw=1, label="target")
            ax_path.plot(actual[:, 0], actual[:, 1], color="C0", lw=1.2, label=tool_label)
            ax_path.plot(actual[0, 0], actual[0, 1], "o", color="C0", ms=4, label="start")
            ax_path.set_xlabel(f"{names[0]} [m]")
            ax_path.set_ylabel(f"{names[1]} [m]")
            ax_path.set_aspect("equal", adjustable="datalim")
        else:
            ax_path.plot(run.t, run.target[:, rows[0]], "k--", lw=1, label="target")
            ax_path.plot(run.t, actual[:, 0], color="C0", label=tool_label)
            ax_path.set_xlabel("t [s]")
            ax_path.set_ylabel(f"{names[0]} [m]")
        ax_path.legend(loc="best", fontsize="small")
        ax_path.set_title(f"{tool_label} path against target")
    else:  # no tool path: show how far the constraint Jacobian is from singular
        ax_path.semilogy(run.t, run.sigma_ratio, color="C0")
        ax_path.set_xlabel("t [s]")
        ax_path.set_ylabel("s_r / s_1 of the constraint Jacobian")
        ax_path.set_title("distance from a singular configuration")
        ax_path.grid(alpha=0.3)

    floor = 1e-16  # below double-precision resolution of positions of order 1
    for i, name in enumerate(run.row_names):
        values = np.abs(run.phi[:, i]) if not np.isnan(run.phi[:, i]).all() else np.abs(run.dphi[:, i])
        ax_phi.semilogy(run.t, np.maximum(values, floor), label=name, lw=1)
    ax_phi.set_xlabel("t [s]")
    ax_phi.set_ylabel("|Phi| [m, rad]  (|dPsi| for velocity rows)")
    ax_phi.set_title("constraint violation")
    if run.row_names:
        ax_phi.legend(loc="best", fontsize="small")

    for i in shown:
        ax_f.plot(run.t, run.tau_c[:, i], label=run.joint_names[i], lw=1)
    ax_f.set_xlabel("t [s]")
    ax_f.set_ylabel("Q_c [N·m, N]")
    ax_f.set_title("generalized constraint forces")
    ax_f.legend(loc="best", fontsize="small")
    for ax in (ax_q, ax_phi, ax_f):
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    save_figure(fig, path)


def plot_reactions(
    run: SimulationResult, reactions: Reactions, robot: RobotModel, path: str | Path, title: str, paths: Sequence | None = None
) -> None:
    """Four panels of a closed-chain run: the passive joint coordinates (or, given
    ``paths``, traces with ``.name`` and ``.points`` (N, 3) in m, the bodies' paths in the
    world x-y plane); the force each
    cut joint (loop constraint) transmits, ``|f|`` of its wrench on frame B's body; the
    reaction force ``|f|`` of every driven joint (its bearing load), or the multipliers of
    velocity-level rows where no joint is driven; the drive torques (programmed-constraint
    force on the driven joints) with their friction part, or the violation where none is."""
    fig = _figure((12, 8))
    (ax_q, ax_cut), (ax_r, ax_tau) = fig.subplots(2, 2, sharex=True)
    driven = [j for j in robot.joints if j.actuated]
    passive = [j for j in robot.joints if not j.actuated] or list(robot.joints)
    if paths:
        ax_q.remove()
        ax_q = fig.add_subplot(2, 2, 1)
        for trace in paths:
            ax_q.plot(trace.points[:, 0], trace.points[:, 1], label=trace.name, lw=1)
            ax_q.plot(trace.points[0, 0], trace.points[0, 1], "o", color=ax_q.lines[-1].get_color(), ms=3)
        ax_q.set_xlabel("x [m]")
        ax_q.set_ylabel("y [m]")
        ax_q.set_aspect("equal", adjustable="datalim")
        ax_q.set_title("paths of the bodies (dots: start)")
    else:
        for j in passive:
            ax_q.plot(run.t, run.q[:, j.idx_v], label=j.name, lw=1)
        ax_q.set_ylabel("q [rad, m]")
        ax_q.set_title("passive joint coordinates" if driven else "coordinates")
    ax_q.legend(loc="best", fontsize="small")
    for i, name in enumerate(reactions.loop_names):
        ax_cut.plot(run.t, np.linalg.norm(reactions.loop_wrench[:, i, :3], axis=1), label=name, lw=1)
    ax_cut.set_ylabel("|f| [N]")
    ax_cut.set_title("cut-joint forces")
    if reactions.loop_names:
        ax_cut.legend(loc="best", fontsize="small")
    if driven:
        for j in driven:
            k = reactions.joint_names.index(j.name)
            ax_r.plot(run.t, np.linalg.norm(reactions.joint_wrench[:, k, :3], axis=1), label=j.name)
        ax_r.set_ylabel("|f| [N]")
        ax_r.set_title("reaction force of the driven joints")
        ax_r.legend(loc="best", fontsize="small")
        for n, j in enumerate(driven):
            unit = "N·m" if j.kind == "revolute" else "N"
            ax_tau.plot(run.t, run.tau_programmed[:, j.idx_v], color=f"C{n}", label=f"{j.name} drive [{unit}]")
            ax_tau.plot(run.t, run.tau_applied[:, j.idx_v], color=f"C{n}", ls="--", lw=1, label=f"{j.name} friction [{unit}]")
        ax_tau.set_ylabel("torque [N·m, N]")
        ax_tau.set_title("drive torques")
        ax_tau.legend(loc="best", fontsize="small")
    else:
        velocity = [i for i, name in enumerate(run.row_names) if np.isnan(run.phi[:, i]).all()]
        for i in velocity:
            ax_r.plot(run.t, run.lam[:, i], label=run.row_names[i], lw=1)
        ax_r.set_ylabel("lambda [N, N·m]")
        ax_r.set_title("velocity-level constraint forces")
        if velocity:
            ax_r.legend(loc="best", fontsize="small")
        floor = 1e-16
        for i, name in enumerate(run.row_names):
            values = np.abs(run.phi[:, i]) if not np.isnan(run.phi[:, i]).all() else np.abs(run.dphi[:, i])
            ax_tau.semilogy(run.t, np.maximum(values, floor), lw=0.8)
        ax_tau.set_ylabel("|Phi| [m, rad]  (|dPsi| for velocity rows)")
        ax_tau.set_title("constraint violation")
    for ax in (ax_q, ax_cut, ax_r, ax_tau):
        ax.grid(alpha=0.3)
    ax_r.set_xlabel("t [s]")
    ax_tau.set_xlabel("t [s]")
    if not paths:
        ax_q.set_xlabel("t [s]")
    fig.suptitle(title)
    save_figure(fig, path)


def plot_redundancy(result: ClosedChainTorques, path: str | Path, title: str) -> None:
    """Left column: each drive's torque in every distribution mode; right column: the norm
    of the passive-joint reaction forces and of the drive powers in every mode."""
    joints = result.chosen.joints
    rows = max(len(joints), 2)
    fig = _figure((12, 2.2 * rows + 0.8))
    grid = fig.subplots(rows, 2, sharex=True, squeeze=False)
    left, right = grid[: len(joints), 0], grid[:2, 1]
    for ax in [*grid[len(joints) :, 0], *grid[2:, 1]]:
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
    save_figure(fig, path)


def plot_identification(result: IdentificationResult, path: str | Path, title: str) -> None:
    """Friction identification: friction against speed with the fit and its confidence
    band, residuals, gravity profile; with a presliding log also the presliding curve,
    the step responses and the break-away torque against the ramp rate."""
    fit, pts = result.fit, result.processed.points
    pre = result.presliding
    n = 3 + (0 if pre is None else 3)
    fig = _figure((13, 3.6 * math.ceil(n / 3) + 0.6))
    axes = fig.subplots(math.ceil(n / 3), 3, squeeze=False).ravel()
    ax_f, ax_r, ax_g = axes[:3]
    v = np.geomspace(pts.speed.min() / 1.5, pts.speed.max() * 1.5, 400)
    F, half = fit.predict(v), fit.band(v)
    ax_f.fill_between(v, F - half, F + half, color="C0", alpha=0.25, lw=0, label=f"{100 * fit.confidence:.0f} % band")
    ax_f.plot(v, F, color="C0", label=f"{fit.law.name} fit")
    ax_f.errorbar(pts.speed, pts.friction, yerr=2 * pts.stderr, fmt="o", ms=3, color="k", label="(u_f - u_r)/2, ±2 se")
    for fd, color in ((result.forward, "C2"), (result.reverse, "C3")):
        if fd is not None:
            ax_f.plot(fd.points.speed, fd.points.friction, "^" if fd.points.direction == "forward" else "v", ms=3, color=color, label=fd.points.direction)
    ax_f.set_xscale("log")
    ax_f.set_xlabel("speed [rad/s, m/s]")
    ax_f.set_ylabel("friction [N·m, N]")
    ax_f.set_title("friction against speed")
    ax_f.legend(loc="best", fontsize="small")
    ax_r.axhline(0.0, color="k", lw=0.8)
    ax_r.errorbar(pts.speed, fit.residuals, yerr=2 * pts.stderr, fmt="o", ms=3, color="k")
    down = fit.weights < 1
    if down.any():
        ax_r.plot(pts.speed[down], fit.residuals[down], "o", mfc="none", mec="C3", ms=8, label="down-weighted")
        ax_r.legend(loc="best", fontsize="small")
    ax_r.set_xscale("log")
    ax_r.set_xlabel("speed [rad/s, m/s]")
    ax_r.set_ylabel("residual [N·m, N]")
    ax_r.set_title(f"residuals (chi2/dof {fit.chi2_red:.3g})")
    g = result.processed.gravity
    ax_g.plot(g.q, g.tau, ".-", color="C1", ms=3)
    ax_g.set_xlabel("position [rad, m]")
    ax_g.set_ylabel("(u_f + u_r)/2 [N·m, N]")
    ax_g.set_title("gravity profile")
    if pre is not None:
        ax_p, ax_s, ax_b = axes[3:6]
        if pre.cycle is not None:
            c = pre.cycle
            ax_p.plot(c.x * 1e6, c.F, ".", ms=2, color="k", label="measured")
            ax_p.plot(c.x_model * 1e6, c.F, color="C0", lw=1, label=f"LuGre branches, sigma0 = {c.sigma0:.4g}")
            ax_p.legend(loc="best", fontsize="small")
        else:
            ax_p.text(0.5, 0.5, "\n".join(pre.notes) or "no cycle", ha="center", va="center", wrap=True, fontsize="small", transform=ax_p.transAxes)
        ax_p.set_xlabel("displacement [µrad, µm]")
        ax_p.set_ylabel("friction u - c [N·m, N]")
        ax_p.set_title("presliding cycle")
        for i, s in enumerate(pre.steps):
            ax_s.plot(s.t * 1e3, s.x * 1e6, ".", ms=2, color=f"C{i}")
            if s.ok:
                ax_s.plot(s.t * 1e3, s.x_model * 1e6, color=f"C{i}", lw=1, label=f"zeta {s.zeta:.2f}, {s.omega_n / 2 / math.pi:.1f} Hz")
        if any(s.ok for s in pre.steps):
            ax_s.legend(loc="best", fontsize="small")
        ax_s.set_xlabel("time from step [ms]")
        ax_s.set_ylabel("displacement [µrad, µm]")
        ax_s.set_title("torque steps" + ("" if pre.sigma1_identified else " (sigma1 not identified)"))
        b = pre.breakaway
        if b is not None and len(b.rates):
            ax_b.plot(b.rates, b.per_rate, "o", color="k", label="(u_b+ - u_b-)/2")
            r = np.linspace(0, b.rates.max() * 1.1, 10)
            if math.isfinite(b.value) and len(b.rates) > 1:
                slope = np.polyfit(b.rates, b.per_rate, 1)[0]
                ax_b.plot(r, b.value + slope * r, color="C0", lw=1, label=f"at rate 0: {b.value:.4g}")
            ax_b.legend(loc="best", fontsize="small")
        ax_b.set_xlabel("ramp rate [N·m/s, N/s]")
        ax_b.set_ylabel("break-away torque [N·m, N]")
        ax_b.set_title("break-away")
    for ax in axes[:n]:
        ax.grid(alpha=0.3)
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    save_figure(fig, path)


#: File name -> what it shows, one PNG per quantity.
VARIANT_PLOTS = {
    "paths.png": "tool paths against the programmed path",
    "joints.png": "joint coordinates (elastic ones excluded)",
    "forces.png": "joint force magnitudes |f|",
    "rms.png": "RMS of |f| per joint (bar chart)",
    "violation.png": "constraint violation (log scale)",
    "deflection.png": "flexible links: deflection from the chord (written when a variant has one)",
}


def _variant_style(variant) -> dict:
    """Colour by structure (base, link), solid without friction, dashed with it."""
    colour = {("rigid", "rigid"): "C0", ("rigid", "flexible"): "C1", ("flexible", "rigid"): "C2", ("flexible", "flexible"): "C3"}
    return {
        "color": colour[(variant.support, variant.links)],
        "ls": "-" if variant.friction == "none" else "--",
        "lw": 1.0,
        "label": variant.label,
    }


def plot_variants(runs: Sequence, directory: str | Path, title: str) -> list[Path]:
    """The five comparison figures of ``mbctl variants`` (:data:`VARIANT_PLOTS`) in ``directory``.

    Args:
        runs: :class:`mbctl.dynamics.simulation.variants.VariantRun` objects, one per variant.

    Returns:
        The files written.
    """
    directory = Path(directory)
    written = []
    joints = runs[0].joints

    # tool paths, in the plane of the two coordinates the target moves most in
    fig = _figure((7.5, 6.5))
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
    ax.legend(loc="best", fontsize="x-small")
    fig.suptitle(title)
    written.append(directory / "paths.png")
    save_figure(fig, written[-1])

    for name, quantity, ylabel in (
        ("joints.png", "q", "q [rad, m]"),
        ("forces.png", "joint_force", "|f| [N]"),
    ):
        fig, axes = _grid(len(joints), f"{title}: {VARIANT_PLOTS[name]}")
        for i, (ax, joint) in enumerate(zip(axes, joints)):
            for run in runs:
                ax.plot(run.result.t, getattr(run, quantity)[:, i], **_variant_style(run.variant))
            ax.set_ylabel(f"{joint}: {ylabel}")
            ax.grid(alpha=0.3)
        axes[0].legend(loc="best", fontsize="x-small")
        written.append(directory / name)
        save_figure(fig, written[-1])

    fig = _figure((max(7.0, 1.6 * len(joints)), 4.8))
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

    fig = _figure((8, 5))
    ax = fig.subplots()
    for run in runs:
        ax.semilogy(run.result.t, np.maximum(run.violation, 1e-16), **_variant_style(run.variant))
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


def _plot_deflection(runs: Sequence, path: Path, title: str) -> None:
    """Per flexible link: the largest distance of its elastic line from the chord over
    time for every run (mm), and the shape at five instants for the first run."""
    from mbctl.dynamics.flexible.rfe import chord_deflection

    links = [r.spec.link for r in runs[0].robot.rfe_links]
    fig = _figure((11, 3.6 * len(links) + 0.6))
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


def plot_servo_fit(fit: ServoFit, logs: Sequence[ServoLog], path: str | Path) -> None:
    """A servo fit: per log, the measured position, the simulated one and the goal (rad)
    against time (s); held-out logs are marked in their titles."""
    cols = 2
    rows = math.ceil(len(logs) / cols)
    fig = _figure((12, 2.6 * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, log in zip(axes, logs):
        simulated = fit.simulated(log)
        ax.plot(log.t, log.goal, color="0.6", lw=0.8, label="goal")
        ax.plot(log.t, log.position, color="k", lw=1.0, label="measured")
        ax.plot(log.t, simulated, color="C1", lw=1.0, label="simulated")
        held = log.name in fit.validation_mae
        mae = (fit.validation_mae if held else fit.train_mae)[log.name]
        ax.set_title(f"{log.name} (kp {log.model.firmware.kp:g}){' held out' if held else ''}: {mae * 1e3:.1f} mrad", fontsize="small")
        ax.set_xlabel("t [s]")
        ax.set_ylabel("position [rad]")
    for ax in axes[len(logs) :]:
        ax.set_visible(False)
    axes[0].legend(loc="best", fontsize="small")
    fig.suptitle(f"servo fit, {fit.law}: open-loop simulation of each log")
    save_figure(fig, path)


def _panels(n: int, title: str, width: float = 3.6, height: float = 2.8) -> tuple[Figure, list]:
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = _figure((width * cols, height * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig, axes[:n]


def _by_kind(quantities: Sequence[str]) -> dict[str, list[str]]:
    """Quantity names grouped by kind (``tau_peak.j1`` -> ``tau_peak``), in first-seen order."""
    groups: dict[str, list[str]] = {}
    for q in quantities:
        groups.setdefault(q.split(".", 1)[0], []).append(q)
    return groups


def plot_sweep_scatter(columns: Mapping[str, np.ndarray], parameter: str, quantities: Sequence[str], path: str | Path, title: str) -> None:
    """Every quantity of interest against the varied ``parameter`` (successful runs): one panel
    per kind of quantity, one colour per joint (or fitted parameter)."""
    ok = columns["status"] == "ok"
    x = np.asarray(columns[f"param.{parameter}"], dtype=float)[ok]
    groups = _by_kind(quantities)
    fig, axes = _panels(len(groups), title)
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
    save_figure(fig, path)


def plot_sweep_histograms(columns: Mapping[str, np.ndarray], quantities: Sequence[str], path: str | Path, title: str) -> None:
    """Histograms of every quantity of interest over the successful runs: one panel per kind."""
    ok = columns["status"] == "ok"
    groups = _by_kind(quantities)
    fig, axes = _panels(len(groups), title)
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
    save_figure(fig, path)


def plot_torque_bands(bands: Bands, path: str | Path, title: str) -> None:
    """Per joint: the median torque over time and the bands between symmetric percentiles (5-95, 25-75)."""
    fig, axes = _grid(len(bands.joints), title)
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
    save_figure(fig, path)


FLEXFEED_PLOTS = ("flexfeed_path.png", "flexfeed_levers.png", "flexfeed_tips.png", "flexfeed_rfe.png")
_MODE_COLORS = {"non-redundant": "tab:red", "min-internal-force": "tab:blue", "min-power": "tab:green", "min-norm": "tab:purple"}


def plot_flexfeed(result, directory: str | Path) -> list[Path]:
    """The figures of ``mbctl flexfeed`` (:data:`FLEXFEED_PLOTS`) in ``directory``.

    Args:
        result: A :class:`mbctl.ctrl.flexible_feedforward.FlexFeedResult`.

    Returns:
        The files written (the RFE figure only with a cross-check).
    """
    directory = Path(directory)
    written = []
    t = result.t
    color = lambda mode: _MODE_COLORS.get(mode, None)  # noqa: E731

    fig = _figure((11.0, 6.5))
    grid = fig.add_gridspec(2, 2)
    ax = fig.add_subplot(grid[:, 0])
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
        ax = fig.add_subplot(grid[i, 1])
        for mode, r in result.runs.items():
            ax.plot(t, r.error[:, i] * 1e3, color=color(mode), lw=1, label=mode)
        ax.set_ylabel(f"{axis} error [mm]")
        ax.grid(alpha=0.3)
        if i == 1:
            ax.set_xlabel("t [s]")
    fig.suptitle(f"{result.name}: rigid-model torques fed forward into the flexible levers")
    save_figure(fig, directory / FLEXFEED_PLOTS[0])
    written.append(directory / FLEXFEED_PLOTS[0])

    joints = result.lever_joints
    fig = _figure((13.0, 1.9 * len(joints) + 0.8))
    axes = fig.subplots(len(joints), 3, sharex=True, squeeze=False)
    for i, joint in enumerate(joints):
        for c, (label, scale, get) in enumerate(
            (("angle error [mrad]", 1e3, lambda r: r.angle_error), ("ω [rad/s]", 1.0, lambda r: r.omega), ("α [rad/s²]", 1.0, lambda r: r.alpha))
        ):
            ax = axes[i, c]
            for mode, r in result.runs.items():
                ax.plot(t, get(r)[:, i] * scale, color=color(mode), lw=0.8, label=mode)
            ax.set_ylabel(f"lever {i + 1} ({joint})\n{label}", fontsize="small")
            ax.grid(alpha=0.3)
        # the torque step at t = 0 gives the flexible levers' root sections a spike of
        # acceleration (high modes) that would flatten the rest: scale to t > 5 ms
        late = t > min(5e-3, t[-1] / 2)
        values = np.concatenate([r.alpha[late, i] for r in result.runs.values()])
        if values.size and np.ptp(values) > 0:
            pad = 0.08 * np.ptp(values)
            axes[i, 2].set_ylim(values.min() - pad, values.max() + pad)
    for c in range(3):
        axes[-1, c].set_xlabel("t [s]")
    axes[0, 0].legend(fontsize="x-small")
    fig.suptitle(f"{result.name}: lever frame angles (error against the rigid model), rates and accelerations (scaled to t > 5 ms)")
    save_figure(fig, directory / FLEXFEED_PLOTS[1])
    written.append(directory / FLEXFEED_PLOTS[1])

    links = result.links
    fig = _figure((13.0, 2.3 * len(links) + 0.8))
    axes = fig.subplots(len(links), 3, sharex=True, squeeze=False)
    for i, link in enumerate(links):
        for c, (label, scale) in enumerate((("axial u [µm]", 1e6), ("transverse v [mm]", 1e3), ("elastic angle [mrad]", 1e3))):
            ax = axes[i, c]
            for mode, r in result.runs.items():
                ax.plot(t, r.tip[:, i, c] * scale, color=color(mode), lw=0.8, label=mode)
            ax.set_ylabel(f"{link} tip\n{label}", fontsize="small")
            ax.grid(alpha=0.3)
    for c in range(3):
        axes[-1, c].set_xlabel("t [s]")
    axes[0, 0].legend(fontsize="x-small")
    fig.suptitle(f"{result.name}: tip deformation of the flexible levers (floating frame)")
    save_figure(fig, directory / FLEXFEED_PLOTS[2])
    written.append(directory / FLEXFEED_PLOTS[2])

    if result.rfe is not None and result.rfe.mode in result.runs:
        c, fem = result.rfe, result.runs[result.rfe.mode]
        n = len(c.error)
        fig = _figure((11.0, 2.2 * (len(links) + 1) + 0.8))
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
