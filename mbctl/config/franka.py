"""``[franka]``: a Franka Research 3 in torque control over FCI, through libfranka (SI units inside).

```toml
[franka]
address = "172.16.0.2"            # the robot's FCI address (the CLI's --robot-ip overrides it)
server = "robot"                  # robot | franky-sim: what answers at the address
realtime = "enforce"              # enforce | ignore: refuse to run on a kernel without real-time scheduling
automatic_error_recovery = false  # true: clear a reflex left from an earlier run when the run starts
state_timeout_ms = 50             # no robot state for this long stops a run (libfranka's own: 1000 ms)
torque_rate_limit = 1000.0        # N·m/s: each joint's command changes at most this fast (0: no limit)
gravity = "libfranka"             # libfranka | mbctl: the model whose gravity leaves the commands
joint_impedance = [3000.0, 3000.0, 3000.0, 2500.0, 2500.0, 2000.0, 2000.0]   # N·m/rad, optional

[franka.collision]                # the robot's own contact and collision thresholds (a collision is a reflex)
torque_lower = [20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0]   # N·m, per joint: contact
torque_upper = [20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0]   # N·m: collision
force_lower = [20.0, 20.0, 20.0, 25.0, 25.0, 25.0]         # N (x, y, z), N·m (about x, y, z) at the end effector
force_upper = [20.0, 20.0, 20.0, 25.0, 25.0, 25.0]

[franka.load]                     # what the flange carries beyond the configured end effector (libfranka's setLoad)
mass = 0.0                        # kg
center = [0.0, 0.0, 0.0]          # m, in the flange frame
inertia = [0.0, 0.0, 0.0, 0.0, 0.0, 0.0]   # kg·m², [ixx, iyy, izz, ixy, ixz, iyz] about the centre of mass
```

Every key is optional; the defaults are libfranka's (its examples' collision thresholds, its
real-time requirement) except ``state_timeout_ms`` (libfranka waits 1 s for a state) and the
rate limit (the FR3 data sheet's 1000 N·m/s). The robot adds gravity to every torque command
itself: ``gravity`` says whose model is removed from mbctl's commands first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.tomlfields import Table

__all__ = ["FrankaCollision", "FrankaLoad", "FrankaSpec", "GRAVITY_MODELS", "SERVERS", "parse_franka"]

KEYS = ("address", "server", "realtime", "automatic_error_recovery", "state_timeout_ms", "torque_rate_limit", "gravity", "joint_impedance", "collision", "load")
COLLISION_KEYS = ("torque_lower", "torque_upper", "force_lower", "force_upper")
LOAD_KEYS = ("mass", "center", "inertia")
SERVERS = ("robot", "franky-sim")
GRAVITY_MODELS = ("libfranka", "mbctl")
MAX_PAYLOAD_KG = 3.0  # the FR3's rated payload
JOINTS = 7


@dataclass(frozen=True)
class FrankaCollision:
    """The robot's contact (lower) and collision (upper) thresholds: per joint (N·m) and at the end
    effector (N for x, y, z, N·m about them); libfranka's ``setCollisionBehavior``, the same under
    acceleration and at constant speed."""

    torque_lower: tuple[float, ...] = (20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0)
    torque_upper: tuple[float, ...] = (20.0, 20.0, 18.0, 18.0, 16.0, 14.0, 12.0)
    force_lower: tuple[float, ...] = (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)
    force_upper: tuple[float, ...] = (20.0, 20.0, 20.0, 25.0, 25.0, 25.0)


@dataclass(frozen=True)
class FrankaLoad:
    """A payload on the flange: ``mass`` (kg), ``center`` of mass in the flange frame (m) and
    ``inertia`` about it, 3x3 row-major (kg·m²; symmetric, so libfranka's column-major is the same)."""

    mass: float = 0.0
    center: tuple[float, float, float] = (0.0, 0.0, 0.0)
    inertia: tuple[float, ...] = (0.0,) * 9


@dataclass(frozen=True)
class FrankaSpec:
    """The ``[franka]`` table, parsed (times in s).

    Attributes:
        address: The robot's FCI address (host name or IP), or franky-sim's.
        server: ``"robot"`` (a Franka's controller: ``tau_J`` from the joint torque sensors) or
            ``"franky-sim"`` (its MuJoCo model: ``tau_J`` is the torque applied to the joint).
        realtime: ``"enforce"`` (refuse a kernel without real-time scheduling) or ``"ignore"``.
        automatic_error_recovery: Clear a reflex found when the run starts (False: refuse to start).
        state_timeout_s: No robot state for this long stops a run (s).
        torque_rate_limit: Largest change of a joint's command (N·m/s); 0 for none.
        gravity: ``"libfranka"`` (the robot's own model, loaded from it) or ``"mbctl"`` (the robot
            model of the TOML): the gravity removed from the commands before they are sent.
        joint_impedance: The stiffness of the robot's own joint controller (N·m/rad), which holds the
            arm after a run; None: the robot's.
        collision: The robot's contact and collision thresholds.
        load: The payload on the flange.
        file: The TOML file, for errors.
    """

    address: str = "172.16.0.2"
    server: str = "robot"
    realtime: str = "enforce"
    automatic_error_recovery: bool = False
    state_timeout_s: float = 0.05
    torque_rate_limit: float = 1000.0
    gravity: str = "libfranka"
    joint_impedance: tuple[float, ...] | None = None
    collision: FrankaCollision = FrankaCollision()
    load: FrankaLoad = FrankaLoad()
    file: Path | None = None


def _positive(t: Table, key: str, size: int, default: tuple[float, ...] | None) -> tuple[float, ...] | None:
    if key not in t:
        return default
    values = t.vector(key, size)
    if (values <= 0).any():
        raise t.error(key, f"every value must be > 0, got {values.tolist()}")
    return tuple(float(v) for v in values)


def _collision(t: Table) -> FrankaCollision:
    t.only(COLLISION_KEYS)
    d = FrankaCollision()
    lower_t, upper_t = _positive(t, "torque_lower", JOINTS, d.torque_lower), _positive(t, "torque_upper", JOINTS, d.torque_upper)
    lower_f, upper_f = _positive(t, "force_lower", 6, d.force_lower), _positive(t, "force_upper", 6, d.force_upper)
    for key, lower, upper in (("torque_upper", lower_t, upper_t), ("force_upper", lower_f, upper_f)):
        below = [i for i, (lo, up) in enumerate(zip(lower, upper)) if up < lo]
        if below:
            i = below[0]
            raise t.error(key, f"entry {i + 1} ({upper[i]:g}) is below its contact threshold {key.replace('upper', 'lower')} ({lower[i]:g})")
    return FrankaCollision(lower_t, upper_t, lower_f, upper_f)


def _load(t: Table) -> FrankaLoad:
    t.only(LOAD_KEYS)
    mass = t.number("mass", 0.0)
    if not 0.0 <= mass <= MAX_PAYLOAD_KG:
        raise t.error("mass", f"must be in [0, {MAX_PAYLOAD_KG:g}] kg (the arm's rated payload), got {mass:g}")
    center = t.vector("center", 3, np.zeros(3))
    if np.abs(center).max() > 1.0:
        raise t.error("center", f"must lie within 1 m of the flange, got {center.tolist()}")
    ixx, iyy, izz, ixy, ixz, iyz = t.vector("inertia", 6, np.zeros(6))
    inertia = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
    eig = np.linalg.eigvalsh(inertia)
    # a rigid body's principal moments are >= 0 and each at most the sum of the other two
    if eig.min() < -1e-12 or eig.max() > eig.sum() - eig.max() + 1e-12:
        raise t.error("inertia", f"is not a rigid body's inertia (principal moments {np.round(eig, 6).tolist()} kg·m²)")
    return FrankaLoad(mass=mass, center=tuple(float(c) for c in center), inertia=tuple(float(v) for v in inertia.ravel()))


def parse_franka(t: Table) -> FrankaSpec:
    """Parse a ``[franka]`` table.

    Raises:
        ConfigError: Naming the file and field of a bad value.
    """
    t.only(KEYS)
    d = FrankaSpec()
    address = t.string("address", d.address)
    if not address or any(c.isspace() for c in address) or "/" in address:
        raise t.error("address", f"must be a host name or IP address such as '172.16.0.2', got {address!r}")
    timeout_ms = t.number("state_timeout_ms", d.state_timeout_s * 1e3)
    if not 0 < timeout_ms <= 60e3:
        raise t.error("state_timeout_ms", f"must be in (0, 60000] ms, got {timeout_ms:g}")
    rate = t.number("torque_rate_limit", d.torque_rate_limit)
    if rate < 0:
        raise t.error("torque_rate_limit", f"must be >= 0 N·m/s (0: no limit), got {rate:g}")
    return FrankaSpec(
        address=address,
        server=t.string("server", d.server, choices=SERVERS),
        realtime=t.string("realtime", d.realtime, choices=("enforce", "ignore")),
        automatic_error_recovery=t.boolean("automatic_error_recovery", d.automatic_error_recovery),
        state_timeout_s=timeout_ms * 1e-3,
        torque_rate_limit=rate,
        gravity=t.string("gravity", d.gravity, choices=GRAVITY_MODELS),
        joint_impedance=_positive(t, "joint_impedance", JOINTS, None),
        collision=_collision(t.table("collision")) if "collision" in t else d.collision,
        load=_load(t.table("load")) if "load" in t else d.load,
        file=t.file,
    )
