"""``[joints.<name>]``: limit overrides, armature, the friction law with its load model, and a servo.

```toml
[joints.j1]                         # a URDF joint name
actuated = true                     # optional, default true
limits = { position = [-2.9, 2.9], velocity = 3.0, effort = 100.0 }   # optional overrides, SI
armature = 0.5                      # optional: reflected rotor inertia, kg*m^2 (kg for prismatic joints)
inertial = { mass = 2.1, com = [0.0, 0.0, 0.1], inertia = [0.02, 0.02, 0.01, 0.0, 0.0, 0.0] }   # optional, below
friction = { law = "stribeck", fc = 0.8, fs = 1.1, vs = 0.05, delta = 2.0, fv = 0.12 }
[joints.j2.friction]
law = "lugre"                       # none | coulomb-viscous | stribeck | lugre
fc = 0.5
...
load = { model = "bearing3d", rb = 0.02, rp = 0.01, rn = 0.015 }   # optional
[joints.j3.actuator]                # optional: a position-controlled servo (mbctl.config.actuator)
```

``inertial`` replaces the rigid body the joint moves (its child link and every link fixed
to it, merged as pinocchio merges them): ``mass`` in kg, ``com`` in m and ``inertia``
``[ixx, iyy, izz, ixy, ixz, iyz]`` in kg·m² about the centre of mass, all in the joint's
frame, as URDF states a link's inertial. Identification writes it (``mbctl identify
dynamics --write-back``).

The parameter names of each law and load model are the schema below; their physical
ranges (``fs >= fc``, ...) are checked when :mod:`mbctl.dynamics.friction` builds the
law, with the error placed at :attr:`FrictionSpec.field`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from mbctl.config.actuator import ActuatorSpec, parse_actuator
from mbctl.tomlfields import Table

__all__ = ["FRICTION_LAWS", "LOAD_MODELS", "FrictionSpec", "InertialSpec", "JointSpec", "LoadSpec", "parse_friction", "parse_joint"]

# name -> (required parameters, optional parameters); units: N·m (N) for forces, rad/s (m/s) for speeds
FRICTION_LAWS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    "coulomb-viscous": (("fc",), ("fv",)),
    "stribeck": (("fc", "fs", "vs"), ("fv", "delta")),
    "lugre": (("fc", "fs", "vs", "fv", "sigma0", "sigma1"), ()),
})
LOAD_MODELS: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] = MappingProxyType({
    "bearing3d": (("rb", "rp", "rn"), ()),
    "journal2d": (("diameter",), ()),
})
JOINT_KEYS = ("actuated", "limits", "friction", "armature", "actuator", "inertial")
INERTIAL_KEYS = ("mass", "com", "inertia")
LIMIT_KEYS = ("position", "velocity", "effort")


@dataclass(frozen=True)
class LoadSpec:
    """A normal-load model of load-dependent friction: its name and parameters (m)."""

    model: str
    parameters: Mapping[str, float]


@dataclass(frozen=True)
class FrictionSpec:
    """A joint's friction law by name with its parameters, and an optional load model.

    Attributes:
        law: ``"coulomb-viscous"``, ``"stribeck"`` or ``"lugre"``.
        parameters: Law parameters (``fc``, ``fs``, ``vs``, ``delta``, ``fv``, ``sigma0``, ``sigma1``; SI).
        load: Load model, or None for load-independent friction.
        file, field: Where the spec came from, for errors found when the law is built.
    """

    law: str
    parameters: Mapping[str, float]
    load: LoadSpec | None = None
    file: Path | None = dataclasses.field(default=None, compare=False)
    field: str | None = dataclasses.field(default=None, compare=False)


@dataclass(frozen=True)
class InertialSpec:
    """The rigid body a joint moves: mass (kg), centre of mass (m) and inertia about it
    ``(ixx, iyy, izz, ixy, ixz, iyz)`` (kg·m²), in the joint frame; ``field`` locates it for errors."""

    mass: float
    com: tuple[float, float, float]
    inertia: tuple[float, float, float, float, float, float]
    file: Path | None = dataclasses.field(default=None, compare=False)
    field: str | None = dataclasses.field(default=None, compare=False)


@dataclass(frozen=True)
class JointSpec:
    """What the description says about one joint, before it is merged with the URDF (SI units)."""

    actuated: bool = True
    position: tuple[float, float] | None = None
    velocity: float | None = None
    effort: float | None = None
    friction: FrictionSpec | None = None
    armature: float | None = None
    actuator: ActuatorSpec | None = None
    inertial: InertialSpec | None = None


def _parameters(t: Table, schema: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]], name: str, skip: tuple[str, ...]) -> dict[str, float]:
    required, optional = schema[name]
    t.only([*skip, *required, *optional])
    for key in required:
        if key not in t:
            raise t.error(key, f"missing required parameter of {name}")
    return t.numbers([*required, *optional])


def parse_friction(t: Table) -> FrictionSpec | None:
    """Parse a ``[joints.<name>.friction]`` table; None for ``law = "none"``."""
    law = t.string("law", choices=["none", *FRICTION_LAWS])
    if law == "none":
        t.only(["law"])
        return None
    parameters = _parameters(t, FRICTION_LAWS, law, skip=("law", "load"))
    load = None
    if "load" in t:
        lt = t.table("load")
        model = lt.string("model", choices=list(LOAD_MODELS))
        load = LoadSpec(model=model, parameters=_parameters(lt, LOAD_MODELS, model, skip=("model",)))
    return FrictionSpec(law=law, parameters=parameters, load=load, file=t.file, field=t.path())


def parse_inertial(t: Table) -> InertialSpec:
    """Parse a ``[joints.<name>.inertial]`` table (its physical consistency is checked with the model)."""
    t.only(INERTIAL_KEYS)
    for key in INERTIAL_KEYS:
        if key not in t:
            raise t.error(key, "missing (an inertial needs mass, com and inertia)")
    mass = t.number("mass")
    if not mass > 0:
        raise t.error("mass", f"must be > 0 kg, got {mass:g}")
    com = tuple(float(x) for x in t.vector("com", 3))
    inertia = tuple(float(x) for x in t.vector("inertia", 6))
    return InertialSpec(mass=mass, com=com, inertia=inertia, file=t.file, field=t.path())  # type: ignore[arg-type]


def parse_joint(t: Table) -> JointSpec:
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
    return JointSpec(
        actuated=t.boolean("actuated", True),
        position=position,
        velocity=velocity,
        effort=effort,
        friction=friction,
        armature=armature,
        actuator=parse_actuator(t.table("actuator")) if "actuator" in t else None,
        inertial=parse_inertial(t.table("inertial")) if "inertial" in t else None,
    )
