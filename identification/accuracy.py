"""Monte-Carlo accuracy of the constant-speed pipeline on synthetic logs with a known truth.

For every seed: a random gravity profile ``A*cos(q + phase)`` (``A`` uniform up to
``gravity_max``, phase uniform), white torque noise, the encoder, then
processing and fits — Stribeck with ``delta`` fixed at the truth's and free — and,
with the same noise but no gravity, the same pipeline again to measure how much
gravity leaks into the friction estimate. Fits from random starts (every parameter
off by a log-uniform factor up to ``start_factor``) check the convergence.
End to end, :func:`simulated_constant_speed` runs the experiment on the simulated
plant and :func:`clean_fit_errors` gives the errors of fits to clean steady-state
points at the same per-point noise, for comparison. Used by the acceptance tests
and ``benchmarks/identification_accuracy.py``.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from mbctl.dynamics.friction.laws import Stribeck
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.sim import SimPlant, truth_model
from mbctl.identification.config import identification_settings
from mbctl.identification.experiments import ExperimentController, run_experiment
from mbctl.identification.fitting import FrictionFit, fit_friction
from mbctl.identification.logs import ConstantSpeedLog
from mbctl.identification.plan import ConstantSpeedPlan, constant_speed_timeline
from mbctl.identification.processing import FrictionPoints, process_constant_speed
from mbctl.identification.synthetic import SyntheticRig, steady_points, synthetic_log

__all__ = ["MonteCarloResult", "monte_carlo", "converged_to", "simulated_constant_speed", "clean_fit_errors", "PARAMS"]

PARAMS = ("fc", "fs", "vs", "fv")


@dataclass(frozen=True)
class MonteCarloResult:
    """Per-seed outcomes.

    Attributes:
        error: Relative error per parameter (delta fixed), one value per seed.
        error_free: The same with delta free (``delta`` included).
        covered: Whether the nominal 95 % interval (delta fixed) holds the truth.
        leak_points: max_k |F_k(gravity) - F_k(no gravity)| / fc per seed.
        leak_fc: |fc(gravity) - fc(no gravity)| / fc per seed.
        starts: Fits from random starts.
        converged: Of those, how many reached the reference fit with no parameter on a bound.
        stuck: Of those, how many ended with a parameter on a bound.
        failures: Descriptions of the starts that did not converge.
    """

    error: dict[str, np.ndarray]
    error_free: dict[str, np.ndarray]
    covered: dict[str, np.ndarray]
    leak_points: np.ndarray
    leak_fc: np.ndarray
    starts: int
    converged: int
    stuck: int
    failures: tuple[str, ...]

    def p95(self, which: str = "fixed") -> dict[str, float]:
        """95th percentile of the absolute relative errors."""
        src = self.error if which == "fixed" else self.error_free
        return {k: float(np.percentile(np.abs(e), 95)) for k, e in src.items()}

    def coverage(self) -> dict[str, float]:
        return {k: float(c.mean()) for k, c in self.covered.items()}


def converged_to(fit: FrictionFit, reference: FrictionFit, rtol: float = 1e-5) -> bool:
    """Same parameters as ``reference`` (relative ``rtol``), solver converged, nothing on a bound."""
    same = all(abs(fit.values[k] - reference.values[k]) <= rtol * abs(reference.values[k]) for k in reference.names)
    return same and fit.found and not fit.at_bound


def monte_carlo(
    truth: Stribeck,
    plan: ConstantSpeedPlan,
    rig: SyntheticRig,
    seeds: range,
    *,
    gravity_max: float = 10.0,
    starts_per_seed: int = 2,
    start_factor: float = 5.0,
    settle_s: float | None = None,
    leak_seeds: int | None = None,
) -> MonteCarloResult:
    """Run the pipeline on ``len(seeds)`` synthetic logs (see module docstring).

    Args:
        truth: The friction law simulated.
        plan: Speeds, range, timing.
        rig: Inertia, noise, encoder, sampling (its gravity is replaced per seed).
        seeds: Random seeds.
        gravity_max: Largest gravity amplitude, in multiples of ``fc``.
        starts_per_seed: Random starts per seed for the convergence check.
        start_factor: Largest factor a start is off the truth by.
        settle_s: Transient dropped by processing (default the plan's).
        leak_seeds: Measure the gravity leak on the first this many seeds only (default all).
    """
    settle = plan.settle_s if settle_s is None else settle_s
    err: dict[str, list[float]] = {k: [] for k in PARAMS}
    err_free: dict[str, list[float]] = {k: [] for k in (*PARAMS, "delta")}
    cov: dict[str, list[bool]] = {k: [] for k in PARAMS}
    leak_pts, leak_fc = [], []
    starts = converged = stuck = 0
    failures = []
    for i, seed in enumerate(seeds):
        rng = np.random.default_rng(seed)
        amp = rng.uniform(0.0, gravity_max) * truth.fc
        phase = rng.uniform(0.0, 2 * math.pi)
        noise_seed = int(rng.integers(2**63))
        with_g = synthetic_log(replace(rig, gravity=amp, gravity_phase=phase), plan, np.random.default_rng(noise_seed))
        pts = process_constant_speed(with_g, settle_s=settle).points
        fit = fit_friction(pts, "stribeck", delta=truth.delta)
        free = fit_friction(pts, "stribeck", delta=None)
        for k in PARAMS:
            x = getattr(truth, k)
            err[k].append(fit.values[k] / x - 1)
            lo, hi = fit.ci[k]
            cov[k].append(lo <= x <= hi)
        for k in (*PARAMS, "delta"):
            err_free[k].append(free.values[k] / getattr(truth, k) - 1)
        if leak_seeds is None or i < leak_seeds:
            without_g = synthetic_log(replace(rig, gravity=0.0), plan, np.random.default_rng(noise_seed))
            pts0 = process_constant_speed(without_g, settle_s=settle).points
            fit0 = fit_friction(pts0, "stribeck", delta=truth.delta)
            if len(pts.speed) == len(pts0.speed) and np.allclose(pts.speed, pts0.speed):
                leak_pts.append(float(np.abs(pts.friction - pts0.friction).max()) / truth.fc)
            else:
                leak_pts.append(math.inf)
            leak_fc.append(abs(fit.values["fc"] - fit0.values["fc"]) / truth.fc)
        for _ in range(starts_per_seed):
            factors = np.exp(rng.uniform(-math.log(start_factor), math.log(start_factor), len(PARAMS)))
            start = {k: getattr(truth, k) * f for k, f in zip(PARAMS, factors)}
            trial = fit_friction(pts, "stribeck", delta=truth.delta, start=start)
            starts += 1
            stuck += bool(trial.at_bound)
            if converged_to(trial, fit):
                converged += 1
            else:
                failures.append(f"seed {seed}: start {start} -> {trial.values} (at bound: {trial.at_bound})")
    return MonteCarloResult(
        error={k: np.array(v) for k, v in err.items()},
        error_free={k: np.array(v) for k, v in err_free.items()},
        covered={k: np.array(v) for k, v in cov.items()},
        leak_points=np.array(leak_pts),
        leak_fc=np.array(leak_fc),
        starts=starts,
        converged=converged,
        stuck=stuck,
        failures=tuple(failures),
    )


def simulated_constant_speed(robot: RobotModel, joint: str, seed: int, overrides: dict | None = None) -> ConstantSpeedLog:
    """A lock-step constant-speed run of ``joint`` on the robot's simulated plant, noise seed ``seed``."""
    settings = identification_settings(robot, joint, overrides)
    truth, plant_config = truth_model(robot)
    timeline = constant_speed_timeline(settings.constant_speed, float(settings.start[robot.joint(joint).idx_v]))
    controller = ExperimentController(robot, joint, timeline, settings.gains)
    with tempfile.TemporaryDirectory() as tmp:
        with SimPlant(truth, 1.0 / settings.rate_hz, replace(plant_config, seed=seed), q0=settings.start) as plant:
            run = run_experiment(plant, robot, controller, rate_hz=settings.rate_hz, paced=False, npz_path=Path(tmp) / "run.npz", kind="constant-speed")
    if run.summary.stop_reason != "completed":
        raise RuntimeError(f"simulated run stopped: {run.summary.stop_reason}")
    return run.constant_speed


def clean_fit_errors(truth: Stribeck, points: FrictionPoints, seeds: range, law: str = "stribeck") -> dict[str, np.ndarray]:
    """Relative errors of fits to clean steady-state points ``F(v_k) + N(0, se_k**2)``
    at the speeds and standard errors of ``points`` (the reference for end-to-end runs)."""
    out: dict[str, list[float]] = {k: [] for k in PARAMS}
    for seed in seeds:
        F = steady_points(truth, points.speed, points.stderr, np.random.default_rng(seed))
        fit = fit_friction(replace(points, friction=F), law, delta=truth.delta)
        for k in PARAMS:
            out[k].append(fit.values[k] / getattr(truth, k) - 1)
    return {k: np.array(v) for k, v in out.items()}
