"""``--publish``: live output of ``mbctl run`` and ``mbctl simulate`` on ROS 2 (:mod:`mbctl.hardware.ros2.publish`).

The publisher starts before the run (its topics and domain are printed), follows it from a process
of its own and, after the run, publishes what is left before the command goes on.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from mbctl.cli.console import warn

if TYPE_CHECKING:
    from mbctl.dynamics.model.robot import RobotModel
    from mbctl.hardware.ros2.publish import LivePublisher

__all__ = ["add_publish_options", "close_publisher", "open_publisher"]

DEFAULT_RATE_HZ = 100.0  # mbctl.hardware.ros2.publish.DEFAULT_RATE_HZ (not imported: --help stays light)


def add_publish_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--publish", action="store_true",
        help="put the run on ROS 2 while it goes (/joint_states, /joint_commands, /diagnostics, /tf where available) for RViz, Foxglove, "
        "PlotJuggler; domain from ROS_DOMAIN_ID",
    )
    p.add_argument("--publish-rate", type=float, default=DEFAULT_RATE_HZ, metavar="HZ", help=f"with --publish: highest message rate per topic in Hz (default {DEFAULT_RATE_HZ:g})")


def open_publisher(robot: RobotModel, args: argparse.Namespace, log: Path | None = None) -> LivePublisher | None:
    """The :class:`~mbctl.hardware.ros2.publish.LivePublisher` of ``--publish`` (None without it), its topics printed.

    ``log``: a closed-loop run's log, followed as the loop writes it; without it, a simulation's
    states come through :meth:`~mbctl.hardware.ros2.publish.LivePublisher.show`.
    """
    if not args.publish:
        return None
    from mbctl.hardware.ros2.publish import LivePublisher

    publisher = LivePublisher(robot, log=log, rate_hz=args.publish_rate)
    print(f"publishing on ROS 2 domain {publisher.domain_id}: {', '.join(publisher.topics)} (at most {args.publish_rate:g} Hz)", flush=True)
    for note in publisher.notes:
        warn(f"--publish: {note}")
    return publisher


def close_publisher(publisher: LivePublisher | None) -> None:
    """After the run: let the publisher finish and say what it published."""
    if publisher is None:
        return
    summary = publisher.close()
    if summary is None:
        warn("--publish: the publisher gave no summary (it stopped early)")
        return
    counts = ", ".join(f"{topic} {n}" for topic, n in summary.published.items())
    print(f"published on ROS 2: {counts}" + ("" if summary.acknowledged else " (not every subscriber acknowledged every message)"))
