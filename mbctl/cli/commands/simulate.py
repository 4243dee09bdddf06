"""``mbctl simulate``: integrate a robot's constrained dynamics as its TOML describes.

Reads ``[[constraints]]`` and ``[simulation]`` from the robot TOML, integrates, and
writes the run as NPZ (``t, q, dq, ddq, phi, dphi, target, lam, tau_c, ...``), an
optional JSON summary and an optional plot (joint paths, tool path against target,
violation on a log scale, constraint forces).

The recorded samples stream to disk as the run proceeds: every batch of about
:data:`BATCH_BYTES` of records is appended to ``OUT.npz.partial/`` (one raw file per
array, :class:`~mbctl.fileio.NpzParts`) and the NPZ is assembled from it at the end, so
a long run holds one batch in memory; the summary and the limit check are gathered batch
by batch (:class:`RunTally`). Plots and the animation read the finished NPZ back.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import time
from pathlib import Path

import numpy as np

from mbctl.budget import check_disk, check_memory, format_bytes, format_count
from mbctl.cli.arguments import add_time_limit, add_xacro_option, budget, check_estimate, robot_config, xacro_args_of
from mbctl.cli.commands.animate import HTML, add_view_arguments, write_view
from mbctl.cli.commands.feedforward import FRICTION_CHOICES, override_friction
from mbctl.cli.console import ProgressPrinter, warn
from mbctl.cli.publish import add_publish_options, close_publisher, open_publisher
from mbctl.cli.view import add_view_option, close_view, open_view
from mbctl.ctrl.trajectory import Trajectory, limit_violations
from mbctl.dynamics.actuator import robot_servos
from mbctl.dynamics.constraints.analysis import analyse_constraints
from mbctl.dynamics.constraints.reactions import (
    joint_reactions,
    pair_matrix,
    reaction_solvability,
)
from mbctl.dynamics.constraints.solvers import SOLVERS
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import BACKENDS, INTEGRATORS, SimulationResult, recorded_samples, sample_bytes
from mbctl.dynamics.simulation.pilot import estimate_run_time
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulate_setup,
    simulation_setup,
)
from mbctl.errors import InputError
from mbctl.fileio import NpzParts, atomic_output, check_output
from mbctl.viz.figures import FORMATS
from mbctl.viz.simulation import plot_reactions, plot_simulation


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name with [[constraints]] and [simulation]")
    add_xacro_option(p)
    p.add_argument("--duration", type=float, help="simulated time in s (default: simulation.duration)")
    p.add_argument("--out", type=Path, required=True, help="run to write (.npz)")
    p.add_argument("--summary", type=Path, help="also write a JSON summary")
    p.add_argument("--log", type=Path, help="also write the run as MCAP for Foxglove (.mcap: /joint_states, /tf), after it ends")
    p.add_argument("--plot", type=Path, help="also plot the run (.png, .pdf or .svg)")
    p.add_argument("--solver", choices=SOLVERS, help="override simulation.solver")
    p.add_argument("--integrator", choices=INTEGRATORS, help="override simulation.integrator")
    p.add_argument("--step", type=float, help="override simulation.step (s)")
    p.add_argument("--backend", choices=BACKENDS, default="auto", help="compiled: RK4 and ROS2 steps in generated C, scipy methods on the compiled right-hand side; python: the interpreted reference; auto (default): compiled where supported")
    p.add_argument("--reactions", action="store_true", help="add tree-joint and cut-joint reaction wrenches to the NPZ")
    p.add_argument("--plot-reactions", type=Path, help="also plot joint coordinates, cut-joint forces, drive reactions and drive torques (implies --reactions)")
    p.add_argument(
        "--friction",
        choices=FRICTION_CHOICES,
        default="config",
        help="none, or reduce every joint's law to at most this one, keeping its parameters and load model "
        "(lugre > stribeck > coulomb-viscous; default: config)",
    )
    add_time_limit(p)
    add_view_arguments(p, animate=True)
    add_view_option(p)
    add_publish_options(p)
    p.set_defaults(run=run)


def _watch_all(watchers: list) -> object:
    """One ``watch(t, q)`` that calls each of ``watchers`` (None for none)."""
    if not watchers:
        return None
    if len(watchers) == 1:
        return watchers[0]
    return lambda t, q: [w(t, q) for w in watchers]


def _positive_option(value: float | None, option: str) -> None:
    if value is not None and not (math.isfinite(value) and value > 0):
        raise InputError(f"must be > 0, got {value!r}", field=option)


# records held in memory at a time before they are appended to the partial NPZ (bytes)
BATCH_BYTES = 16 * 2**20
# memory of the plots and the animation per number of the run read back for them (the arrays, their
# copies in matplotlib and in the page)
PLOT_FACTOR = 4.0


def recorded_arrays(run: SimulationResult) -> dict[str, np.ndarray]:
    """The numeric arrays of a run's NPZ, one row per recorded sample."""
    return {
        "t": run.t,
        "q": run.q,
        "dq": run.dq,
        "ddq": run.ddq,
        "phi": run.phi,
        "dphi": run.dphi,
        "target": run.target,
        "lam": run.lam,
        "tau_c": run.tau_c,
        "tau_programmed": run.tau_programmed,
        "tau_applied": run.tau_applied,
        "state": run.state,
        "sigma_ratio": run.sigma_ratio,
    }


