"""``[actuation]``: which joints are driven and how their torques are shared (SI units).

```toml
[actuation]
joints = ["a1", "a2", "a3"]      # the drives (default: the joints marked actuated); every
                                 # joint the model marks actuated must be listed
mode = "min-internal-force"      # min-norm | min-internal-force | min-power | non-redundant
non_redundant = ["a1", "a2"]     # the drives of mode "non-redundant" (as many as the DOF);
                                 # the others turn freely (zero torque) in that mode
effort = 3.0                     # torque limit |tau_i| <= effort_i, N·m (N): one number for every
                                 # drive or a table naming some; default: the joint's effort limit
weights = { a3 = 2.0 }           # min-norm weights w_i > 0 (default 1): minimize sum w_i tau_i^2
power_regularization = 1e-3      # rad/s (m/s): speed floor of min-power, see mbctl.ctrl.redundancy
solver = "qrqp"                  # QP solver: qrqp (active set, compiled to C) | qpoases (interpreted)
internal_forces = "all"          # joints whose reaction forces min-internal-force minimises: "all" (the
                                 # passive tree joints and the cut joints) | "tree" (the passive tree
                                 # joints only, e.g. the 3-RRR's elbows B_i, as the 3-RRR study does)
```

The distribution modes are explained in :mod:`mbctl.ctrl.redundancy`; the joint
names are checked against the robot by :func:`mbctl.ctrl.actuation.actuation_settings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mbctl.tomlfields import Table

__all__ = ["ACTUATION_KEYS", "INTERNAL_FORCES", "MODES", "QP_SOLVERS", "ActuationSpec", "parse_actuation"]

MODES = ("min-norm", "min-internal-force", "min-power", "non-redundant")
QP_SOLVERS = ("qrqp", "qpoases")
INTERNAL_FORCES = ("all", "tree")
ACTUATION_KEYS = ("joints", "mode", "non_redundant", "effort", "weights", "power_regularization", "solver", "internal_forces")


@dataclass(frozen=True)
class ActuationSpec:
    """The ``[actuation]`` table, parsed.

    Attributes:
        joints: The drives in torque-vector order, or None for the joints marked actuated.
        mode: Default distribution mode (one of :data:`MODES`).
        non_redundant: Drives of mode ``"non-redundant"``.
        effort: Torque limits (N·m or N): one for every drive or by name; None: the joints' limits.
        weights: Min-norm weights (> 0): one for every drive or by name; None: all 1.
        power_regularization: Speed floor of min-power (rad/s or m/s).
        solver: QP solver of the limited problems.
        internal_forces: Reactions min-internal-force minimises: "all" or "tree" (passive tree joints only).
        file: The robot TOML, for errors found against the robot.
    """

    joints: tuple[str, ...] | None = None
    mode: str = "min-norm"
    non_redundant: tuple[str, ...] = ()
    effort: float | dict[str, float] | None = None
    weights: float | dict[str, float] | None = None
    power_regularization: float = 1e-3
    solver: str = "qrqp"
    file: Path | None = None
    internal_forces: str = "all"


def _names(t: Table, key: str) -> tuple[str, ...]:
    value = t.get(key)
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise t.error(key, f"must be a non-empty list of joint names, got {value!r}")
    for name in value:
        if value.count(name) > 1:
            raise t.error(key, f"joint {name!r} is listed twice")
    return tuple(value)


def _positive(t: Table, key: str, unit: str) -> float | dict[str, float] | None:
    if key not in t:
        return None
    value = t.per_joint(key)
    for name, number in value.items() if isinstance(value, dict) else [(None, value)]:
        if not number > 0:
            raise t.error(key if name is None else f"{key}.{name}", f"must be > 0{unit}, got {number:g}")
    return value


def parse_actuation(t: Table) -> ActuationSpec:
    """Parse the ``[actuation]`` table.

    Raises:
        ConfigError: Naming file and field, for unknown fields, bad modes, lists or numbers.
    """
    t.only(ACTUATION_KEYS)
    non_redundant = _names(t, "non_redundant") if "non_redundant" in t else ()
    mode = t.string("mode", "min-norm", choices=MODES)
    if mode == "non-redundant" and not non_redundant:
        raise t.error("non_redundant", "missing required field (mode non-redundant needs the drives it uses)")
    regularization = t.number("power_regularization", 1e-3)
    if not regularization > 0:
        raise t.error("power_regularization", f"must be > 0 rad/s (m/s), got {regularization:g}")
    return ActuationSpec(
        joints=_names(t, "joints") if "joints" in t else None,
        mode=mode,
        non_redundant=non_redundant,
        effort=_positive(t, "effort", " N·m (N)"),
        weights=_positive(t, "weights", ""),
        power_regularization=regularization,
        solver=t.string("solver", "qrqp", choices=QP_SOLVERS),
        file=t.file,
        internal_forces=t.string("internal_forces", "all", choices=INTERNAL_FORCES),
    )
