"""``[control]``: controller gains, saturation levels and the task-space law (SI units).

```toml
[control]
effort = { shoulder_pan_joint = 100.0 }   # optional saturation level, N·m (N): one number or by joint
friction_velocity = "desired"            # desired | measured: where computed torque evaluates friction
velocity = "model"                       # measured | first-order | alpha-beta | model: the velocity the laws see
velocity_cutoff_hz = 40.0                # Hz: bandwidth of that estimate
[control.collision]                      # generalized-momentum observer of external joint torques
gain = 200.0                             # 1/s: K, the observer's bandwidth
threshold = { j1 = 5.0 }                 # N·m (N): one number, or by joint (default: break-away friction + 1 % of the effort limit)
reaction = "stop"                        # stop (torque off) | hold (compliant hold) | none (log only)
velocity_cutoff_hz = 10.0                # Hz: optional low-pass of the velocity the observer uses
torque = "measured"                      # measured (the drives' torque where the backend reports one) | commanded
[control.computed-torque]                # e'' + kd e' + kp e = 0
kp = 400.0                               # 1/s²: one number for every actuated joint, or by joint name
kd = 40.0                                # 1/s
[control.pd]                             # PD + gravity and PD + feed-forward
kp = { j1 = 800.0, j2 = 400.0 }          # N·m/rad (N/m)
kd = { j1 = 40.0, j2 = 20.0 }            # N·m·s/rad (N·s/m)
[control.task-space]
frame = "panda_hand_tcp"                 # task frame: its origin's world position is the task
axes = ["x", "y", "z"]                   # optional subset
kp = 100.0                               # 1/s²
kd = 20.0                                # 1/s
[control.task-space.nullspace]
objective = "joint-limits"               # joint-limits | posture
kp = 25.0                                # 1/s²
kd = 10.0                                # 1/s
posture = { panda_joint4 = -2.0 }        # rad, with objective = "posture"
[control.mpc]                            # model predictive control (mbctl run --controller mpc)
knots = 20                               # horizon N
step = 0.01                              # s: h, so the horizon is N h
iterations = 1                           # Gauss-Newton (Riccati) iterations per update: 1 is the real-time iteration
solver = "riccati"                       # the stage-structured solve
q = 1.0e4                                # 1/rad²: position weight (one number or by joint)
bandwidth = 25.0                         # rad/s: sets the two weights below when they are not given
dq = 50.0                                # s²/rad²: velocity weight (default 2 q / bandwidth²)
tau = 1.0e-3                             # 1/(N·m)²: the torque's departure from the feed-forward (default: q / bandwidth⁴ on M⁻¹ times it)
terminal = 10.0                          # factor on the last knot's state weights
budget = 0.8                             # fraction of the control period an update may take
[control.end]                            # a clean finish (a stop is torque off at once)
hold_s = 0.2                             # s: the controller holds the last reference this long (at most 3600)
then = "hand-over"                       # hand-over (the drives' own safe state: brakes, a holding controller) | torque-off
```

Values given per joint stay keyed by joint name here; the controller checks the
names against the robot (:mod:`mbctl.ctrl.settings`, :mod:`mbctl.ctrl.task_space`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from mbctl.tomlfields import Table

__all__ = [
    "CONTROL_KEYS",
    "FRICTION_VELOCITIES",
    "REACTIONS",
    "OBSERVER_TORQUES",
    "VELOCITY_ESTIMATORS",
    "CollisionSpec",
    "END_ACTIONS",
    "EndSpec",
    "MAX_HOLD_S",
    "MpcSpec",
    "MPC_SOLVERS",
    "OBJECTIVES",
    "TASK_AXES",
    "ControlSpec",
    "GainsSpec",
    "NullspaceSpec",
    "PerJoint",
    "TaskSpaceSpec",
    "parse_control",
]

PerJoint = float | dict[str, float]
"""One number for every actuated joint, or numbers by joint name."""

JOINT_LAWS = ("feedforward", "computed-torque", "pd-gravity", "pd-feedforward")
"""The joint-space control laws (:mod:`mbctl.ctrl.controllers`)."""
CONTROL_KEYS = ("effort", "friction_velocity", "velocity", "velocity_cutoff_hz", "computed-torque", "pd", "task-space", "collision", "mpc", "end")
END_ACTIONS = ("hand-over", "torque-off")
END_KEYS = ("hold_s", "then")
MAX_HOLD_S = 3600.0  # s: an end hold is seconds; a longer stay is a trajectory of its own, logged cycle by cycle like one
FRICTION_VELOCITIES = ("desired", "measured")
VELOCITY_ESTIMATORS = ("measured", "first-order", "alpha-beta", "model")
"""Where the laws' velocity comes from (:mod:`mbctl.ctrl.estimation`): the backend's as it is, a
first-order filtered difference of positions, an alpha-beta tracking filter, or an observer on the
robot's dynamics driven by the commanded torque."""
REACTIONS = ("stop", "hold", "none")
OBSERVER_TORQUES = ("measured", "commanded")
COLLISION_KEYS = ("gain", "threshold", "reaction", "velocity_cutoff_hz", "torque")
GAIN_KEYS = ("kp", "kd")
TASK_KEYS = ("frame", "axes", "kp", "kd", "nullspace")
NULLSPACE_KEYS = ("objective", "kp", "kd", "posture")
OBJECTIVES = ("joint-limits", "posture")
TASK_AXES = ("x", "y", "z")
MPC_KEYS = ("knots", "step", "iterations", "solver", "q", "dq", "tau", "bandwidth", "terminal", "budget")
MPC_SOLVERS = ("riccati",)


