"""A parameter study (``mbctl sweep``): which robot, which workflow, which parameters vary how.

```toml
robot = "ur5"                     # robot TOML (relative to this file) or a bundled robot's name
workflow = "feedforward"          # feedforward | simulate | run | identify
samples = 1000                    # Monte Carlo samples (per grid point), with a distribution
seed = 1                          # of the Monte Carlo draws
runs_per_task = 20                # optional: runs batched into one task (default: sized from a timed run)
quantities = ["tau_peak", "tau_rms"]   # optional: keep only these kinds (default: all of the workflow)

[overrides.plant]                 # merged into the robot description before anything varies (a table
                                  # with a `law` replaces the old one whole)
payload = { frame = "tool0", mass = 1.0, com = [0.0, 0.0, 0.05] }

[parameters."plant.payload.mass"]             # dotted TOML path into the robot description
distribution = "uniform"                      # low .. high
low = 0.0
high = 3.0
[parameters."joints.elbow_joint.friction.fc"]
distribution = "normal"                       # mean, std >= 0
mean = 3.5
std = 0.35
[parameters."control.computed-torque.kp"]
values = [100.0, 400.0, 1600.0]               # a grid axis; or range = [start, stop, count]

[trajectory]                      # feedforward and run: a CSV file, or rest-to-rest quintic moves
waypoints = [[0, 0, 0, 0, 0, 0], [0.5, -0.5, 0.8, 0.3, 0.2, 0.1]]   # rad, m; in the robot's joint order
durations = [2.0]                 # s per move
rate_hz = 500.0                   # samples per second
```

Workflow tables (all fields optional unless marked), parsed into :class:`FeedforwardStudy`,
:class:`SimulateStudy`, :class:`RunStudy` and :class:`IdentifyStudy` (their fields, defaults and
units are documented there); every named choice (model, lugre mode, integrator, backend,
controller, law) is checked here, the joint name against the robot by the workflow.

The runs are every combination of the grid axes (declaration order, the last varying
fastest) times ``samples`` Monte Carlo draws; a study with no distribution runs its
grid once. Run ``i`` is row ``i`` of that list. Only the parsing lives here; the
robot-dependent checks (paths exist and are numbers, every sample gives a valid robot)
are made by :func:`mbctl.study.engine.prepare` before any run (with
:func:`mbctl.config.study_samples.check_paths` and :func:`~mbctl.config.study_samples.sample_spec`).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TypeAlias

import numpy as np

from mbctl.budget import Budget, check_memory, format_count, memory_budget
from mbctl.bundled import resolve_config
from mbctl.config.control import JOINT_LAWS
from mbctl.config.simulation import BACKENDS, INTEGRATORS
from mbctl.config.study_samples import merge_tables
from mbctl.errors import InputError
from mbctl.tomlfields import Table, read_toml

__all__ = [
    "BACKENDS",
    "CONTROLLERS",
    "DISTRIBUTIONS",
    "FEEDFORWARD_MODELS",
    "IDENTIFY_LAWS",
    "LUGRE_MODES",
    "STUDY_KEYS",
    "WORKFLOWS",
    "Distribution",
    "FeedforwardStudy",
    "Grid",
    "IdentifyStudy",
    "ParameterSpec",
    "RunStudy",
    "SimulateStudy",
    "StudySpec",
    "StudyTrajectory",
    "WorkflowSettings",
    "read_study",
]

WORKFLOWS = ("feedforward", "simulate", "run", "identify")
DISTRIBUTIONS = ("uniform", "normal", "lognormal")
STUDY_KEYS = ("robot", "workflow", "samples", "seed", "runs_per_task", "quantities", "overrides", "parameters", "trajectory", *WORKFLOWS)
FEEDFORWARD_MODELS = ("robot", "plant")
LUGRE_MODES = ("dynamic", "steady")
CONTROLLERS = JOINT_LAWS  # a lock-step run drives the joint-space laws
IDENTIFY_LAWS = ("stribeck", "coulomb-viscous")  # the static laws a constant-speed fit gives
_DISTRIBUTION_ARGS = {"uniform": ("low", "high"), "normal": ("mean", "std"), "lognormal": ("median", "sigma")}


@dataclass(frozen=True)
class Grid:
    """A grid axis: the parameter takes each of ``values`` in turn."""

    values: tuple[float, ...]


@dataclass(frozen=True)
class Distribution:
    """A Monte Carlo draw.

    ``uniform``: ``a`` = low, ``b`` = high (``b >= a``); ``normal``: ``a`` = mean, ``b`` =
    standard deviation (>= 0); ``lognormal``: ``exp(N(log a, b^2))``, ``a`` = median (> 0),
    ``b`` = standard deviation of the logarithm (>= 0). Units: the parameter's.
    """

    kind: str
    a: float
    b: float


@dataclass(frozen=True)
class ParameterSpec:
    """One varied parameter: its dotted path in the robot description and how it varies."""

    path: str
    variation: Grid | Distribution


@dataclass(frozen=True, eq=False)
class StudyTrajectory:
    """``[trajectory]`` (the ``feedforward`` and ``run`` workflows): a trajectory CSV, or
    rest-to-rest quintic moves through waypoints.

    Attributes:
        file: The trajectory CSV (resolved against the study's folder), or None for moves.
        waypoints: (moves + 1, DOF) positions (rad, m) in the robot's joint order (its
            length checked against the robot by the workflow), or None with a file.
        durations: Length of each move (s, > 0), or None with a file.
        rate_hz: Samples per second of the moves (Hz, > 0).
    """

    file: Path | None = None
    waypoints: np.ndarray | None = None
    durations: np.ndarray | None = None
    rate_hz: float = 500.0


@dataclass(frozen=True)
class FeedforwardStudy:
    """``[feedforward]``: inverse dynamics with friction along the study's trajectory.

    Attributes:
        model: ``"robot"``: the robot description's own friction and payload; ``"plant"``:
            the simulated plant's truth (``[plant]``: its friction and payload).
        lugre: LuGre joints: ``"dynamic"`` integrates the bristle state along the samples,
            ``"steady"`` uses the steady-state (Stribeck, ``delta = 2``) curve.
    """

    model: Literal["robot", "plant"] = "robot"
    lugre: Literal["dynamic", "steady"] = "dynamic"


@dataclass(frozen=True)
class SimulateStudy:
    """``[simulate]``: the robot's ``[[constraints]]`` and ``[simulation]``, with these replacing
    the robot's own values where given (None: the robot's ``[simulation]`` value).

    Attributes:
        duration: Simulated time (s, > 0).
        step: Integrator step (s, > 0).
        integrator: One of :data:`mbctl.config.simulation.INTEGRATORS`.
        backend: ``"auto"`` (the compiled core where it covers the system), ``"compiled"``
            or ``"python"`` (the interpreted reference).
    """

    duration: float | None = None
    step: float | None = None
    integrator: str | None = None
    backend: Literal["auto", "compiled", "python"] = "auto"


@dataclass(frozen=True)
class RunStudy:
    """``[run]``: a lock-step closed-loop run against the simulated plant.

    Attributes:
        controller: One of :data:`CONTROLLERS` (its gains are checked against the robot's
            ``[control]`` by the workflow).
        rate_hz: Control rate (Hz, > 0).
        duration: Length of the run (s, > 0), or None for the trajectory's length.
        compiled: The law and the plant's steps in generated C (False: interpreted, the same
            arithmetic).
    """

    controller: Literal["feedforward", "computed-torque", "pd-gravity", "pd-feedforward"] = "computed-torque"
    rate_hz: float = 1000.0
    duration: float | None = None
    compiled: bool = True


@dataclass(frozen=True)
class IdentifyStudy:
    """``[identify]``: a constant-speed experiment on the simulated plant, then a fit.

    Attributes:
        joint: The joint identified (required; checked against the robot by the workflow).
        law: The fitted law, one of :data:`IDENTIFY_LAWS`.
        count: Speeds per direction (>= 2), or None for the robot's ``[identification]`` plan.
        min_speed, max_speed: Slowest and fastest speed (rad/s or m/s, > 0), or None for the plan's.
    """

    joint: str
    law: Literal["stribeck", "coulomb-viscous"] = "stribeck"
    count: int | None = None
    min_speed: float | None = None
    max_speed: float | None = None

    def plan_overrides(self) -> dict[str, float]:
        """The given ``count``, ``min_speed`` and ``max_speed``, for
        :func:`mbctl.identification.config.identification_settings`."""
        return {k: v for k in ("count", "min_speed", "max_speed") if (v := getattr(self, k)) is not None}


WorkflowSettings: TypeAlias = FeedforwardStudy | SimulateStudy | RunStudy | IdentifyStudy


@dataclass(frozen=True, eq=False)
class StudySpec:
    """A parsed study file.

    Attributes:
        source: The study file.
        robot: The robot TOML file.
        document: The robot description as parsed TOML, with the study's overrides merged
            (a plain nested dict; treat as read-only).
        workflow: One of :data:`WORKFLOWS`.
        parameters: Varied parameters, in declaration order.
        samples: Monte Carlo draws per grid point (1 without a distribution).
        seed: Seed of the draws.
        runs_per_task: Runs batched into one task, or None (sized from a timed run).
        quantities: Kinds of quantities kept, or None for all of the workflow's.
        trajectory: The ``[trajectory]`` table, parsed, or None.
        settings: The workflow's table, parsed (its spec class's defaults where the table is silent).
        digest: SHA-256 of the study and robot files (resume refuses a changed study).
        robot_name: The bundled robot's name, if the study names one (workers on other
            machines find their own copy), else None.
    """

    source: Path
    robot: Path
    document: dict[str, Any]
    workflow: str
    parameters: tuple[ParameterSpec, ...]
    samples: int
    seed: int
    runs_per_task: int | None
    quantities: tuple[str, ...] | None
    trajectory: StudyTrajectory | None
    settings: WorkflowSettings
    digest: str
    robot_name: str | None = None

    @property
    def grid_shape(self) -> tuple[int, ...]:
        """Lengths of the grid axes, in declaration order."""
        return tuple(len(p.variation.values) for p in self.parameters if isinstance(p.variation, Grid))

    def field(self, path: str) -> str:
        """The study-file field of parameter ``path`` (for errors)."""
        return f"parameters.{path}"


def _whole(t: Table, key: str, default: Any, minimum: int) -> Any:
    if key not in t:
        return default
    value = t.number(key)
    if value != int(value) or value < minimum:
        raise t.error(key, f"must be an integer >= {minimum}, got {t.get(key)!r}")
    return int(value)


# memory a run of a study holds in the sweep process, besides its numbers: its design row, its row of
# the consolidated table (status and reason strings, index) and the bookkeeping of its task (bytes)
RUN_BYTES = 200
_VALUE_BYTES = 40  # a grid value while the file is read: a double, a Python float and its tuple slot


def _within(t: Table, key: str, estimate: float, budget: Budget, what: str) -> None:
    """``check_memory``, its refusal placed at ``key`` of ``t`` (study file and dotted field)."""
    try:
        check_memory(estimate, budget, what=what, field=key)
    except InputError as exc:
        raise t.error(key, exc.reason) from None


def _parameter(t: Table, budget: Budget) -> Grid | Distribution:
    kinds = [k for k in ("values", "range", "distribution") if k in t]
    if len(kinds) != 1:
        raise t.error(None, "give exactly one of values = [...], range = [start, stop, count] or distribution = ...")
    if kinds[0] == "values":
        t.only(("values",))
        values = t.vector("values")
        if len(values) == 0:
            raise t.error("values", "must hold at least one number")
        return Grid(tuple(float(v) for v in values))
    if kinds[0] == "range":
        t.only(("range",))
        start, stop, count = t.vector("range", 3)
        if count != int(count) or count < 1:
            raise t.error("range", f"count (third number) must be an integer >= 1, got {count:g}")
        _within(t, "range", count * _VALUE_BYTES, budget, f"the grid axis ({format_count(count)} values)")
        return Grid(tuple(float(v) for v in np.linspace(start, stop, int(count))))
    kind = t.string("distribution", choices=DISTRIBUTIONS)
    names = _DISTRIBUTION_ARGS[kind]
    t.only(("distribution", *names))
    a, b = (t.number(n) for n in names)
    if kind == "uniform" and not b >= a:
        raise t.error("high", f"must be >= low ({a:g}), got {b:g}")
    if kind == "normal" and not b >= 0:
        raise t.error("std", f"must be >= 0, got {b:g}")
    if kind == "lognormal":
        if not a > 0:
            raise t.error("median", f"must be > 0, got {a:g}")
        if not b >= 0:
            raise t.error("sigma", f"must be >= 0, got {b:g}")
    return Distribution(kind, a, b)


def _trajectory(t: Table, study_dir: Path) -> StudyTrajectory:
    if "file" in t:
        t.only(("file",))
        path = Path(t.string("file"))
        path = path if path.is_absolute() else study_dir / path
        if not path.is_file():
            raise t.error("file", f"no such file: {path}")
        return StudyTrajectory(file=path)
    t.only(("waypoints", "durations", "rate_hz"))
    rows = t.get("waypoints")
    if not isinstance(rows, list) or len(rows) < 2:
        raise t.error("waypoints", "must be a list of at least two joint-position lists")
    sub = Table({str(i): r for i, r in enumerate(rows)}, t.file, t.path("waypoints"))
    waypoints = [sub.vector(str(i), len(rows[0]) if isinstance(rows[0], list) else None) for i in range(len(rows))]
    durations = t.vector("durations", len(rows) - 1)
    if np.any(durations <= 0):
        raise t.error("durations", "must all be > 0")
    return StudyTrajectory(waypoints=np.array(waypoints), durations=durations, **_given(rate_hz=_positive(t, "rate_hz")))


def _positive(t: Table, key: str) -> float | None:
    """``key`` as a finite number > 0, or None where the table is silent."""
    if key not in t:
        return None
    number = t.number(key)
    if not number > 0:
        raise t.error(key, f"must be > 0, got {number:g}")
    return number


def _choice(t: Table, key: str, choices: tuple[str, ...]) -> str | None:
    return t.string(key, choices=choices) if key in t else None


def _given(**values: Any) -> dict[str, Any]:
    """The settings the table gives: the spec class's defaults stand for the others."""
    return {k: v for k, v in values.items() if v is not None}


