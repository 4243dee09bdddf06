"""``[[constraints]]`` and ``[simulation]``: programmed and closed-loop constraints, and how to integrate.

```toml
[[constraints]]
name = "tool_xy"
kind = "frame_position"          # frame_position | frame_orientation | joint_linear | loop | frame_velocity | frame_offset
frame = "tool"
axes = ["x", "y"]                # world axes of the frame origin (m)
target = ["0.05*sin(0.4*pi*t)", "0.35 + 0.05*cos(0.4*pi*t)"]   # expressions in t (s)
# or a built-in path instead of target:
# path = { kind = "rectangle", corners = [[x, y], ...], edge_duration = 1.0, start = 0.0, laps = 1 }
# path = { kind = "polyline", points = [[x, y], ...], durations = [1.0, ...], start = 0.0 }

[[constraints]]
name = "yaw"
kind = "joint_linear"
coefficients = { j1 = 1.0, j2 = 1.0, j3 = 1.0 }
target = "0"                     # default "0"

[[constraints]]                  # Z-Y-X Euler angles (rad) of a frame
kind = "frame_orientation"
angles = ["yaw"]                 # any of roll, pitch, yaw
target = ["0.1*t"]

[[constraints]]                  # loop closure at a cut joint between frames A and B
kind = "loop"
frames = ["coupler_end", "rocker_end"]
joint = "revolute"               # revolute | prismatic | spherical
axis = [0, 0, 1]                 # in A's axes (default z); axis_b in B's axes (default = axis)
plane = "xy"                     # optional: planar variant (xy | yz | zx)

[[constraints]]                  # Pfaffian: frame velocity components = target(t)
kind = "frame_velocity"
frame = "wheel"
axes = ["y"]                     # x, y, z (m/s), wx, wy, wz (rad/s)
expressed = "local"              # local (frame axes) | world
target = ["0"]                   # default zeros
material = false                 # true: a physical contact (knife edge, wheel) whose force is a reaction

[[constraints]]                  # a linear drive between two bodies: offset of B's origin from A's, in A's axes
kind = "frame_offset"
frames = ["platform", "slider"]
axes = ["y"]                     # x, y, z of frame A (m)
target = ["0.01*sin(t)"]

[simulation]
solver = "udwadia-kalaba"        # udwadia-kalaba | lagrange | nullspace
integrator = "rk4"               # rk4 | ros2 | radau | bdf | lsoda | rk45 | dop853
step = 1e-4                      # s: RK4 step; default output interval of adaptive methods
duration = 10.0                  # s
output_step = 1e-3               # s between recorded samples (default: step)
rtol = 1e-8                      # adaptive methods (also atol, max_step)
jacobian_interval = 0.05         # s between Jacobian refreshes of integrator = "ros2"
baumgarte = { form = "linear", alpha = 0.5, beta = 200.0 }   # or form = "squared"; omit for none
initial = { q = { j1 = 0.5236 }, dq = { j1 = -0.157 }, assemble = false, keep = [], perturb = {}, equilibrium = true }
# equilibrium = true: elastic coordinates balanced with the others held; "constrained":
# at rest, every coordinate balanced under gravity, springs and constraints (assemble = true)
independent = ["j1"]             # nullspace: independent coordinates (default: QR with pivoting)
eliminate = ["loop_c.x"]         # lagrange/nullspace: redundant rows to drop (default: QR with pivoting)
friction_smoothing = 1e-3        # rad/s or m/s: tanh(v/eps) for static friction laws
singularity = { tolerance = 1e-3, action = "stop", damping = 1e-3 }   # action: stop | damped
rank_tolerance = 1e-9
```

How the initial state is assembled and balanced: :mod:`mbctl.dynamics.simulation.setup`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mbctl.errors import ConfigError
from mbctl.tomlfields import Table

__all__ = [
    "INTEGRATORS",
    "KINDS",
    "SOLVERS",
    "Baumgarte",
    "ConstraintSpec",
    "PathSpec",
    "SimulationSpec",
    "SingularityPolicy",
    "parse_constraints",
    "parse_simulation",
]

KINDS = ("frame_position", "frame_orientation", "joint_linear", "loop", "frame_velocity", "frame_offset")
SOLVERS = ("udwadia-kalaba", "lagrange", "nullspace")
INTEGRATORS = ("rk4", "ros2", "radau", "bdf", "lsoda", "rk45", "dop853")
BACKENDS = ("auto", "compiled", "python")
"""What runs a simulation's steps (:func:`mbctl.dynamics.simulation.integrate.simulate`)."""
PLANES = ("xy", "yz", "zx")
_COMMON = ("name", "kind")
_FIELDS = {
    "frame_position": ("frame", "axes", "target", "path"),
    "frame_orientation": ("frame", "angles", "target"),
    "joint_linear": ("coefficients", "target"),
    "loop": ("frames", "joint", "axis", "axis_b", "plane"),
    "frame_velocity": ("frame", "axes", "expressed", "target", "material"),
    "frame_offset": ("frames", "axes", "target"),
}
SIMULATION_KEYS = (
    "solver", "integrator", "step", "duration", "output_step", "rtol", "atol", "max_step", "jacobian_interval",
    "baumgarte", "initial", "independent", "eliminate", "friction_smoothing", "singularity", "rank_tolerance",
)  # fmt: skip


