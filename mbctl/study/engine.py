"""Running a study: checks before any run, batches of runs as Dask tasks, rows streamed to disk, resume.

Output directory:

- ``sweep.json``: the study file, its SHA-256 (with the robot file's), the run count,
  parameters and quantities; written when the sweep starts, checked by a resume.
- ``parts/run-<first>-<id>.parquet``: the rows of the tasks finished within about a
  second (:data:`FLUSH_S`; at once when the sweep is interrupted), written to a
  temporary name and renamed (a killed sweep leaves whole parts only); beside it
  ``.npy`` with the runs' torque curves (feed-forward), written first.
- ``runs.parquet`` and ``runs.csv``: every row, sorted by run, written at the end;
  ``curves.npy`` (feed-forward): the runs' torque curves in the same order.
- ``summary.json`` (:mod:`mbctl.study.summary`) and, for feed-forward studies, ``bands.npz``.

Row columns: ``run`` (its index, see :mod:`mbctl.study.design`), ``status`` (``ok`` or
``failed``), ``reason`` (why it failed, else empty), ``param.<path>`` for every varied
parameter, the workflow's quantities (:mod:`mbctl.study.workflows`; NaN where a run
failed before computing them) and ``wall_time_s`` (the run's own time on its worker, s).
Resume (:func:`run_study` with ``resume=True``) runs the run indices no part holds, and
those of tasks that were lost (their worker kept dying).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.budget import Budget
from mbctl.config.robot import read_robot_spec
from mbctl.config.study import StudySpec
from mbctl.config.study_samples import check_paths, sample_spec
from mbctl.dynamics.model.robot import build_robot
from mbctl.errors import ConfigError, InputError, MbctlError
from mbctl.fileio import atomic_output
from mbctl.study.cluster import RETRIES, map_tasks
from mbctl.study.design import Design, design, sample_error
from mbctl.study.workflows import WORKFLOWS, Context, make_context, quantity_kinds

__all__ = [
    "BatchResult",
    "BatchSizer",
    "Plan",
    "SweepResult",
    "completed_runs",
    "consolidate",
    "prepare",
    "run_batch",
    "run_one",
    "run_study",
]

TASK_TARGET_S = 0.5  # batch runs until a task takes about this long: Dask's per-task cost (~ms) stays ~1 %
IN_FLIGHT = 4  # tasks per worker submitted and not yet finished
FLUSH_S = 1.0  # finished tasks' rows are written together at most this often (a part costs the client ~10 ms)
LOST = "task lost: "  # reason of the rows of a task that failed after its retries (run again by a resume)
MANIFEST = "sweep.json"
PARTS = "parts"


@dataclass(frozen=True, eq=False)
class Plan:
    """A checked study, ready to run (what every task gets).

    Attributes:
        context: The study, its trajectory and band grid.
        design: Every run's parameter values.
        quantities: Quantity columns, in order.
        joints: Joints of the torque curves (feed-forward), else ().
        pilot_s: Time of one run measured while checking (s), or NaN.
    """

    context: Context
    design: Design
    quantities: tuple[str, ...]
    joints: tuple[str, ...]
    pilot_s: float

    @property
    def study(self) -> StudySpec:
        return self.context.study

    @property
    def columns(self) -> list[str]:
        """The table's columns, in order."""
        return ["run", "status", "reason", *(f"param.{p}" for p in self.design.paths), *self.quantities, "compile_time_s", "wall_time_s"]


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or "no message"
    text = text if isinstance(exc, MbctlError) else f"{type(exc).__name__}: {text}"
    return text[:300]


