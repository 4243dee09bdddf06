"""``--view``: the live MeshCat view of ``mbctl run`` and ``mbctl simulate`` (:mod:`mbctl.viz.live`).

The view opens before the run and its URL is printed; it follows the run from a process of its
own. After the run it shows the final pose: when stdin is a terminal the command waits for
Enter (or Ctrl-C) before closing it; otherwise (scripts, tests) it closes with the command.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mbctl.dynamics.model.robot import RobotModel
    from mbctl.viz.live import LiveView

__all__ = ["add_view_option", "check_run_view", "close_view", "open_view"]


def add_view_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--view", action="store_true", help="follow the run in a live 3-D view (prints its URL; after the run, Enter closes it)")


def check_run_view(robot: RobotModel, args: argparse.Namespace) -> None:
    """Before a closed-loop run: ``--view`` follows its log, which holds the actuated joints only, so
    the robot must have no passive or elastic DOF (refused naming ``--view``)."""
    if args.view:
        from mbctl.viz.live import check_log_view

        check_log_view(robot, "--view")


def open_view(robot: RobotModel, args: argparse.Namespace, log: Path | None = None) -> LiveView | None:
    """The :class:`~mbctl.viz.live.LiveView` of ``--view`` (``None`` without it), its URL printed.

    ``log``: a closed-loop run's log, followed as it is written (see :func:`check_run_view`).
    """
    if not args.view:
        return None
    from mbctl.viz.live import LiveView

    view = LiveView(robot, log=log, magnification=args.magnify)
    print(f"live view: {view.url}", flush=True)
    return view


def close_view(view: LiveView | None) -> None:
    """After the run: wait for Enter when stdin is a terminal, then close the view."""
    if view is None:
        return
    if sys.stdin.isatty():
        print(f"live view: {view.url} shows the end of the run; press Enter to close it", flush=True)
        with contextlib.suppress(KeyboardInterrupt, EOFError):
            input()
    view.close()
