"""``mbctl observe ROBOT LOG --out OUT.csv``: the generalized-momentum observer over a recorded log.

Writes ``t``, ``tau_ext.<joint>`` (N·m, N), ``detected.<joint>`` and ``detected`` (1/0) and prints
each detection: its time, the joint and the peak. Thresholds come from the robot's
``[control.collision]`` unless ``--threshold`` gives them. Exit code 0 whether or not something
was detected (the output says which), 2 for bad input.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from mbctl.cli.arguments import add_bag_arguments, add_xacro_option, bag_options, robot_config, xacro_args_of
from mbctl.config.control import VELOCITY_ESTIMATORS
from mbctl.errors import InputError
from mbctl.fileio import check_output, write_csv


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name (its model and [control.collision])")
    add_xacro_option(p)
    p.add_argument("log", type=Path, help="log: CSV with t, q.<joint>, dq.<joint> (optional), tau.<joint>; an mbctl run log (.npz); or a ROS 2 bag")
    p.add_argument("--out", type=Path, required=True, help="table to write (.csv)")
    p.add_argument("--threshold", help="detection thresholds, N·m (N): one number, or joint=value,... (default: [control.collision])")
    p.add_argument("--velocity", choices=VELOCITY_ESTIMATORS, help="velocity the observer uses (default: the log's dq, else [control] velocity)")
    add_bag_arguments(p)
    p.set_defaults(run=run)


def parse_threshold(text: str | None) -> float | dict[str, float] | None:
    """``"5"`` or ``"j1=5,j2=3"`` as a number or a table by joint (bad text: an :class:`InputError`)."""
    if text is None:
        return None
    try:
        if "=" not in text:
            value: float | dict[str, float] = float(text)
            values = [value]
        else:
            value = {k.strip(): float(v) for k, v in (item.split("=", 1) for item in text.split(","))}
            values = list(value.values())
    except ValueError:
        raise InputError(f"expected a number or joint=value,... got {text!r}", field="--threshold") from None
    if not all(v > 0 for v in values):
        raise InputError("thresholds must be > 0", field="--threshold")
    return value


def run(args: argparse.Namespace) -> int:
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.identification.observe import observe_log, observer_table

    check_output(args.out, (".csv",))
    threshold = parse_threshold(args.threshold)
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    result = observe_log(robot, args.log, threshold=threshold, velocity=args.velocity, bag=bag_options(args))
    columns, data = observer_table(robot, result)
    write_csv(args.out, columns, data)
    print(f"{robot.name}: {len(result.t)} samples over {result.t[-1] - result.t[0]:.3f} s; thresholds "
          + ", ".join(f"{j} {v:.3g}" for j, v in zip(robot.joint_names, result.threshold)))
    for d in result.detections:
        print(f"detected at t = {d.start_s:.4f} s on {d.joint}: peak {d.peak:.3g} at {d.peak_s:.4f} s (until {d.end_s:.4f} s)")
    if not result.detections:
        print("no detection")
    print(f"wrote {args.out}")
    return 0
