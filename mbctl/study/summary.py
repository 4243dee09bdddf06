"""A finished sweep in numbers: counts, failures, percentiles of every quantity, torque bands.

Percentiles are numpy's (linear interpolation between order statistics) over the runs
that succeeded. Torque bands (feed-forward studies): at each of the
:data:`mbctl.study.workflows.BAND_SAMPLES` times of the band grid, the percentiles of
the runs' torques per joint; every run's torque is kept on that grid only (linear
interpolation of the trajectory's samples), so the bands cost 200 x joints numbers per
run whatever the trajectory's rate.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.fileio import atomic_output
from mbctl.study.engine import Plan

__all__ = ["PERCENTILES", "Bands", "read_table", "summarize", "torque_bands", "write_summary"]

PERCENTILES = (5.0, 25.0, 50.0, 75.0, 95.0)


def read_table(path: str | Path) -> dict[str, np.ndarray]:
    """A sweep table (``runs.parquet``) as columns (numbers as float arrays, text as object arrays)."""
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    return {name: table.column(name).to_numpy(zero_copy_only=False) for name in table.column_names}


def summarize(plan: Plan, columns: dict[str, np.ndarray], wall_s: float | None = None) -> dict:
    """The JSON summary: counts, failure reasons (most common first), the range of every
    parameter and the min, mean, percentiles (:data:`PERCENTILES`) and max of every quantity."""
    ok = columns["status"] == "ok"
    reasons = Counter(str(r) for r, good in zip(columns["reason"], ok) if not good)
    quantities = {}
    for q in plan.quantities:
        x = np.asarray(columns[q][ok], dtype=float)
        x = x[np.isfinite(x)]
        if x.size == 0:
            quantities[q] = None
            continue
        entry = {"min": float(x.min()), "mean": float(x.mean())}
        entry.update({f"p{p:g}": float(v) for p, v in zip(PERCENTILES, np.percentile(x, PERCENTILES))})
        entry["max"] = float(x.max())
        quantities[q] = entry
    params = {}
    for p in plan.design.paths:
        x = np.asarray(columns[f"param.{p}"], dtype=float)
        params[p] = {"min": float(x.min()), "max": float(x.max())} if x.size else None
    times = np.asarray(columns["wall_time_s"], dtype=float)
    times = times[np.isfinite(times)]
    compile_s = np.asarray(columns["compile_time_s"], dtype=float)
    compile_s = compile_s[np.isfinite(compile_s)]
    return {
        "study": str(plan.study.source),
        "robot": str(plan.study.robot),
        "workflow": plan.study.workflow,
        "runs": int(len(ok)),
        "ok": int(ok.sum()),
        "failed": int((~ok).sum()),
        "failure_reasons": dict(reasons.most_common(20)),
        "run_time_s": {"mean": float(times.mean()), "p50": float(np.median(times)), "max": float(times.max())} if times.size else None,
        "compile_time_s": {"total": float(compile_s.sum()), "runs_compiling": int((compile_s > 0).sum())} if compile_s.size else None,
        "sweep_wall_s": wall_s,
        "parameters": params,
        "quantities": quantities,
    }


def write_summary(path: str | Path, summary: dict) -> None:
    """Write the summary as JSON, atomically."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(summary, indent=2) + "\n")


@dataclass(frozen=True, eq=False)
class Bands:
    """Torque percentiles over time.

    Attributes:
        t: (K,) band grid (s).
        joints: Joint names.
        percentiles: The percentiles (:data:`PERCENTILES`).
        values: (P, K, joints) torque percentiles (N·m, N).
        runs: Runs they were taken over (the successful ones).
    """

    t: np.ndarray
    joints: tuple[str, ...]
    percentiles: tuple[float, ...]
    values: np.ndarray
    runs: int


def torque_bands(plan: Plan, out_dir: str | Path, ok: np.ndarray) -> Bands | None:
    """Percentile bands of the torque curves of the successful runs (``curves.npy``), joint by joint; None without curves."""
    path = Path(out_dir) / "curves.npy"
    if not plan.joints or not path.exists() or not ok.any():
        return None
    curves = np.load(path, mmap_mode="r")
    values = np.stack([np.nanpercentile(np.asarray(curves[ok, :, j], dtype=float), PERCENTILES, axis=0) for j in range(len(plan.joints))], axis=2)
    bands = Bands(t=plan.context.band_t, joints=plan.joints, percentiles=PERCENTILES, values=values, runs=int(ok.sum()))
    with atomic_output(Path(out_dir) / "bands.npz") as tmp:
        np.savez(tmp, t=bands.t, joints=np.array(bands.joints), percentiles=np.array(bands.percentiles), values=bands.values)
    return bands
