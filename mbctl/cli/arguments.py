"""Argument types shared by the sub-commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from mbctl.budget import Budget, memory_budget
from mbctl.bundled import resolve_config
from mbctl.errors import ConfigError

__all__ = ["robot_config", "budget", "add_bag_arguments", "bag_options"]


def budget(args: argparse.Namespace) -> Budget:
    """The memory budget of this command line (``--memory-budget``, ``$MBCTL_MEMORY_BUDGET`` or half the available memory)."""
    return memory_budget(getattr(args, "memory_budget", None))


def robot_config(text: str) -> Path:
    """A robot TOML path, or the name of a bundled robot (``scara``, ``ur5``, ...) turned into its path."""
    try:
        return resolve_config(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
