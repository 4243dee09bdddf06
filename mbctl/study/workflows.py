"""What one run of a study does, and the numbers it keeps (quantities of interest).

Each workflow is three functions of the run's robot and the study's :class:`Context`:
``quantities`` (column names, fixed before the first run), ``check`` (what of the settings
needs the robot: joint names, gains, memory; raising ``InputError`` before any run; the
settings themselves are parsed and their choices checked by :mod:`mbctl.config.study`) and
``run`` (one run -> :class:`RunOutput`). They call the library functions the commands call:

- ``feedforward`` (:func:`mbctl.ctrl.feedforward.feedforward` along the study's trajectory;
  ``model = "plant"`` takes the simulated plant's truth, its friction and payload):
  ``tau_peak.<joint>`` = max |tau|, ``tau_rms.<joint>`` = sqrt(mean tau^2),
  ``friction_peak.<joint>`` = max |tau_friction| (N·m or N), ``effort_ratio`` = max over
  joints of tau_peak / effort limit; the torque curve on the study's band grid.
- ``simulate`` (the robot's ``[[constraints]]`` and ``[simulation]``,
  :func:`mbctl.dynamics.simulation.setup.simulate_setup`, on the compiled core where it
  covers the system, ``backend = "auto"``): ``drift_max``, ``drift_final``
  = max_i |Phi_i| (m, rad) over the run and at its end, ``velocity_drift_max`` = max
  |dPhi| (m/s, rad/s), ``force_peak.<joint>`` = max |programmed-constraint force| on
  each actuated joint (N·m, N), ``sigma_ratio_min`` (smallest singular-value ratio of the
  constraint Jacobian), ``singular_samples``.
- ``run`` (a lock-step closed-loop run against the simulated plant,
  :func:`mbctl.hardware.session.run_session`; compiled unless ``compiled = false``): ``track_rms.<joint>`` (rad, m),
  ``track_max`` = max |q_ref - q| over joints, ``tau_peak.<joint>``, ``tau_rms.<joint>``
  of the commanded torque, ``saturated`` cycles. A run that stops early (safety stop)
  is a failed row with its stop reason.
- ``identify`` (a lock-step constant-speed experiment on the simulated plant, then a
  fit, :func:`mbctl.identification.accuracy.simulated_constant_speed` and
  :func:`mbctl.identification.pipeline.identify`): ``fit.<p>``, ``stderr.<p>`` and
  ``error.<p>`` = fit - truth (the plant's truth law's steady-state parameter) for the
  fitted parameters ``p``, ``residual_rms``.
"""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np

from mbctl.budget import Budget, check_memory, format_count, memory_budget
from mbctl.config.study import FeedforwardStudy, IdentifyStudy, RunStudy, SimulateStudy, StudySpec, WorkflowSettings
from mbctl.ctrl.trajectory import Trajectory, quintic_rest_to_rest, read_trajectory, sample_count, trajectory_bytes
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError, InputError

__all__ = ["BAND_SAMPLES", "Context", "RunOutput", "WORKFLOWS", "Workflow", "make_context", "quantity_kinds"]

BAND_SAMPLES = 200  # torque-band grid: enough to draw a 2-10 s move; 200 x joints float32 per run


@dataclass(frozen=True, eq=False)
class Context:
    """What every run of a study shares: the study, its trajectory and the band grid (s)."""

    study: StudySpec
    trajectory: Trajectory | None
    band_t: np.ndarray | None
    budget: Budget | None = None  # what one run may hold in memory (None: mbctl.budget.memory_budget())


@dataclass(frozen=True, eq=False)
class RunOutput:
    """One run's quantities, its torque curve on ``Context.band_t`` ((K, actuated), N·m; N for
    prismatic joints; or None), a failure reason for a run that completed without
    reaching its end ("" if none), and the part of its time spent generating and compiling
    C (s; 0 when its structure was compiled before in this worker)."""

    values: dict[str, float]
    curve: np.ndarray | None = None
    failure: str = ""
    compile_s: float = 0.0


