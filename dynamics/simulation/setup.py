"""The robot TOML's ``[[constraints]]`` and ``[simulation]`` tables.

```toml
[[constraints]]
name = "tool_xy"
kind = "frame_position"          # frame_position | frame_orientation | joint_linear | loop | frame_velocity
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
independent = ["j1"]             # nullspace: independent coordinates (default: QR with pivoting)
eliminate = ["loop_c.x"]         # lagrange/nullspace: redundant rows to drop (default: QR with pivoting)
friction_smoothing = 1e-3        # rad/s or m/s: tanh(v/eps) for static friction laws
singularity = { tolerance = 1e-3, action = "stop", damping = 1e-3 }   # action: stop | damped
rank_tolerance = 1e-9
```

Unlisted initial values are 0. ``assemble = true`` moves the initial state onto the
constraints at ``t = 0`` (Gauss–Newton, minimum-norm change, the coordinates in
``keep`` held), then adds ``perturb`` (rad or m per joint) to ``q``.

Elastic DOF (flexible base, RFE links) start at rest in static equilibrium under
gravity with the other coordinates held (``equilibrium = true``, the default;
:func:`mbctl.dynamics.flexible.modal.static_equilibrium`); the assembly leaves them to the
equilibrium (it alternates both until they agree) and they are re-balanced after
``perturb``. With ``equilibrium = false`` they start at the values given (default 0,
undeformed).

The force elements are the joint friction (load-dependent laws included, see
:mod:`mbctl.dynamics.constraints.constrained` for the algebraic loop) and, for elastic robots, the
springs and dampers of :class:`mbctl.dynamics.flexible.elastic.ElasticForces`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.constraint_set import ConstraintSet
from mbctl.dynamics.constraints.kinds import (
    PLANES,
    Constraint,
    FrameOrientation,
    FramePosition,
    FrameVelocity,
    JointLinear,
)
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.constraints.solvers import SOLVERS
from mbctl.dynamics.constraints.stabilization import Baumgarte, SingularityPolicy
from mbctl.dynamics.constraints.targets import (
    ExpressionTarget,
    QuinticPolyline,
    Target,
    rectangle,
)
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.flexible.modal import static_equilibrium
from mbctl.dynamics.forces import ForceElement, JointFriction
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.integrate import (
    INTEGRATORS,
    Progress,
    SimulationResult,
    simulate,
)
from mbctl.errors import ConfigError
from mbctl.tomlfields import Table

__all__ = ["KINDS", "SimulationSetup", "parse_constraints", "parse_simulation", "build_dynamics", "initial_state", "simulate_setup"]

KINDS = ("frame_position", "frame_orientation", "joint_linear", "loop", "frame_velocity")
_COMMON = ("name", "kind")
_FIELDS = {
    "frame_position": ("frame", "axes", "target", "path"),
    "frame_orientation": ("frame", "angles", "target"),
    "joint_linear": ("coefficients", "target"),
    "loop": ("frames", "joint", "axis", "axis_b", "plane"),
    "frame_velocity": ("frame", "axes", "expressed", "target"),
}
SIMULATION_KEYS = (
    "solver",
    "integrator",
    "step",
    "duration",
    "output_step",
    "rtol",
    "atol",
    "max_step",
    "jacobian_interval",
    "baumgarte",
    "initial",
    "independent",
    "eliminate",
    "friction_smoothing",
    "singularity",
    "rank_tolerance",
)


@dataclass(frozen=True)
class SimulationSetup:
    """The ``[simulation]`` table, parsed (SI units)."""

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
    equilibrium: bool = True
    independent: tuple[str, ...] | None = None
    eliminate: tuple[str, ...] | None = None
    friction_smoothing: float = 1e-3
    singularity: SingularityPolicy = SingularityPolicy()
    rank_tolerance: float = 1e-9


def _strings(t: Table, key: str, default=None) -> list[str]:
    value = t.get(key, default)
    if value is default and default is not None:
        return value
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise t.error(key, f"must be a list of strings, got {value!r}")
    return value


def _expressions(t: Table, key: str, size: int | None, default: list[str] | None = None) -> ExpressionTarget:
    """``target``: one expression string (or number) per component."""
    value = t.get(key, default)
    scalar = size is None
    items = [value] if scalar else value
    if not scalar and not isinstance(items, list):
        raise t.error(key, f"must be a list of {size} expressions in t, got {value!r}")
    texts = []
    for i, item in enumerate(items):
        if isinstance(item, bool) or not isinstance(item, (str, int, float)):
            where = key if scalar else f"{key}[{i}]"
            raise t.error(where, f"must be an expression string in t, got {item!r}")
        texts.append(item if isinstance(item, str) else repr(float(item)))
    if not scalar and len(texts) != size:
        raise t.error(key, f"needs {size} expressions (one per component), got {len(texts)}")
    try:
        return ExpressionTarget(texts)
    except ConfigError as exc:
        field = exc.field if not scalar else None
        raise ConfigError(exc.reason, file=t.file, field=f"{t.path(key)}{field or ''}") from None


def _path(t: Table, size: int) -> Target:
    pt = t.table("path")
    kind = pt.string("kind", choices=["polyline", "rectangle"])
    try:
        if kind == "polyline":
            pt.only(["kind", "points", "durations", "start"])
            points = np.array(pt.get("points"), dtype=float) if _is_matrix(pt.get("points")) else None
            if points is None:
                raise pt.error("points", "must be a list of points, each a list of numbers")
            target: Target = QuinticPolyline(points, pt.vector("durations"), pt.number("start", 0.0))
        else:
            pt.only(["kind", "corners", "edge_duration", "start", "laps"])
            corners = np.array(pt.get("corners"), dtype=float) if _is_matrix(pt.get("corners")) else None
            if corners is None:
                raise pt.error("corners", "must be a list of points, each a list of numbers")
            laps = pt.number("laps", 1.0)
            if laps != int(laps):
                raise pt.error("laps", "must be a whole number")
            target = rectangle(corners, pt.number("edge_duration"), pt.number("start", 0.0), int(laps))
    except ConfigError as exc:
        if exc.file is not None:
            raise
        raise pt.error(exc.field, exc.reason) from None
    if target.size != size:
        raise pt.error(None, f"points have {target.size} components, the constraint has {size} axes")
    return target


def _is_matrix(value) -> bool:
    return (
        isinstance(value, list)
        and len(value) > 0
        and all(isinstance(r, list) and len(r) == len(value[0]) for r in value)
        and all(not isinstance(x, bool) and isinstance(x, (int, float)) and math.isfinite(x) for r in value for x in r)
    )


def _constraint(robot: RobotModel, t: Table) -> Constraint:
    kind = t.string("kind", choices=KINDS)
    t.only([*_COMMON, *_FIELDS[kind]])
    name = t.string("name")
    if not name or any(c in name for c in " .[]"):
        raise t.error("name", f"must be a non-empty name without spaces, dots or brackets, got {name!r}")
    try:
        if kind == "frame_position":
            axes = _strings(t, "axes")
            if ("target" in t) == ("path" in t):
                raise t.error(None, "give either target (expressions) or path (built-in generator)")
            target = _path(t, len(axes)) if "path" in t else _expressions(t, "target", len(axes))
            return FramePosition(robot, name, t.string("frame"), axes, target)
        if kind == "frame_orientation":
            angles = _strings(t, "angles")
            target = _expressions(t, "target", len(angles))
            return FrameOrientation(robot, name, t.string("frame"), angles, target)
        if kind == "joint_linear":
            ct = t.table("coefficients")
            coefficients = {j: ct.number(j) for j in ct.keys()}
            target = _expressions(t, "target", None, default="0")
            return JointLinear(robot, name, coefficients, target)
        if kind == "loop":
            frames = _strings(t, "frames")
            axis = t.vector("axis", 3) if "axis" in t else None
            axis_b = t.vector("axis_b", 3) if "axis_b" in t else None
            plane = t.string("plane", None, choices=list(PLANES)) if "plane" in t else None
            return LoopClosure(robot, name, frames, t.string("joint"), axis, axis_b, plane)
        axes = _strings(t, "axes")
        target = _expressions(t, "target", len(axes), default=["0"] * len(axes))
        return FrameVelocity(robot, name, t.string("frame"), axes, target, t.string("expressed", "local"))
    except ConfigError as exc:
        if exc.file is not None:
            raise
        raise ConfigError(exc.reason, file=t.file, field=t.path(exc.field) if exc.field else t.path()) from None


def parse_constraints(robot: RobotModel) -> ConstraintSet:
    """The ``[[constraints]]`` of the robot's TOML, in declaration order (empty without any).

    Raises:
        ConfigError: Naming file and field, for unknown kinds, frames, joints, axes,
            malformed expressions or duplicate names.
    """
    root = robot.config
    if root is None or "constraints" not in root:
        return ConstraintSet([], robot.nv)
    items = root.get("constraints")
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise root.error("constraints", "must be an array of tables ([[constraints]])")
    constraints = [_constraint(robot, Table(item, root.file, f"constraints[{i}]")) for i, item in enumerate(items)]
    try:
        return ConstraintSet(constraints, robot.nv)
    except ConfigError as exc:
        raise ConfigError(exc.reason, file=root.file, field="constraints") from None


def _joint_values(robot: RobotModel, t: Table, key: str) -> dict[str, float]:
    if key not in t:
        return {}
    jt = t.table(key)
    out = {}
    for name in jt.keys():
        try:
            robot.joint(name)
        except ConfigError as exc:
            raise jt.error(name, exc.reason) from None
        out[name] = jt.number(name)
    return out


def _positive(t: Table, key: str, default):
    value = t.number(key, default)
    if value is not None and not value > 0:
        raise t.error(key, f"must be > 0, got {value!r}")
    return value


def parse_simulation(robot: RobotModel) -> SimulationSetup:
    """The ``[simulation]`` table (defaults when absent).

    Raises:
        ConfigError: Naming file and field.
    """
    root = robot.config
    if root is None or "simulation" not in root:
        return SimulationSetup()
    t = root.table("simulation")
    t.only(SIMULATION_KEYS)
    baumgarte = None
    if "baumgarte" in t:
        bt = t.table("baumgarte")
        bt.only(["form", "alpha", "beta"])
        try:
            baumgarte = Baumgarte(bt.string("form", choices=["squared", "linear"]), bt.number("alpha"), bt.number("beta"))
        except ConfigError as exc:
            if exc.file is not None:
                raise
            raise bt.error(exc.field, exc.reason) from None
    singularity = SingularityPolicy()
    if "singularity" in t:
        st = t.table("singularity")
        st.only(["tolerance", "action", "damping"])
        try:
            singularity = SingularityPolicy(
                tolerance=st.number("tolerance", 1e-3),
                action=st.string("action", "stop", choices=["stop", "damped"]),  # type: ignore[arg-type]
                damping=st.number("damping", 1e-3),
            )
        except ConfigError as exc:
            if exc.file is not None:
                raise
            raise st.error(exc.field, exc.reason) from None
    q = dq = perturb = None
    assemble = False
    equilibrium = True
    keep: tuple[str, ...] = ()
    if "initial" in t:
        it = t.table("initial")
        it.only(["q", "dq", "assemble", "keep", "perturb", "equilibrium"])
        q = _joint_values(robot, it, "q")
        dq = _joint_values(robot, it, "dq")
        perturb = _joint_values(robot, it, "perturb")
        assemble = it.boolean("assemble", False)
        keep = tuple(_strings(it, "keep", []))
        for name in keep:
            try:
                robot.joint(name)
            except ConfigError as exc:
                raise it.error("keep", exc.reason) from None
        if (keep or perturb) and not assemble:
            raise it.error("assemble", "keep and perturb apply to an assembled initial state; set assemble = true")
        equilibrium = it.boolean("equilibrium", True)
        if equilibrium:
            for key, values in (("q", q), ("dq", dq)):
                named = [n for n in values if n in robot.elastic_names]
                if named:
                    raise it.error(f"{key}.{named[0]}", "elastic coordinates start in static equilibrium; set equilibrium = false to give them")
    independent = tuple(_strings(t, "independent")) if "independent" in t else None
    eliminate = tuple(_strings(t, "eliminate")) if "eliminate" in t else None
    rank_tolerance = _positive(t, "rank_tolerance", 1e-9)
    return SimulationSetup(
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
        q=q,
        dq=dq,
        assemble=assemble,
        keep=keep,
        perturb=perturb,
        equilibrium=equilibrium,
        independent=independent,
        eliminate=eliminate,
        friction_smoothing=_positive(t, "friction_smoothing", 1e-3),
        singularity=singularity,
        rank_tolerance=rank_tolerance,
    )


def build_dynamics(robot: RobotModel, setup: SimulationSetup | None = None, **overrides) -> ConstrainedDynamics:
    """The :class:`ConstrainedDynamics` the TOML describes (constraints, solver, friction).

    Args:
        overrides: Replace ``solver``, ``eliminate`` or ``independent`` of the setup.
    """
    setup = setup or parse_simulation(robot)
    forces: list[ForceElement] = [JointFriction(robot, setup.friction_smoothing, loads=True)]
    if robot.is_elastic:
        forces.insert(0, ElasticForces(robot))
    return ConstrainedDynamics(
        robot,
        parse_constraints(robot),
        solver=overrides.get("solver", setup.solver),
        baumgarte=setup.baumgarte,
        forces=forces,
        independent=overrides.get("independent", setup.independent),
        eliminate=overrides.get("eliminate", setup.eliminate),
        rank_tolerance=setup.rank_tolerance,
        singularity=setup.singularity,
    )


def initial_state(robot: RobotModel, setup: SimulationSetup, dynamics: ConstrainedDynamics, t0: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    """``(q0, dq0)`` from ``simulation.initial``: given values (others 0), assembled and
    perturbed when asked, elastic coordinates in static equilibrium (see module docstring)."""
    q = np.zeros(robot.nv)
    dq = np.zeros(robot.nv)
    for name, value in (setup.q or {}).items():
        q[robot.joint(name).idx_v] = value
    for name, value in (setup.dq or {}).items():
        dq[robot.joint(name).idx_v] = value
    elastic = robot.elastic_names if setup.equilibrium else ()

    def balance(q: np.ndarray) -> np.ndarray:
        return static_equilibrium(robot, q, free=elastic) if elastic else q

    q = balance(q)
    if setup.assemble:
        for _ in range(20):  # assembly and elastic equilibrium, alternately, until they agree
            q_prev = q
            q, dq = dynamics.assemble(t0, q, dq, keep=(*setup.keep, *elastic))
            q = balance(q)
            if not elastic or np.abs(q - q_prev).max() < 1e-12:
                break
        q, dq = dynamics.assemble(t0, q, dq, keep=(*setup.keep, *elastic))
        for name, value in (setup.perturb or {}).items():
            q[robot.joint(name).idx_v] += value
        q = balance(q)
    return q, dq


def simulate_setup(
    system: ConstrainedDynamics, q0: np.ndarray, dq0: np.ndarray, setup: SimulationSetup, progress: Progress | None = None
) -> SimulationResult:
    """Integrate ``system`` from ``(q0, dq0)`` over ``setup.duration`` (s) with the
    setup's integrator, steps and tolerances; see :func:`mbctl.dynamics.simulation.integrate.simulate`."""
    return simulate(
        system,
        q0,
        dq0,
        setup.duration,
        integrator=setup.integrator,
        step=setup.step,
        output_step=setup.output_step,
        rtol=setup.rtol,
        atol=setup.atol,
        max_step=setup.max_step,
        jacobian_interval=setup.jacobian_interval,
        progress=progress,
    )
