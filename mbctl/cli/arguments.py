"""Argument types shared by the sub-commands."""

from __future__ import annotations

import argparse
from pathlib import Path

from mbctl.budget import Budget, memory_budget
from mbctl.bundled import resolve_config
from mbctl.errors import ConfigError

__all__ = ["robot_config", "budget"]


def budget(args: argparse.Namespace) -> Budget:
    """The memory budget of this command line (``--memory-budget``, ``$MBCTL_MEMORY_BUDGET`` or half the available memory)."""
    return memory_budget(getattr(args, "memory_budget", None))


def robot_config(text: str) -> Path:
    """A robot TOML path, or the name of a bundled robot (``scara``, ``ur5``, ...) turned into its path."""
    try:
        return resolve_config(text)
    except ConfigError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
