"""``mbctl feedforward``: inverse dynamics plus joint friction along a trajectory CSV; writes a torque CSV."""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np

from mbctl.budget import check_read
from mbctl.cli.arguments import add_bag_arguments, add_xacro_option, bag_options, budget, robot_config, xacro_args_of
from mbctl.cli.commands.animate import HTML, add_view_arguments, write_view
from mbctl.cli.console import ProgressPrinter, warn
from mbctl.ctrl.actuation import MODES, actuation_settings
from mbctl.ctrl.closed_chain import (
    ClosedChainTorques,
    closed_chain_feedforward,
    write_closed_chain,
)
from mbctl.ctrl.feedforward import (
    ENGINES,
    FeedforwardResult,
    feedforward,
    write_torques,
)
from mbctl.ctrl.settings import control_settings
from mbctl.ctrl.trajectory import limit_violations, read_trajectory
from mbctl.dynamics.friction.laws import LAWS, simplify_law
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.errors import DataError, InputError
from mbctl.fileio import check_output
from mbctl.rosbag import BagOptions, is_bag
from mbctl.viz.feedforward import plot_feedforward, plot_redundancy
from mbctl.viz.figures import FORMATS

FRICTION_CHOICES = ("config", "none", *LAWS)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name")
    add_xacro_option(p)
    p.add_argument(
        "--trajectory",
        type=Path,
        required=True,
        help="trajectory CSV: t, q.<joint>, dq.<joint>, ddq.<joint>; or a measured log without ddq (t, q, optional dq and tau; "
        "or a ROS 2 bag of JointState messages), conditioned as `mbctl identify dynamics` does and compared with its torques",
    )
    add_bag_arguments(p)
    p.add_argument("--out", type=Path, required=True, help="torque CSV to write: t, tau.<joint>, tau_friction.<joint>")
    p.add_argument("--plot", type=Path, help="also plot the torques (.png, .pdf or .svg)")
    p.add_argument("--reactions", action="store_true", help="add joint reaction wrenches and normal loads to the CSV")
    add_view_arguments(p, animate=True)
    p.add_argument(
        "--friction",
        choices=FRICTION_CHOICES,
        default="config",
        help="none, or reduce every joint's law to at most this one, keeping its parameters "
        "(lugre > stribeck > coulomb-viscous; default: config)",
    )
    p.add_argument(
        "--lugre",
        choices=("dynamic", "steady"),
        default="dynamic",
        help="integrate LuGre states along the trajectory (default) or use their steady state",
    )
    p.add_argument(
        "--engine",
        choices=ENGINES,
        default="pinocchio",
        help="pinocchio's batched RNEA (default) or the CasADi mirror of the model (same numbers, slower)",
    )
    p.add_argument(
        "--mode",
        choices=MODES,
        help="closed chains with an [actuation] table: how the drives share the load (default: actuation.mode)",
    )
    p.set_defaults(run=run)


def override_friction(robot: RobotModel, law: str) -> RobotModel:
    """Reduce every joint's law to at most ``law`` ("config" keeps them, "none" removes them)."""
    if law == "config":
        return robot
    changed = {}
    for j in robot.joints:
        if law == "none" or j.friction is None:
            changed[j.name] = None
            continue
        changed[j.name] = dataclasses.replace(j.friction, law=simplify_law(j.friction.law, law))
    return robot.with_friction(changed)


def trajectory_or_log(path: Path, robot: RobotModel, bag: BagOptions = BagOptions()):  # noqa: ANN201  (Trajectory, measured torques or None)
    """A trajectory CSV as it is, or a measured log (no ``ddq.`` columns, or a ROS 2 bag) conditioned into one.

    A log is resampled, filtered and differentiated with the defaults of
    :class:`mbctl.identification.arm_log.Conditioning`; its measured torques, if
    present, come back (filtered alike) to be compared with the prediction.
    """
    from mbctl.ctrl.trajectory import Trajectory
    from mbctl.fileio import read_csv

    if not is_bag(path) and any(name.startswith("ddq.") for name in read_csv(path).header):
        return read_trajectory(path, robot.joint_names), None
    from mbctl.identification.arm_log import condition_log, read_arm_log

    log = condition_log(read_arm_log(path, robot.joint_names, need_torque=False, bag=bag, spec=robot.spec))
    print(f"{path}: {'a ROS 2 bag' if is_bag(path) else 'no ddq columns'}, conditioned as a measured log:")
    for note in log.notes:
        print(f"  {note}")
    return Trajectory(t=log.t, joint_names=log.joint_names, q=log.q, dq=log.dq, ddq=log.ddq), log.tau


def format_prediction_error(ff: FeedforwardResult, measured) -> str:  # noqa: ANN001  (array (N, nv))
    """RMS and peak difference between the predicted and the measured torques, per joint."""
    lines = [
        "  against the log's measured tau (low-passed as q and dq were):",
        f"  {'joint':<26}{'rms error':>12}{'peak error':>12}{'rms measured':>14}",
    ]
    for j in ff.robot.joints:
        e = ff.dynamics.tau[:, j.idx_v] - measured[:, j.idx_v]
        unit = "N·m" if j.kind == "revolute" else "N"
        lines.append(
            f"  {j.name:<26}{np.sqrt(np.mean(e**2)):>8.4g} {unit:<3}{np.abs(e).max():>8.4g} {unit:<3}{np.sqrt(np.mean(measured[:, j.idx_v] ** 2)):>10.4g} {unit:<3}"
        )
    return "\n".join(lines)


