"""The ``mbctl`` command line: parses arguments, runs one sub-command, maps errors to exit codes.

Exit codes: 0 success, 2 bad input (file, field or argument; one line on stderr),
1 any other mbctl error, 130 interrupted (SIGINT), 143 terminated (SIGTERM). A signal
unwinds the command like an error: outputs are written whole or not at all, and a
closed loop, which handles both signals itself, stops with torque off and its log.
Both handlers are installed before anything else is imported, and SIGINT is handled
even when mbctl was started with it ignored (a background job of a shell script
inherits an ignored SIGINT, and Python then keeps ignoring it: a Ctrl-C or ``kill -INT``
would be lost and the run would complete).

``--memory-budget SIZE`` (anywhere on the line, for every command) raises or lowers the
memory a request may hold (:mod:`mbctl.budget`; default ``$MBCTL_MEMORY_BUDGET``, else
half of the available memory): sizes are checked before any work starts.

Only the chosen sub-command's module is imported (``mbctl --help`` imports none of
them), so the numerical stack loads only when a command needs it.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
import threading
from collections.abc import Sequence

from mbctl import __version__
from mbctl.budget import OPTION as BUDGET_OPTION
from mbctl.errors import InputError, MbctlError

__all__ = ["COMMANDS", "main", "build_parser"]

# name -> one-line help; the module mbctl.cli.commands.<name> has add_arguments(parser) and run(args)
COMMANDS = {
    "demo": "feed-forward torques and a closed-loop run on the bundled SCARA (main job)",
    "feedforward": "feed-forward torques along a trajectory",
    "trajectory": "generate a trajectory CSV",
    "plot": "compare torque CSVs in one figure",
    "simulate": "simulate constrained dynamics ([[constraints]], [simulation] of a robot TOML)",
    "run": "closed-loop run against the simulated plant or real drives",
    "observe": "external joint torques and collisions in a log (momentum observer)",
    "emulate": "emulate the robot's Dynamixel bus on a pty, CANopen drives, or a ros2_control arm",
    "identify": "friction identification: run experiments, fit logs",
    "commission": "commission an arm: pre-flight, friction, excitation, identification, verification, report",
    "variants": "simulate rigid/flexible base x rigid/flexible links x with/without friction and compare",
    "animate": "a run in 3-D as a self-contained HTML page",
    "constraints": "constraint analysis: rows, ranks, redundancy, mobility, unique reactions",
    "sweep": "parameter study (grids, Monte Carlo) on dask.distributed: one table row per run",
    "flexfeed": "rigid-model drive torques fed forward into flexible FEM levers (the flexible 3-RRR)",
    "convert": "a run log as MCAP (ROS 2 messages, for Foxglove), or a ROS 2 bag as a log CSV",
    "description": "a robot's URDF from a running ROS 2 system (/robot_description) or a xacro file",
}


def _chosen(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (the first argument that is not an option)."""
    return next((a for a in argv if not a.startswith("-")), None)


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser for ``argv``: full arguments for the command it names, a stub for the others."""
    parser = argparse.ArgumentParser(prog="mbctl", description="Model-based control of robot arms.")
    parser.add_argument("--version", action="version", version=f"mbctl {__version__}")
    parser.add_argument(
        BUDGET_OPTION,
        metavar="SIZE",
        help="memory a request may hold, e.g. 8G (any command, anywhere on the line; default: $MBCTL_MEMORY_BUDGET, "
        "else half of the available memory); larger requests are refused before they start",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    chosen = _chosen(argv)
    for name, help_text in COMMANDS.items():
        if name == chosen:
            module = importlib.import_module(f"mbctl.cli.commands.{name}")
            module.add_arguments(sub.add_parser(name, help=help_text, description=module.__doc__))
        else:
            sub.add_parser(name, help=help_text)
    return parser


class _Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the program is, so that it unwinds like Ctrl-C."""


def _interrupt(signum: int, frame: object) -> None:
    raise _Terminated() if signum == signal.SIGTERM else KeyboardInterrupt()


def _install_handlers() -> dict[int, object]:
    """Raise on SIGINT and SIGTERM from now on; returns the handlers to restore (none off the main thread)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, _interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}


def _take_budget(argv: list[str]) -> tuple[list[str], str | None]:
    """``argv`` without ``--memory-budget SIZE`` (or ``--memory-budget=SIZE``), wherever it stands, and SIZE."""
    rest, size = [], None
    items = iter(argv)
    for arg in items:
        if arg == BUDGET_OPTION:
            size = next(items, None)
            if size is None:
                raise InputError("expected a size such as 8G", field=BUDGET_OPTION)
        elif arg.startswith(BUDGET_OPTION + "="):
            size = arg.partition("=")[2]
        else:
            rest.append(arg)
    return rest, size


# the robot clients whose class says, in ``opened``, that this process used them: (module, class)
_ROBOT_CLIENTS = (("mbctl.hardware.ros2.runtime", "Ros2Runtime"), ("mbctl.hardware.franka.arm", "FrankaArm"))


def _used_a_robot_client() -> bool:
    return any(getattr(getattr(sys.modules.get(module), name, None), "opened", False) for module, name in _ROBOT_CLIENTS)


def main(argv: Sequence[str] | None = None) -> int:
    code = _main(sys.argv[1:] if argv is None else list(argv))
    if argv is None and _used_a_robot_client():
        # a process of its own that talked to a robot through a C++ client, its results written: end it
        # now. The interpreter's own teardown (Fast DDS's, libfranka's and the C++ modules' destructors)
        # takes 0.2-0.8 s, which a run that stopped on a dead robot must not spend before its exit
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a reader gone, a stream closed: nothing left to say
                pass
        os._exit(code)
    return code


def _main(argv: list[str]) -> int:
    previous = _install_handlers()  # first: a signal during the imports below must count too
    try:
        argv, budget = _take_budget(argv)
        args = build_parser(argv).parse_args(argv)
        args.memory_budget = budget
        return args.run(args)
    except InputError as exc:
        print(f"mbctl: error: {exc}", file=sys.stderr)
        return 2
    except MbctlError as exc:
        print(f"mbctl: error: {exc}", file=sys.stderr)
        return 1
    except BrokenPipeError:  # the reader went away (mbctl ... | head): nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit flush does not fail again
        return 141
    except KeyboardInterrupt as exc:  # a command may add what it kept: raise type(exc)("detail")
        detail = f": {exc}" if str(exc) else ""
        terminated = isinstance(exc, _Terminated)
        print(f"mbctl: {'terminated (SIGTERM)' if terminated else 'interrupted'}{detail}", file=sys.stderr)
        return 143 if terminated else 130
    finally:
        for sig, handler in previous.items():
            if handler is not None:  # None: installed outside Python, cannot be put back
                signal.signal(sig, handler)
