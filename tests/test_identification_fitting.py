"""Fitting static friction laws: exactness on noise-free data, linear least squares, uncertainty, robustness."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from mbctl.dynamics.friction.laws import CoulombViscous, Stribeck
from mbctl.errors import DataError
from mbctl.identification.accuracy import converged_to
from mbctl.identification.fitting import fit_friction, min_points
from mbctl.identification.plan import ConstantSpeedPlan, speed_grid
from mbctl.identification.processing import FrictionPoints, process_constant_speed
from mbctl.identification.synthetic import SyntheticRig, steady_points, synthetic_log

TRUTH = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)
SPEEDS = speed_grid(0.005, 2.0, 25, 0.05)


def points(law, se: float = 1e-3, seed: int | None = None, speeds: np.ndarray = SPEEDS) -> FrictionPoints:
    stderr = np.full(len(speeds), se)
    F = law.steady(speeds) if seed is None else steady_points(law, speeds, stderr, np.random.default_rng(seed))
    return FrictionPoints(speed=speeds, friction=np.asarray(F, float), stderr=stderr, spread=stderr, bins=np.full(len(speeds), 30))


@pytest.mark.parametrize("delta", [2.0, None])
def test_noise_free_constant_speed_log_gives_every_parameter_within_0_1_percent(delta):
    """Acceptance: a noise-free log (gravity 10*fc, 4096-count encoder) through processing and the fit."""
    plan = ConstantSpeedPlan("j", tuple(SPEEDS), (-0.6, 0.6), settle_s=0.2, acceleration=20.0, max_leg_s=10.0, transit_speed=1.0)
    rig = SyntheticRig(TRUTH, gravity=10 * TRUTH.fc, gravity_phase=0.3, encoder_counts=4096)
    fit = fit_friction(process_constant_speed(synthetic_log(rig, plan, np.random.default_rng(0))).points, "stribeck", delta=delta)
    for name in ("fc", "fs", "vs", "fv") + (("delta",) if delta is None else ()):
        assert fit.values[name] == pytest.approx(getattr(TRUTH, name), rel=1e-3), name
    assert fit.found and not fit.at_bound


def test_coulomb_viscous_fit_is_the_weighted_linear_least_squares_solution():
    """F = fc + fv*v: the fit equals numpy's weighted lstsq and its covariance s2*(A^T W A)^-1."""
    law = CoulombViscous(fc=0.5, fv=0.2)
    v = np.linspace(0.1, 2.0, 12)
    se = np.linspace(0.01, 0.03, 12)
    F = law.steady(v) + np.random.default_rng(0).normal(0, 1, 12) * se
    fit = fit_friction(FrictionPoints(v, F, se, se, np.full(12, 30)), "coulomb-viscous", robust=False)
    A = np.column_stack([np.ones_like(v), v]) / se[:, None]
    x, res, *_ = np.linalg.lstsq(A, F / se, rcond=None)
    cov = res[0] / (12 - 2) * np.linalg.inv(A.T @ A)
    assert [fit.values["fc"], fit.values["fv"]] == pytest.approx(x, rel=1e-9)
    assert fit.stderr["fc"] == pytest.approx(math.sqrt(cov[0, 0]), rel=1e-6)
    assert fit.stderr["fv"] == pytest.approx(math.sqrt(cov[1, 1]), rel=1e-6)


def test_confidence_intervals_cover_the_truth_at_the_nominal_rate():
    """Clean points with Gaussian errors: the 95 % intervals hold the truth in about 95 % of 300 seeds."""
    hits = {k: 0 for k in ("fc", "fs", "vs", "fv")}
    for seed in range(300):
        fit = fit_friction(points(TRUTH, seed=seed), "stribeck")
        for k in hits:
            lo, hi = fit.ci[k]
            hits[k] += lo <= getattr(TRUTH, k) <= hi
    for k, n in hits.items():
        assert 0.90 <= n / 300 <= 0.98, (k, n)


def test_confidence_band_is_the_delta_method_on_the_covariance():
    """Band half-width at v: t*sqrt(g^T C g) with g = dF/dtheta (checked by finite differences)."""
    fit = fit_friction(points(TRUTH, seed=1), "stribeck")
    v = np.array([0.03])
    g = []
    for k in fit.names:
        h = 1e-6 * fit.values[k]
        up = replace(fit.law, **{k: fit.values[k] + h})
        g.append((up.steady(v) - fit.law.steady(v))[0] / h)
    g = np.array(g)
    from scipy.stats import t as student_t

    expected = student_t.ppf(0.975, fit.dof) * math.sqrt(g @ fit.covariance @ g)
    assert fit.band(v)[0] == pytest.approx(expected, rel=1e-4)


def test_fits_from_starts_five_times_off_reach_the_same_minimum():
    """Every parameter off by 1/5 or 5 (all 16 corners): the same fit, nothing on a bound."""
    pts = points(TRUTH, se=2e-4, seed=3)
    ref = fit_friction(pts, "stribeck")
    for corner in range(16):
        start = {k: getattr(TRUTH, k) * (5.0 if corner >> i & 1 else 0.2) for i, k in enumerate(("fc", "fs", "vs", "fv"))}
        assert converged_to(fit_friction(pts, "stribeck", start=start), ref), start


def test_one_bad_point_is_down_weighted_by_the_robust_loss():
    """A point 50 standard errors off gets a small weight; the parameters stay within their
    standard errors of the clean fit (Huber bounds its pull), unlike plain least squares."""
    pts = points(TRUTH, se=1e-3, seed=4)
    clean = fit_friction(pts, "stribeck")
    F = pts.friction.copy()
    F[12] += 0.05
    bad = fit_friction(replace(pts, friction=F), "stribeck")
    plain = fit_friction(replace(pts, friction=F), "stribeck", robust=False)
    assert bad.weights[12] < 0.1 and (bad.weights[np.arange(25) != 12] > 0.5).all()
    for k in ("fc", "fs", "vs"):
        assert abs(bad.values[k] - clean.values[k]) < min(clean.stderr[k], 0.5 * abs(plain.values[k] - clean.values[k])), k


def test_delta_free_recovers_tustins_exponent():
    """A delta = 1 truth is fitted as such when delta is free."""
    tustin = replace(TRUTH, delta=1.0)
    fit = fit_friction(points(tustin), "stribeck", delta=None)
    assert fit.values["delta"] == pytest.approx(1.0, rel=1e-6)


def test_too_few_speeds_is_an_error():
    """Stribeck with delta fixed needs six speeds, free seven; Coulomb-viscous four."""
    assert (min_points("coulomb-viscous"), min_points("stribeck"), min_points("stribeck", True)) == (4, 6, 7)
    with pytest.raises(DataError, match="only 5 speeds.*needs at least 6"):
        fit_friction(points(TRUTH, speeds=SPEEDS[::5]), "stribeck")


def test_lugre_static_part_is_stribeck_with_delta_two():
    fit = fit_friction(points(TRUTH), "lugre")
    assert isinstance(fit.law, Stribeck) and fit.law.delta == 2.0 and fit.fixed == {"delta": 2.0}
