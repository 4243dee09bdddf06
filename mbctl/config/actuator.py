"""``[joints.<name>.actuator]``: a position-controlled servo (motor, firmware P loop, gearbox friction).

```toml
[joints.servo.actuator]
kt = 0.35                 # N m/A at the servo's output shaft (gear included); also the back-EMF constant, V s/rad
R = 3.5                   # winding resistance, ohm
vin = 7.4                 # supply voltage, V
kp = 400                  # firmware position gain (firmware units)
divisor = 256             # optional: PWM = kp * error_counts / divisor (XL330 observed: 256)
pwm_limit = 885           # optional: PWM limit (PWM units), <= pwm_max
pwm_max = 885             # optional: PWM at 100 % duty
counts = 4096             # optional: encoder counts per revolution of the output
current_limit = 1.7       # optional: the firmware's current limit, A (none by default)
supply_resistance = 0.3   # optional: internal resistance of the supply, cables included, ohm (default 0)
torque_saturation = 1.8   # optional: the motor torque bends as kt i / (1 + |kt i| / torque_saturation), N m (none by default)
friction_smoothing = 0.005  # optional: eps of the gearbox's dry-friction sign tanh(omega / eps), rad/s (default 0.02)
armature = 0.002          # optional: apparent rotor inertia at the output, kg m^2 (default 0)
gear_ratio = 1.0          # optional: output turns per joint turn (a gear between servo and joint)
friction = { law = "stribeck-load", fc = 0.03, fv = 0.01, fs = 0.06, vs = 0.3, mu = 0.05 }
```

The model and its units are in :mod:`mbctl.dynamics.actuator`; its physical ranges are
checked when the model is built, with the error placed at :attr:`ActuatorSpec.field`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from mbctl.tomlfields import Table

__all__ = ["ACTUATOR_KEYS", "SERVO_FRICTION_LAWS", "ActuatorSpec", "parse_actuator"]

# law -> its parameters (N m, N m s/rad, rad/s, 1; LuGre's sigma0 N m/rad, sigma1 N m s/rad), all required
SERVO_FRICTION_LAWS: Mapping[str, tuple[str, ...]] = MappingProxyType({
    "none": (),
    "coulomb-viscous": ("fc", "fv"),
    "stribeck": ("fc", "fv", "fs", "vs"),
    "stribeck-load": ("fc", "fv", "fs", "vs", "mu"),
    "lugre": ("fc", "fv", "fs", "vs", "sigma0", "sigma1"),
})
REQUIRED = ("kt", "R", "vin", "kp")
OPTIONAL = ("divisor", "pwm_limit", "pwm_max", "counts", "current_limit", "supply_resistance", "torque_saturation", "friction_smoothing", "armature", "gear_ratio")
ACTUATOR_KEYS = (*REQUIRED, *OPTIONAL, "friction")


@dataclass(frozen=True)
class ActuatorSpec:
    """A joint's servo as the TOML gives it (SI units; ``kp``, ``divisor``, PWM in firmware units).

    Attributes:
        values: ``kt``, ``R``, ``vin``, ``kp`` and those optional fields that are given.
        law: Friction law of the gearbox (:data:`SERVO_FRICTION_LAWS`); friction: its parameters.
        file, field: Where the spec came from, for errors found when the model is built.
    """

    values: Mapping[str, float]
    law: str = "none"
    friction: Mapping[str, float] = dataclasses.field(default_factory=dict)
    file: Path | None = dataclasses.field(default=None, compare=False)
    field: str | None = dataclasses.field(default=None, compare=False)

    # read-only mappings do not pickle; a robot (with its specs) is pickled to the paced plant's process
    def __getstate__(self) -> dict:
        return {k: dict(v) if isinstance(v, MappingProxyType) else v for k, v in self.__dict__.items()}

    def __setstate__(self, state: dict) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, MappingProxyType(v) if k in ("values", "friction") else v)


def parse_actuator(t: Table) -> ActuatorSpec:
    """Parse a ``[joints.<name>.actuator]`` table (presence and types; ranges are checked by the model)."""
    t.only(ACTUATOR_KEYS)
    for key in REQUIRED:
        if key not in t:
            raise t.error(key, "missing required field of the servo")
    values = t.numbers([*REQUIRED, *OPTIONAL])
    law, friction = "none", {}
    if "friction" in t:
        ft = t.table("friction")
        law = ft.string("law", choices=list(SERVO_FRICTION_LAWS))
        names = SERVO_FRICTION_LAWS[law]
        ft.only(["law", *names])
        for key in names:
            if key not in ft:
                raise ft.error(key, f"missing required parameter of {law}")
        friction = ft.numbers(names)
    return ActuatorSpec(values=MappingProxyType(values), law=law, friction=MappingProxyType(friction), file=t.file, field=t.path())