def prepare(study: StudySpec, *, pilot: bool = True, budget: Budget | None = None) -> Plan:
    """Check everything about ``study`` before any run.

    Checks: every path names a number; the nominal robot builds and the workflow's
    settings fit it; every run's description parses (ranges of every field); for each
    parameter the runs with its smallest and largest value build a robot that passes the
    workflow's checks. With ``pilot`` one run of the nominal robot is timed (its result
    is not kept) to size the batches. ``budget`` bounds what the trajectory and one run may
    hold in memory (default :func:`mbctl.budget.memory_budget`).

    Raises:
        ConfigError: Naming the study file and field (``parameters.<path>`` for a sample
            that makes the robot invalid).
    """
    check_paths(study)
    d = design(study)
    workflow = WORKFLOWS[study.workflow]
    try:
        robot = build_robot(sample_spec(study, {}))
    except InputError as exc:
        build_robot(read_robot_spec(study.robot))  # the robot file's own error, if it is at fault
        raise ConfigError(f"the robot with the study's overrides is invalid: {exc}", file=study.source, field="overrides") from None
    ctx = make_context(study, robot, budget)
    workflow.check(robot, ctx)
    names = workflow.quantities(robot, ctx)
    if study.quantities is not None:
        kinds = quantity_kinds(names)
        unknown = [q for q in study.quantities if q not in kinds]
        if unknown:
            raise ConfigError(f"unknown {', '.join(map(repr, unknown))} for the {study.workflow} workflow (expected some of: {', '.join(kinds)})", file=study.source, field="quantities")
        names = [n for n in names if n.split(".", 1)[0] in study.quantities]
    for i in range(len(d)):
        try:
            sample_spec(study, d.run(i))
        except InputError as exc:
            raise sample_error(study, i, d.run(i), exc) from None
    extremes = sorted({int(k) for col in d.values.T for k in (np.argmin(col), np.argmax(col))}) if d.paths else []
    for i in extremes:
        try:
            workflow.check(build_robot(sample_spec(study, d.run(i))), ctx)
        except InputError as exc:
            raise sample_error(study, i, d.run(i), exc) from None
    joints = robot.actuated_names if ctx.band_t is not None else ()
    plan = Plan(context=ctx, design=d, quantities=tuple(names), joints=joints, pilot_s=math.nan)
    if pilot:
        pilot_s = math.nan
        for _ in range(2):  # the first run pays for imports and caches
            start = time.perf_counter()
            try:
                workflow.run(build_robot(sample_spec(study, {})), ctx)
            except Exception:  # a failing nominal run says nothing about the samples; rows will
                break
            pilot_s = time.perf_counter() - start
            if pilot_s > 1.0:
                break
        plan = dataclasses.replace(plan, pilot_s=pilot_s)
    return plan


class BatchSizer:
    """Runs per task: the study's ``runs_per_task``, else enough runs for about
    :data:`TASK_TARGET_S` per task at the mean run time seen so far (the pilot run's
    until the first task is back); with several workers at most half the remaining runs
    per worker, but not under a quarter of the target, and never more than an even share
    of what remains, so that the workers finish together."""

    def __init__(self, plan: Plan, workers: int):
        self.fixed = plan.study.runs_per_task
        self.workers = max(1, workers)
        self.time_s = 0.0
        self.runs = 0
        self.pilot_s = plan.pilot_s if math.isfinite(plan.pilot_s) and plan.pilot_s > 0 else TASK_TARGET_S

    def observe(self, run_times_s: Sequence[float]) -> None:
        """Record the run times (s) of a finished task."""
        finite = [t for t in run_times_s if math.isfinite(t)]
        self.time_s += sum(finite)
        self.runs += len(finite)

    def size(self, remaining: int) -> int:
        """Runs for the next task, with ``remaining`` runs not yet submitted."""
        if self.fixed is not None:
            return self.fixed
        per_run = self.time_s / self.runs if self.runs else self.pilot_s
        by_time = max(1, math.ceil(TASK_TARGET_S / max(per_run, 1e-9)))
        if self.workers == 1:
            return by_time
        # towards the end, shorter tasks (down to a quarter of the target) so that no worker
        # is left with a long one while the others idle
        tail = min(by_time, max(math.ceil(by_time / 4), math.ceil(remaining / (2 * self.workers))))
        return min(tail, math.ceil(remaining / self.workers))  # a small sweep: shared out evenly


