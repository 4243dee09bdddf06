"""Simulations a robot describes: its ``[[constraints]]`` and ``[simulation]`` specs checked and built.

The TOML is described in :mod:`mbctl.config.simulation`.

Unlisted initial values are 0. ``assemble = true`` moves the initial state onto the
constraints at ``t = 0`` (Gauss–Newton, minimum-norm change, the coordinates in
``keep`` held), then adds ``perturb`` (rad or m per joint) to ``q``.

Elastic DOF (flexible base, RFE links) start at rest in static equilibrium under
gravity with the other coordinates held (``equilibrium = true``, the default;
:func:`mbctl.dynamics.flexible.modal.static_equilibrium`); the assembly leaves them to the
equilibrium (it alternates both until they agree) and they are re-balanced after
``perturb``. With ``equilibrium = false`` they start at the values given (default 0,
undeformed). With ``equilibrium = "constrained"`` the assembled state is then moved to
the static equilibrium of the whole mechanism on its constraints, at rest
(:meth:`mbctl.dynamics.constraints.constrained.ConstrainedDynamics.equilibrate`: gravity,
springs, the drives' static forces through the programmed rows, the loop reactions),
so that a run starting there has zero accelerations until the targets move.

The force elements are the joint friction (load-dependent laws included, see
:mod:`mbctl.dynamics.constraints.constrained` for the algebraic loop) and, for elastic robots, the
springs and dampers of :class:`mbctl.dynamics.flexible.elastic.ElasticForces`.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from mbctl.config.simulation import ConstraintSpec, SimulationSpec
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.constraint_set import ConstraintSet
from mbctl.dynamics.constraints.kinds import (
    Constraint,
    FrameOrientation,
    FramePosition,
    FrameVelocity,
    JointLinear,
)
from mbctl.dynamics.constraints.loops import FrameOffset, LoopClosure
from mbctl.dynamics.constraints.targets import (
    ExpressionTarget,
    QuinticPolyline,
    Target,
    rectangle,
)
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.flexible.modal import static_equilibrium
from mbctl.dynamics.forces import ForceElement, JointFriction
from mbctl.dynamics.model.per_joint import check_joint_names
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.integrate import (
    Progress,
    SimulationResult,
    simulate,
)
from mbctl.errors import ConfigError

__all__ = ["build_dynamics", "constraint_set", "initial_state", "simulate_setup", "simulation_setup"]


def _located(spec: ConstraintSpec, key: str, build):
    """``build()``, with a ConfigError it raises placed at ``key`` of the constraint's entry."""
    try:
        return build()
    except ConfigError as exc:
        if exc.file is not None:
            raise
        inner = f"{key}.{exc.field}" if key and exc.field and not exc.field.startswith("[") else f"{key}{exc.field or ''}"
        raise ConfigError(exc.reason, file=spec.file, field=f"{spec.field}.{inner}" if inner else spec.field) from None


def _path_target(spec: ConstraintSpec) -> Target:
    path = spec.path
    assert path is not None
    points = np.array(path.points, dtype=float)
    if path.kind == "polyline":
        target: Target = _located(spec, "path", lambda: QuinticPolyline(points, np.array(path.durations), path.start))
    else:
        target = _located(spec, "path", lambda: rectangle(points, path.edge_duration, path.start, path.laps))
    if target.size != len(spec.axes):
        raise ConfigError(f"points have {target.size} components, the constraint has {len(spec.axes)} axes", file=spec.file, field=f"{spec.field}.path")
    return target


def _expression_target(texts: tuple[str, ...], scalar: bool) -> ExpressionTarget:
    try:
        return ExpressionTarget(list(texts))
    except ConfigError as exc:
        raise ConfigError(exc.reason, field=None if scalar else exc.field) from None


def _constraint(robot: RobotModel, spec: ConstraintSpec) -> Constraint:
    target = None
    if spec.path is not None:
        target = _path_target(spec)
    elif spec.target:
        scalar = spec.kind == "joint_linear"  # one expression: its error names the field, not an index
        target = _located(spec, "target", lambda: _expression_target(spec.target, scalar))

    def build() -> Constraint:
        if spec.kind == "frame_position":
            return FramePosition(robot, spec.name, spec.frame, list(spec.axes), target)
        if spec.kind == "frame_orientation":
            return FrameOrientation(robot, spec.name, spec.frame, list(spec.angles), target)
        if spec.kind == "joint_linear":
            return JointLinear(robot, spec.name, dict(spec.coefficients or {}), target)
        if spec.kind == "loop":
            axis = None if spec.axis is None else np.array(spec.axis)
            axis_b = None if spec.axis_b is None else np.array(spec.axis_b)
            return LoopClosure(robot, spec.name, list(spec.frames), spec.joint, axis, axis_b, spec.plane)
        if spec.kind == "frame_offset":
            return FrameOffset(robot, spec.name, list(spec.frames), list(spec.axes), target)
        return FrameVelocity(robot, spec.name, spec.frame, list(spec.axes), target, spec.expressed, spec.material)

    return _located(spec, "", build)