_SETTINGS: dict[str, type[WorkflowSettings]] = {"feedforward": FeedforwardStudy, "simulate": SimulateStudy, "run": RunStudy, "identify": IdentifyStudy}


def _settings(t: Table, workflow: str) -> WorkflowSettings:
    """The workflow's table ``t`` (empty if the study has none) as its spec class."""
    t.only([f.name for f in dataclasses.fields(_SETTINGS[workflow])])
    if workflow == "feedforward":
        return FeedforwardStudy(**_given(model=_choice(t, "model", FEEDFORWARD_MODELS), lugre=_choice(t, "lugre", LUGRE_MODES)))
    if workflow == "simulate":
        return SimulateStudy(
            **_given(
                duration=_positive(t, "duration"),
                step=_positive(t, "step"),
                integrator=_choice(t, "integrator", INTEGRATORS),
                backend=_choice(t, "backend", BACKENDS),
            )
        )
    if workflow == "run":
        compiled = t.boolean("compiled") if "compiled" in t else None
        return RunStudy(
            **_given(controller=_choice(t, "controller", CONTROLLERS), rate_hz=_positive(t, "rate_hz"), duration=_positive(t, "duration"), compiled=compiled)
        )
    if "joint" not in t:
        raise t.error("joint", "missing required field (the joint to identify)")
    return IdentifyStudy(
        t.string("joint"),
        **_given(
            law=_choice(t, "law", IDENTIFY_LAWS), count=_whole(t, "count", None, 2), min_speed=_positive(t, "min_speed"), max_speed=_positive(t, "max_speed")
        ),
    )