def name_arrays(run: SimulationResult) -> dict[str, np.ndarray]:
    """The column names of a run's NPZ."""
    return {
        "joint_names": np.array(run.joint_names, dtype=str),
        "row_names": np.array(run.row_names, dtype=str),
        "state_names": np.array(run.state_names, dtype=str),
    }


def npz_arrays(run: SimulationResult) -> dict[str, np.ndarray]:
    """The NPZ content of a run (see the README for the format)."""
    return {**recorded_arrays(run), **name_arrays(run)}


def batch_samples(system, reactions: bool = False) -> int:
    """Recorded samples held in memory before they go to disk (:data:`BATCH_BYTES` of records)."""
    return max(1, int(BATCH_BYTES // sample_bytes(system, reactions=reactions)))


def size_option(args: argparse.Namespace) -> dict:
    """Where a run's length comes from, for a refusal: ``--step`` or ``--duration`` if given, else the file's
    ``simulation.duration``."""
    option = next((o for o, v in (("--step", args.step), ("--duration", args.duration)) if v is not None), None)
    return {"field": option} if option else {"file": args.config, "field": "simulation.duration"}


def check_run_size(args: argparse.Namespace, setup, system) -> None:
    """Refuse, before integrating, a run that would not fit the memory budget or the disk.

    Memory: a batch of records (:func:`batch_samples` x :func:`sample_bytes`), and the whole run's
    numbers x :data:`PLOT_FACTOR` when plots or an animation read it back. Disk: the partial
    files and the NPZ, which exist together while the NPZ is assembled (2 x the numbers, 8 bytes each).
    """
    samples = recorded_samples(setup.duration, setup.step, setup.output_step, setup.integrator)
    per_sample = sample_bytes(system, reactions=args.reactions)
    nv, m = system.robot.nv, system.constraints.m
    numbers = 2 + 6 * nv + system.n_states + 4 * m + (6 * (len(system.robot.joints) + m) if args.reactions else 0)
    option = next((o for o, v in (("--duration", args.duration), ("--step", args.step)) if v is not None), None)
    where = {"field": option} if option else {"file": args.config, "field": "simulation.duration"}
    read_back = bool(args.plot or args.plot_reactions or args.animate)
    held = min(samples, batch_samples(system, args.reactions)) * per_sample + (samples * numbers * 8 * PLOT_FACTOR if read_back else 0.0)
    what = f"the run ({format_count(samples)} samples" + (", plotted" if read_back else f", recorded in batches of {format_bytes(BATCH_BYTES)}") + ")"
    check_memory(held, budget(args), what=what, **where)
    check_disk(2 * samples * numbers * 8, args.out, what=what, **where)


@dataclasses.dataclass
class RunTally:
    """What the summary and the limit check need from a run, gathered batch by batch (:meth:`add`):
    counts, first and last values, extremes per column (units of the arrays they come from)."""

    samples: int = 0
    t_first: float = math.nan
    t_last: float = math.nan
    violation_initial: float = math.nan
    violation_max: float = 0.0
    violation_final: float = math.nan
    velocity_violation_max: float = 0.0
    velocity_violation_final: float = math.nan
    row_max: np.ndarray | None = None  # per constraint row: |Phi| (position rows) or |dPhi| (velocity rows)
    row_final: np.ndarray | None = None
    programmed_peak: np.ndarray | None = None  # per joint: max |tau_programmed|
    constraint_force_peak: np.ndarray | None = None  # per joint: max |tau_c|
    sigma_ratio_min: float = math.inf
    q_min: np.ndarray | None = None
    q_max: np.ndarray | None = None
    dq_peak: np.ndarray | None = None  # per joint: max |dq|

    def add(self, run: SimulationResult) -> None:
        """Take in a batch of samples (the next ones in time)."""
        if not len(run.t):
            return
        violation, velocity = run.violation(), run.velocity_violation()
        rows = np.abs(np.where(np.isnan(run.phi).all(axis=0), run.dphi, run.phi))
        if self.samples == 0:
            self.t_first, self.violation_initial = float(run.t[0]), float(violation[0])
        self.samples += len(run.t)
        self.t_last, self.violation_final, self.velocity_violation_final = float(run.t[-1]), float(violation[-1]), float(velocity[-1])
        self.violation_max = max(self.violation_max, float(violation.max()))
        self.velocity_violation_max = max(self.velocity_violation_max, float(velocity.max()))
        self.sigma_ratio_min = min(self.sigma_ratio_min, float(run.sigma_ratio.min()))
        self.row_final = rows[-1]
        for name, values, reduce in (
            ("row_max", rows, np.maximum),
            ("programmed_peak", np.abs(run.tau_programmed), np.maximum),
            ("constraint_force_peak", np.abs(run.tau_c), np.maximum),
            ("q_min", run.q, np.minimum),
            ("q_max", run.q, np.maximum),
            ("dq_peak", np.abs(run.dq), np.maximum),
        ):
            extreme = reduce.reduce(values, axis=0)
            setattr(self, name, extreme if getattr(self, name) is None else reduce(getattr(self, name), extreme))

    def envelope(self, joint_names: tuple[str, ...]) -> Trajectory:
        """Two samples with the run's extreme positions and speeds: :func:`limit_violations` finds on
        them what it finds on the whole run (it looks at the extremes only)."""
        return Trajectory(
            t=np.array([0.0, 1.0]),
            joint_names=joint_names,
            q=np.array([self.q_min, self.q_max]),
            dq=np.array([self.dq_peak, self.dq_peak]),
            ddq=np.zeros((2, len(joint_names))),
        )


def read_run(path: Path, run: SimulationResult) -> SimulationResult:
    """``run`` (the counters of a streamed run) with the samples of the NPZ it was written to."""
    with np.load(path) as data:
        return dataclasses.replace(run, **{key: data[key] for key in recorded_arrays(run)})


def _fmt(x: float) -> str:
    return f"{x:.3g}"


def run(args: argparse.Namespace) -> int:
    check_output(args.out, (".npz",))
    if args.log:
        check_output(args.log, (".mcap",))
    if args.summary:
        check_output(args.summary, (".json",))
    if args.plot:
        check_output(args.plot, FORMATS)
    if args.plot_reactions:
        check_output(args.plot_reactions, FORMATS)
        args.reactions = True
    if args.animate:
        check_output(args.animate, HTML)
    _positive_option(args.duration, "--duration")
    _positive_option(args.step, "--step")
    robot = override_friction(load_robot(args.config, xacro_args=xacro_args_of(args)), args.friction)
    servos = list(robot_servos(robot))
    if servos:  # simulate has no goal positions to give them: say so rather than drop them silently
        warn(f"{args.config}: the servo of joint {servos[0]} ([joints.{servos[0]}.actuator]) is not simulated here (no goal positions); "
             "mbctl run --controller position drives it")
    setup = simulation_setup(robot)
    overrides = {k: v for k, v in (("solver", args.solver), ("integrator", args.integrator), ("step", args.step), ("duration", args.duration)) if v is not None}
    setup = dataclasses.replace(setup, **overrides)
    if args.reactions and setup.solver == "nullspace":
        raise InputError("the nullspace solver gives no multipliers; use --solver lagrange or udwadia-kalaba", field="--reactions")
    system = build_dynamics(robot, setup)
    check_run_size(args, setup, system)
    q0, dq0 = initial_state(robot, setup, system)
    if system.constraints.m:  # the analysis first: a user sees a wrong mobility before waiting for the run
        analysis = analyse_constraints(system, q0, 0.0, rtol=setup.rank_tolerance, reactions=False)
        print(format_mobility(analysis, len(robot.elastic_names)), flush=True)
    check_estimate(args, estimate_run_time(system, q0, dq0, setup, backend=args.backend), what=f"{robot.name}: the run", **size_option(args))

    view = open_view(robot, args)
    publisher = open_publisher(robot, args)
    watchers = [f for f in ((lambda t, q: view.show(q, t)) if view else None, publisher.show if publisher else None) if f is not None]
    start = time.perf_counter()
    unit = "steps" if setup.integrator in ("rk4", "ros2") else "samples"
    tally = RunTally()
    loop_names: list[tuple[str, ...]] = []
    with NpzParts(args.out, compress=True, block_bytes=BATCH_BYTES) as parts:

        def record(batch: SimulationResult) -> None:
            """A batch of samples to disk (with its reaction wrenches) and into the tally."""
            arrays = recorded_arrays(batch)
            if args.reactions:
                r = joint_reactions(system, batch.t, batch.q, batch.dq, batch.ddq, batch.lam)
                arrays.update(joint_wrench=r.joint_wrench, loop_wrench=r.loop_wrench)
                loop_names[:] = [r.loop_names]
            parts.append(arrays)
            tally.add(batch)

        result = simulate_setup(
            system, q0, dq0, setup, progress=ProgressPrinter("simulate", min_total=20_000, unit=unit), backend=args.backend,
            sink=record, batch_samples=batch_samples(system, args.reactions), watch=_watch_all(watchers),
        )  # fmt: skip
        elapsed = time.perf_counter() - start - result.compile_s
        close_publisher(publisher)
        extra = {**name_arrays(result), "config": np.array(str(Path(args.config).resolve()))}  # config: so that mbctl animate finds the robot
        if args.reactions:
            extra["loop_names"] = np.array(loop_names[0], dtype=str)
        parts.close(extra)
    if args.plot or args.plot_reactions or args.animate:
        result = read_run(args.out, result)
    uniqueness = None
    if system.redundancy > 0:
        C, groups = pair_matrix(system, 0.0, q0)
        uniqueness = reaction_solvability(C, groups, rtol=setup.rank_tolerance).unique
    summary = build_summary(args.config, robot.name, setup, system, result, tally, q0, dq0, elapsed, uniqueness)

    if args.summary:
        with atomic_output(args.summary) as tmp:
            tmp.write_text(json.dumps(summary, indent=2) + "\n")
    if args.plot:
        plot_simulation(result, args.plot, robot=robot)
    if args.plot_reactions:
        friction = {"config": "friction as configured", "none": "no friction"}.get(args.friction, f"{args.friction} friction")
        title = f"{robot.name}: {friction}" if any(j.friction for j in robot.joints) or args.friction != "config" else robot.name
        r = joint_reactions(system, result.t, result.q, result.dq, result.ddq, result.lam)
        plot_reactions(result, robot, args.plot_reactions, reactions=r, title=title)
    if args.animate:
        write_view(args.animate, robot, result.t, result.q, args, f"{setup.solver}, {setup.integrator}")
    if args.log:
        from mbctl.cli.commands.convert import write_log_mcap

        write_log_mcap(args.out, args.log, robot)

    for message in limit_violations(robot, tally.envelope(result.joint_names)):
        warn(f"{args.config}: {message}")
    unactuated = summary["unactuated_programmed_force"]
    if len(unactuated) > 3:  # elastic robots: one line, largest first
        top = sorted(unactuated.items(), key=lambda item: -item[1])[:3]
        warn(
            f"programmed constraints need force on {len(unactuated)} unactuated joints (largest: "
            + ", ".join(f"{name} {peak:.4g}" for name, peak in top)
            + "): the drives cannot realise them exactly"
        )
    else:
        for name, peak in unactuated.items():
            warn(f"programmed constraints need up to {peak:.4g} on unactuated joint {name}: the drives cannot realise them exactly")
    print(format_summary(summary))
    written = [str(args.out)] + [str(p) for p in (args.summary, args.log, args.plot, args.plot_reactions, args.animate) if p]
    print(f"wrote {', '.join(written)}")
    close_view(view)
    return 0


def build_summary(config, robot_name, setup, system, result: SimulationResult, tally: RunTally, q0, dq0, elapsed, uniqueness) -> dict:
    """The JSON summary of a run (see the README): ``result``'s counters and names, ``tally``'s samples."""
    by_row = {row: {"max": float(tally.row_max[i]), "final": float(tally.row_final[i])} for i, row in enumerate(result.row_names)}
    unact = {}
    for j in system.robot.joints:
        peak = float(tally.programmed_peak[j.idx_v])
        if not j.actuated and peak > 1e-9:
            unact[j.name] = peak
    h = setup.duration / result.steps if setup.integrator in ("rk4", "ros2") else setup.step
    return {
        "config": str(config),
        "robot": robot_name,
        "status": "completed",
        "solver": result.solver,
        "integrator": result.integrator,
        "step": h,
        "duration": tally.t_last - tally.t_first,
        "steps": result.steps,
        "evaluations": result.evaluations,
        "samples": tally.samples,
        "wall_time_s": elapsed,
        "backend": result.backend,
        "compile_time_s": result.compile_s,
        "baumgarte": dataclasses.asdict(setup.baumgarte) if setup.baumgarte else None,
        "rows": list(result.row_names),
        "rank": result.rank,
        "redundancy": len(result.row_names) - result.rank,
        "eliminated_rows": list(result.eliminated_rows),
        "initial_violation": tally.violation_initial,
        "max_violation": tally.violation_max,
        "final_violation": tally.violation_final,
        "max_velocity_violation": tally.velocity_violation_max,
        "final_velocity_violation": tally.velocity_violation_final,
        "violation_by_row": by_row,
        "min_sigma_ratio": tally.sigma_ratio_min,
        "singular_samples": result.singular_samples,
        "initial": {
            "q": {n: float(v) for n, v in zip(result.joint_names, q0)},
            "dq": {n: float(v) for n, v in zip(result.joint_names, dq0)},
        },
        "peak_constraint_force": {n: float(tally.constraint_force_peak[i]) for i, n in enumerate(result.joint_names)},
        "unactuated_programmed_force": unact,
        "reaction_unique": uniqueness,
    }


def format_mobility(a, elastic: int = 0) -> str:
    """The constraint analysis ``mbctl simulate`` prints before integrating
    (:class:`mbctl.dynamics.constraints.analysis.ConstraintAnalysis`; ``elastic``: how many of the
    coordinates are elastic)."""
    split = f" ({elastic} elastic, {a.mechanism_mobility - elastic} of the rigid mechanism)" if elastic else ""
    return (
        f"{a.robot}: {a.coordinates} coordinates, {a.rows} constraint rows ({a.rows - a.programmed_rows} material, "
        f"{a.programmed_rows} programmed), rank {a.rank}, redundancy {a.redundancy}\n"
        f"  mobility (coordinates - rank of the material rows): {a.mechanism_mobility}{split}; left free by all rows: {a.mobility}"
        + (" (the program fixes the motion)" if a.mobility == 0 else " (undriven directions)")
    )


def format_summary(s: dict) -> str:
    """The lines ``mbctl simulate`` prints."""
    lines = [
        f"{s['robot']}: {s['duration']:g} s simulated ({s['steps']} {s['integrator']} steps, {s['evaluations']} evaluations) "
        f"in {s['wall_time_s']:.2f} s with {s['solver']} ({s['backend']}"
        + (f"; C code built or loaded in {s['compile_time_s']:.2f} s)" if s["backend"] == "compiled" else ")"),
        f"  constraints: {len(s['rows'])} rows, rank {s['rank']}, redundancy {s['redundancy']}"
        + (f", eliminated {', '.join(s['eliminated_rows'])}" if s["eliminated_rows"] else "")
        + (
            f"; Baumgarte {s['baumgarte']['form']} alpha = {s['baumgarte']['alpha']:g}, beta = {s['baumgarte']['beta']:g}"
            if s["baumgarte"]
            else "; no stabilization"
        ),
        f"  violation |Phi|: initial {_fmt(s['initial_violation'])}, max {_fmt(s['max_violation'])}, "
        f"final {_fmt(s['final_violation'])}; |dPhi| max {_fmt(s['max_velocity_violation'])}, final {_fmt(s['final_velocity_violation'])}",
    ]
    if s["rows"]:
        lines.append(f"  {'row':<24}{'max |Phi|':>12}{'final':>12}")
        for row, v in s["violation_by_row"].items():
            lines.append(f"  {row:<24}{_fmt(v['max']):>12}{_fmt(v['final']):>12}")
    lines.append("  peak constraint force: " + ", ".join(f"{n} {_fmt(v)}" for n, v in s["peak_constraint_force"].items()))
    if s["reaction_unique"] is not None:
        lines.append(
            "  reactions unique in: " + (", ".join(k for k, v in s["reaction_unique"].items() if v) or "none")
            + "; not unique in: " + (", ".join(k for k, v in s["reaction_unique"].items() if not v) or "none")
        )
    if s["singular_samples"]:
        lines.append(f"  near-singular (damped) at {s['singular_samples']} recorded samples")
    return "\n".join(lines)
