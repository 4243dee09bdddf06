"""Figures of identification fits: a joint's friction against speed, a servo's simulated against
measured motion, an arm's predicted against measured torques."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.viz.figures import check_figure_path, grid, new_figure, save_figure

if TYPE_CHECKING:
    from mbctl.dynamics.model.robot import RobotModel
    from mbctl.identification.arm_fit import ArmFit
    from mbctl.identification.arm_log import ConditionedLog
    from mbctl.identification.report import IdentificationResult
    from mbctl.identification.servo import ServoFit, ServoLog

__all__ = ["plot_arm_fit", "plot_identification", "plot_servo_fit"]


def plot_identification(result: IdentificationResult, path: str | Path, *, title: str | None = None) -> Path:
    """A friction identification (:func:`mbctl.identification.pipeline.identify`): friction (N·m, N)
    against speed (rad/s, m/s) with the fit and its confidence band, the residuals, the gravity
    profile; with a presliding log also the presliding curve (µrad, µm), the step responses and
    the break-away torque against the ramp rate (N·m/s, N/s). Returns ``path``.

    Args:
        title: Default: ``"<joint>: <law> friction"``.

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    fit, pts = result.fit, result.processed.points
    pre = result.presliding
    n = 3 + (0 if pre is None else 3)
    fig = new_figure((13, 3.6 * math.ceil(n / 3) + 0.6))
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
    fig.suptitle(title or f"{result.joint}: {result.fit.law.name} friction")
    return save_figure(fig, path)


def plot_servo_fit(fit: ServoFit, logs: Sequence[ServoLog], path: str | Path, *, title: str | None = None) -> Path:
    """A servo fit (:func:`mbctl.identification.servo.fit_servo`): per log, the measured position,
    the simulated one and the goal (rad) against time (s); held-out logs are marked in their
    titles with their mean absolute error (mrad). Returns ``path``.

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    cols = 2
    rows = math.ceil(len(logs) / cols)
    fig = new_figure((12, 2.6 * rows + 0.6))
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
    fig.suptitle(title or f"servo fit, {fit.law}: open-loop simulation of each log")
    return save_figure(fig, path)


def plot_arm_fit(robot: RobotModel, fit: ArmFit, logs: Sequence[ConditionedLog], path: str | Path, *, title: str | None = None) -> Path:
    """Measured (grey) against predicted (colour) joint torques (N·m, N) of an arm fit
    (:func:`mbctl.identification.arm_fit.fit_arm`) along conditioned logs, one panel per joint,
    the logs one after another in time (s). Returns ``path``.

    Args:
        logs: Fitted and held-out logs (:func:`mbctl.identification.arm_log.condition_log`).

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    from mbctl.identification.arm_fit import predict_torques

    check_figure_path(path)
    names = logs[0].joint_names
    fig, axes = grid(len(names), title or "measured (grey) and identified model (colour) torques")
    for log in logs:
        tau = predict_torques(robot, fit.theta, fit.friction, log, armature=fit.armature_by_joint)
        for c, ax in enumerate(axes):
            ax.plot(log.t, log.tau[:, c], color="0.6", lw=1.0)
            ax.plot(log.t, tau[:, c], lw=0.9)
            ax.set_ylabel(f"{names[c]} (N·m)")
    for ax in axes[-2:]:
        ax.set_xlabel("t (s)")
    return save_figure(fig, path)
