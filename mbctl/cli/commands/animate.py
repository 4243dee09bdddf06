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

from mbctl.cli.arguments import robot_config
from mbctl.dynamics.constraints.kinds import FramePosition
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.dynamics.simulation.setup import constraint_set
from mbctl.errors import InputError
from mbctl.fileio import check_output
from mbctl.viz.animation import Trace, frame_paths, write_animation

HTML = (".html",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("run_file", metavar="RUN", type=Path, help="run to animate (.npz from mbctl simulate, variants --save-runs or run --log)")
    p.add_argument("--out", type=Path, required=True, help="page to write (.html)")
    p.add_argument("--robot", type=robot_config, help="robot TOML or bundled name (default: the one recorded in the NPZ)")
    add_view_arguments(p)
    p.set_defaults(run=run)


def add_view_arguments(p: argparse.ArgumentParser, *, animate: bool = False) -> None:
    """Options shared with the commands that take ``--animate`` (which ``animate=True`` adds)."""
    if animate:
        p.add_argument("--animate", type=Path, help="also write the motion in 3-D (.html; see mbctl animate)")
    p.add_argument("--magnify", type=float, default=1.0, help="factor on elastic deflections as drawn (default 1)")
    p.add_argument("--trace", action="append", default=[], metavar="FRAME", help="frame whose path is drawn (repeatable; default: the constrained frames)")


def constrained_frames(robot: RobotModel) -> list[str]:
    """Frames the robot's ``[[constraints]]`` hold: programmed points and loop-closure points."""
    frames = []
    for c in constraint_set(robot):
        name = c.frame if isinstance(c, FramePosition) else c.frames[0] if isinstance(c, LoopClosure) else None
        if name is not None and name not in frames:
            frames.append(name)
    return frames


def traces(robot: RobotModel, q: np.ndarray, requested: list[str]) -> list[Trace]:
    """Paths of ``requested`` frames (default: the constrained ones) along ``q``."""
    names = requested or constrained_frames(robot)
    unknown = [n for n in names if not robot.model.existFrame(n)]
    if unknown:
        raise InputError(f"unknown frame {unknown[0]!r} of {robot.name}", field="--trace")
    return frame_paths(robot, q, names)


def motion(robot: RobotModel, data, file: Path) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(t, q, q_ref)`` from a run file: all DOF of a simulation, or the actuated joints of a run log."""
    if "joint_names" in data:  # a simulation
        names = [str(n) for n in data["joint_names"]]
        if names != list(robot.joint_names):
            raise InputError(f"the run's joints ({', '.join(names)}) are not those of {robot.name}", file=file, field="joint_names")
        return np.asarray(data["t"], dtype=float), np.asarray(data["q"], dtype=float), None
    if "columns" in data:  # a closed-loop run log
        joints = [str(c).split(".", 1)[1] for c in data["columns"] if str(c).startswith("q.")]
        if sorted(joints) != sorted(robot.joint_names):
            raise InputError(
                f"the log holds joints {', '.join(joints)}; {robot.name} has DOF {', '.join(robot.joint_names)} (a robot with passive "
                "or elastic DOF is animated from mbctl simulate)",
                file=file,
            )
        order = [joints.index(n) for n in robot.joint_names]
        q = np.asarray(data["q"], dtype=float).reshape(len(data["t"]), -1)[:, order]
        q_ref = np.asarray(data["q_ref"], dtype=float).reshape(q.shape)[:, order] if "q_ref" in data else None
        return np.asarray(data["t"], dtype=float), q, q_ref
    raise InputError("not a run of mbctl simulate or mbctl run (no joint_names or columns)", file=file)


def check_log_animation(robot: RobotModel, out: Path | None) -> None:
    """Before a closed-loop run: its log (actuated joints only) can be drawn only for a robot whose every DOF is actuated."""
    if out is None:
        return
    check_output(out, HTML)
    if set(robot.actuated_names) != set(robot.joint_names):
        raise InputError(f"{robot.name} has passive or elastic DOF, which a run log does not hold; animate a simulation instead", field="--animate")


def write_view(path: Path, robot: RobotModel, t: np.ndarray, q: np.ndarray, args: argparse.Namespace, title: str, reference: np.ndarray | None = None) -> None:
    """Write the page of a motion with the view options of ``args`` (``--trace``, ``--magnify``)."""
    write_animation(path, robot, t, q, reference=reference, traces=traces(robot, q, args.trace), magnification=args.magnify, title=f"{robot.name}: {title}")


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
    robot = load_robot(config)
    t, q, q_ref = motion(robot, data, args.run_file)
    write_view(args.out, robot, t, q, args, args.run_file.name, reference=q_ref)
    print(f"wrote {args.out}")
    return 0