def read_study(path: str | Path, budget: Budget | None = None) -> StudySpec:
    """Parse a study file; ``budget``: the memory its runs may hold (default :func:`mbctl.budget.memory_budget`).

    Raises:
        ConfigError: Naming the study file and the dotted field, for a malformed file, an
            unknown field or workflow, a workflow setting of the wrong type, or a bad
            distribution (negative standard deviation, empty grid), or more runs (grid points x
            ``samples``) than ``budget`` holds at :data:`RUN_BYTES` plus two doubles per parameter
            each (the field named is the largest factor). Whether the parameter
            paths name numbers in the robot description is checked by
            :func:`mbctl.study.engine.prepare` (:func:`mbctl.config.study_samples.check_paths`).
    """
    import hashlib

    budget = memory_budget() if budget is None else budget
    path = Path(path)
    root = read_toml(path)
    root.only(STUDY_KEYS)
    name = root.string("robot")
    local = path.parent / name
    robot_file = local if local.is_file() else resolve_config(name)
    robot_root = read_toml(robot_file)
    workflow = root.string("workflow", choices=WORKFLOWS)
    for other in WORKFLOWS:
        if other != workflow and other in root:
            raise root.error(other, f"settings of another workflow (this study runs {workflow!r})")
    document = robot_root.data
    if "overrides" in root:
        document = merge_tables(document, root.table("overrides").data)
    parameters = []
    if "parameters" in root:
        for key, t in root.table("parameters").tables():
            parameters.append(ParameterSpec(key, _parameter(t, budget)))
    has_draws = any(isinstance(p.variation, Distribution) for p in parameters)
    if has_draws and "samples" not in root:
        raise root.error("samples", "missing required field (the parameters with a distribution need a sample count)")
    if "samples" in root and not has_draws:
        raise root.error("samples", "needs a parameter with a distribution")
    samples = _whole(root, "samples", 1, 1)
    axes = {f"parameters.{p.path}": len(p.variation.values) for p in parameters if isinstance(p.variation, Grid)}
    # in floats: a sample count written as 7e305 is a whole number whose product with the run size
    # overflows the float conversions of the message (then an unbounded size, refused as such)
    runs = math.prod(float(n) for n in axes.values()) * float(samples)
    largest = max([("samples", samples), *axes.items()], key=lambda item: item[1])[0]
    _within(root, largest, runs * (RUN_BYTES + 16 * len(parameters)), budget, f"the study ({format_count(runs)} runs)")
    quantities = None
    if "quantities" in root:
        value = root.get("quantities")
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            raise root.error("quantities", f"must be a non-empty list of names, got {value!r}")
        quantities = tuple(value)
    trajectory = _trajectory(root.table("trajectory"), path.parent) if "trajectory" in root else None
    if workflow in ("feedforward", "run") and trajectory is None:
        raise root.error("trajectory", f"missing required table (the {workflow} workflow follows a trajectory)")
    settings = _settings(root.table(workflow) if workflow in root else Table({}, root.file, workflow), workflow)
    digest = hashlib.sha256()
    for f in (path, robot_file, *([trajectory.file] if trajectory is not None and trajectory.file is not None else [])):
        digest.update(Path(f).read_bytes())
    return StudySpec(
        source=path,
        robot=Path(robot_file),
        document=document,
        workflow=workflow,
        parameters=tuple(parameters),
        samples=samples,
        seed=_whole(root, "seed", 0, 0),
        runs_per_task=_whole(root, "runs_per_task", None, 1),
        quantities=quantities,
        trajectory=trajectory,
        settings=settings,
        digest=digest.hexdigest(),
        robot_name=None if local.is_file() or Path(name).suffix or len(Path(name).parts) != 1 else name,
    )
