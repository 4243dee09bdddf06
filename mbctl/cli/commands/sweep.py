"""``mbctl sweep``: a parameter study (grids, Monte Carlo) on dask.distributed.

Every run of the study file (docs/sweep.md) is checked before any starts; the runs are
batched into Dask tasks on a LocalCluster of one single-threaded process per core
(``--workers N``) or on an existing scheduler (``--scheduler ADDRESS``). Rows stream to
``DIR/parts/`` as tasks finish; at the end ``DIR`` holds ``runs.parquet``, ``runs.csv``,
``summary.json`` and the plots (``scatter-<parameter>.png`` per varied parameter,
``histograms.png``, and ``torque-bands.png`` for feed-forward studies). A killed sweep
continues with ``--resume`` (only the missing runs run); a failed run is a row with
status ``failed`` and its reason. Exit 0 when the sweep finished, failed runs included.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import TYPE_CHECKING

from mbctl.cli.arguments import budget
from mbctl.cli.console import ProgressPrinter
from mbctl.errors import InputError

if TYPE_CHECKING:
    from mbctl.study.engine import Plan, SweepResult


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("study", help="study TOML file (docs/sweep.md) or the name of a bundled study (ur5_payload)")
    p.add_argument("--out", type=Path, required=True, help="output directory (created; its parent must exist)")
    p.add_argument("--workers", type=int, help="LocalCluster worker processes (default: one per core)")
    p.add_argument("--scheduler", help="address of a running Dask scheduler, e.g. tcp://10.0.0.5:8786 (instead of a LocalCluster; given up after 20 s)")
    p.add_argument("--resume", action="store_true", help="continue the sweep in --out: run only the runs it does not hold yet")
    p.add_argument("--no-plots", action="store_true", help="write the table and summary only")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from mbctl.bundled import bundled_study
    from mbctl.config.study import read_study
    from mbctl.fileio import check_output_dir
    from mbctl.study.cluster import dask_client
    from mbctl.study.engine import completed_runs, prepare, run_study

    out = check_output_dir(args.out)  # created once the cluster is there
    if args.resume and not (out / "sweep.json").is_file():
        raise InputError("no sweep to resume here (no sweep.json)", file=out)
    if not args.resume and (out / "sweep.json").exists():
        raise InputError("holds a sweep already; pass --resume to continue it, or choose another directory", file=out)
    if args.workers is not None and args.workers < 1:
        raise InputError(f"must be >= 1, got {args.workers}", field="--workers")
    if args.workers is not None and args.scheduler is not None:
        raise InputError("give --workers (a LocalCluster) or --scheduler (an existing cluster), not both", field="--workers")
    limit = budget(args)
    study = read_study(bundled_study(args.study), limit)
    plan = prepare(study, pilot=study.runs_per_task is None, budget=limit)  # every check, before anything is written
    grid = " x ".join(str(n) for n in study.grid_shape)
    shape = (f"grid {grid}" if grid else "") + (" x " if grid and study.samples > 1 else "") + (f"{study.samples} samples" if study.samples > 1 or not grid else "")
    timed = f"; one run took {plan.pilot_s * 1e3:.1f} ms here" if plan.pilot_s == plan.pilot_s else ""
    print(f"{study.source.name}: {len(plan.design)} {study.workflow} runs of {study.robot.stem} ({shape}), {len(plan.quantities)} quantities{timed}", flush=True)
    started = time.perf_counter()
    try:
        with dask_client(args.workers, args.scheduler, timeout_s=20.0) as client:
            out.mkdir(exist_ok=True)  # only once the cluster is there: a bad address leaves nothing behind
            workers = len(client.scheduler_info()["workers"])
            where = f"scheduler {args.scheduler}" if args.scheduler else "LocalCluster"
            print(f"{where}: {workers} workers", flush=True)
            result = run_study(plan, out, client=client, workers=workers, resume=args.resume, progress=ProgressPrinter("sweep", min_total=1, unit="runs"))
    except KeyboardInterrupt as exc:  # SIGTERM too: the same class again, with what was kept (one line from main)
        done = len(completed_runs(out)) if (out / "parts").is_dir() else 0
        hint = "; continue with --resume" if (out / "sweep.json").is_file() else ""
        raise type(exc)(f"sweep stopped with {done} of {len(plan.design)} runs written{hint}") from None
    written = [result.table, out / "runs.csv"]
    summary, files = write_results(plan, out, time.perf_counter() - started, plots=not args.no_plots)
    written += files
    print(format_result(result, summary))
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0


def write_results(plan: Plan, out: Path, wall_s: float, plots: bool = True) -> tuple[dict, list[Path]]:
    """Summary JSON, torque bands and plots of the consolidated table.

    Returns:
        The summary (what ``summary.json`` holds) and the files written.
    """
    from mbctl.study.summary import read_table, summarize, torque_bands, write_summary
    from mbctl.viz.sweep import plot_sweep

    columns = read_table(out / "runs.parquet")
    summary = summarize(plan, columns, wall_s)
    write_summary(out / "summary.json", summary)
    written = [out / "summary.json"]
    bands = torque_bands(plan, out, columns["status"] == "ok")
    if bands is not None:
        written.append(out / "bands.npz")
    if not plots or summary["ok"] == 0:
        return summary, written
    written += plot_sweep(columns, out, title=f"{plan.study.robot.stem}: {plan.study.workflow}", bands=bands)
    return summary, written


def format_result(result: SweepResult, s: dict) -> str:
    """The lines printed at the end: counts, throughput, failures (``s``: the summary)."""
    lines = [
        f"{s['runs']} runs: {s['ok']} ok, {s['failed']} failed"
        + (f" ({result.skipped} were done before)" if result.skipped else "")
        + (f"; {result.ran} ran in {result.wall_s:.2f} s ({result.ran / result.wall_s:.1f} runs/s, {result.tasks} tasks of {result.runs_per_task:.3g} runs)" if result.ran and result.wall_s > 0 else "")
    ]
    compiled = s.get("compile_time_s")
    if compiled and compiled["runs_compiling"]:
        lines.append(f"  of the runs' time, {compiled['total']:.2f} s went to generating and compiling C, in {compiled['runs_compiling']} run(s) (once per model structure and worker)")
    for reason, count in list(s["failure_reasons"].items())[:3]:
        lines.append(f"  failed ({count}): {reason}")
    return "\n".join(lines)