@dataclass(frozen=True)
class Workflow:
    """A workflow's quantity names, its pre-run checks and its run function."""

    quantities: Callable[[RobotModel, Context], list[str]]
    check: Callable[[RobotModel, Context], None]
    run: Callable[[RobotModel, Context], RunOutput]


S = TypeVar("S", bound=WorkflowSettings)


def _settings(ctx: Context, kind: type[S]) -> S:
    """The study's workflow settings, as the spec class its workflow parsed them into."""
    settings = ctx.study.settings
    if not isinstance(settings, kind):
        raise TypeError(f"the study of workflow {ctx.study.workflow} holds {type(settings).__name__}, not {kind.__name__}")
    return settings


def _within_budget(study: StudySpec, estimate: float, budget: Budget | None, what: str, field: str) -> None:
    """``check_memory`` with the refusal placed in the study file."""
    try:
        check_memory(estimate, budget or memory_budget(), what=what, field=field)
    except InputError as exc:
        raise ConfigError(exc.reason, file=study.source, field=field) from None


def make_context(study: StudySpec, robot: RobotModel, budget: Budget | None = None) -> Context:
    """The shared part of every run, built once from the study and its nominal robot.

    Raises:
        InputError: For a trajectory that does not fit the robot, or one larger than ``budget``.
    """
    traj = None
    if study.trajectory is not None:
        tr = study.trajectory
        if tr.file is not None:
            traj = read_trajectory(tr.file, robot.joint_names)
        elif tr.waypoints is not None and tr.durations is not None:
            if tr.waypoints.shape[1] != len(robot.joint_names):
                raise ConfigError(
                    f"needs {len(robot.joint_names)} positions per waypoint ({', '.join(robot.joint_names)}), got {tr.waypoints.shape[1]}",
                    file=study.source,
                    field="trajectory.waypoints",
                )
            samples = sample_count(float(np.sum(tr.durations)), tr.rate_hz)
            what = f"the trajectory ({format_count(samples)} samples at {tr.rate_hz:g} Hz)"
            _within_budget(study, trajectory_bytes(samples, len(robot.joint_names)), budget, what, "trajectory.durations")
            traj = quintic_rest_to_rest(tr.waypoints, tr.durations, tr.rate_hz, robot.joint_names)
    band_t = np.linspace(traj.t[0], traj.t[-1], BAND_SAMPLES) if traj is not None and study.workflow == "feedforward" else None
    return Context(study=study, trajectory=traj, band_t=band_t, budget=budget)


# --- feed-forward ---------------------------------------------------------------------------


def _ff_quantities(robot: RobotModel, ctx: Context) -> list[str]:
    names = robot.actuated_names
    return [f"{k}.{n}" for k in ("tau_peak", "tau_rms", "friction_peak") for n in names] + ["effort_ratio"]


def _ff_robot(robot: RobotModel, ctx: Context) -> RobotModel:
    if _settings(ctx, FeedforwardStudy).model == "plant":
        from mbctl.hardware.sim import truth_model

        return truth_model(robot)[0]
    return robot


def _ff_check(robot: RobotModel, ctx: Context) -> None:
    _ff_robot(robot, ctx)


def _ff_run(robot: RobotModel, ctx: Context) -> RunOutput:
    from mbctl.ctrl.feedforward import feedforward

    ff = feedforward(_ff_robot(robot, ctx), ctx.trajectory, lugre=_settings(ctx, FeedforwardStudy).lugre)
    values: dict[str, float] = {}
    stats = ff.stats()
    for s in stats:
        values[f"tau_peak.{s.name}"] = s.peak
        values[f"tau_rms.{s.name}"] = s.rms
        values[f"friction_peak.{s.name}"] = s.peak_friction
    values["effort_ratio"] = max(s.peak / s.effort_limit for s in stats)
    cols = [robot.joint(s.name).idx_v for s in stats]
    tau = ff.dynamics.tau[:, cols]
    curve = np.stack([np.interp(ctx.band_t, ff.trajectory.t, tau[:, k]) for k in range(tau.shape[1])], axis=1)
    return RunOutput(values, curve.astype(np.float32))


