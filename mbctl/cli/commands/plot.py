"""``mbctl plot``: overlay the drive torques of several torque CSVs, one panel per joint.

A run written by ``mbctl simulate`` (``.npz``) stands for the torque table of its drives:
the programmed-constraint force ``tau_programmed`` on every joint where it is nonzero
(e.g. the crank of a mechanism driven by a ``joint_linear`` constraint). A ROS 2 bag
(directory, ``.mcap`` or ``.db3``) stands for the measured efforts of its JointState topic
(every joint it carries; ``--topic``, ``--stamps``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mbctl.cli.arguments import add_bag_arguments, bag_options
from mbctl.errors import DataError, InputError
from mbctl.fileio import CsvTable, check_output, read_csv
from mbctl.viz.feedforward import plot_torque_tables
from mbctl.viz.figures import FORMATS


def drive_table(path: Path) -> CsvTable:
    """The drive torques of a ``mbctl simulate`` run as a torque table (``t`` in s, ``tau.<joint>`` in
    N·m, or N for prismatic joints).

    Raises:
        DataError: If the file is not such a run or no joint carries a programmed force.
    """
    import numpy as np

    try:
        with np.load(path) as run:
            t, tau, names = run["t"], run["tau_programmed"], [str(n) for n in run["joint_names"]]
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"not a run written by mbctl simulate ({exc})", file=path) from None
    driven = [i for i in range(tau.shape[1]) if np.abs(tau[:, i]).max() > 0]
    if not driven:
        raise DataError("no joint carries a programmed-constraint (drive) force in this run", file=path)
    return CsvTable(
        path=path,
        header=("t", *(f"tau.{names[i]}" for i in driven)),
        data=np.column_stack([t, tau[:, driven]]),
        line_numbers=tuple(range(2, len(t) + 2)),
    )


def effort_table(path: Path, args: argparse.Namespace) -> CsvTable:
    """The measured efforts of a ROS 2 bag as a torque table (``t`` in s, ``tau.<joint>`` in N·m or N).

    Raises:
        DataError: If the bag cannot be read or its messages carry no effort.
    """
    import numpy as np

    from mbctl.rosbag import read_joint_states

    states = read_joint_states(path, None, bag_options(args))
    if states.tau is None:
        raise DataError("the messages carry no effort", file=path, field=states.topic)
    order = np.argsort(states.joint_names)  # panels by name, not in the driver's order
    return CsvTable(
        path=path,
        header=("t", *(f"tau.{states.joint_names[k]}" for k in order)),
        data=np.column_stack([states.t, states.tau[:, order]]),
        line_numbers=tuple(range(1, len(states.t) + 1)),
    )


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "tables", type=Path, nargs="+",
        help="torque CSVs written by mbctl feedforward, runs (.npz) written by mbctl simulate, or ROS 2 bags (their efforts)",
    )
    add_bag_arguments(p)
    p.add_argument("--labels", help="comma-separated legend labels (default: file names)")
    p.add_argument("--title", default="drive torques", help="figure title")
    p.add_argument("--out", type=Path, required=True, help="figure to write (.png, .pdf or .svg)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_output(args.out, FORMATS)
    labels = args.labels.split(",") if args.labels else [p.stem for p in args.tables]
    if len(labels) != len(args.tables):
        raise InputError(f"{len(labels)} labels for {len(args.tables)} files", field="--labels")
    from mbctl.rosbag import is_bag

    tables = [effort_table(p, args) if is_bag(p) else drive_table(p) if p.suffix == ".npz" else read_csv(p) for p in args.tables]
    plot_torque_tables(tables, labels, args.out, title=args.title)
    print(f"wrote {args.out}")
    return 0