@dataclass(frozen=True)
class Baumgarte:
    """Baumgarte stabilization of the acceleration-level constraint rows.

    - ``form="squared"`` (the flexible-manipulator study): ``Phi'' + 2*alpha*Phi' + beta**2*Phi = 0``;
    - ``form="linear"`` (the SCARA constraint study): ``Phi'' + alpha*Phi' + beta*Phi = 0``.

    Velocity-level (Pfaffian) rows get the damping term only: ``dPsi' + c1*dPsi = 0``
    with ``c1 = 2*alpha`` or ``alpha``. Units: ``alpha`` 1/s; ``beta`` 1/s (squared)
    or 1/s² (linear). Applied by :func:`mbctl.dynamics.constraints.stabilization.stabilize`.
    """

    form: Literal["squared", "linear"]
    alpha: float
    beta: float

    def __post_init__(self) -> None:
        if self.form not in ("squared", "linear"):
            raise ConfigError(f"unknown value {self.form!r} (expected squared, linear)", field="form")
        for name in ("alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ConfigError(f"must be a finite number >= 0, got {value!r}", field=name)

    @property
    def coefficients(self) -> tuple[float, float]:
        """``(c1, c0)`` of the violation's law ``Phi'' + c1*Phi' + c0*Phi = 0``."""
        if self.form == "squared":
            return 2.0 * self.alpha, self.beta**2
        return float(self.alpha), float(self.beta)


@dataclass(frozen=True)
class SingularityPolicy:
    """What to do when the constraint Jacobian loses rank.

    When the constraints fix every DOF (rank = nv), the sign of ``det A`` is also
    watched: a fixed-step integrator can step across a singular configuration
    between two evaluations, and a sign change reveals it.

    Attributes:
        tolerance: A singular value ``s_r`` below ``tolerance*s_1`` (r = the initial
            rank) counts as singular (1e-3: for the SCARA, an elbow within ~1° of
            stretched).
        action: ``"stop"`` raises ``SingularConstraintError``; ``"damped"``
            continues with damped least squares (Udwadia–Kalaba only).
        damping: ``mu/s_max`` of the damped mode.
    """

    tolerance: float = 1e-3
    action: Literal["stop", "damped"] = "stop"
    damping: float = 1e-3

    def __post_init__(self) -> None:
        if self.action not in ("stop", "damped"):
            raise ConfigError(f"unknown value {self.action!r} (expected stop, damped)", field="action")
        if not (0 < self.tolerance < 1):
            raise ConfigError(f"must be in (0, 1), got {self.tolerance!r}", field="tolerance")
        if not (self.damping > 0 and math.isfinite(self.damping)):
            raise ConfigError(f"must be > 0, got {self.damping!r}", field="damping")


@dataclass(frozen=True)
class PathSpec:
    """A built-in path target: ``polyline`` through ``points`` with segment ``durations`` (s), or
    ``rectangle`` through ``points`` (the corners), ``edge_duration`` (s) per edge, ``laps`` times."""

    kind: str
    points: tuple[tuple[float, ...], ...]
    durations: tuple[float, ...] = ()
    edge_duration: float = 0.0
    start: float = 0.0
    laps: int = 1


@dataclass(frozen=True)
class ConstraintSpec:
    """One ``[[constraints]]`` entry, parsed; names of frames and joints are checked against the robot later.

    ``target`` holds expression texts in ``t`` (s): one per axis or angle, or one for
    ``joint_linear``. ``field`` is the entry's place in the file (``constraints[2]``).
    """

    name: str
    kind: str
    frame: str = ""
    frames: tuple[str, ...] = ()
    axes: tuple[str, ...] = ()
    angles: tuple[str, ...] = ()
    target: tuple[str, ...] = ()
    path: PathSpec | None = None
    coefficients: dict[str, float] | None = None
    joint: str = ""
    axis: tuple[float, float, float] | None = None
    axis_b: tuple[float, float, float] | None = None
    plane: str | None = None
    expressed: str = "local"
    material: bool = False
    file: Path | None = None
    field: str = ""


@dataclass(frozen=True)
class SimulationSpec:
    """The ``[simulation]`` table, parsed (SI units; initial values by joint name)."""

    solver: str = "udwadia-kalaba"
    integrator: str = "rk4"
    step: float = 1e-4
    duration: float = 1.0
    output_step: float | None = None
    rtol: float = 1e-8
    atol: float = 1e-10
    max_step: float | None = None
    jacobian_interval: float = 0.05
    baumgarte: Baumgarte | None = None
    q: dict[str, float] | None = None
    dq: dict[str, float] | None = None
    assemble: bool = False
    keep: tuple[str, ...] = ()
    perturb: dict[str, float] | None = None
    equilibrium: bool | str = True
    independent: tuple[str, ...] | None = None
    eliminate: tuple[str, ...] | None = None
    friction_smoothing: float = 1e-3
    singularity: SingularityPolicy = SingularityPolicy()
    rank_tolerance: float = 1e-9
    file: Path | None = None


def _equilibrium(t: Table) -> bool | str:
    """``initial.equilibrium``: true, false or ``"constrained"``."""
    value = t.get("equilibrium", True)
    if isinstance(value, bool) or value == "constrained":
        return value
    raise t.error("equilibrium", f'must be true, false or "constrained", got {value!r}')


def _strings(t: Table, key: str, default: list[str] | None = None) -> tuple[str, ...]:
    value = t.get(key, default)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise t.error(key, f"must be a list of strings, got {value!r}")
    return tuple(value)


def _expressions(t: Table, key: str, size: int | None, default: object = None) -> tuple[str, ...]:
    """``target``: one expression string (or number) per component; one for ``size=None``."""
    value = t.get(key, default) if default is not None else t.get(key)
    scalar = size is None
    items = [value] if scalar else value
    if not scalar and not isinstance(items, list):
        raise t.error(key, f"must be a list of {size} expressions in t, got {value!r}")
    texts = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            raise t.error(key if scalar else f"{key}[{i}]", f"must be an expression string in t, got {item!r}")
        texts.append(item if isinstance(item, str) else repr(float(item)))
    if not scalar and len(texts) != size:
        raise t.error(key, f"needs {size} expressions (one per component), got {len(texts)}")
    return tuple(texts)


def _matrix(t: Table, key: str) -> tuple[tuple[float, ...], ...]:
    value = t.get(key)
    ok = (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(r, list) and len(r) == len(value[0]) for r in value)
        and all(not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) for r in value for x in r)
    )
    if not ok:
        raise t.error(key, "must be a list of points, each a list of numbers")
    return tuple(tuple(float(x) for x in row) for row in value)


