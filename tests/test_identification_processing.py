"""Identification plans and processing: speed grid, reference motion, segments, pairing, gravity profile."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from mbctl.dynamics.friction.laws import Stribeck
from mbctl.errors import DataError
from mbctl.identification.logs import ConstantSpeedLog
from mbctl.identification.plan import (
    ConstantSpeedPlan,
    constant_speed_timeline,
    leg_range,
    speed_grid,
)
from mbctl.identification.processing import huber_location, process_constant_speed
from mbctl.identification.synthetic import SyntheticRig, synthetic_log

TRUTH = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)


def plan(speeds=(0.01, 0.05, 0.2, 1.0), **kw) -> ConstantSpeedPlan:
    base = dict(range=(-0.5, 0.5), settle_s=0.2, acceleration=20.0, max_leg_s=4.0, transit_speed=1.0)
    base.update(kw)
    return ConstantSpeedPlan("j1", tuple(speeds), **base)


def test_speed_grid_is_log_spaced_far_from_vs_and_denser_near_it():
    """Endpoints exact, increasing, and the log-step near vs is smaller than at the ends."""
    v = speed_grid(0.005, 2.0, 25, 0.05)
    assert len(v) == 25 and v[0] == pytest.approx(0.005) and v[-1] == pytest.approx(2.0)
    steps = np.diff(np.log(v))
    assert np.all(steps > 0)
    near = np.argmin(np.abs(np.log(v / 0.05)))
    assert steps[min(near, len(steps) - 1)] < 0.6 * steps[0] and steps[min(near, len(steps) - 1)] < 0.6 * steps[-1]


def test_timeline_legs_cruise_at_the_commanded_speed_over_the_range():
    """Each speed gives a +v leg a -> b and a -v leg b -> a; the reference integrates to the range."""
    p = plan()
    tl = constant_speed_timeline(p, 0.0)
    legs = [ph for ph in tl.phases if ph.kind == "leg"]
    assert [ph.speed for ph in legs] == [s for v in p.speeds for s in (v, -v)]
    for ph in legs:
        t = np.linspace(ph.t0, ph.t1, 20001)
        q, dq, ddq = ph.reference(t)
        assert q[0] == pytest.approx(ph.q0) and q[-1] == pytest.approx(ph.q1, abs=1e-12)
        assert np.max(np.abs(dq)) == pytest.approx(abs(ph.speed))
        assert np.trapezoid(dq, t) == pytest.approx(ph.q1 - ph.q0, abs=1e-6)  # velocity integrates to the travel
        assert np.max(np.abs(ddq)) == pytest.approx(p.acceleration)


def test_slow_legs_use_a_centred_shorter_range():
    """A leg that would cruise longer than max_leg_s covers v*max_leg_s + v**2/a around the centre."""
    p = plan(range=(0.1, 0.9))
    lo, hi = leg_range(p, 0.01)
    assert (lo + hi) / 2 == pytest.approx(0.5) and hi - lo == pytest.approx(0.01 * 4.0 + 0.01**2 / 20.0)
    assert leg_range(p, 1.0) == (0.1, 0.9)


def test_a_range_too_short_for_the_fastest_speed_is_refused():
    """Both directions must keep a common range after dropping their transients."""
    with pytest.raises(ValueError, match="2\\*settle_s"):
        constant_speed_timeline(plan(speeds=(3.0,)), 0.0)


def test_noise_free_points_are_the_truth_and_gravity_cancels():
    """Paired bins give F(v) to round-off level and the profile (u_f + u_r)/2 = A*cos(q + phase)."""
    rig = SyntheticRig(TRUTH, gravity=8.0, gravity_phase=0.4, encoder_counts=0)
    p = process_constant_speed(synthetic_log(rig, plan(), np.random.default_rng(0)))
    assert np.allclose(p.points.speed, [0.01, 0.05, 0.2, 1.0])
    assert np.allclose(p.points.friction, TRUTH.steady(p.points.speed), rtol=0, atol=1e-6 * TRUTH.fc)
    assert np.allclose(p.gravity.tau, 8.0 * np.cos(p.gravity.q + 0.4), atol=2e-3)
    assert not p.dropped


def test_plateaus_without_dq_ref_give_the_same_points():
    """Without the reference speed, velocity plateaus of a quantised log give the same friction."""
    rig = SyntheticRig(TRUTH, gravity=4.0, torque_noise=0.01, encoder_counts=131072)
    log = synthetic_log(rig, plan(), np.random.default_rng(1))
    with_ref = process_constant_speed(log).points
    without = process_constant_speed(replace(log, dq_ref=None)).points
    assert np.allclose(without.speed, with_ref.speed, rtol=2e-3)
    assert np.allclose(without.friction, TRUTH.steady(without.speed), atol=5 * without.stderr.max())


def test_standard_errors_match_the_scatter_of_the_points():
    """Over seeds, (F_k - truth)/se_k has unit spread (the errors carried into the fit are right)."""
    rig = SyntheticRig(TRUTH, torque_noise=0.02 * TRUTH.fc, encoder_counts=4096)
    z = []
    for seed in range(40):
        pts = process_constant_speed(synthetic_log(rig, plan(max_leg_s=4.0), np.random.default_rng(seed))).points
        z.append((pts.friction - TRUTH.steady(pts.speed)) / pts.stderr)
    assert 0.85 < np.std(z) < 1.2
    assert abs(np.mean(z)) < 0.2


def test_stick_slip_segments_are_dropped_with_a_reason():
    """A slow leg moving in jumps (stuck, then slipping) is left out, saying so."""
    rig = SyntheticRig(TRUTH, encoder_counts=0)
    log = synthetic_log(rig, plan(), np.random.default_rng(0))
    seg = (log.dq_ref == 0.01)
    idx = np.flatnonzero(seg)
    t = log.t[idx] - log.t[idx[0]]
    # replace the smooth forward motion by a staircase: 0.2 s stuck, then a jump
    q0 = log.q[idx[0]]
    log.q[idx] = q0 + 0.01 * 0.2 * np.floor(t / 0.2)
    p = process_constant_speed(log)
    reasons = [d.reason for d in p.dropped]
    assert any(r.startswith("stick-slip") for r in reasons)
    assert any(d.speed == pytest.approx(0.01) and "no forward run" in d.reason for d in p.dropped)
    assert 0.01 not in np.round(p.points.speed, 6)


def test_missing_reverse_runs_are_an_error():
    """Forward legs only: processing says so."""
    log = synthetic_log(SyntheticRig(TRUTH), plan(), np.random.default_rng(0))
    fwd = log.dq_ref >= 0
    cut = ConstantSpeedLog(t=log.t[fwd], q=log.q[fwd], dq=log.dq[fwd], tau=log.tau[fwd], dq_ref=log.dq_ref[fwd])
    with pytest.raises(DataError, match="no reverse runs"):
        process_constant_speed(cut)


def test_asymmetric_friction_is_recovered_per_direction_with_a_gravity_reference():
    """With tau_g logged, forward and reverse friction are separated (here they differ by 10 %)."""
    rig = SyntheticRig(TRUTH, gravity=5.0, encoder_counts=0)
    log = synthetic_log(rig, plan(), np.random.default_rng(0))
    tau_g = 5.0 * np.cos(log.q)
    neg = log.dq < 0
    tau = log.tau.copy()
    rev = neg & (log.dq_ref < 0)
    tau[rev] += 0.1 * (log.tau - tau_g)[rev]  # reverse friction 10 % larger
    p = process_constant_speed(replace(log, tau=tau, tau_g=tau_g), asymmetric=True)
    assert np.allclose(p.forward.friction, TRUTH.steady(p.forward.speed), rtol=1e-4)
    assert np.allclose(p.reverse.friction, 1.1 * TRUTH.steady(p.reverse.speed), rtol=1e-3)
    assert np.allclose(p.points.friction, 1.05 * TRUTH.steady(p.points.speed), rtol=1e-3)


def test_asymmetric_processing_needs_tau_g():
    log = synthetic_log(SyntheticRig(TRUTH), plan(), np.random.default_rng(0))
    with pytest.raises(DataError, match="tau_g"):
        process_constant_speed(log, asymmetric=True)


def test_huber_location_is_the_mean_for_clean_data_and_ignores_an_outlier():
    """Gaussian data: close to the mean with the right standard error; one wild point barely moves it."""
    x = np.random.default_rng(3).normal(1.0, 0.1, 400)
    m, se, s = huber_location(x)
    assert m == pytest.approx(x.mean(), abs=0.2 * 0.1 / math.sqrt(400))
    assert se == pytest.approx(0.1 / math.sqrt(400), rel=0.15) and s == pytest.approx(0.1, rel=0.15)
    m2, *_ = huber_location(np.append(x, 1e3))
    assert abs(m2 - m) < 0.01
