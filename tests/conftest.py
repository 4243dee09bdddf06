"""Shared fixtures: the bundled robots and an in-process runner for the CLI."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mbctl.cli import main
from mbctl.dynamics.model.robot import RobotModel, load_robot

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


@pytest.fixture(scope="session", autouse=True)
def codegen_cache(tmp_path_factory) -> Iterator[Path]:
    """Compiled controllers go to a per-session directory, never to the user's cache."""
    path = tmp_path_factory.mktemp("codegen")
    mp = pytest.MonkeyPatch()
    mp.setenv("MBCTL_CODEGEN_CACHE", str(path))
    yield path
    mp.undo()


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
