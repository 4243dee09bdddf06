"""The bundled robot descriptions (package data ``mbctl.configs``), addressed by name or path."""

from __future__ import annotations

from importlib.resources import files
from pathlib import Path

from mbctl.errors import ConfigError

__all__ = ["bundled_names", "bundled_config", "resolve_config"]


def _config_dir() -> Path:
    return Path(str(files("mbctl.configs")))


def bundled_names() -> tuple[str, ...]:
    """Names of the bundled robot descriptions, e.g. ``("fourbar", ..., "ur5")``."""
    return tuple(sorted(p.stem for p in _config_dir().glob("*.toml")))


def bundled_config(name: str) -> Path:
    """Path of the bundled description ``<name>.toml``.

    Raises:
        ConfigError: If no bundled description has that name (the message lists them).
    """
    path = _config_dir() / f"{name}.toml"
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
