"""``mbctl convert``: a run log or simulation (NPZ) as an MCAP file of ROS 2 messages, or a ROS 2 bag as a log CSV.

``LOG.npz OUT.mcap``: ``/joint_states``, ``/joint_commands``, ``/diagnostics`` (the loop's
timing) and, with ``--robot``, ``/tf`` and ``/tf_static`` (every link's pose from the
model), stamped with the log's times (:mod:`mbctl.hardware.mcap_log`; ``mbctl run --log
X.mcap`` and ``mbctl simulate --log X.mcap`` do the same at the end of the run).

``BAG OUT.csv --robot ROBOT``: the bag's JointState messages as the log CSV ``identify
dynamics`` and ``feedforward`` read (``t``, ``q.<joint>``, ``dq.<joint>``, ``tau.<joint>``
for the robot's joints, as far as the messages carry them; :mod:`mbctl.rosbag`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mbctl.cli.arguments import add_bag_arguments, add_xacro_option, bag_options, robot_config, xacro_args_of
from mbctl.cli.console import ProgressPrinter, warn
from mbctl.errors import InputError
from mbctl.fileio import check_output


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("log", type=Path, help="run log or simulation (.npz), or a ROS 2 bag (directory, .mcap or .db3)")
    p.add_argument("out", type=Path, help="file to write: .mcap (from an NPZ) or .csv (from a bag)")
    p.add_argument("--robot", type=robot_config, help="robot TOML file or bundled robot name: /tf from its model (NPZ), its joints (bag)")
    add_xacro_option(p)
    add_bag_arguments(p)
    p.set_defaults(run=run)


def write_log_mcap(log: Path, out: Path, robot) -> None:  # noqa: ANN001  (RobotModel or None)
    """Write ``log`` as the MCAP ``out`` and print what it holds."""
    from mbctl.hardware.mcap_log import write_mcap

    summary = write_mcap(log, out, robot, progress=ProgressPrinter("mcap", unit="rows"))
    for note in summary.notes:
        warn(note)
    counts = ", ".join(f"{topic} {n}" for topic, n in summary.messages.items())
    links = f"; {len(summary.links)} links in /tf and /tf_static" if summary.links else "; no /tf: give --robot for the link poses"
    print(f"wrote {out} ({summary.kind}, {summary.rows} rows: {counts}{links})")


def run(args: argparse.Namespace) -> int:
    from mbctl.rosbag import is_bag

    if is_bag(args.log):
        check_output(args.out, (".csv",))
        if args.robot is None:
            raise InputError("a bag becomes a log CSV of a robot's joints: give --robot", field="--robot")
        return bag_to_csv(args)
    check_output(args.out, (".mcap",))
    robot = None
    if args.robot is not None:
        from mbctl.dynamics.model.robot import load_robot

        robot = load_robot(args.robot, xacro_args=xacro_args_of(args))
    write_log_mcap(args.log, args.out, robot)
    return 0


def bag_to_csv(args: argparse.Namespace) -> int:
    import numpy as np

    from mbctl.dynamics.model.robot import load_robot
    from mbctl.fileio import write_csv
    from mbctl.rosbag import read_joint_states

    robot = load_robot(args.robot, xacro_args=xacro_args_of(args))
    states = read_joint_states(args.log, robot.joint_names, bag_options(args))
    groups = [(g, x) for g, x in (("q", states.q), ("dq", states.dq), ("tau", states.tau)) if x is not None]
    header = ["t", *(f"{g}.{j}" for g, _ in groups for j in states.joint_names)]
    write_csv(args.out, header, np.column_stack([states.t, *(x for _, x in groups)]))
    for note in states.notes:
        print(note)
    print(f"wrote {args.out} ({len(states.t)} rows: {', '.join(g for g, _ in groups)})")
    return 0