def constraint_set(robot: RobotModel) -> ConstraintSet:
    """The robot's ``[[constraints]]``, in declaration order (empty without any).

    Raises:
        ConfigError: Naming file and field, for unknown frames, joints, axes,
            malformed expressions or duplicate names.
    """
    specs = robot.spec.constraints if robot.spec is not None else ()
    constraints = [_constraint(robot, spec) for spec in specs]
    try:
        return ConstraintSet(constraints, robot.nv)
    except ConfigError as exc:
        raise ConfigError(exc.reason, file=robot.source, field="constraints") from None


def simulation_setup(robot: RobotModel) -> SimulationSpec:
    """The robot's ``[simulation]`` spec (defaults when absent), its joint names checked.

    Raises:
        ConfigError: Naming file and field, for an unknown joint, or an elastic
            coordinate given while it starts in static equilibrium.
    """
    spec = robot.spec.simulation if robot.spec is not None else None
    if spec is None:
        return SimulationSpec()
    for key in ("q", "dq", "perturb"):
        check_joint_names(robot, getattr(spec, key) or {}, file=spec.file, field=f"simulation.initial.{key}")
    for name in spec.keep:
        try:
            robot.joint(name)
        except ConfigError as exc:
            raise ConfigError(exc.reason, file=spec.file, field="simulation.initial.keep") from None
    if spec.equilibrium:
        for key in ("q", "dq"):
            named = [n for n in getattr(spec, key) or {} if n in robot.elastic_names]
            if named:
                raise ConfigError(
                    "elastic coordinates start in static equilibrium; set equilibrium = false to give them", file=spec.file, field=f"simulation.initial.{key}.{named[0]}"
                )
    return spec


def build_dynamics(robot: RobotModel, setup: SimulationSpec | None = None, **overrides) -> ConstrainedDynamics:
    """The :class:`ConstrainedDynamics` the TOML describes (constraints, solver, friction).

    Args:
        overrides: Replace ``solver``, ``eliminate`` or ``independent`` of the setup.
    """
    setup = setup or simulation_setup(robot)
    forces: list[ForceElement] = [JointFriction(robot, setup.friction_smoothing, loads=True)]
    if robot.is_elastic:
        forces.insert(0, ElasticForces(robot))
    return ConstrainedDynamics(
        robot,
        constraint_set(robot),
        solver=overrides.get("solver", setup.solver),
        baumgarte=setup.baumgarte,
        forces=forces,
        independent=overrides.get("independent", setup.independent),
        eliminate=overrides.get("eliminate", setup.eliminate),
        rank_tolerance=setup.rank_tolerance,
        singularity=setup.singularity,
    )


def initial_state(robot: RobotModel, setup: SimulationSpec, dynamics: ConstrainedDynamics, t0: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
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
        if setup.equilibrium == "constrained":
            q = dynamics.equilibrate(t0, q, keep=setup.keep)
            dq = np.zeros(robot.nv)
    return q, dq


def simulate_setup(
    system: ConstrainedDynamics,
    q0: np.ndarray,
    dq0: np.ndarray,
    setup: SimulationSpec,
    progress: Progress | None = None,
    backend: str = "auto",
    sink: Callable[[SimulationResult], None] | None = None,
    batch_samples: int = 4096,
    watch: Callable[[float, np.ndarray], None] | None = None,
) -> SimulationResult:
    """Integrate ``system`` from ``(q0, dq0)`` over ``setup.duration`` (s) with the setup's integrator,
    steps and tolerances on ``backend``, the records kept or handed to ``sink`` in batches, each
    recorded ``(t, q)`` shown to ``watch``; see :func:`mbctl.dynamics.simulation.integrate.simulate`."""
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
        backend=backend,
        sink=sink,
        batch_samples=batch_samples,
        watch=watch,
    )
