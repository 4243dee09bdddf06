"""Throughput of mbctl sweep on a LocalCluster: 1 and 2 workers, scaling, per-task overhead.

The study: the bundled ``ur5_payload`` (feed-forward torques of the UR5 along a 2 s move
at 500 Hz, payload uniform 0-5 kg, two joints' Coulomb friction normal) with
``--samples`` Monte Carlo draws (default 1,000). References measured in the same run:

- the run time: the same runs one after another in this process (``run_one``), the
  runs' own times summed (``wall_time_s`` of the table, measured on the workers) and
  their mean;
- throughput (runs/s) with 1 and 2 workers from the first task submitted to the table
  written (cluster start-up and the workers' first imports excluded: one warm-up run
  per worker first), batched as ``mbctl sweep`` batches them; scaling = throughput(2) /
  throughput(1); efficiency = scaling / 2; and, on the same two clusters, the scaling of
  fixed pure-Python work (no mbctl): what the machine itself gives two processes at the time;
- overhead: ``(workers * wall - sum of run times) / sum of run times`` (everything that
  is not a run: scheduling, transfer, writing parts, idle workers at the end), and per
  task ``(workers * wall - sum of run times) / tasks`` against the mean run time, also
  for unbatched tasks (one run per task: ``--unbatched`` runs of the same study, and
  ``--long`` runs of the study at ``--long-rate`` (5 kHz: runs of tens of ms; 15 kHz:
  ~50 ms), and for those ``--long`` runs batched as ``mbctl sweep`` batches them.

Run: python benchmarks/sweep.py [--samples 1000] [--unbatched 200] [--long 100] [--long-rate 5000]
"""

from __future__ import annotations

import argparse
import math
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from mbctl.bundled import bundled_study
from mbctl.config.study import read_study
from mbctl.study.cluster import dask_client
from mbctl.study.engine import Plan, prepare, run_one, run_study
from mbctl.study.summary import read_table


def study_file(directory: Path, samples: int, runs_per_task: int | None, rate_hz: float = 500.0) -> Path:
    """The bundled ur5_payload study with ``samples`` draws, a batch size and a trajectory rate, written to ``directory``."""
    text = bundled_study("ur5_payload").read_text()
    text = re.sub(r"(?m)^samples = \d+", f"samples = {samples}", text)
    text = re.sub(r"(?m)^rate_hz = [0-9.]+", f"rate_hz = {rate_hz!r}", text)
    text = text.replace('robot = "ur5"', 'robot = "ur5"' + (f"\nruns_per_task = {runs_per_task}" if runs_per_task else ""))
    path = directory / f"study-{samples}-{runs_per_task}-{rate_hz:g}.toml"
    path.write_text(text)
    return path


def fixed_work(n: int) -> float:
    """A fixed amount of pure-Python arithmetic (the machine's own scaling, without mbctl)."""
    x = 0.0
    for i in range(n):
        x += (i % 7) * 0.5
    return x


def machine_throughput(client, workers: int, tasks: int = 8 * 2, n: int = 3_000_000) -> float:
    """Tasks of :func:`fixed_work` per second on ``client`` (all submitted at once)."""
    start = time.perf_counter()
    client.gather([client.submit(fixed_work, n, pure=False) for _ in range(tasks)])
    return tasks / (time.perf_counter() - start)


def sweep(plan: Plan, workers: int, directory: Path, reference: bool = False) -> dict:
    """One sweep on a fresh LocalCluster of ``workers`` processes, after one warm-up run per
    worker; with ``reference`` also the throughput of fixed pure-Python work on that cluster."""
    out = Path(tempfile.mkdtemp(dir=directory))
    with dask_client(workers) as client:
        client.run(run_one, plan, 0)  # imports and first-call costs, on every worker
        machine = machine_throughput(client, workers) if reference else math.nan
        start = time.perf_counter()
        result = run_study(plan, out, client=client, workers=workers)
        wall = time.perf_counter() - start
    table = read_table(result.table)
    runs = np.asarray(table["wall_time_s"], dtype=float)
    busy = float(runs.sum())
    idle = workers * wall - busy
    return {
        "workers": workers,
        "runs": len(runs),
        "failed": int((table["status"] != "ok").sum()),
        "tasks": result.tasks,
        "per_task": result.runs_per_task,
        "wall": wall,
        "throughput": len(runs) / wall,
        "run_mean": float(runs.mean()),
        "overhead": idle / busy,
        "overhead_per_task": idle / result.tasks,
        "machine": machine,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--unbatched", type=int, default=200, help="runs of the one-run-per-task measurement (0: skip)")
    parser.add_argument("--long", type=int, default=100, help="runs of the long-run measurement (trajectory at --long-rate), one run per task (0: skip)")
    parser.add_argument("--long-rate", type=float, default=5000.0, help="trajectory rate of the long runs, Hz (15000: runs of ~50 ms)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plan = prepare(read_study(study_file(tmp, args.samples, None)))
        serial = []
        for i in range(min(100, args.samples)):
            start = time.perf_counter()
            run_one(plan, i)
            serial.append(time.perf_counter() - start)
        print(f"UR5 feed-forward study, {args.samples} runs; in this process one after another: "
              f"{np.mean(serial) * 1e3:.2f} ms per run (mean of {len(serial)}), {1 / np.mean(serial):.1f} runs/s")
        print(f"{'workers':>18}{'tasks':>7}{'runs/task':>10}{'wall s':>9}{'runs/s':>9}{'run ms':>9}{'overhead':>10}{'per task ms':>13}{'failed':>8}")
        rows = [sweep(plan, w, tmp, reference=True) for w in (1, 2)]
        if args.unbatched:
            small = prepare(read_study(study_file(tmp, args.unbatched, 1)), pilot=False)
            rows.append({**sweep(small, 2, tmp), "workers": "2, 1/task"})
        if args.long:
            rate = f"{args.long_rate / 1e3:g} kHz"
            long = prepare(read_study(study_file(tmp, args.long, 1, rate_hz=args.long_rate)), pilot=False)
            rows.append({**sweep(long, 2, tmp), "workers": f"2, {rate}, 1/task"})
            batched = prepare(read_study(study_file(tmp, args.long, None, rate_hz=args.long_rate)))
            rows.append({**sweep(batched, 2, tmp), "workers": f"2, {rate}"})
        for r in rows:
            print(f"{r['workers']!s:>18}{r['tasks']:>7}{r['per_task']:>10.1f}{r['wall']:>9.2f}{r['throughput']:>9.1f}{r['run_mean'] * 1e3:>9.2f}"
                  f"{r['overhead'] * 100:>9.1f}%{r['overhead_per_task'] * 1e3:>13.2f}{r['failed']:>8}")
        scaling = rows[1]["throughput"] / rows[0]["throughput"]
        machine = rows[1]["machine"] / rows[0]["machine"]
        print(f"scaling 1 -> 2 workers: {scaling:.2f}x (efficiency {scaling / 2 * 100:.0f} %); "
              f"fixed pure-Python work on the same clusters: {machine:.2f}x (what this machine gives two processes now)")
        for r in rows[2:]:
            print(f"{r['workers']}: {r['overhead_per_task'] * 1e3:.2f} ms of overhead per task of {r['per_task']:.1f} runs = "
                  f"{r['overhead'] * 100:.1f} % of the run time (mean run {r['run_mean'] * 1e3:.1f} ms)")


if __name__ == "__main__":
    main()
