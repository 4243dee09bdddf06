"""Shared fixtures: the bundled robots and an in-process runner for the CLI."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mbctl.cli import main
from mbctl.dynamics.model.robot import RobotModel, load_robot

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.fixture(scope="session", autouse=True)
def codegen_cache(tmp_path_factory) -> Iterator[Path]:
    """Compiled controllers go to one directory for the whole test run, never to the user's cache.

    Under pytest-xdist each worker's base temporary directory is a subdirectory of the run's
    (``.../pytest-N/popen-gw0``): the cache sits beside them, so a library one worker compiled
    is loaded by the others (the cache writes each file under a temporary name and renames it,
    so two workers compiling the same function at once leave one whole library)."""
    base = tmp_path_factory.getbasetemp()
    path = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "codegen"
    path.mkdir(exist_ok=True)
    mp = pytest.MonkeyPatch()
    mp.setenv("MBCTL_CODEGEN_CACHE", str(path))
    yield path
    mp.undo()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config) -> int:
    """``-n auto``: one worker per core this process may run on, at most 8 (each worker holds the
    numerical stack, and many tests start processes of their own)."""
    return max(1, min(len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1, 8))


@pytest.fixture(scope="session")
def configs() -> Path:
    return CONFIGS


@pytest.fixture(scope="session")
def robots() -> dict[str, RobotModel]:
    """The bundled robots, loaded once."""
    return {name: load_robot(CONFIGS / f"{name}.toml") for name in ("scara", "tree5", "ur5")}


@dataclass
class CliResult:
    code: int
    out: str
    err: str


@pytest.fixture
def cli(capsys):
    """Run ``mbctl ARGS`` in-process; returns exit code, stdout and stderr."""

    def run(*args: str | Path) -> CliResult:
        try:
            code = main([str(a) for a in args])
        except SystemExit as exc:  # argparse usage errors
            code = int(exc.code)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
