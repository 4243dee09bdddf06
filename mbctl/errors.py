"""Exception hierarchy shared by every layer.

Every error mbctl raises on purpose derives from :class:`MbctlError`. Errors caused
by what a user gave us (a file, a field, a value) are :class:`InputError`\\ s: they
carry the file and field so the command line can print one precise line and exit
with status 2.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["MbctlError", "InputError", "ConfigError", "DataError", "OutsideLimits"]


class MbctlError(Exception):
    """Root of all mbctl errors."""


class InputError(MbctlError):
    """Bad user input: a file that is missing or malformed, or a field with a bad value.

    Attributes:
        file: The file the bad input came from, or None when it came from code.
        field: Dotted name of the offending field (``joints.j1.friction.fs``,
            column ``q.j2``), or None when the whole file is at fault.
        reason: What is wrong, in a few words.
    """

    def __init__(self, reason: str, *, file: str | Path | None = None, field: str | None = None):
        self.file = None if file is None else Path(file)
        self.field = field
        self.reason = reason
        super().__init__(self._render())

    def _render(self) -> str:
        where = []
        if self.file is not None:
            where.append(str(self.file))
        if self.field:
            where.append(self.field)
        return f"{': '.join(where)}: {self.reason}" if where else self.reason

    def located(self, *, file: str | Path | None = None, prefix: str | None = None) -> InputError:
        """Return a copy of this error placed in ``file`` with ``prefix`` prepended to its field."""
        field = self.field
        if prefix:
            field = f"{prefix}.{field}" if field else prefix
        return type(self)(self.reason, file=file if file is not None else self.file, field=field)


class ConfigError(InputError):
    """A robot or experiment description (TOML, URDF) is missing, malformed or non-physical."""


class DataError(InputError):
    """A data file (trajectory or log CSV) is missing, malformed or holds non-finite numbers."""


class OutsideLimits(InputError):
    """A pose asked of the robot lies outside a joint's position range.

    Attributes:
        joint: The joint's name.
        value: The position asked (rad or m).
        limit: The limit it passes (rad or m): the lower one for a value below it, else the upper one.
    """

    def __init__(
        self, reason: str, *, file: str | Path | None = None, field: str | None = None, joint: str = "", value: float = math.nan, limit: float = math.nan
    ):
        super().__init__(reason, file=file, field=field)
        self.joint, self.value, self.limit = joint, value, limit

    def located(self, *, file: str | Path | None = None, prefix: str | None = None) -> OutsideLimits:
        """The same error placed in ``file`` with ``prefix`` prepended to its field, the joint's data kept."""
        moved = super().located(file=file, prefix=prefix)
        return OutsideLimits(moved.reason, file=moved.file, field=moved.field, joint=self.joint, value=self.value, limit=self.limit)
