"""``mbctl description``: robot descriptions as ROS has them, turned into URDF files.

``fetch --out robot.urdf``: the URDF a running ROS 2 system publishes on ``/robot_description``
(latched, as robot_state_publisher and ``mbctl emulate --bus ros2`` publish it), waited for at
most ``--timeout`` s; nothing published: one line, exit 2. ``expand ARM.urdf.xacro --out arm.urdf``:
a xacro file expanded with ``--xacro-arg name:=value`` as every command that loads a robot expands
it. Either file is written whole or not at all; a robot TOML then names it (``urdf = "robot.urdf"``)
and adds what URDF cannot say.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from mbctl.cli.arguments import add_xacro_option, xacro_args_of
from mbctl.errors import InputError
from mbctl.fileio import atomic_output, check_output

URDF = (".urdf",)


def add_arguments(p: argparse.ArgumentParser) -> None:
    actions = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    f = actions.add_parser("fetch", help="write the URDF a running ROS 2 system publishes on /robot_description")
    f.add_argument("--out", type=Path, required=True, help="URDF file to write (.urdf)")
    f.add_argument("--topic", default="/robot_description", help="std_msgs/msg/String topic of the description (default /robot_description)")
    f.add_argument("--timeout", type=float, default=10.0, help="longest wait for it in s (default 10)")
    f.add_argument("--domain-id", type=int, help="ROS 2 domain (default: ROS_DOMAIN_ID, else 0)")
    f.set_defaults(run=run_fetch)
    e = actions.add_parser("expand", help="write the URDF of a xacro file (.urdf.xacro, .xacro)")
    e.add_argument("xacro", type=Path, help="xacro file to expand")
    add_xacro_option(e)
    e.add_argument("--out", type=Path, required=True, help="URDF file to write (.urdf)")
    e.set_defaults(run=run_expand)


def run_fetch(args: argparse.Namespace) -> int:
    from mbctl.hardware.ros2.description import fetch_description

    check_output(args.out, URDF)
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        raise InputError(f"must be a finite number > 0, got {args.timeout!r}", field="--timeout")
    if args.domain_id is not None and not 0 <= args.domain_id <= 232:
        raise InputError(f"a ROS 2 domain id is 0 to 232, got {args.domain_id}", field="--domain-id")
    found = fetch_description(args.topic, args.timeout, domain_id=args.domain_id)
    with atomic_output(args.out) as tmp:
        tmp.write_text(found.urdf)
    print(f"{args.topic}: robot {found.robot!r}, {found.links} links, {found.joints} joints (came after {found.wait_s:.2f} s)")
    print(f"wrote {args.out}")
    return 0


def run_expand(args: argparse.Namespace) -> int:
    from mbctl.xacro_files import expand_xacro, is_xacro

    check_output(args.out, URDF)
    if not is_xacro(args.xacro):
        raise InputError("not a xacro file (.xacro, .urdf.xacro)", file=args.xacro)
    text = expand_xacro(args.xacro, xacro_args_of(args))
    with atomic_output(args.out) as tmp:
        tmp.write_text(text)
    print(f"wrote {args.out}")
    return 0
