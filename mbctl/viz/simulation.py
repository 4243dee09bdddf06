"""Figures of a simulated run: coordinates, tool path, constraint violation and forces; the
reactions of a closed chain."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.viz.figures import check_figure_path, new_figure, save_figure

if TYPE_CHECKING:
    from mbctl.dynamics.constraints.reactions import Reactions
    from mbctl.dynamics.model.robot import RobotModel
    from mbctl.dynamics.simulation.integrate import SimulationResult
    from mbctl.viz.animation import Trace

__all__ = ["plot_reactions", "plot_simulation", "simulation_title"]

FLOOR = 1e-16  # |Phi| drawn on a log scale no lower than this: double-precision resolution of positions of order 1
BODY_PATHS_ABOVE = 8  # passive coordinates beyond which a closed chain's bodies are drawn as paths instead


def simulation_title(run: SimulationResult, robot: RobotModel | None = None) -> str:
    """``"<robot>: <solver>, <integrator>, Baumgarte ..."``: the stabilisation is that of the robot's
    ``[simulation]``; without the robot, ``"simulation: <solver>, <integrator>"``."""
    if robot is None:
        return f"simulation: {run.solver}, {run.integrator}"
    from mbctl.dynamics.simulation.setup import simulation_setup

    baumgarte = simulation_setup(robot).baumgarte
    stabilisation = f"Baumgarte {baumgarte.form} alpha={baumgarte.alpha:g} beta={baumgarte.beta:g}" if baumgarte else "no stabilization"
    return f"{robot.name}: {run.solver}, {run.integrator}, {stabilisation}"


def _tool(run: SimulationResult, robot: RobotModel | None) -> tuple[list[int], str]:
    """Rows of the robot's first frame-position constraint in ``run`` and its label (none without one)."""
    if robot is None:
        return [], "tool"
    from mbctl.dynamics.constraints.kinds import FramePosition
    from mbctl.dynamics.simulation.setup import constraint_set

    tool = next((c for c in constraint_set(robot) if isinstance(c, FramePosition)), None)
    if tool is None:
        return [], "tool"
    return [i for i, row in enumerate(run.row_names) if row.startswith(f"{tool.name}.")], f"frame {tool.frame}"


def _violation(run: SimulationResult, i: int) -> np.ndarray:
    """|Phi| of row ``i`` (m, rad), or |dPsi| for a velocity-level row (NaN Phi), no lower than :data:`FLOOR`."""
    values = np.abs(run.phi[:, i]) if not np.isnan(run.phi[:, i]).all() else np.abs(run.dphi[:, i])
    return np.maximum(values, FLOOR)