@dataclass(frozen=True)
class GainsSpec:
    """Diagonal gains: ``kp`` (1/s² for computed torque, N·m/rad for PD), ``kd`` (1/s, N·m·s/rad)."""

    kp: PerJoint
    kd: PerJoint


@dataclass(frozen=True)
class NullspaceSpec:
    """The secondary objective of the task-space law: stiffness ``kp`` (1/s²), damping ``kd`` (1/s)."""

    kp: float
    kd: float
    objective: str = "joint-limits"
    posture: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class TaskSpaceSpec:
    """Task frame, task axes, task gains ``kp`` (1/s²) and ``kd`` (1/s), and the null-space objective."""

    frame: str
    kp: float
    kd: float
    nullspace: NullspaceSpec
    axes: tuple[str, ...] = TASK_AXES


@dataclass(frozen=True)
class CollisionSpec:
    """The momentum observer: ``gain`` K (1/s), detection ``threshold`` on ``|tau_ext|`` (N·m, N;
    one number, by joint, or None for the default), ``reaction`` on a detection, the cutoff (Hz) of
    a low-pass on the velocity it uses (inf: none), and the ``torque`` it takes as acting on the arm:
    ``measured`` (the drives' measured torque where the backend reports one, else the commands) or
    ``commanded``."""

    gain: float = 200.0
    threshold: PerJoint | None = None
    reaction: str = "stop"
    velocity_cutoff_hz: float = math.inf
    torque: str = "measured"


@dataclass(frozen=True)
class MpcSpec:
    """``[control.mpc]``: ``knots`` N, ``step`` h (s), Gauss–Newton ``iterations`` per update, the
    ``solver`` of the stage-structured subproblem, weights ``q`` (1/rad²), ``dq`` (s²/rad²; None:
    ``2 q / bandwidth²``), ``tau`` (1/(N·m)²; None: the matrix ``M⁻¹ diag(q / bandwidth⁴) M⁻¹`` at the
    start, so that every joint's error closes at about ``bandwidth`` rad/s, critically damped,
    whatever its inertia; with 10 ms knots, 25 rad/s gives first-stage gains of about computed
    torque's at 20: ``M`` times 476 to 516 1/s² and 41 1/s on the UR5), ``terminal``
    (factor on the last knot's state weights) and the ``budget`` (fraction of the control period an
    update may take before its cycle falls back)."""

    knots: int = 20
    step: float = 0.01
    iterations: int = 1
    solver: str = "riccati"
    q: PerJoint = 1.0e4
    dq: PerJoint | None = None
    tau: PerJoint | None = None
    bandwidth: float = 25.0
    terminal: float = 10.0
    budget: float = 0.8


@dataclass(frozen=True)
class EndSpec:
    """``[control.end]``, the end of a clean run: the controller holds the last reference for
    ``hold_s`` (s), ``then`` hands the arm to the drives' own safe state (``"hand-over"``: CiA 402
    drives through their state machine to their brakes, servos to their own position hold, a ROS 2
    arm to a holding controller) or turns torque off (``"torque-off"``: under gravity the arm falls
    unless brakes hold it)."""

    hold_s: float = 0.2
    then: str = "hand-over"


@dataclass(frozen=True)
class ControlSpec:
    """The ``[control]`` table, parsed.

    Attributes:
        effort: Saturation levels (N·m or N), or None for the joints' effort limits.
        friction_velocity: ``"desired"`` or ``"measured"``.
        computed_torque: Gains of the computed-torque law, or None.
        pd: Gains of the PD laws, or None.
        task_space: The task-space law, or None.
        velocity: The velocity estimator (:data:`VELOCITY_ESTIMATORS`).
        velocity_cutoff_hz: Its bandwidth (Hz).
        collision: The momentum observer's detection settings, or None: it observes, never detects.
        mpc: The model predictive controller's settings (defaults without the table).
        end: The end of a clean run.
        file: The robot TOML, for errors found against the robot (None: built in Python).
    """

    effort: PerJoint | None = None
    friction_velocity: str = "desired"
    computed_torque: GainsSpec | None = None
    pd: GainsSpec | None = None
    task_space: TaskSpaceSpec | None = None
    velocity: str = "model"
    velocity_cutoff_hz: float = 40.0
    collision: CollisionSpec | None = None
    mpc: MpcSpec = field(default_factory=MpcSpec)
    end: EndSpec = field(default_factory=EndSpec)
    file: Path | None = None


def _positive(t: Table, key: str, unit: str) -> float:
    value = t.number(key)
    if not value > 0:
        raise t.error(key, f"must be > 0 {unit}, got {value:g}")
    return value


