"""``[plant]``: the simulated plant's truth model and sensors (SI units).

The truth may differ from the controller's model on purpose: another friction law on
some joints, a payload the model does not know. Every field is optional.

```toml
[plant]
substeps = 8                  # plant steps per control period
seed = 0                      # of the effort noise
encoder_counts = 4096         # counts per joint revolution (per metre for prismatic joints); 0: exact;
                              # or by joint; default: the drive table's (motor counts x gear), else 4096
velocity = "difference"       # "exact" | "difference" (of encoder positions, first-order filtered)
velocity_cutoff_hz = 150.0    # Hz, filter of the difference estimate
effort_noise = 0.0            # standard deviation of measured effort, N·m (N)
latency_cycles = 0            # measurements are this many control periods old
payload = { frame = "tool", mass = 0.5, com = [0.0, 0.0, 0.05] }   # kg; m in the frame
[plant.joints.j2]
friction = { law = "lugre", fc = 0.5, fs = 0.7, vs = 0.02, fv = 0.05, sigma0 = 1e4 }   # truth friction
[plant.contact]               # an external wrench on a body over a time window
frame = "tool"                # it acts at this frame's origin
force = [0.0, 0.0, -20.0]     # N, world axes
torque = [0.0, 0.0, 0.0]      # N·m, world axes (optional)
start = 0.5                   # s since the run's start
duration = 0.2                # s
```
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from mbctl.config.joints import FrictionSpec, parse_friction
from mbctl.tomlfields import Table

__all__ = ["DEFAULT_ENCODER_COUNTS", "PLANT_KEYS", "ContactSpec", "PayloadSpec", "PlantConfig", "PlantSpec", "SensorModel", "parse_plant"]

PLANT_KEYS = ("substeps", "seed", "encoder_counts", "velocity", "velocity_cutoff_hz", "effort_noise", "latency_cycles", "payload", "joints", "contact")
DEFAULT_ENCODER_COUNTS = 4096
"""Counts per joint revolution (per metre) of a plant whose robot gives neither ``[plant]
encoder_counts`` nor a drive table."""
VELOCITY_ESTIMATES = ("exact", "difference")


@dataclass(frozen=True)
class SensorModel:
    """How the plant is measured.

    Attributes:
        encoder_counts: Counts per joint revolution (per metre for prismatic joints); 0 is
            exact; one number, or by joint name; None: not given (the plant takes the drive
            table's motor counts x gear, else :data:`DEFAULT_ENCODER_COUNTS`).
        velocity: ``"exact"`` or ``"difference"`` of encoder positions, first-order filtered.
        velocity_cutoff_hz: Cut-off of that filter (Hz).
        effort_noise: Standard deviation of measured effort (N·m or N).
        latency_cycles: Age of every measurement, in control periods.
        encoder_source: Where ``encoder_counts`` came from when the plant filled it in (e.g. the
            drive table); empty when given or defaulted.
    """

    encoder_counts: int | Mapping[str, int] | None = None
    velocity: str = "difference"
    velocity_cutoff_hz: float = 150.0
    effort_noise: float = 0.0
    latency_cycles: int = 0
    encoder_source: str = ""


@dataclass(frozen=True)
class ContactSpec:
    """An external wrench on the plant: ``force`` (N) and ``torque`` (N·m), world axes, at the
    origin of ``frame``, from ``start_s`` for ``duration_s`` seconds (s since the run's start)."""

    frame: str
    force: tuple[float, float, float]
    torque: tuple[float, float, float] = (0.0, 0.0, 0.0)
    start_s: float = 0.0
    duration_s: float = 0.0


@dataclass(frozen=True)
class PlantConfig:
    """How the plant runs: sensor model, integration substeps per control period, noise seed,
    an external wrench (or None)."""

    sensors: SensorModel = SensorModel()
    substeps: int = 8
    seed: int = 0
    contact: ContactSpec | None = None


@dataclass(frozen=True)
class PayloadSpec:
    """A point mass ``mass`` (kg) at ``com`` (m, in ``frame``) that the model does not know."""

    frame: str
    mass: float
    com: tuple[float, float, float] = (0.0, 0.0, 0.0)


@dataclass(frozen=True)
class PlantSpec:
    """The ``[plant]`` table, parsed.

    Attributes:
        config: Sensors, substeps, seed.
        friction: Truth friction by joint name (None: frictionless), replacing the model's.
        payload: An unmodelled payload, or None.
        file: The robot TOML, for errors found against the robot.
    """

    config: PlantConfig = PlantConfig()
    friction: dict[str, FrictionSpec | None] = field(default_factory=dict)
    payload: PayloadSpec | None = None
    file: Path | None = None


def _whole(t: Table, key: str, default: float, minimum: int, what: str) -> int:
    value = t.number(key, default)
    if value != int(value) or value < minimum:
        raise t.error(key, what)
    return int(value)


def _encoder_counts(t: Table) -> int | dict[str, int] | None:
    """``encoder_counts``: one whole number >= 0, or a table of them by joint name; None if absent."""
    if "encoder_counts" not in t:
        return None
    if isinstance(t.get("encoder_counts"), dict):
        sub = t.table("encoder_counts")
        return {name: _whole(sub, name, 0.0, 0, "must be a non-negative integer (0: exact)") for name in sub.keys()}
    return _whole(t, "encoder_counts", 0.0, 0, "must be a non-negative integer (0: exact)")


def _contact(t: Table) -> ContactSpec:
    t.only(("frame", "force", "torque", "start", "duration"))
    start, duration = t.number("start"), t.number("duration")
    if start < 0:
        raise t.error("start", "must be >= 0 s")
    if not duration > 0:
        raise t.error("duration", "must be > 0 s")
    force = tuple(float(x) for x in t.vector("force", 3, [0.0, 0.0, 0.0]))
    torque = tuple(float(x) for x in t.vector("torque", 3, [0.0, 0.0, 0.0]))
    if "force" not in t and "torque" not in t:
        raise t.error("force", "give force (N) or torque (N·m), or both")
    return ContactSpec(frame=t.string("frame"), force=force, torque=torque, start_s=start, duration_s=duration)


def parse_plant(t: Table) -> PlantSpec:
    """Parse the ``[plant]`` table.

    Raises:
        ConfigError: Naming the file and field of a bad value.
    """
    t.only(PLANT_KEYS)
    cutoff = t.number("velocity_cutoff_hz", 150.0)
    if not cutoff > 0:
        raise t.error("velocity_cutoff_hz", "must be > 0")
    noise = t.number("effort_noise", 0.0)
    if noise < 0:
        raise t.error("effort_noise", "must be >= 0")
    sensors = SensorModel(
        encoder_counts=_encoder_counts(t),
        velocity=t.string("velocity", "difference", choices=VELOCITY_ESTIMATES),
        velocity_cutoff_hz=cutoff,
        effort_noise=noise,
        latency_cycles=_whole(t, "latency_cycles", 0.0, 0, "must be a non-negative integer"),
    )
    friction = {}
    if "joints" in t:
        for name, sub in t.table("joints").tables():
            sub.only(("friction",))
            friction[name] = parse_friction(sub.table("friction"))
    payload = None
    if "payload" in t:
        pt = t.table("payload")
        pt.only(("frame", "mass", "com"))
        mass = pt.number("mass")
        if not mass > 0:
            raise pt.error("mass", "must be > 0")
        cx, cy, cz = pt.vector("com", 3, [0.0, 0.0, 0.0])
        payload = PayloadSpec(frame=pt.string("frame"), mass=mass, com=(float(cx), float(cy), float(cz)))
    config = PlantConfig(
        sensors=sensors,
        substeps=_whole(t, "substeps", 8.0, 1, "must be a positive integer"),
        seed=int(t.number("seed", 0.0)),
        contact=_contact(t.table("contact")) if "contact" in t else None,
    )
    return PlantSpec(config=config, friction=friction, payload=payload, file=t.file)
