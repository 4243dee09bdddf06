"""``mbctl animate``: a run in 3-D, as one self-contained HTML page (MeshCat's viewer).

Reads an NPZ written by ``mbctl simulate`` or ``mbctl variants --save-runs`` (all DOF),
or a ``mbctl run --log`` (actuated joints and their reference, drawn as a ghost; the
robot must have no passive or elastic DOF then). The page plays offline in any browser
with WebGL: orbit with the mouse, play, scrub and change speed under Animations.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from mbctl.cli.arguments import add_xacro_option, robot_config, xacro_args_of
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.errors import InputError
from mbctl.fileio import check_output
from mbctl.viz.animation import motion, traces, write_animation

HTML = (".html",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_file", metavar="RUN", type=Path, help="run to animate (.npz from mbctl simulate, variants --save-runs or run --log)")
    p.add_argument("--out", type=Path, required=True, help="page to write (.html)")
    p.add_argument("--robot", type=robot_config, help="robot TOML or bundled name (default: the one recorded in the NPZ)")
    add_xacro_option(p)
    add_view_arguments(p)
    p.set_defaults(run=run)


def add_view_arguments(p: argparse.ArgumentParser, *, animate: bool = False) -> None:
    """Options shared with the commands that take ``--animate`` (which ``animate=True`` adds)."""
    if animate:
        p.add_argument("--animate", type=Path, help="also write the motion in 3-D (.html; see mbctl animate)")
    p.add_argument("--magnify", type=float, default=1.0, help="factor on elastic deflections as drawn (default 1)")
    p.add_argument("--trace", action="append", default=[], metavar="FRAME", help="frame whose path is drawn (repeatable; default: the constrained frames)")


def check_log_animation(robot: RobotModel, out: Path | None) -> None:
    """Before a closed-loop run: its log (actuated joints only) can be drawn only for a robot whose every DOF is actuated."""
    if out is None:
        return
    check_output(out, HTML)
    if set(robot.actuated_names) != set(robot.joint_names):
        raise InputError(f"{robot.name} has passive or elastic DOF, which a run log does not hold; animate a simulation instead", field="--animate")


def write_view(path: Path, robot: RobotModel, t: np.ndarray, q: np.ndarray, args: argparse.Namespace, title: str, reference: np.ndarray | None = None) -> None:
    """Write the page of a motion with the view options of ``args`` (``--trace``, ``--magnify``)."""
    write_animation(
        path, robot, t, q, reference=reference, traces=traces(robot, q, args.trace, "--trace"), magnification=args.magnify, title=f"{robot.name}: {title}"
    )


def animate_log(robot: RobotModel, log: Path, args: argparse.Namespace) -> None:
    """Write ``args.animate`` from a closed-loop run's log, its reference as a ghost."""
    t, q, q_ref = motion(robot, dict(np.load(log)), log)
    write_view(args.animate, robot, t, q, args, log.name, reference=q_ref)


def run(args: argparse.Namespace) -> int:
    check_output(args.out, HTML)
    try:
        data = dict(np.load(args.run_file, allow_pickle=False))
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot read the run ({exc})", file=args.run_file) from None
    config = args.robot
    if config is None:
        if "config" not in data:
            raise InputError("no robot recorded in the run; pass --robot", file=args.run_file)
        config = robot_config(str(data["config"]))
    robot = load_robot(config, xacro_args=xacro_args_of(args))
    t, q, q_ref = motion(robot, data, args.run_file)
    write_view(args.out, robot, t, q, args, args.run_file.name, reference=q_ref)
    print(f"wrote {args.out}")
    return 0