def run_one(plan: Plan, run: int, values: dict[str, float] | None = None) -> tuple[dict, np.ndarray | None]:
    """Run ``run`` of the plan (its parameter ``values``, default the plan's design row);
    any error becomes a failed row (Ctrl-C is not caught).

    Returns:
        The row (column -> value) and the torque curve ((K, joints) float32, N·m; N for
        prismatic joints; NaN if the run failed), or None when the workflow keeps no curve.
    """
    study = plan.study
    values = plan.design.run(run) if values is None else values
    row: dict = {"run": run, "status": "ok", "reason": ""}
    row.update({f"param.{p}": v for p, v in values.items()})
    row.update({q: math.nan for q in plan.quantities})
    row["compile_time_s"] = math.nan
    curve = np.full((len(plan.context.band_t), len(plan.joints)), np.nan, np.float32) if plan.joints else None
    start = time.perf_counter()
    try:
        robot = build_robot(sample_spec(study, values))
        out = WORKFLOWS[study.workflow].run(robot, plan.context)
        for q in plan.quantities:
            row[q] = float(out.values.get(q, math.nan))
        if out.curve is not None and curve is not None:
            curve = out.curve
        if out.failure:
            row["status"], row["reason"] = "failed", out.failure[:300]
        row["compile_time_s"] = out.compile_s
    except Exception as exc:  # singular configuration, limit breach, a sample the robot refuses, ...
        row["status"], row["reason"] = "failed", _one_line(exc)
    row["wall_time_s"] = time.perf_counter() - start
    return row, curve


@dataclass(frozen=True, eq=False)
class BatchResult:
    """One task's rows (column -> list) and torque curves ((runs, K, joints) float32, N·m; N for
    prismatic joints; or None)."""

    rows: dict[str, list]
    curves: np.ndarray | None


def run_batch(plan: Plan, runs: Sequence[int], values: np.ndarray | None = None) -> BatchResult:
    """Run ``runs`` one after another (one Dask task); ``values``: their rows of the design
    ((runs, parameters); default the plan's own), so that a task need not carry the whole design."""
    out: dict[str, list] = {c: [] for c in plan.columns}
    curves = []
    for k, run in enumerate(runs):
        row, curve = run_one(plan, int(run), None if values is None else dict(zip(plan.design.paths, map(float, values[k]))))
        for c in plan.columns:
            out[c].append(row[c])
        if curve is not None:
            curves.append(curve)
    return BatchResult(out, np.stack(curves) if curves else None)


def _schema(plan: Plan):
    import pyarrow as pa

    fields = [pa.field("run", pa.int64()), pa.field("status", pa.string()), pa.field("reason", pa.string())]
    fields += [pa.field(c, pa.float64()) for c in plan.columns[3:]]
    return pa.schema(fields)


def _failed_batch(plan: Plan, runs: Sequence[int], reason: str) -> BatchResult:
    out: dict[str, list] = {c: [] for c in plan.columns}
    for run in runs:
        row = {"run": int(run), "status": "failed", "reason": reason[:300], "compile_time_s": math.nan, "wall_time_s": math.nan}
        row.update({f"param.{p}": v for p, v in plan.design.run(int(run)).items()})
        for c in plan.columns:
            out[c].append(row.get(c, math.nan))
    curves = np.full((len(runs), len(plan.context.band_t), len(plan.joints)), np.nan, np.float32) if plan.joints else None
    return BatchResult(out, curves)


def _merge(results: Sequence[BatchResult]) -> BatchResult:
    rows = {c: [v for r in results for v in r.rows[c]] for c in results[0].rows}
    curves = [r.curves for r in results if r.curves is not None]
    return BatchResult(rows, np.concatenate(curves) if curves else None)