def _path(t: Table) -> PathSpec:
    pt = t.table("path")
    kind = pt.string("kind", choices=["polyline", "rectangle"])
    if kind == "polyline":
        pt.only(["kind", "points", "durations", "start"])
        return PathSpec(kind, _matrix(pt, "points"), durations=tuple(float(x) for x in pt.vector("durations")), start=pt.number("start", 0.0))
    pt.only(["kind", "corners", "edge_duration", "start", "laps"])
    laps = pt.number("laps", 1.0)
    if laps != int(laps):
        raise pt.error("laps", "must be a whole number")
    return PathSpec(kind, _matrix(pt, "corners"), edge_duration=pt.number("edge_duration"), start=pt.number("start", 0.0), laps=int(laps))


def _vector3(t: Table, key: str) -> tuple[float, float, float] | None:
    if key not in t:
        return None
    x, y, z = t.vector(key, 3)
    return float(x), float(y), float(z)


def _constraint(t: Table) -> ConstraintSpec:
    kind = t.string("kind", choices=KINDS)
    t.only([*_COMMON, *_FIELDS[kind]])
    name = t.string("name")
    if not name or any(c in name for c in " .[]"):
        raise t.error("name", f"must be a non-empty name without spaces, dots or brackets, got {name!r}")
    where = {"name": name, "kind": kind, "file": t.file, "field": t.path() or ""}
    if kind == "frame_position":
        axes = _strings(t, "axes")
        if ("target" in t) == ("path" in t):
            raise t.error(None, "give either target (expressions) or path (built-in generator)")
        if "path" in t:
            return ConstraintSpec(**where, frame=t.string("frame"), axes=axes, path=_path(t))
        return ConstraintSpec(**where, frame=t.string("frame"), axes=axes, target=_expressions(t, "target", len(axes)))
    if kind == "frame_orientation":
        angles = _strings(t, "angles")
        return ConstraintSpec(**where, frame=t.string("frame"), angles=angles, target=_expressions(t, "target", len(angles)))
    if kind == "joint_linear":
        ct = t.table("coefficients")
        return ConstraintSpec(**where, coefficients={j: ct.number(j) for j in ct.keys()}, target=_expressions(t, "target", None, default="0"))
    if kind == "loop":
        return ConstraintSpec(
            **where,
            frames=_strings(t, "frames"),
            joint=t.string("joint"),
            axis=_vector3(t, "axis"),
            axis_b=_vector3(t, "axis_b"),
            plane=t.string("plane", None, choices=list(PLANES)) if "plane" in t else None,
        )
    axes = _strings(t, "axes")
    if kind == "frame_offset":
        return ConstraintSpec(**where, frames=_strings(t, "frames"), axes=axes, target=_expressions(t, "target", len(axes)))
    return ConstraintSpec(**where, frame=t.string("frame"), axes=axes, target=_expressions(t, "target", len(axes), default=["0"] * len(axes)), expressed=t.string("expressed", "local"), material=t.boolean("material", False))


