"""Locating and parsing URDF files: paths relative to the config, or bundled robots.

``urdf = "example-robot-data:ur5"`` names a robot of the ``example-robot-data``
package, which installs its URDFs as data under ``cmeel.prefix/share/`` (no Python
module); the file is found offline through the package's installed-file list.
"""

from __future__ import annotations

import difflib
import importlib.metadata
from functools import cache
from pathlib import Path

import pinocchio as pin

from mbctl.errors import ConfigError

__all__ = ["resolve_urdf", "example_robot_urdfs", "parse_urdf", "EXAMPLE_ROBOT_DATA"]

EXAMPLE_ROBOT_DATA = "example-robot-data"


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


def parse_urdf(path: Path) -> pin.Model:
    """Build the pinocchio model of a fixed-base URDF (no meshes needed).

    Raises:
        ConfigError: If pinocchio cannot parse the file.
    """
    try:
        return pin.buildModelFromUrdf(str(path))
    except (ValueError, RuntimeError) as exc:
        first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else exc.__class__.__name__
        raise ConfigError(f"invalid URDF: {first_line}", file=path) from None
