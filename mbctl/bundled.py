"""Robot files by name: the bundled descriptions (package data ``mbctl.configs``) and the URDFs of
example-robot-data (``urdf = "example-robot-data:ur5"``), which that package installs as data under
``cmeel.prefix/share/`` with no Python module; they are found offline through its installed-file list."""

from __future__ import annotations

import difflib
import importlib.metadata
from functools import cache
from importlib.resources import files
from pathlib import Path

from mbctl.errors import ConfigError

__all__ = [
    "EXAMPLE_ROBOT_DATA",
    "bundled_config",
    "bundled_names",
    "bundled_servo_logs",
    "bundled_study",
    "example_robot_urdfs",
    "resolve_config",
    "resolve_urdf",
]

EXAMPLE_ROBOT_DATA = "example-robot-data"


def _config_dir() -> Path:
    return Path(str(files("mbctl.configs")))


def bundled_names() -> tuple[str, ...]:
    """Names of the bundled robot descriptions, e.g. ``("fourbar", ..., "ur5")``."""
    return tuple(sorted(p.stem for p in _config_dir().glob("*.toml")))


def bundled_servo_logs(name: str) -> list[Path]:
    """The logs of the bundled servo bench ``name`` (``configs/servo-logs/<name>/``, with its NOTICE.md).

    Raises:
        ConfigError: If there is no such bench (the message lists them).
    """
    root = _config_dir() / "servo-logs"
    logs = sorted((root / name).glob("*.json.gz")) if name and (root / name).is_dir() else []
    if not logs:
        names = sorted(p.name for p in root.iterdir() if p.is_dir()) if root.is_dir() else []
        raise ConfigError(f"no log file or bundled servo logs named {name!r}; bundled: {', '.join(names)}", file=name)
    return logs


def bundled_study(name: str) -> Path:
    """A study file given as a path, or the name of a bundled one (``configs/studies/<name>.toml``).

    Raises:
        ConfigError: If neither exists (the message lists the bundled studies).
    """
    path = Path(name)
    if path.exists() or path.suffix or len(path.parts) != 1:
        return path
    root = _config_dir() / "studies"
    found = root / f"{name}.toml"
    if not found.is_file():
        names = sorted(p.stem for p in root.glob("*.toml"))
        raise ConfigError(f"no study file or bundled study named {name!r}; bundled: {', '.join(names)}", file=name)
    return found


def bundled_config(name: str) -> Path:
    """Path of the bundled description ``<name>.toml``, or of the bench of the bundled servo
    logs ``<name>`` (``servo-logs/<name>/bench.toml``).

    Raises:
        ConfigError: If no bundled description has that name (the message lists them).
    """
    path = _config_dir() / f"{name}.toml"
    if not path.is_file() and name and (_config_dir() / "servo-logs" / name / "bench.toml").is_file():
        path = _config_dir() / "servo-logs" / name / "bench.toml"
    if not path.is_file():
        raise ConfigError(f"no bundled robot named {name!r}; bundled robots: {', '.join(bundled_names())}", file=name)
    return path


def resolve_config(config: str | Path) -> Path:
    """A robot description given as a TOML path or as the name of a bundled one.

    An existing file wins; a bare name without a suffix or folder (``"scara"``) is
    looked up among the bundled descriptions. Anything else is returned unchanged,
    so that the reader reports the missing file by its path.
    """
    path = Path(config)
    if path.exists() or path.suffix or len(path.parts) != 1:
        return path
    return bundled_config(str(config))


@cache
def example_robot_urdfs() -> dict[str, Path]:
    """Map robot name -> URDF path for every URDF installed by example-robot-data.

    A file ``ur5_robot.urdf`` is reachable as ``ur5_robot`` and, when unambiguous,
    as ``ur5``.
    """
    try:
        dist = importlib.metadata.distribution(EXAMPLE_ROBOT_DATA)
    except importlib.metadata.PackageNotFoundError:
        return {}
    paths = [Path(dist.locate_file(f)) for f in dist.files or () if str(f).endswith(".urdf")]
    table: dict[str, Path] = {p.stem: p for p in paths}
    for p in paths:
        if p.stem.endswith("_robot"):
            table.setdefault(p.stem.removesuffix("_robot"), p)
    return table


def resolve_urdf(spec: str, relative_to: Path, *, file: Path | None = None) -> Path:
    """Turn the ``urdf`` field of a robot TOML into an existing file path.

    Args:
        spec: A path (absolute, or relative to ``relative_to``) or
            ``"example-robot-data:<name>"``.
        relative_to: Directory of the TOML file.
        file: The TOML file, for error messages.

    Raises:
        ConfigError: If the file or the named robot cannot be found.
    """
    prefix = f"{EXAMPLE_ROBOT_DATA}:"
    if spec.startswith(prefix):
        name = spec[len(prefix) :]
        robots = example_robot_urdfs()
        if not robots:
            raise ConfigError(f"package {EXAMPLE_ROBOT_DATA} is not installed (pip install {EXAMPLE_ROBOT_DATA})", file=file, field="urdf")
        if name not in robots:
            close = difflib.get_close_matches(name, robots, n=3)
            hint = f"; close names: {', '.join(close)}" if close else ""
            raise ConfigError(f"no robot {name!r} in {EXAMPLE_ROBOT_DATA}{hint}", file=file, field="urdf")
        return robots[name]
    path = Path(spec)
    if not path.is_absolute():
        path = relative_to / path
    if not path.is_file():
        raise ConfigError(f"URDF file not found: {path}", file=file, field="urdf")
    return path
