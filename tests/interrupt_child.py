"""Test helper: ``python interrupt_child.py HOOK N SIGNUM ARGS...`` runs ``mbctl ARGS`` and sends SIGNUM at the N-th call of HOOK.

Each hook is a function every command calls at one phase of its life; the signal goes to this
process just before the N-th call once mbctl's main has started (and, for ``compile``, to the compiler too, through the
process group, as a Ctrl-C at a terminal does), so it lands at that phase whatever the
machine's speed. ``mbctl-test: signal at HOOK #N`` on stderr says that it was sent. Used by
tests/test_interrupts.py (not collected: no test_ prefix).
"""

from __future__ import annotations

import importlib
import os
import sys


def _target(hook: str) -> tuple[object, str]:
    """The object and attribute that HOOK wraps (imported here, before mbctl's command modules bind them)."""
    if hook == "import":  # main importing the command's module (numpy, pinocchio, casadi load here)
        return importlib, "import_module"
    if hook == "codegen":  # CasADi writing the C code of a function
        import casadi

        return casadi.CodeGenerator, "dump"
    if hook == "compile":  # waiting for the C compiler (and its version query)
        import subprocess

        return subprocess.Popen, "communicate"
    if hook == "chunk":  # a compiled call: RK4 steps, a recorded sample's diagnostics
        from mbctl.dynamics.codegen import CompiledFunction

        return CompiledFunction, "eval"
    if hook == "progress":  # between integration chunks, as the progress line is printed
        from mbctl.cli.console import ProgressPrinter

        return ProgressPrinter, "__call__"
    if hook == "record":  # a batch of recorded samples appended to the partial NPZ
        from mbctl.fileio import NpzParts

        return NpzParts, "append"
    if hook == "write":  # writing an array into an NPZ output (before its rename into place)
        import zipfile

        return zipfile.ZipFile, "open"
    if hook == "csv":  # writing a CSV output
        import numpy

        return numpy, "savetxt"
    if hook == "rename":  # the atomic rename of a finished output
        return os, "replace"
    if hook == "cluster":  # a Dask worker starting (cluster start-up)
        from distributed.nanny import Nanny

        return Nanny, "start_unsafe"
    if hook == "tasks":  # a task being submitted to the cluster
        from distributed import Client

        return Client, "submit"
    raise SystemExit(f"unknown hook {hook!r}")


def main() -> int:
    hook, nth, signum, args = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    owner, name = _target(hook)
    original = getattr(owner, name)
    calls = [0]
    armed = [False]  # calls count from main on: before it, Python's own start-up is not mbctl's to handle

    def wrapper(*a, **k):
        calls[0] += armed[0]
        if armed[0] and calls[0] == nth:
            print(f"mbctl-test: signal at {hook} #{nth}", file=sys.stderr, flush=True)
            if hook == "compile":
                os.killpg(os.getpgrp(), signum)
            else:
                os.kill(os.getpid(), signum)
        return original(*a, **k)

    setattr(owner, name, wrapper)
    from mbctl.cli import main as mbctl_main

    armed[0] = True
    return mbctl_main(args)


if __name__ == "__main__":
    sys.exit(main())
