"""What a run did: :class:`RunSummary`, and the chatter check on its torque commands."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

__all__ = ["CHATTER_REVERSALS", "CHATTER_STEP_FRACTION", "RunSummary", "chatter_warnings", "reversal_threshold", "spread"]


CHATTER_STEP_FRACTION = 0.002
"""A cycle reverses a command when its step goes back on the previous one by more than this
fraction of the joint's effort limit ..."""
CHATTER_REVERSALS = 0.1
"""... and a command chatters when more than this fraction of its cycles reverse it."""


def reversal_threshold(effort: np.ndarray) -> np.ndarray:
    """The step (N·m, N) by which a cycle must go back on the previous one to count as a reversal."""
    return CHATTER_STEP_FRACTION * np.asarray(effort, dtype=float)


def chatter_warnings(names: Sequence[str], reversals: np.ndarray, effort: np.ndarray) -> list[str]:
    """One warning per joint whose torque command chatters.

    With the steps ``d_k = tau_k - tau_{k-1}``, cycle ``k`` reverses the command when ``d_k`` and
    ``d_{k-1}`` have opposite signs and ``min(|d_k|, |d_{k-1}|)`` exceeds
    :func:`reversal_threshold`; ``reversals`` is the fraction of cycles that do, per joint. A
    command chatters when it exceeds :data:`CHATTER_REVERSALS`: noise passed on to the drive,
    not a smooth command, nor one that jumps once (the bang-bang switch of a time-optimal
    motion, with a few cycles of ringing), nor one that saws by a hair (a sampled reference's
    staircase).
    """
    return [
        f"{name}: the torque command chatters (it reverses by more than {100 * CHATTER_STEP_FRACTION:g} % of the effort limit {limit:g} "
        f"in {100 * rev:.0f} % of the cycles)"
        for name, rev, limit in zip(names, reversals, effort)
        if rev > CHATTER_REVERSALS
    ]


@dataclass
class RunSummary:
    """What a run did; ``to_json`` gives the summary file's content.

    Times in µs. ``period_error_*``: ``|period - 1/rate|``; ``period_jitter_us``: the
    standard deviation of the period. ``phases_us``: p50/p99/max of each phase of a
    cycle (:data:`PHASES`); ``compute`` is read + control + write. ``plant_timing``: the
    backend's own timing report, if it has one (a simulated plant in its own
    process: its steps, overruns and real-time factor). ``scheduling``: the policy
    the loop ran under (``SCHED_FIFO 80``, or ``normal (...)`` with the reason). ``sensing`` and
    ``estimation``: where positions and velocities come from and how they are filtered.
    ``torque_step_rms``: RMS change of each joint's torque command per cycle (N·m, N; from the
    second cycle on: the first step is torque coming on); ``torque_step_reversals``: the
    fraction of cycles that reverse the command (:func:`chatter_warnings`); ``chatter``: a
    warning per chattering command. ``collision``: the collision detected, if any;
    ``observer_torque``: the torque the momentum observer took as acting on the arm (the drives'
    measurement, or the commands and how their timing was found); ``tau_ext_ratio_max``: the largest
    ``|tau_ext_i| / threshold_i`` of the run (a detection at 1; NaN without thresholds);
    ``sample_timing``: the samples' age when read and the horizon to the instant a command acts, p50,
    p99 and max (µs; :mod:`mbctl.hardware.sample_timing`; empty where the backend keeps no time of its
    own, and in lock-step). ``mpc``: the
    model predictive controller's report (solver, updates, iterations per update, fallbacks,
    solve-time percentiles in µs); empty for the other laws. ``end``: how the run ended for the
    drives (the end hold and the hand-over after a clean finish, or torque off after a stop).
    ``cycle``: what ran the cycle between read and write: ``compiled`` (one generated call,
    :mod:`mbctl.hardware.compiled_cycle`) or ``python``.
    """

    cycles: int = 0
    overruns: int = 0
    period_p50_us: float = math.nan
    period_p99_us: float = math.nan
    period_error_p99_us: float = math.nan
    period_error_max_us: float = math.nan
    period_jitter_us: float = math.nan
    compute_p50_us: float = math.nan
    compute_p99_us: float = math.nan
    phases_us: dict[str, dict[str, float]] = field(default_factory=dict)
    tracking_rms: dict[str, float] = field(default_factory=dict)
    max_abs_error: float = math.nan
    stop_reason: str = ""
    comm_errors: dict[str, int] = field(default_factory=dict)
    failed_reads: int = 0
    saturated: int = 0
    rate_hz: float = math.nan
    duration_s: float = 0.0
    plant_timing: dict[str, float] = field(default_factory=dict)
    scheduling: str = ""
    sensing: str = ""
    estimation: str = ""
    torque_step_rms: dict[str, float] = field(default_factory=dict)
    torque_step_reversals: dict[str, float] = field(default_factory=dict)
    chatter: list[str] = field(default_factory=list)
    collision: str = ""
    observer_torque: str = ""
    tau_ext_ratio_max: float = math.nan
    sample_timing: dict[str, float] = field(default_factory=dict)
    mpc: dict[str, float | int | str] = field(default_factory=dict)
    end: str = ""
    cycle: str = ""

    @property
    def completed(self) -> bool:
        """The run went to its end (possibly degraded)."""
        return self.stop_reason.startswith("completed")

    @property
    def clean(self) -> bool:
        """The run went to its end without an overrun."""
        return self.stop_reason == "completed"

    @property
    def overrun_fraction(self) -> float:
        """Overrun cycles per cycle run (0 for no cycles)."""
        return self.overruns / self.cycles if self.cycles else 0.0

    def to_json(self) -> dict:
        return {**asdict(self), "completed": self.completed, "clean": self.clean}


def spread(values: np.ndarray) -> dict[str, float]:
    """p50, p99 and max of the finite values (NaN if none)."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return {"p50": math.nan, "p99": math.nan, "max": math.nan}
    return {"p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)), "max": float(v.max())}


