"""Argument types shared by the sub-commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from mbctl.budget import ANNOUNCE_S, TIME_OPTION, Budget, check_run_time, format_count, format_duration, memory_budget, parse_duration
from mbctl.bundled import resolve_config
from mbctl.errors import ConfigError

__all__ = ["robot_config", "add_xacro_option", "xacro_args_of", "budget", "add_bag_arguments", "bag_options", "add_time_limit", "check_estimate"]


def budget(args: argparse.Namespace) -> Budget:
    """The memory budget of this command line (``--memory-budget``, ``$MBCTL_MEMORY_BUDGET`` or half the available memory)."""
    return memory_budget(getattr(args, "memory_budget", None))


def robot_config(text: str) -> Path:
    """A robot TOML path, or the name of a bundled robot (``scara``, ``ur5``, ...) turned into its path."""
    try:
        return resolve_config(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def add_xacro_option(p: argparse.ArgumentParser) -> None:
    """``--xacro-arg name:=value`` (repeatable): arguments of a robot described in xacro (:mod:`mbctl.xacro_files`)."""
    p.add_argument(
        "--xacro-arg", action="append", default=[], metavar="NAME:=VALUE", dest="xacro_arg",
        help="an argument of the robot's xacro description (repeatable; over the TOML's [xacro] table)",
    )


def xacro_args_of(args: argparse.Namespace) -> dict[str, str] | None:
    """The ``--xacro-arg`` arguments of a command line (None when none was given).

    Raises:
        InputError: Naming ``--xacro-arg``, for an item that is not ``name:=value``.
    """
    from mbctl.xacro_files import parse_xacro_args

    items = getattr(args, "xacro_arg", None) or []
    return parse_xacro_args(items) if items else None


def add_bag_arguments(p: argparse.ArgumentParser) -> None:
    """``--topic`` and ``--stamps``: how a log given as a ROS 2 bag is read (:mod:`mbctl.rosbag`)."""
    p.add_argument("--topic", help="a bag's sensor_msgs/msg/JointState topic (default: /joint_states, or the bag's only JointState topic)")
    p.add_argument(
        "--stamps", choices=("header", "receive"), default="header",
        help="a bag's time: the messages' header stamps (default) or the bag's receive times",
    )


def bag_options(args: argparse.Namespace):  # noqa: ANN201  (mbctl.rosbag.BagOptions: numpy loads with it)
    """The bag options of a command line with :func:`add_bag_arguments`."""
    from mbctl.rosbag import BagOptions

    return BagOptions(topic=args.topic, stamps=args.stamps)


def add_time_limit(p: argparse.ArgumentParser) -> None:
    """``--time-limit DURATION`` (:mod:`mbctl.budget`: runs estimated longer are refused before they start)."""
    p.add_argument(
        TIME_OPTION,
        metavar="DURATION",
        default="24h",
        help="refuse a run estimated (by timing its first steps here) to take longer, e.g. 90min, 48h, 3d, or none "
        "(default 24h); an estimate above a minute is printed before the run starts",
    )


def check_estimate(args: argparse.Namespace, estimate, *, what: str, field: str, file: Path | None = None) -> None:
    """Refuse a run whose :class:`~mbctl.dynamics.simulation.pilot.RunTimeEstimate` is above ``--time-limit``
    (naming ``field``, the option or file field that sets its size); print it when above a minute.
    No estimate (None: the pilot failed, and the run will say why) passes."""
    limit = parse_duration(args.time_limit, field=TIME_OPTION)
    if estimate is None:
        return
    timed = f"{format_count(estimate.units)} {estimate.unit} at {estimate.per_unit_s * 1e6:.3g} µs each, timed on {estimate.timed} here"
    check_run_time(estimate.seconds, limit, what=f"{what} ({timed})", field=field, file=file)
    if estimate.seconds > ANNOUNCE_S:
        print(f"{what}: estimated run time {format_duration(estimate.seconds)} ({timed})", flush=True)