def _write_part(directory: Path, plan: Plan, result: BatchResult) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    first = min(result.rows["run"])
    stem = f"run-{first:09d}-{uuid.uuid4().hex[:8]}"
    if result.curves is not None:
        with atomic_output(directory / f"{stem}.npy") as tmp:
            np.save(tmp, result.curves)
    table = pa.Table.from_pydict(result.rows, schema=_schema(plan))
    with atomic_output(directory / f"{stem}.parquet") as tmp:  # the part's commit point
        pq.write_table(table, tmp)


def _parts(out_dir: Path) -> list[Path]:
    return sorted((out_dir / PARTS).glob("run-*.parquet"))


def completed_runs(out_dir: str | Path) -> set[int]:
    """Run indices some part in ``out_dir`` holds, ok or failed, except runs whose task was
    lost (its worker kept dying; :data:`LOST`): a resume runs those again."""
    import pyarrow.parquet as pq

    done: set[int] = set()
    for part in _parts(Path(out_dir)):
        t = pq.read_table(part, columns=["run", "reason"])
        done.update(r for r, why in zip(t.column("run").to_pylist(), t.column("reason").to_pylist()) if not why.startswith(LOST))
    return done


def _manifest(plan: Plan) -> dict:
    s = plan.study
    return {
        "study": str(s.source),
        "robot": str(s.robot),
        "digest": s.digest,
        "workflow": s.workflow,
        "runs": len(plan.design),
        "parameters": list(plan.design.paths),
        "quantities": list(plan.quantities),
    }


def _start(plan: Plan, out_dir: Path, resume: bool) -> None:
    manifest = out_dir / MANIFEST
    if resume:
        if not manifest.is_file():
            raise InputError(f"no sweep to resume here (no {MANIFEST})", file=out_dir)
        old = json.loads(manifest.read_text())
        if old.get("digest") != plan.study.digest or old.get("quantities") != list(plan.quantities):
            raise InputError(f"the study or its robot changed since this sweep started ({old.get('study')}); start a new sweep in another directory", file=out_dir)
        (out_dir / PARTS).mkdir(exist_ok=True)
        return
    if manifest.exists() or _parts(out_dir):
        raise InputError("holds a sweep already; pass --resume to continue it, or choose another directory", file=out_dir)
    (out_dir / PARTS).mkdir(exist_ok=True)
    with atomic_output(manifest) as tmp:
        tmp.write_text(json.dumps(_manifest(plan), indent=2) + "\n")


@dataclass(frozen=True)
class SweepResult:
    """What :func:`run_study` did.

    Attributes:
        runs: Runs in the study.
        skipped: Runs already done (resume).
        ran: Runs done now.
        tasks: Tasks submitted now.
        runs_per_task: Mean batch size (runs per task).
        wall_s: Time from the first submission to the last part written (s).
        table: The consolidated Parquet table.
    """

    runs: int
    skipped: int
    ran: int
    tasks: int
    runs_per_task: float
    wall_s: float
    table: Path


