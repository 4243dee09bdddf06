"""``[base]``: a rigid or flexible base; a flexible one rests on spring–damper supports (SI units).

```toml
[base]
support = "flexible"          # rigid (default) | flexible
supports = [
    { name = "front_left", position = [0.3, 0.3, 0.0], stiffness = [2e6, 2e6, 5e6], damping = 800.0 },
    ...
]
```
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbctl.tomlfields import Table

__all__ = ["BaseSupport", "SupportPoint", "parse_base"]

BASE_KEYS = ("support", "supports")
SUPPORT_KEYS = ("name", "position", "stiffness", "damping")
SupportPoint = tuple[str, tuple[float, float, float], tuple[float, float, float], tuple[float, float, float]]
"""``(name, position m, stiffness N/m, damping N·s/m)`` of one support, x/y/z in the base frame."""


@dataclass(frozen=True, eq=False)
class BaseSupport:
    """The ``[base]`` table, parsed (SI units).

    Attributes:
        flexible: True for ``support = "flexible"``.
        names: Support point names.
        positions: (n, 3) support points in the base frame (m).
        stiffness: (n, 3) spring constants along x, y, z (N/m).
        damping: (n, 3) damper constants (N·s/m).
    """

    flexible: bool
    names: tuple[str, ...]
    positions: np.ndarray
    stiffness: np.ndarray
    damping: np.ndarray

    @classmethod
    def of(cls, points: list[SupportPoint], flexible: bool = True) -> BaseSupport:
        """Build from support points (no file needed)."""
        return cls(
            flexible=flexible,
            names=tuple(p[0] for p in points),
            positions=np.array([p[1] for p in points], dtype=float).reshape(-1, 3),
            stiffness=np.array([p[2] for p in points], dtype=float).reshape(-1, 3),
            damping=np.array([p[3] for p in points], dtype=float).reshape(-1, 3),
        )


def _triple(t: Table, key: str, default: float | None = None) -> np.ndarray:
    value = t.get(key, default)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
        raise t.error(key, f"must be a number or 3 finite numbers (x, y, z), got {value!r}")
    out = np.array(value, dtype=float)
    if (out < 0).any():
        raise t.error(key, f"must be >= 0, got {value!r}")
    return out


def parse_base(t: Table) -> BaseSupport:
    """Parse the ``[base]`` table.

    Raises:
        ConfigError: Naming file and field.
    """
    t.only(BASE_KEYS)
    flexible = t.string("support", "rigid", choices=["rigid", "flexible"]) == "flexible"
    items = t.get("supports", [])
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise t.error("supports", "must be an array of tables ([[base.supports]])")
    if flexible and not items:
        raise t.error("supports", "a flexible base needs at least one support point ([[base.supports]])")
    names, positions, stiffness, damping = [], [], [], []
    for i, item in enumerate(items):
        st = Table(item, t.file, f"{t.path('supports')}[{i}]")
        st.only(SUPPORT_KEYS)
        name = st.string("name", str(i + 1))
        if not name or not all(c.isalnum() or c == "_" for c in name):
            raise st.error("name", f"must be letters, digits or underscores, got {name!r}")
        if name in names:
            raise st.error("name", f"support {name!r} is listed twice")
        names.append(name)
        positions.append(st.vector("position", 3))
        stiffness.append(_triple(st, "stiffness"))
        damping.append(_triple(st, "damping", 0.0))
    return BaseSupport(
        flexible=flexible,
        names=tuple(names),
        positions=np.array(positions, dtype=float).reshape(-1, 3),
        stiffness=np.array(stiffness, dtype=float).reshape(-1, 3),
        damping=np.array(damping, dtype=float).reshape(-1, 3),
    )
