"""``mbctl variants``: simulate the variants of one robot description and compare them.

Support rigid/flexible x links rigid/flexible x joints frictionless/with friction (seed
the flexible-manipulator study's eight variants), as far as the TOML has a flexible base, flexible links and
friction. Writes one PNG per quantity (tool paths, joint coordinates, joint force
magnitudes, their RMS per joint, the violation on a log scale) and a JSON table of the
RMS values into ``--out-dir``; ``--save-runs`` adds each run as NPZ (the format of
``mbctl simulate``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from mbctl.budget import check_memory, format_count
from mbctl.cli.arguments import add_time_limit, add_xacro_option, budget, check_estimate, robot_config, xacro_args_of
from mbctl.cli.commands.animate import add_view_arguments, write_view
from mbctl.cli.commands.simulate import npz_arrays, size_option
from mbctl.cli.console import ProgressPrinter
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import INTEGRATORS, recorded_samples, sample_bytes
from mbctl.dynamics.simulation.pilot import RunTimeEstimate
from mbctl.dynamics.simulation.setup import build_dynamics, simulation_setup
from mbctl.dynamics.simulation.variants import (
    Variant,
    VariantRun,
    available_variants,
    estimate_variant,
    rms_table,
    run_variant,
)
from mbctl.errors import InputError
from mbctl.fileio import atomic_output, check_output_dir
from mbctl.viz.variants import plot_variants


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name with [[constraints]], [simulation] and [base], [flexible], friction")
    add_xacro_option(p)
    p.add_argument("--out-dir", type=Path, required=True, help="directory for the PNG and JSON files (created if missing; its parent must exist)")
    p.add_argument("--variants", help="comma-separated names, e.g. rigid-rigid-frictionless,flexible-flexible-friction (default: all)")
    p.add_argument("--integrator", choices=INTEGRATORS, help="override simulation.integrator")
    p.add_argument("--step", type=float, help="override simulation.step (s)")
    p.add_argument("--duration", type=float, help="override simulation.duration (s)")
    p.add_argument("--jobs", type=int, default=1, help="variants simulated in parallel: a Dask LocalCluster of this many processes (default 1: in this process)")
    p.add_argument("--save-runs", action="store_true", help="also write <variant>.npz per run")
    p.add_argument("--animate", action="store_true", help="also write <variant>.html per run (3-D; see mbctl animate)")
    add_time_limit(p)
    add_view_arguments(p)
    p.set_defaults(run=run)


def _simulate(config: Path, variant: Variant, overrides: dict, quiet: bool) -> VariantRun:
    progress = None if quiet else ProgressPrinter(variant.name, min_total=20_000, unit="steps")
    return run_variant(config, variant, progress=progress, **overrides)


def check_runs_size(args: argparse.Namespace, robot, overrides: dict, count: int) -> None:
    """Refuse, before any run, variants whose records (all kept for the plots) would exceed the memory
    budget: ``count`` runs of the configured system's sample size (the flexible variants' are larger)."""
    setup = dataclasses.replace(simulation_setup(robot), **overrides)
    samples = recorded_samples(setup.duration, setup.step, setup.output_step, setup.integrator)
    option = next((o for o, v in (("--duration", args.duration), ("--step", args.step)) if v is not None), None)
    where = {"field": option} if option else {"file": args.config, "field": "simulation.duration"}
    estimate = count * samples * sample_bytes(build_dynamics(robot, setup))
    check_memory(estimate, budget(args), what=f"{count} run{'s' if count != 1 else ''} of {format_count(samples)} samples", **where)


def check_runs_time(args: argparse.Namespace, variants: list[Variant], overrides: dict) -> None:
    """Refuse, before any run, variants estimated to take longer than ``--time-limit`` together: a pilot
    of each variant's first steps, the sum shared among ``--jobs`` processes (at best)."""
    estimates = [estimate_variant(args.config, v, **overrides) for v in variants]
    if None in estimates:  # a run that fails at once: it says why
        return
    processes = min(args.jobs, len(variants))
    units = sum(e.units for e in estimates)
    total = RunTimeEstimate(
        seconds=sum(e.seconds for e in estimates) / processes, units=units, unit=estimates[0].unit,
        per_unit_s=sum(e.seconds for e in estimates) / units, timed=sum(e.timed for e in estimates),
    )  # fmt: skip
    where = f" on {processes} processes" if processes > 1 else ""
    check_estimate(args, total, what=f"{len(variants)} variant{'s' if len(variants) != 1 else ''}{where}", **size_option(args))


