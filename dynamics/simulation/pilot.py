"""How long a simulation will take, measured on the model before the run starts.

A pilot run integrates the first steps of the run as it is set up (same system, integrator,
step, backend) and times them once the C code is built or loaded:

    estimate (s) = units x (wall time of the timed units / timed units)

with units the integrator's steps (RK4, ROS2: ``ceil(duration / step)``) or, for the
adaptive scipy methods, the recorded samples (``ceil(duration / output_step)``). The pilot
records a sample every ``min(every, pilot / 20)`` steps: as often as the run when the run
records often (so recording's cost counts), rarely otherwise (so the per-call cost of the
compiled steps is spread as in the run). It takes at most ``pilot_units`` units and stops at
the first progress report after ``pilot_wall_s`` of timed work, so an absurd request (1e13
steps) costs a fraction of a second to refuse.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from mbctl.config.simulation import SimulationSpec
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.errors import MbctlError

__all__ = ["RunTimeEstimate", "calibrated_run_time", "estimate_run_time", "run_units"]


@dataclass(frozen=True)
class RunTimeEstimate:
    """A run's wall time as a pilot measured it (compilation excluded).

    Attributes:
        seconds: Estimated wall time of the whole run (s).
        units: Steps (fixed-step integrators) or recorded samples (adaptive ones) of the run.
        unit: ``"steps"`` or ``"samples"``.
        per_unit_s: Measured wall time per unit (s).
        timed: Units the measurement covers.
    """

    seconds: float
    units: float
    unit: str
    per_unit_s: float
    timed: int


class _Enough(Exception):
    """Raised from the pilot's progress callback once it has timed enough."""


def run_units(setup: SimulationSpec) -> tuple[float, str]:
    """``(units, unit)`` of a run: its steps for RK4 and ROS2, its recorded samples for the adaptive
    methods (a float: 1e13 is a number to compare, not a loop)."""
    fixed = setup.integrator in ("rk4", "ros2")
    units = setup.duration / (setup.step if fixed else setup.output_step or setup.step)
    return (max(1.0, math.ceil(units - 1e-9)) if math.isfinite(units) else math.inf), "steps" if fixed else "samples"


def estimate_run_time(
    system: ConstrainedDynamics,
    q0: np.ndarray,
    dq0: np.ndarray,
    setup: SimulationSpec,
    *,
    backend: str = "auto",
    pilot_units: int = 2000,
    pilot_wall_s: float = 0.3,
) -> RunTimeEstimate | None:
    """Time the first units of the run ``setup`` describes (see the module docstring); None when they
    fail (a singular start, an unstable step: the run itself then says why, as it would have)."""
    units, unit = run_units(setup)
    fixed = unit == "steps"
    h = setup.duration / units if fixed else (setup.output_step or setup.step)
    pilot = int(min(units, pilot_units))
    if fixed:
        every = 1 if setup.output_step is None else max(1, round(setup.output_step / h))
        output = min(every, max(1, pilot // 20)) * h
    else:
        output = h
    marks: list[tuple[float, int]] = []

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        marks.append((now, done))
        if now - marks[0][0] > pilot_wall_s and done > marks[0][1]:
            raise _Enough

    start = time.perf_counter()
    try:
        with np.errstate(all="ignore"):  # a pilot that blows up gives no estimate; the run reports it
            run = simulate(
                system, q0, dq0, pilot * h, integrator=setup.integrator, step=h if fixed else setup.step, output_step=output,
                rtol=setup.rtol, atol=setup.atol, max_step=setup.max_step, jacobian_interval=setup.jacobian_interval,
                backend=backend, progress=progress,
            )  # fmt: skip
        end = time.perf_counter()
    except _Enough:
        run, end = None, marks[-1][0]
    except MbctlError:
        return None
    if len(marks) >= 2 and marks[-1][1] > marks[0][1]:
        # from the first report on: the compilation (or the loading of a cached library) is behind it
        (t0, done0), (t1, done1) = marks[0], marks[-1]
        per_unit, timed = (t1 - t0) / (done1 - done0), done1 - done0
    else:
        per_unit, timed = (end - start - (run.compile_s if run is not None else 0.0)) / pilot, pilot
    return RunTimeEstimate(seconds=per_unit * units, units=units, unit=unit, per_unit_s=per_unit, timed=timed)


def calibrated_run_time(evaluate: Callable[[], object], evaluations_per_unit: float, units: float, unit: str = "steps", *, repeats: int = 200) -> RunTimeEstimate:
    """A run's wall time from the measured cost of one evaluation of its right-hand side (s):
    ``units x evaluations_per_unit x (wall time of `repeats` calls of evaluate / repeats)``, where a
    pilot of the steps themselves would compile more than the run (``evaluations_per_unit``
    calibrated on a run of the same kind, e.g. 2.5 for ROS2 with the stiff-block solve)."""
    evaluate()  # loaded, warm
    start = time.perf_counter()
    with np.errstate(all="ignore"):  # the cost, not the value, is wanted
        for _ in range(repeats):
            evaluate()
    per_unit = (time.perf_counter() - start) / repeats * evaluations_per_unit
    return RunTimeEstimate(seconds=per_unit * units, units=units, unit=unit, per_unit_s=per_unit, timed=repeats)