def parse_constraints(root: Table) -> tuple[ConstraintSpec, ...]:
    """The ``[[constraints]]`` of a robot TOML, in declaration order (empty without any).

    Raises:
        ConfigError: Naming file and field, for unknown kinds or fields, malformed lists,
            paths or expression values.
    """
    if "constraints" not in root:
        return ()
    items = root.get("constraints")
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise root.error("constraints", "must be an array of tables ([[constraints]])")
    return tuple(_constraint(Table(item, root.file, f"constraints[{i}]")) for i, item in enumerate(items))


def _positive(t: Table, key: str, default: float | None) -> float | None:
    value = t.number(key, default)
    if value is not None and not value > 0:
        raise t.error(key, f"must be > 0, got {value!r}")
    return value


def _located(t: Table, build):
    """``build()``, with a ConfigError it raises placed in ``t``."""
    try:
        return build()
    except ConfigError as exc:
        if exc.file is not None:
            raise
        raise t.error(exc.field, exc.reason) from None


def _joint_values(t: Table, key: str) -> dict[str, float]:
    if key not in t:
        return {}
    jt = t.table(key)
    return {name: jt.number(name) for name in jt.keys()}


def parse_simulation(t: Table) -> SimulationSpec:
    """Parse the ``[simulation]`` table.

    Raises:
        ConfigError: Naming file and field.
    """
    t.only(SIMULATION_KEYS)
    baumgarte = None
    if "baumgarte" in t:
        bt = t.table("baumgarte")
        bt.only(["form", "alpha", "beta"])
        baumgarte = _located(bt, lambda: Baumgarte(bt.string("form", choices=["squared", "linear"]), bt.number("alpha"), bt.number("beta")))
    singularity = SingularityPolicy()
    if "singularity" in t:
        st = t.table("singularity")
        st.only(["tolerance", "action", "damping"])
        singularity = _located(
            st, lambda: SingularityPolicy(tolerance=st.number("tolerance", 1e-3), action=st.string("action", "stop", choices=["stop", "damped"]), damping=st.number("damping", 1e-3))
        )
    initial: dict[str, object] = {"q": {}, "dq": {}, "perturb": {}, "assemble": False, "keep": (), "equilibrium": True}
    if "initial" in t:
        it = t.table("initial")
        it.only(["q", "dq", "assemble", "keep", "perturb", "equilibrium"])
        initial = {
            "q": _joint_values(it, "q"),
            "dq": _joint_values(it, "dq"),
            "perturb": _joint_values(it, "perturb"),
            "assemble": it.boolean("assemble", False),
            "keep": _strings(it, "keep", []),
            "equilibrium": _equilibrium(it),
        }
        if (initial["keep"] or initial["perturb"]) and not initial["assemble"]:
            raise it.error("assemble", "keep and perturb apply to an assembled initial state; set assemble = true")
        if initial["equilibrium"] == "constrained" and not initial["assemble"]:
            raise it.error("equilibrium", 'the constrained equilibrium starts from an assembled state; set assemble = true')
        if initial["equilibrium"] == "constrained" and (initial["dq"] or initial["perturb"]):
            raise it.error("equilibrium", "a constrained static equilibrium is at rest on the constraints; drop dq and perturb")
    return SimulationSpec(
        solver=t.string("solver", "udwadia-kalaba", choices=SOLVERS),
        integrator=t.string("integrator", "rk4", choices=INTEGRATORS),
        step=_positive(t, "step", 1e-4),
        duration=_positive(t, "duration", 1.0),
        output_step=_positive(t, "output_step", None),
        rtol=_positive(t, "rtol", 1e-8),
        atol=_positive(t, "atol", 1e-10),
        max_step=_positive(t, "max_step", None),
        jacobian_interval=_positive(t, "jacobian_interval", 0.05),
        baumgarte=baumgarte,
        independent=_strings(t, "independent") if "independent" in t else None,
        eliminate=_strings(t, "eliminate") if "eliminate" in t else None,
        friction_smoothing=_positive(t, "friction_smoothing", 1e-3),
        singularity=singularity,
        rank_tolerance=_positive(t, "rank_tolerance", 1e-9),
        file=t.file,
        **initial,
    )