def run(args: argparse.Namespace) -> int:
    check_output_dir(args.out_dir)  # created once the runs are done: a failed run leaves nothing behind
    for value, option in ((args.step, "--step"), (args.duration, "--duration")):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"must be > 0, got {value!r}", field=option)
    if args.jobs < 1:
        raise InputError(f"must be >= 1, got {args.jobs}", field="--jobs")
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    simulation_setup(robot)  # a bad [simulation] table fails before any run
    variants = available_variants(robot)
    if args.variants:
        wanted = [Variant.parse(v.strip(), field="--variants") for v in args.variants.split(",") if v.strip()]
        unknown = [v.name for v in wanted if v not in variants]
        if unknown:
            raise InputError(
                f"{', '.join(unknown)} not available from this file (available: {', '.join(v.name for v in variants)})",
                field="--variants",
            )
        variants = wanted
    overrides = {k: v for k, v in (("integrator", args.integrator), ("step", args.step), ("duration", args.duration)) if v is not None}
    check_runs_size(args, robot, overrides, len(variants))
    check_runs_time(args, variants, overrides)

    if args.jobs > 1:
        # the study engine's Dask map: a LocalCluster of --jobs processes (one variant per task)
        from mbctl.study.cluster import dask_client, map_tasks

        done: dict[int, VariantRun] = {}
        with dask_client(min(args.jobs, len(variants))) as client:
            for i, result, error in map_tasks(client, _simulate, [(args.config, v, overrides, True) for v in variants]):
                if error is not None:
                    raise error
                done[i] = result
                print(f"{variants[i].name}: done in {result.wall_time_s:.1f} s", flush=True)
        runs = [done[i] for i in range(len(variants))]
    else:
        runs = []
        for v in variants:
            runs.append(_simulate(args.config, v, overrides, False))
            print(f"{v.name}: done in {runs[-1].wall_time_s:.1f} s", flush=True)

    table = rms_table(runs)
    setup = dataclasses.replace(simulation_setup(robot), **overrides)
    report = {
        "config": str(args.config),
        "integrator": setup.integrator,
        "step": setup.step,
        "duration": setup.duration,
        "baumgarte": dataclasses.asdict(setup.baumgarte) if setup.baumgarte else None,
        "variants": table,
    }
    args.out_dir.mkdir(exist_ok=True)
    written = plot_variants(runs, args.out_dir, title=robot.name)
    with atomic_output(args.out_dir / "rms.json") as tmp:
        tmp.write_text(json.dumps(report, indent=2) + "\n")
    written.append(args.out_dir / "rms.json")
    if args.save_runs:
        for r in runs:
            path = args.out_dir / f"{r.variant.name}.npz"
            with atomic_output(path) as tmp:
                np.savez_compressed(tmp, **npz_arrays(r.result))
            written.append(path)
    if args.animate:
        for r in runs:
            path = args.out_dir / f"{r.variant.name}.html"
            write_view(path, r.robot, r.result.t, r.result.q, args, r.variant.name)
            written.append(path)

    joints = runs[0].joints
    width = max(len(name) for name in table) + len(" (fluct.)") + 2
    header = f"{'variant':<{width}}" + "".join(f"{j:>10}" for j in joints)
    print(f"RMS of the joint force magnitudes |f| (N), and of their fluctuation about the mean (N):\n{header}{'max|Phi|>1s':>13}{'final':>10}")
    for name, row in table.items():
        late = row["violation_max_after_1s"]
        print(
            f"{name:<{width}}"
            + "".join(f"{row['joint_force_rms_N'][j]:>10.4g}" for j in joints)
            + f"{late if late is not None else float('nan'):>13.3g}{row['violation_final']:>10.3g}"
        )
    for name, row in table.items():
        print(f"{name + ' (fluct.)':<{width}}" + "".join(f"{row['joint_force_fluctuation_rms_N'][j]:>10.4g}" for j in joints))
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0