def _positive_per_joint(t: Table, key: str) -> PerJoint:
    value = t.per_joint(key)
    entries = value.items() if isinstance(value, dict) else [(None, value)]
    for name, number in entries:
        if not number > 0:
            raise t.error(key if name is None else f"{key}.{name}", f"must be > 0, got {number:g}")
    return value


def _gains(t: Table) -> GainsSpec:
    t.only(GAIN_KEYS)
    return GainsSpec(kp=_positive_per_joint(t, "kp"), kd=_positive_per_joint(t, "kd"))


def _task_space(t: Table) -> TaskSpaceSpec:
    t.only(TASK_KEYS)
    axes = t.get("axes", list(TASK_AXES))
    if not isinstance(axes, list) or not axes or any(a not in TASK_AXES for a in axes) or len(set(axes)) != len(axes):
        raise t.error("axes", f"must be a list of distinct axes among x, y, z, got {axes!r}")
    nt = t.table("nullspace")
    nt.only(NULLSPACE_KEYS)
    objective = nt.string("objective", "joint-limits", choices=OBJECTIVES)
    if objective == "joint-limits" and "posture" in nt:
        raise nt.error("posture", 'only with objective = "posture"')
    posture = nt.table("posture").numbers(nt.table("posture").keys()) if "posture" in nt else {}
    return TaskSpaceSpec(
        frame=t.string("frame"),
        kp=_positive(t, "kp", "1/s²"),
        kd=_positive(t, "kd", "1/s"),
        nullspace=NullspaceSpec(kp=_positive(nt, "kp", "1/s²"), kd=_positive(nt, "kd", "1/s"), objective=objective, posture=posture),
        axes=tuple(axes),
    )


def _collision(t: Table) -> CollisionSpec:
    t.only(COLLISION_KEYS)
    return CollisionSpec(
        gain=_positive(t, "gain", "1/s") if "gain" in t else CollisionSpec.gain,
        threshold=_positive_per_joint(t, "threshold") if "threshold" in t else None,
        reaction=t.string("reaction", "stop", choices=REACTIONS),
        velocity_cutoff_hz=_positive(t, "velocity_cutoff_hz", "Hz") if "velocity_cutoff_hz" in t else math.inf,
        torque=t.string("torque", "measured", choices=OBSERVER_TORQUES),
    )


def _integer(t: Table, key: str, default: int, least: int) -> int:
    value = t.number(key, default)
    if value != int(value) or value < least:
        raise t.error(key, f"must be an integer >= {least}, got {value:g}")
    return int(value)


def _mpc(t: Table) -> MpcSpec:
    t.only(MPC_KEYS)
    d = MpcSpec()
    budget = t.number("budget", d.budget)
    if not 0 < budget <= 1:
        raise t.error("budget", f"must be in (0, 1], got {budget:g}")
    return MpcSpec(
        knots=_integer(t, "knots", d.knots, 2),
        step=_positive(t, "step", "s") if "step" in t else d.step,
        iterations=_integer(t, "iterations", d.iterations, 1),
        solver=t.string("solver", d.solver, choices=MPC_SOLVERS),
        **{key: _positive_per_joint(t, key) if key in t else getattr(d, key) for key in ("q", "dq", "tau")},
        bandwidth=_positive(t, "bandwidth", "rad/s") if "bandwidth" in t else d.bandwidth,
        terminal=_positive(t, "terminal", "") if "terminal" in t else d.terminal,
        budget=budget,
    )


def _end(t: Table) -> EndSpec:
    t.only(END_KEYS)
    hold = t.number("hold_s", EndSpec.hold_s)
    if not 0 <= hold <= MAX_HOLD_S:
        raise t.error("hold_s", f"must be within [0, {MAX_HOLD_S:g}] s, got {hold:g}")
    return EndSpec(hold_s=hold, then=t.string("then", EndSpec.then, choices=END_ACTIONS))


def parse_control(t: Table) -> ControlSpec:
    """Parse the ``[control]`` table.

    Raises:
        ConfigError: Naming file and field, for unknown fields, non-positive gains or
            saturation levels, or a malformed task-space table.
    """
    t.only(CONTROL_KEYS)
    return ControlSpec(
        effort=_positive_per_joint(t, "effort") if "effort" in t else None,
        friction_velocity=t.string("friction_velocity", "desired", choices=FRICTION_VELOCITIES),
        computed_torque=_gains(t.table("computed-torque")) if "computed-torque" in t else None,
        pd=_gains(t.table("pd")) if "pd" in t else None,
        task_space=_task_space(t.table("task-space")) if "task-space" in t else None,
        velocity=t.string("velocity", "model", choices=VELOCITY_ESTIMATORS),
        velocity_cutoff_hz=_positive(t, "velocity_cutoff_hz", "Hz") if "velocity_cutoff_hz" in t else ControlSpec.velocity_cutoff_hz,
        collision=_collision(t.table("collision")) if "collision" in t else None,
        mpc=_mpc(t.table("mpc")) if "mpc" in t else MpcSpec(),
        end=_end(t.table("end")) if "end" in t else EndSpec(),
        file=t.file,
    )
