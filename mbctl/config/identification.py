"""``[identification]``: experiment plans for ``mbctl identify run`` (SI units).

Every field is optional; ``[identification.joints.<name>]`` overrides any of them
for one tested joint, and command-line options override both::

    [identification]
    rate_hz = 1000.0              # loop rate, Hz
    bandwidth_hz = 10.0           # host-side PID loops (see mbctl.identification.plan.ControlGains)
    damping = 1.0
    integral = 0.3
    start = { j1 = 0.0 }          # the start pose (identify run's simulated plant; mbctl commission's, on any backend)
    # constant-speed test
    range = [-0.6, 0.6]           # rad (m): positions travelled at every speed
                                  # (default: the middle of the limits, +-min(quarter span, 0.5 rad / 0.05 m))
    speeds = [0.01, 0.02]         # rad/s (m/s): an explicit list, or the grid below
    count = 25                    # speeds of the grid
    min_speed = 0.005             # default 0.1*stribeck_velocity
    max_speed = 2.0               # default min(40*stribeck_velocity, 0.8*velocity limit, the
                                  # speed that still cruises 2*settle_s + 0.1 s over 75 % of the range)
    stribeck_velocity = 0.05      # where the grid is densest (default: vs of the joint's friction law)
    settle_s = 0.2                # hold at the ends of every leg; transient dropped when processing
    acceleration = 10.0           # rad/s² (m/s²) of the speed ramps (default: reaches max_speed in 10 % of the range)
    max_leg_s = 20.0              # longest cruise; slower legs use a shorter, centred range
    transit_speed = 0.5           # rad/s (m/s) between legs (default half of max_speed)
    randomize = false             # shuffle the speed order (against thermal drift)
    seed = 0
    # presliding / break-away test
    breakaway = 1.1               # expected break-away torque, N·m (N) (default: fs, else fc, of the friction law)
    presliding_amplitude = 0.5    # slow cycle peak, fraction of breakaway
    cycle_s = 4.0
    step = 0.1                    # torque step, fraction of breakaway (small: keeps the mode linear)
    step_s = 0.5
    ramp_rates = [0.25, 0.5, 1.0] # fractions of breakaway per second
    max_torque = 2.0              # ramps give up at this multiple of breakaway
    slip_distance = 1e-3          # rad (m): a ramp ends when the joint has moved this far
                                  # (default 10*fs/sigma0 for a LuGre law, else 1 mrad / 0.1 mm)
    hold_s = 1.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from mbctl.tomlfields import Table

__all__ = ["IDENTIFICATION_KEYS", "IdentificationSpec", "parse_identification"]

ANY_SIGN = ("integral", "seed")
VECTORS = {"range": 2, "speeds": None, "ramp_rates": None}
CONTROL_KEYS = ("rate_hz", "bandwidth_hz", "damping", "integral", "start")
SPEED_KEYS = (
    "range", "speeds", "count", "min_speed", "max_speed", "stribeck_velocity", "settle_s",
    "acceleration", "max_leg_s", "transit_speed", "randomize", "seed",
)  # fmt: skip
PRESLIDING_KEYS = ("breakaway", "presliding_amplitude", "cycle_s", "step", "step_s", "ramp_rates", "max_torque", "slip_distance", "hold_s")
IDENTIFICATION_KEYS = CONTROL_KEYS + SPEED_KEYS + PRESLIDING_KEYS


@dataclass(frozen=True)
class IdentificationSpec:
    """The ``[identification]`` table, parsed: its fields, and each joint's overrides.

    Values are floats, tuples of floats (``range``, ``speeds``, ``ramp_rates``), a bool
    (``randomize``) or a dict of floats by joint name (``start``).
    """

    general: dict[str, object] = field(default_factory=dict)
    joints: dict[str, dict[str, object]] = field(default_factory=dict)
    file: Path | None = None

    def fields(self, joint: str) -> dict[str, tuple[object, str]]:
        """Field -> (value, dotted name): the joint's overrides over the general fields."""
        out = {key: (value, f"identification.{key}") for key, value in self.general.items()}
        out.update({key: (value, f"identification.joints.{joint}.{key}") for key, value in self.joints.get(joint, {}).items()})
        return out


def _values(t: Table) -> dict[str, object]:
    t.only(IDENTIFICATION_KEYS)
    out: dict[str, object] = {}
    for key in t.keys():
        if key == "randomize":
            out[key] = t.boolean(key)
        elif key == "start":
            st = t.table(key)
            out[key] = {name: st.number(name) for name in st.keys()}
        elif key in VECTORS:
            vector = t.vector(key, VECTORS[key])
            if key == "ramp_rates" and (len(vector) == 0 or not (vector > 0).all()):
                raise t.error(key, "must be a non-empty list of positive numbers")
            out[key] = tuple(float(x) for x in vector)
        else:
            value = t.number(key)
            if key not in ANY_SIGN and not value > 0:
                raise t.error(key, "must be > 0")
            out[key] = value
    return out


def parse_identification(t: Table) -> IdentificationSpec:
    """Parse the ``[identification]`` table.

    Raises:
        ConfigError: Naming the file and field, for unknown fields or bad values.
    """
    general = Table({k: v for k, v in t.data.items() if k != "joints"}, t.file, t.where)
    joints = {name: _values(sub) for name, sub in t.table("joints").tables()} if "joints" in t else {}
    return IdentificationSpec(general=_values(general), joints=joints, file=t.file)