# --- simulate -------------------------------------------------------------------------------


def _sim_setup(robot: RobotModel, ctx: Context):
    from mbctl.dynamics.simulation.setup import simulation_setup

    s = _settings(ctx, SimulateStudy)
    overrides = {k: v for k in ("duration", "step", "integrator") if (v := getattr(s, k)) is not None}
    return dataclasses.replace(simulation_setup(robot), **overrides)


def _sim_quantities(robot: RobotModel, ctx: Context) -> list[str]:
    return ["drift_max", "drift_final", "velocity_drift_max", *(f"force_peak.{n}" for n in robot.actuated_names), "sigma_ratio_min", "singular_samples"]


def _sim_check(robot: RobotModel, ctx: Context) -> None:
    from mbctl.dynamics.simulation.integrate import recorded_samples, sample_bytes
    from mbctl.dynamics.simulation.setup import build_dynamics

    s = _settings(ctx, SimulateStudy)
    setup = _sim_setup(robot, ctx)
    system = build_dynamics(robot, setup)
    samples = recorded_samples(setup.duration, setup.step, setup.output_step, setup.integrator)
    field = "simulate.step" if s.step is not None and s.duration is None else "simulate.duration"
    _within_budget(ctx.study, samples * sample_bytes(system), ctx.budget, f"one run ({format_count(samples)} samples)", field)


def _sim_run(robot: RobotModel, ctx: Context) -> RunOutput:
    from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulate_setup

    setup = _sim_setup(robot, ctx)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    # compiled where the core covers the system: the robot's numbers are an input of the
    # generated code, so a worker compiles once per structure, not once per run
    result = simulate_setup(system, q0, dq0, setup, backend=_settings(ctx, SimulateStudy).backend)
    viol = result.violation()
    values = {
        "drift_max": float(viol.max()),
        "drift_final": float(viol[-1]),
        "velocity_drift_max": float(result.velocity_violation().max()),
    }
    for j in robot.joints:
        if j.actuated:
            values[f"force_peak.{j.name}"] = float(np.abs(result.tau_programmed[:, j.idx_v]).max())
    values["sigma_ratio_min"] = float(result.sigma_ratio.min())
    values["singular_samples"] = float(result.singular_samples)
    return RunOutput(values, compile_s=result.compile_s)


# --- closed-loop run ------------------------------------------------------------------------


def _run_options(ctx: Context):
    from mbctl.hardware.session import SessionOptions

    s = _settings(ctx, RunStudy)
    # compiled by default: the law and the plant's steps take each run's numbers as inputs, so
    # a worker compiles them once per model structure (the task-space law: once per model)
    return SessionOptions(plant="sim", law=s.controller, rate_hz=s.rate_hz, duration_s=s.duration, lockstep=True, compiled=s.compiled)


def _run_quantities(robot: RobotModel, ctx: Context) -> list[str]:
    names = robot.actuated_names
    return [*(f"track_rms.{n}" for n in names), "track_max", *(f"tau_peak.{n}" for n in names), *(f"tau_rms.{n}" for n in names), "saturated"]


def _run_check(robot: RobotModel, ctx: Context) -> None:
    from mbctl.ctrl.settings import control_settings
    from mbctl.hardware.sim import truth_model

    law = _settings(ctx, RunStudy).controller
    settings = control_settings(robot)
    if law != "feedforward":
        settings.require("computed-torque" if law == "computed-torque" else "pd")
    truth_model(robot)


