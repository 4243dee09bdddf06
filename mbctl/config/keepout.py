"""``[keepout]``: where no part of the arm may go, checked on every planned motion (SI units).

```toml
[keepout]
floor = 0.0                   # m: the lowest height (z of the model's root frame) a checked frame may reach
frames = ["tool0"]            # optional: the frames checked (default: every link frame that moves)
boxes = [                     # optional: boxes, in the root frame, no checked frame may enter
    { name = "fixture", min = [0.3, -0.2, 0.0], max = [0.7, 0.2, 0.25] },
]
```

Every key is optional; a table without ``floor`` or ``boxes`` checks nothing. The floor is usually
the mounting plane, raised by the clearance the links need (the check sees frame origins, not link
surfaces). :mod:`mbctl.ctrl.keepout` checks planned motions against it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mbctl.tomlfields import Table

__all__ = ["KEEPOUT_KEYS", "KeepoutBox", "KeepoutSpec", "parse_keepout"]

KEEPOUT_KEYS = ("floor", "frames", "boxes")
BOX_KEYS = ("name", "min", "max")


@dataclass(frozen=True)
class KeepoutBox:
    """An axis-aligned box of the root frame (m) no checked frame may enter.

    Attributes:
        lower, upper: Its corners, ``lower < upper`` on every axis (m).
        name: For messages (default ``box <n>``, 1-based).
        field: Its dotted TOML field, for messages.
    """

    lower: tuple[float, float, float]
    upper: tuple[float, float, float]
    name: str
    field: str = "keepout.boxes"


@dataclass(frozen=True)
class KeepoutSpec:
    """The ``[keepout]`` table, parsed (m).

    Attributes:
        floor: Lowest height (z of the root frame, m) of a checked frame's origin; None: no floor.
        frames: The checked frames by name; None: every link frame that moves with a joint.
        boxes: Boxes no checked frame's origin may enter.
        file: The TOML file, for errors.
    """

    floor: float | None = None
    frames: tuple[str, ...] | None = None
    boxes: tuple[KeepoutBox, ...] = ()
    file: Path | None = None


def parse_keepout(t: Table) -> KeepoutSpec:
    """Parse ``[keepout]``.

    Raises:
        ConfigError: Naming the file and field, for an unknown key, a value that is not a finite
            number, a frame list that is not strings, or a box whose ``min`` is not below its ``max``.
    """
    t.only(KEEPOUT_KEYS)
    frames = None
    if "frames" in t:
        value = t.get("frames")
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise t.error("frames", f"must be a non-empty list of frame names, got {value!r}")
        frames = tuple(value)
    boxes = []
    if "boxes" in t:
        value = t.get("boxes")
        if not isinstance(value, list):
            raise t.error("boxes", f"must be a list of tables {{ min = [x, y, z], max = [x, y, z] }}, got {value!r}")
        for i, item in enumerate(value):
            field = f"{t.path('boxes')}[{i}]"
            if not isinstance(item, dict):
                raise t.error("boxes", f"[{i}] must be a table {{ min = [x, y, z], max = [x, y, z] }}, got {item!r}")
            box = Table(item, t.file, field)
            box.only(BOX_KEYS)
            lower, upper = box.vector("min", 3), box.vector("max", 3)
            if not (lower < upper).all():
                raise box.error("max", f"must exceed min on every axis, got min {lower.tolist()} and max {upper.tolist()}")
            name = box.string("name", f"box {i + 1}")
            boxes.append(KeepoutBox(tuple(map(float, lower)), tuple(map(float, upper)), name, field))
    return KeepoutSpec(floor=t.number("floor", None), frames=frames, boxes=tuple(boxes), file=t.file)
