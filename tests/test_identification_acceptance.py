"""Acceptance of friction identification on synthetic data with a known truth (the README's tables;
``benchmarks/identification_accuracy.py`` prints them with more seeds)."""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.dynamics.friction.laws import Stribeck
from mbctl.dynamics.model.robot import load_robot
from mbctl.identification.accuracy import (
    PARAMS,
    clean_fit_errors,
    monte_carlo,
    simulated_constant_speed,
)
from mbctl.identification.fitting import fit_friction
from mbctl.identification.plan import ConstantSpeedPlan, speed_grid
from mbctl.identification.processing import process_constant_speed
from mbctl.identification.synthetic import SyntheticRig

TRUTH = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)


@pytest.fixture(scope="module")
def mc():
    """200 seeds (coverage needs them: its binomial spread is 1.7 % at 200): 25 speeds 0.1*vs .. 40*vs,
    2 % torque noise of fc per sample, gravity up to 10*fc, 4096 counts."""
    speeds = speed_grid(0.1 * TRUTH.vs, 40 * TRUTH.vs, 25, TRUTH.vs)
    plan = ConstantSpeedPlan("j1", tuple(speeds), (-0.6, 0.6), settle_s=0.2, acceleration=20.0, max_leg_s=10.0, transit_speed=1.0)
    rig = SyntheticRig(TRUTH, torque_noise=0.02 * TRUTH.fc, encoder_counts=4096, rate_hz=1000.0)
    return monte_carlo(TRUTH, plan, rig, range(200), starts_per_seed=1, leak_seeds=50)


@pytest.mark.slow
def test_95th_percentile_errors(mc):
    """delta fixed: fc, fs <= 2 %, vs, fv <= 12 %; delta free: fc, fs <= 2 %."""
    fixed, free = mc.p95("fixed"), mc.p95("free")
    assert fixed["fc"] <= 0.02 and fixed["fs"] <= 0.02
    assert fixed["vs"] <= 0.12 and fixed["fv"] <= 0.12
    assert free["fc"] <= 0.02 and free["fs"] <= 0.02


@pytest.mark.slow
def test_gravity_does_not_leak_into_the_friction(mc):
    """Same noise with and without gravity (up to 10*fc), 50 seeds: every point within 0.5 % of fc."""
    assert mc.leak_points.max() < 0.005


@pytest.mark.slow
def test_confidence_intervals_hold_the_truth_in_90_to_98_percent_of_seeds(mc):
    for k, c in mc.coverage().items():
        assert 0.90 <= c <= 0.98, (k, c)


@pytest.mark.slow
def test_fits_converge_from_starts_five_times_off(mc):
    """>= 99 % of the starts reach the reference fit, none ends on a bound."""
    assert mc.converged >= 0.99 * mc.starts and mc.stuck == 0, mc.failures[:3]


@pytest.mark.slow
def test_end_to_end_errors_are_within_1_5x_of_clean_point_fits(configs):
    """identify run on the simulated plant (LuGre truth, 2 % effort noise) then the fit, over three noise
    seeds: RMS parameter errors within 1.5x those of fits to clean steady-state points F(v_k) + N(0, se_k)."""
    robot = load_robot(configs / "friction_rig.toml")
    truth = TRUTH
    e2e = {k: [] for k in PARAMS}
    clean = {k: [] for k in PARAMS}
    for seed in range(3):
        log = simulated_constant_speed(robot, "j1", seed, {"max_leg_s": 1.0, "count": 20})
        pts = process_constant_speed(log).points
        fit = fit_friction(pts, "stribeck")
        for k in PARAMS:
            e2e[k].append(fit.values[k] / getattr(truth, k) - 1)
        for k, v in clean_fit_errors(truth, pts, range(100 * seed, 100 * seed + 100)).items():
            clean[k].extend(v)
    for k in PARAMS:
        ratio = np.sqrt(np.mean(np.square(e2e[k]))) / np.sqrt(np.mean(np.square(clean[k])))
        assert ratio <= 1.5, (k, ratio)
