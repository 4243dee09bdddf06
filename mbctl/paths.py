"""Where the bundled robot descriptions live (``configs/`` of the source checkout)."""

from __future__ import annotations

from pathlib import Path

from mbctl.errors import ConfigError

__all__ = ["CONFIG_DIR", "bundled_config"]

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


def bundled_config(name: str) -> Path:
    """Path of ``configs/<name>.toml``.

    Raises:
        ConfigError: If the file is not there (mbctl installed without its checkout).
    """
    path = CONFIG_DIR / f"{name}.toml"
    if not path.is_file():
        raise ConfigError("bundled config not found; install mbctl from its source checkout (pip install -e .)", file=path)
    return path