def run_study(
    plan: Plan,
    out_dir: str | Path,
    *,
    client: object | None = None,
    workers: int = 1,
    resume: bool = False,
    progress: Callable[[int, int], None] | None = None,
    retries: int = RETRIES,
    task: Callable[[Plan, Sequence[int], np.ndarray], BatchResult] = run_batch,
) -> SweepResult:
    """Run every run of ``plan`` not yet in ``out_dir``; write parts as tasks finish, then the table.

    Args:
        client: A ``distributed.Client`` (None: in this process, one batch after another).
        workers: Workers the client has (sizes the batches).
        resume: Continue the sweep in ``out_dir`` (its study must be unchanged).
        progress: Called ``(done, total)`` after every finished task.
        retries: Times a task whose worker died is run again before its runs are
            recorded as failed.
        task: What one task runs, ``task(plan, runs, values)`` (default :func:`run_batch`; a
            wrapper can add set-up a cluster needs, or faults for a test).

    Raises:
        InputError: If ``out_dir`` holds another sweep, or nothing to resume.
    """
    out_dir = Path(out_dir)
    _start(plan, out_dir, resume)
    done = completed_runs(out_dir)
    missing = [i for i in range(len(plan.design)) if i not in done]
    sizer = BatchSizer(plan, workers)
    batches: list[list[int]] = []
    # what every task carries: the plan without the design (100,000 runs x 5 parameters
    # would be 4 MB a task), and its own rows of the design
    light = dataclasses.replace(plan, design=Design(plan.design.paths, plan.design.values[:0]))

    def items():
        k = 0
        while k < len(missing):
            batches.append(missing[k:k + sizer.size(len(missing) - k)])
            k += len(batches[-1])
            yield light, batches[-1], plan.design.values[batches[-1]]

    total = len(plan.design)
    count = total - len(missing)
    if progress is not None:
        progress(count, total)
    start = time.perf_counter()
    held: list[BatchResult] = []
    written = time.perf_counter()

    def flush() -> None:
        nonlocal written
        if held:
            _write_part(out_dir / PARTS, plan, _merge(held))
            held.clear()
        written = time.perf_counter()

    # a few tasks per worker in flight: the next is on the scheduler when one ends (Dask sends
    # it on at once), and batch sizes still follow the run times measured so far
    tasks = map_tasks(client, task, items(), retries=retries, in_flight=IN_FLIGHT * max(1, workers))
    try:
        for i, result, error in tasks:
            if error is not None:
                result = _failed_batch(plan, batches[i], f"{LOST}failed after {retries} retries: {_one_line(error)}")
            sizer.observe(result.rows["wall_time_s"])
            held.append(result)
            if time.perf_counter() - written >= FLUSH_S:
                flush()
            count += len(batches[i])
            if progress is not None:
                progress(count, total)
    finally:
        tasks.close()  # cancels what is still queued
        flush()  # finished rows are kept when the sweep is interrupted (Ctrl-C, SIGTERM)
    wall = time.perf_counter() - start
    table = consolidate(plan, out_dir)
    return SweepResult(
        runs=total, skipped=total - len(missing), ran=len(missing), tasks=len(batches),
        runs_per_task=len(missing) / len(batches) if batches else 0.0, wall_s=wall, table=table,
    )


def consolidate(plan: Plan, out_dir: str | Path) -> Path:
    """Write ``runs.parquet`` and ``runs.csv`` (every part's rows, sorted by run, one row per
    run) and, for studies with torque curves, ``curves.npy`` in the same order."""
    import pyarrow as pa
    import pyarrow.csv as pacsv
    import pyarrow.parquet as pq

    out_dir = Path(out_dir)
    tables, curves = [], []
    for part in _parts(out_dir):
        tables.append(pq.read_table(part, schema=_schema(plan)))
        if plan.joints:
            npy = part.with_suffix(".npy")
            curves.append(np.load(npy, mmap_mode="r") if npy.exists() else np.full((tables[-1].num_rows, len(plan.context.band_t), len(plan.joints)), np.nan, np.float32))
    table = pa.concat_tables(tables) if tables else _schema(plan).empty_table()
    runs = np.asarray(table.column("run").to_numpy(), dtype=np.int64)
    lost = np.array([r.startswith(LOST) for r in table.column("reason").to_pylist()], dtype=bool)
    order = np.lexsort((lost, runs))  # by run; of a run written twice (lost, then run again), the result
    keep = order[np.concatenate([[True], np.diff(runs[order]) != 0])] if len(order) else order
    table = table.take(pa.array(keep))
    path = out_dir / "runs.parquet"
    with atomic_output(path) as tmp:
        pq.write_table(table, tmp)
    with atomic_output(out_dir / "runs.csv") as tmp:
        pacsv.write_csv(table, tmp)
    if plan.joints:
        stacked = np.concatenate(curves) if curves else np.zeros((0, len(plan.context.band_t), len(plan.joints)), np.float32)
        with atomic_output(out_dir / "curves.npy") as tmp:
            np.save(tmp, stacked[keep])
    return path
