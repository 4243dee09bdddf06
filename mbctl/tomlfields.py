"""Typed, located access to TOML tables, so every bad field gives a one-line error.

Each layer parses its own tables (``[joints]`` in dynamics, ``[control]`` in ctrl,
...) through :class:`Table`, which knows the file and the dotted path of the table
and raises :class:`~mbctl.errors.ConfigError` naming both.
"""

from __future__ import annotations

import difflib
import math
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from mbctl.errors import ConfigError

__all__ = ["Table", "read_toml"]

_MISSING: Any = object()


def read_toml(path: str | Path) -> Table:
    """Parse a TOML file into a root :class:`Table`.

    Raises:
        ConfigError: If the file is missing, unreadable or not valid TOML.
    """
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigError("file not found", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read file ({exc.__class__.__name__})", file=path) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"malformed TOML: {exc}", file=path) from None
    return Table(data, path, "")


def _suggest(name: str, options: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(options), n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


class Table:
    """A TOML table together with the file it came from and its dotted location."""

    def __init__(self, data: dict[str, Any], file: Path, where: str):
        self.data = data
        self.file = file
        self.where = where

    def path(self, key: str | None = None) -> str | None:
        """Dotted name of ``key`` in this table (or of the table itself)."""
        if key is None:
            return self.where or None
        return f"{self.where}.{key}" if self.where else key

    def error(self, key: str | None, reason: str) -> ConfigError:
        """A :class:`ConfigError` located at ``key`` of this table."""
        return ConfigError(reason, file=self.file, field=self.path(key))

    def __contains__(self, key: str) -> bool:
        return key in self.data

    def keys(self) -> list[str]:
        return list(self.data)

    def only(self, allowed: Iterable[str]) -> None:
        """Reject keys not in ``allowed`` (catches typos such as ``frcition``)."""
        allowed = list(allowed)
        for key in self.data:
            if key not in allowed:
                raise self.error(key, f"unknown field (expected one of: {', '.join(allowed)}){_suggest(key, allowed)}")

    def get(self, key: str, default: Any = _MISSING) -> Any:
        if key in self.data:
            return self.data[key]
        if default is _MISSING:
            raise self.error(key, "missing required field")
        return default

    def number(self, key: str, default: Any = _MISSING) -> float:
        """A finite real number (TOML integer or float)."""
        value = self.get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise self.error(key, f"must be a finite number, got {value!r}")
        return float(value)

    def string(self, key: str, default: Any = _MISSING, choices: Sequence[str] | None = None) -> str:
        """A string, optionally one of ``choices``."""
        value = self.get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, str):
            raise self.error(key, f"must be a string, got {value!r}")
        if choices is not None and value not in choices:
            raise self.error(key, f"unknown value {value!r} (expected one of: {', '.join(choices)}){_suggest(value, choices)}")
        return value

    def boolean(self, key: str, default: Any = _MISSING) -> bool:
        value = self.get(key, default)
        if not isinstance(value, bool):
            raise self.error(key, f"must be true or false, got {value!r}")
        return value

    def vector(self, key: str, size: int | None = None, default: Any = _MISSING) -> np.ndarray:
        """An array of finite numbers, of length ``size`` when given."""
        value = self.get(key, default)
        if value is default and default is not _MISSING:
            return value
        ok = isinstance(value, list) and all(
            not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v) for v in value
        )
        if not ok or (size is not None and len(value) != size):
            shape = f"{size} finite numbers" if size is not None else "a list of finite numbers"
            raise self.error(key, f"must be {shape}, got {value!r}")
        return np.array(value, dtype=float)

    def table(self, key: str, default: Any = _MISSING) -> Table:
        """A sub-table (``[a.b]`` or an inline table)."""
        value = self.get(key, default)
        if value is default and default is not _MISSING:
            return value
        if not isinstance(value, dict):
            raise self.error(key, f"must be a table, got {value!r}")
        return Table(value, self.file, self.path(key) or key)

    def tables(self) -> Iterator[tuple[str, Table]]:
        """Iterate over the sub-tables of this table (every value must be a table)."""
        for key in self.data:
            yield key, self.table(key)

    def per_joint(self, key: str, default: Any = _MISSING) -> float | dict[str, float]:
        """One number for every joint, or a table of numbers by joint name (names not checked here)."""
        value = self.get(key, default)
        if value is default and default is not _MISSING:
            return value
        if isinstance(value, dict):
            sub = self.table(key)
            return {name: sub.number(name) for name in sub.keys()}
        return self.number(key)

    def numbers(self, names: Iterable[str]) -> dict[str, float]:
        """The given keys, those present, as numbers."""
        return {name: self.number(name) for name in names if name in self.data}
