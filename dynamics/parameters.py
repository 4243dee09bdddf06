"""Base for small frozen dataclasses of physical parameters (friction laws, load models)."""

from __future__ import annotations

import math
from dataclasses import fields
from typing import ClassVar

from mbctl.errors import ConfigError

__all__ = ["Parameters"]


class Parameters:
    """Checks that every field is a finite real number, then runs :meth:`_validate`.

    Subclasses are frozen dataclasses with a ``name`` class variable; errors are
    :class:`~mbctl.errors.ConfigError` with the offending field, so a loader can
    place them in the file they came from.
    """

    name: ClassVar[str]

    def __post_init__(self) -> None:
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"must be a finite number, got {value!r}", field=f.name)
            object.__setattr__(self, f.name, float(value))
        self._validate()

    def _validate(self) -> None:
        """Check the physical ranges; raise via :meth:`_require`."""

    def _require(self, field: str, ok: bool, reason: str) -> None:
        if not ok:
            raise ConfigError(f"{reason} ({self.name})", field=field)

    def parameters(self) -> dict[str, float]:
        """The fields as a plain mapping, as they appear in the TOML file."""
        return {f.name: getattr(self, f.name) for f in fields(self)}  # type: ignore[arg-type]
