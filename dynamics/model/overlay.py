"""The robot description's TOML tables that belong to dynamics: ``[joints.<name>]``.

```toml
urdf = "scara.urdf"                 # relative to this file, or "example-robot-data:ur5"
gravity = [0.0, 0.0, -9.81]         # m/s², optional (default: the URDF/pinocchio default)
[joints.j1]                         # a URDF joint name
actuated = true                     # optional, default true
limits = { position = [-2.9, 2.9], velocity = 3.0, effort = 100.0 }   # optional overrides, SI
armature = 0.5                      # optional: reflected rotor inertia, kg*m^2 (kg for prismatic joints)
friction = { law = "stribeck", fc = 0.8, fs = 1.1, vs = 0.05, delta = 2.0, fv = 0.12 }
[joints.j2.friction]
law = "lugre"                       # none | coulomb-viscous | stribeck | lugre
fc = 0.5
...
load = { model = "bearing3d", rb = 0.02, rp = 0.01, rn = 0.015 }   # optional
```
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields

from mbctl.dynamics.friction.laws import LAWS, JointFriction
from mbctl.dynamics.friction.loads import LOAD_MODELS
from mbctl.dynamics.parameters import Parameters
from mbctl.errors import ConfigError
from mbctl.tomlfields import Table

__all__ = ["JointOverrides", "parse_joint", "parse_friction", "ROBOT_KEYS", "JOINT_KEYS"]

ROBOT_KEYS = (
    "urdf", "gravity", "joints", "control", "constraints", "simulation", "plant", "drives", "actuation", "identification",
    "flexible", "base",
)
JOINT_KEYS = ("actuated", "limits", "friction", "armature")
LIMIT_KEYS = ("position", "velocity", "effort")


@dataclass(frozen=True)
class JointOverrides:
    """What the TOML says about one joint, before it is merged with the URDF."""

    actuated: bool = True
    position: tuple[float, float] | None = None
    velocity: float | None = None
    effort: float | None = None
    friction: JointFriction | None = None
    armature: float | None = None


def _build(cls: type[Parameters], t: Table, skip: tuple[str, ...]) -> Parameters:
    """Instantiate a parameter dataclass from the table's fields (all but ``skip``)."""
    names = [f.name for f in fields(cls)]  # type: ignore[arg-type]
    t.only([*skip, *names])
    values = t.numbers(names)
    for f in fields(cls):  # type: ignore[arg-type]
        if f.default is MISSING and f.name not in values:
            raise t.error(f.name, f"missing required parameter of {cls.name}")
    try:
        return cls(**values)
    except ConfigError as exc:
        raise exc.located(file=t.file, prefix=t.path()) from None


def parse_friction(t: Table) -> JointFriction | None:
    """Parse a ``[joints.<name>.friction]`` table; None for ``law = "none"``."""
    law_name = t.string("law", choices=["none", *LAWS])
    if law_name == "none":
        t.only(["law"])
        return None
    law = _build(LAWS[law_name], t, skip=("law", "load"))
    load = None
    if "load" in t:
        lt = t.table("load")
        model = lt.string("model", choices=list(LOAD_MODELS))
        load = _build(LOAD_MODELS[model], lt, skip=("model",))
    return JointFriction(law=law, load=load)  # type: ignore[arg-type]


def parse_joint(t: Table) -> JointOverrides:
    """Parse one ``[joints.<name>]`` table."""
    t.only(JOINT_KEYS)
    position = velocity = effort = None
    if "limits" in t:
        lt = t.table("limits")
        lt.only(LIMIT_KEYS)
        if "position" in lt:
            lo, hi = lt.vector("position", 2)
            if not lo < hi:
                raise lt.error("position", f"lower limit {lo:g} must be below upper limit {hi:g}")
            position = (float(lo), float(hi))
        for key in ("velocity", "effort"):
            if key in lt and not lt.number(key) > 0:
                raise lt.error(key, "must be > 0")
        velocity = lt.number("velocity", None)
        effort = lt.number("effort", None)
    friction = parse_friction(t.table("friction")) if "friction" in t else None
    armature = t.number("armature", None)
    if armature is not None and armature < 0:
        raise t.error("armature", f"must be >= 0, got {armature:g}")
    return JointOverrides(
        actuated=t.boolean("actuated", True),
        position=position,
        velocity=velocity,
        effort=effort,
        friction=friction,
        armature=armature,
    )