def format_summary(ff: FeedforwardResult, elapsed_s: float) -> str:
    """Per-joint peak/RMS torque table with limit flags, as printed by the CLI."""
    n = len(ff.trajectory)
    lines = [
        f"{ff.robot.name}: {n} samples over {ff.trajectory.duration:.3f} s, "
        f"computed in {elapsed_s * 1e3:.1f} ms ({elapsed_s / n * 1e6:.2f} us/sample)",
        f"  {'joint':<22}{'peak |tau|':>14}{'rms':>12}{'peak friction':>15}{'effort limit':>14}",
    ]
    for s in ff.stats():
        flag = "  EXCEEDS LIMIT" if s.over_limit else ""
        lines.append(
            f"  {s.name:<22}{s.peak:>10.4g} {s.unit:<3}{s.rms:>8.4g} {s.unit:<3}"
            f"{s.peak_friction:>11.4g} {s.unit:<3}{s.effort_limit:>10.4g} {s.unit:<3}{flag}"
        )
    for name, peak in ff.unactuated_demand().items():
        if peak > 1e-9:
            lines.append(f"  unactuated {name} would need up to {peak:.4g}: the trajectory is not realisable exactly")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    check_output(args.out)
    if args.plot:
        check_output(args.plot, FORMATS)
    if args.animate:
        check_output(args.animate, HTML)
    robot = override_friction(load_robot(args.config, xacro_args=xacro_args_of(args)), args.friction)
    control_settings(robot)  # a bad [control] table is reported even where no controller is built
    check_read(args.trajectory, budget(args), field="--trajectory")
    traj, measured = trajectory_or_log(args.trajectory, robot, bag_options(args))
    for message in limit_violations(robot, traj):
        warn(f"{args.trajectory}: {message}")
    closed_chain = args.mode is not None or (robot.spec is not None and robot.spec.actuation is not None)
    if closed_chain:
        actuation_settings(robot)  # a bad [actuation] table is reported before any work
    if closed_chain and args.reactions:
        raise InputError(
            "not for a closed chain with [actuation]: its torque table already holds the passive-joint reactions", field="--reactions"
        )
    start = time.perf_counter()
    ff = feedforward(
        robot, traj, reactions=args.reactions, lugre=args.lugre, progress=ProgressPrinter("feedforward"), engine=args.engine
    )
    if closed_chain:
        try:
            result = closed_chain_feedforward(ff, args.mode, progress=ProgressPrinter("distribution"))
        except DataError as exc:  # the motion does not keep the loops closed
            raise exc.located(file=args.trajectory) if exc.file is None else exc from None
        elapsed = time.perf_counter() - start
        write_closed_chain(args.out, result)
        if args.plot:
            plot_redundancy(result, args.plot, title=f"{robot.name}: drive torques by distribution mode")
        if args.animate:
            write_view(args.animate, robot, traj.t, traj.q, args, args.trajectory.name)
        print(format_closed_chain(ff, result, elapsed))
        print(f"wrote {', '.join(str(p) for p in (args.out, args.plot, args.animate) if p)}")
        return 0
    elapsed = time.perf_counter() - start
    write_torques(args.out, ff)
    if args.plot:
        plot_feedforward(ff, args.plot)
    if args.animate:
        write_view(args.animate, robot, traj.t, traj.q, args, args.trajectory.name)
    print(format_summary(ff, elapsed))
    if measured is not None:
        print(format_prediction_error(ff, measured))
    print(f"wrote {', '.join(str(p) for p in (args.out, args.plot, args.animate) if p)}")
    return 0


def format_closed_chain(ff: FeedforwardResult, result: ClosedChainTorques, elapsed_s: float) -> str:
    """Per-mode peak and RMS drive torques, internal forces, powers and residuals."""
    n = len(ff.trajectory)
    joints = result.chosen.joints
    settings = result.settings
    lines = [
        f"{ff.robot.name}: {n} samples over {ff.trajectory.duration:.3f} s, {len(result.modes)} distribution modes "
        f"computed in {elapsed_s * 1e3:.1f} ms; drives {', '.join(joints)} (limits "
        + ", ".join(f"{e:.4g}" for e in settings.effort)
        + ")",
        f"  {'mode':<21}" + "".join(f"{'peak|' + j + '|':>12}" for j in joints) + f"{'rms tau':>10}{'peak F_int':>12}"
        f"{'rms F_int':>11}{'peak |P|':>10}{'residual':>10}",
    ]
    for mode, d in result.modes.items():
        mark = "*" if mode == result.mode else " "
        peaks = "".join(f"{v:>12.4g}" for v in np.abs(d.tau).max(axis=0))
        lines.append(
            f"{mark} {mode:<20}{peaks}{np.sqrt(np.mean(d.tau**2)):>10.4g}{d.internal_force.max():>12.4g}"
            f"{np.sqrt(np.mean(d.internal_force**2)):>11.4g}{d.power_norm.max():>10.4g}{d.residual.max():>10.2g}"
        )
    lines.append("  (N·m for torques, N for the passive-joint reaction norm F_int, W for the drive-power norm |P|; * = written)")
    for mode, reason in result.infeasible.items():
        lines.append(f"  {mode}: {reason}")
    return "\n".join(lines)