def plot_simulation(
    run: SimulationResult,
    path: str | Path,
    *,
    robot: RobotModel | None = None,
    title: str | None = None,
    tool_rows: Sequence[int] | None = None,
    tool_label: str | None = None,
    joints: Sequence[str] | None = None,
) -> Path:
    """Four panels of a simulated run against time t (s): joint coordinates q (rad, m), the tool
    path against its target (m), the constraint violation |Phi| (m, rad; log scale) and the
    generalized constraint forces Q_c (N·m, N). Returns ``path``.

    Args:
        run: What :func:`mbctl.simulate` or :func:`mbctl.simulate_setup` returned.
        robot: The robot that ran: it gives the title, the tool (its first ``frame_position``
            constraint) and, for an elastic robot, the joints drawn (the non-elastic ones).
        title: Default: :func:`simulation_title`.
        tool_rows: Constraint rows (one to three) of a frame-position constraint whose actual
            value ``target + Phi`` is drawn against the target; a path in the plane of the two rows
            whose targets move most, or against time for a single row. Without any, the panel shows
            ``s_r/s_1`` of the constraint Jacobian (the distance from a singular configuration).
        joints: Joints drawn in the coordinate and force panels (default: see ``robot``, else all).

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    found_rows, found_label = _tool(run, robot) if tool_rows is None else (list(tool_rows), "tool")
    tool_label = tool_label or found_label
    if joints is None and robot is not None and robot.is_elastic:
        joints = [n for n in robot.joint_names if n not in robot.elastic_names]
    fig = new_figure((12, 8))
    (ax_q, ax_path), (ax_phi, ax_f) = fig.subplots(2, 2)
    shown = [i for i, name in enumerate(run.joint_names) if joints is None or name in joints]
    for i in shown:
        ax_q.plot(run.t, run.q[:, i], label=run.joint_names[i])
    ax_q.set_xlabel("t [s]")
    ax_q.set_ylabel("q [rad, m]")
    ax_q.set_title("joint coordinates")
    ax_q.legend(loc="best", fontsize="small")

    rows = found_rows
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

    for i, name in enumerate(run.row_names):
        ax_phi.semilogy(run.t, _violation(run, i), label=name, lw=1)
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
    fig.suptitle(title or simulation_title(run, robot))
    return save_figure(fig, path)


def body_paths(robot: RobotModel, run: SimulationResult) -> list[Trace] | None:
    """The world paths (m) of the bodies with mass when there are more than :data:`BODY_PATHS_ABOVE`
    passive coordinates to draw (e.g. a mechanism in absolute coordinates), else None."""
    if sum(not j.actuated for j in robot.joints) <= BODY_PATHS_ABOVE:
        return None
    import pinocchio as pin

    from mbctl.viz.animation import frame_paths

    model = robot.model
    bodies = [f.name for f in model.frames if f.type == pin.FrameType.BODY and model.inertias[f.parentJoint].mass > 0 and f.placement.isIdentity()]
    return frame_paths(robot, run.q, bodies)


def plot_reactions(run: SimulationResult, robot: RobotModel, path: str | Path, *, reactions: Reactions | None = None, title: str | None = None) -> Path:
    """Four panels of a closed-chain run against time t (s). Returns ``path``.

    The passive joint coordinates (rad, m) or, with more than :data:`BODY_PATHS_ABOVE` of them, the
    bodies' paths in the world x-y plane (m); the force each cut joint (loop constraint)
    transmits, ``|f|`` (N) of its wrench on frame B's body; the reaction force ``|f|`` (N) of
    every driven joint (its bearing load), or the multipliers of velocity-level rows where no
    joint is driven; the drive torques (programmed-constraint force on the driven joints, N·m
    or N) with their friction part, or the violation where none is.

    Args:
        run: A run of ``robot`` with multipliers (solver ``lagrange`` or ``udwadia-kalaba``).
        reactions: Its joint reactions (:func:`mbctl.dynamics.constraints.reactions.joint_reactions`);
            computed from ``run`` when not given.
        title: Default: the robot's name.

    Raises:
        InputError: Naming ``path``, for a suffix other than .png, .pdf or .svg.
    """
    check_figure_path(path)
    if reactions is None:
        from mbctl.dynamics.constraints.reactions import joint_reactions
        from mbctl.dynamics.simulation.setup import build_dynamics

        reactions = joint_reactions(build_dynamics(robot), run.t, run.q, run.dq, run.ddq, run.lam)
    paths = body_paths(robot, run)
    fig = new_figure((12, 8))
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
        ax_q.set_xlabel("t [s]")
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
        for i in range(len(run.row_names)):
            ax_tau.semilogy(run.t, _violation(run, i), lw=0.8)
        ax_tau.set_ylabel("|Phi| [m, rad]  (|dPsi| for velocity rows)")
        ax_tau.set_title("constraint violation")
    for ax in (ax_q, ax_cut, ax_r, ax_tau):
        ax.grid(alpha=0.3)
    ax_r.set_xlabel("t [s]")
    ax_tau.set_xlabel("t [s]")
    fig.suptitle(title or robot.name)
    return save_figure(fig, path)
