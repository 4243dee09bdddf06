"""The ``mbctl`` command line: parses arguments, runs one sub-command, maps errors to exit codes.

Exit codes: 0 success, 2 bad input (file, field or argument; one line on stderr),
1 any other mbctl error, 130 interrupted.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from mbctl import __version__
from mbctl.cli.commands import (
    demo,
    emulate,
    feedforward,
    identify,
    plot,
    run,
    simulate,
    trajectory,
    variants,
)
from mbctl.errors import InputError, MbctlError

__all__ = ["main", "build_parser"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mbctl", description="Model-based control of robot arms.")
    parser.add_argument("--version", action="version", version=f"mbctl {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in (demo, feedforward, trajectory, plot, simulate, run, emulate, identify, variants):
        command.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except InputError as exc:
        print(f"mbctl: error: {exc}", file=sys.stderr)
        return 2
    except MbctlError as exc:
        print(f"mbctl: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mbctl: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