def _run_run(robot: RobotModel, ctx: Context) -> RunOutput:
    from mbctl.hardware.session import run_session

    with tempfile.TemporaryDirectory() as tmp:
        log_path = Path(tmp) / "run.npz"
        summary = run_session(robot, ctx.trajectory, _run_options(ctx), log_path)
        log = np.load(log_path)
        n = len(log["t"])
        tau = log["tau"].reshape(n, -1) if n else np.zeros((0, len(robot.actuated_names)))
    values = {f"track_rms.{n}": float(summary.tracking_rms.get(n, np.nan)) for n in robot.actuated_names}
    values["track_max"] = float(summary.max_abs_error)
    ok = np.isfinite(tau).all(axis=1)
    for k, name in enumerate(robot.actuated_names):
        col = tau[ok, k]
        values[f"tau_peak.{name}"] = float(np.abs(col).max()) if col.size else np.nan
        values[f"tau_rms.{name}"] = float(np.sqrt(np.mean(col**2))) if col.size else np.nan
    values["saturated"] = float(summary.saturated)
    return RunOutput(values, failure="" if summary.completed else f"stopped: {summary.stop_reason}")


# --- identification -------------------------------------------------------------------------

_FITTED = {"stribeck": ("fc", "fs", "vs", "fv"), "coulomb-viscous": ("fc", "fv")}


def _id_quantities(robot: RobotModel, ctx: Context) -> list[str]:
    names = _FITTED[_settings(ctx, IdentifyStudy).law]
    return [f"{k}.{p}" for k in ("fit", "stderr", "error") for p in names] + ["residual_rms"]


def _id_check(robot: RobotModel, ctx: Context) -> None:
    from mbctl.hardware.sim import truth_model
    from mbctl.identification.config import identification_settings

    s = _settings(ctx, IdentifyStudy)
    if s.joint not in robot.joint_names:
        raise ConfigError(f"no joint {s.joint!r} (joints: {', '.join(robot.joint_names)})", file=ctx.study.source, field="identify.joint")
    settings = identification_settings(robot, s.joint, s.plan_overrides())
    if settings.constant_speed is None:
        raise ConfigError(settings.constant_speed_problem, file=ctx.study.source, field="identify")
    truth_model(robot)


def _id_run(robot: RobotModel, ctx: Context) -> RunOutput:
    from mbctl.hardware.sim import truth_model
    from mbctl.identification.accuracy import simulated_constant_speed
    from mbctl.identification.pipeline import identify

    s = _settings(ctx, IdentifyStudy)
    joint, law = s.joint, s.law
    truth_robot, plant = truth_model(robot)
    log = simulated_constant_speed(robot, joint, plant.seed, s.plan_overrides())
    result = identify(log, joint, law)
    friction = truth_robot.joint(joint).friction
    truth = friction.law if friction is not None else None
    values = {}
    for p in _FITTED[law]:
        values[f"fit.{p}"] = float(result.fit.values.get(p, getattr(result.fit.law, p)))
        values[f"stderr.{p}"] = float(result.fit.stderr.get(p, np.nan))
        values[f"error.{p}"] = values[f"fit.{p}"] - float(getattr(truth, p, 0.0)) if truth is not None else np.nan
    values["residual_rms"] = float(result.fit.residual_rms)
    return RunOutput(values)


WORKFLOWS: dict[str, Workflow] = {
    "feedforward": Workflow(_ff_quantities, _ff_check, _ff_run),
    "simulate": Workflow(_sim_quantities, _sim_check, _sim_run),
    "run": Workflow(_run_quantities, _run_check, _run_run),
    "identify": Workflow(_id_quantities, _id_check, _id_run),
}


def quantity_kinds(names: list[str]) -> list[str]:
    """The kinds (``tau_peak``, ``drift_max``, ...) of quantity names, in first-seen order."""
    return list(dict.fromkeys(n.split(".", 1)[0] for n in names))
