"""Presliding analysis: the branch law, step responses, break-away ramps, and the simulated LuGre joint."""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from scipy.signal import lti, step

from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.sim import SimPlant, truth_model
from mbctl.identification.config import identification_settings
from mbctl.identification.experiments import (
    ExperimentController,
    presliding_timeline,
    run_experiment,
)
from mbctl.identification.logs import TEST_CYCLE, TEST_RAMP, TEST_STEP, PreslidingLog
from mbctl.identification.presliding import (
    _branch_model,
    _step_response,
    breakaway,
    fit_cycle,
    fit_presliding,
    fit_steps,
)

SIGMA0, FS = 2.0e4, 1.1


def test_branch_model_is_the_quasi_static_lugre_curve():
    """Loading from F = 0: x = -(fs/sigma0)*ln(1 - F/fs), the integral of dF/dx = sigma0*(1 - F/fs)."""
    F = np.linspace(0.0, 0.9 * FS, 2001)
    x = _branch_model(F, np.ones_like(F), SIGMA0, FS)
    assert np.allclose(x, -(FS / SIGMA0) * np.log(1 - F / FS), rtol=1e-6, atol=1e-12)


def test_step_response_matches_scipy_for_every_damping():
    """A*(1 + (r2 e^{r1 t} - r1 e^{r2 t})/(r1 - r2)) is the unit-step response of wn^2/(s^2 + 2 zeta wn s + wn^2)."""
    t = np.linspace(0, 0.2, 401)
    for zeta in (0.1, 0.7, 1.0, 2.5):
        _, y = step(lti([200.0**2], [1.0, 2 * zeta * 200.0, 200.0**2]), T=t)
        assert np.allclose(_step_response(t, 1.0, 200.0, zeta), y, atol=1e-6), zeta


def _cycle_log(encoder_counts: int, offset: float = 7.85) -> PreslidingLog:
    """A slow cycle 0 -> +A -> -A -> 0 of the quasi-static LuGre law, positions quantised."""
    n, A = 4000, 0.5 * FS
    s = np.linspace(0, 1, n)
    F = A * np.where(s < 0.25, 4 * s, np.where(s < 0.75, 2 - 4 * s, 4 * s - 4))
    direction = np.sign(np.gradient(F))
    x = _branch_model(F, direction, SIGMA0, FS)
    res = 2 * math.pi / encoder_counts
    test = np.full(n + 200, 0)
    test[100 : 100 + n] = TEST_CYCLE
    q = np.concatenate([np.zeros(100), np.round(x / res) * res, np.full(100, np.round(x[-1] / res) * res)])
    tau = offset + np.concatenate([np.zeros(100), F, np.zeros(100)])
    t = np.arange(n + 200) * 1e-3
    return PreslidingLog(t=t, q=q, dq=np.gradient(q, t), tau=tau, test=test)


def test_cycle_fit_recovers_sigma0_and_the_offset():
    """Noise-free quasi-static cycle on a 26-bit encoder: sigma0 to 0.1 %, the offset (gravity) to 0.1 % of the amplitude."""
    fit = fit_cycle(_cycle_log(2**26), FS)
    assert fit.sigma0 == pytest.approx(SIGMA0, rel=1e-3)
    assert fit.offset == pytest.approx(7.85, abs=1e-3 * 0.5 * FS)


def test_cycle_on_a_coarse_encoder_is_flagged_not_identifiable():
    """A 17-bit encoder sees the whole presliding cycle as a couple of counts: no sigma0, a reason."""
    why = fit_cycle(_cycle_log(2**17), FS)
    assert isinstance(why, str) and "encoder counts" in why and "not identifiable" in why


def _oscillator(t: np.ndarray, wn: float, zeta: float, gain: float) -> np.ndarray:
    return _step_response(t, gain, wn, zeta)


def test_steps_give_the_damping_of_the_presliding_mode():
    """Linear mode J x'' + c x' + k x = dF: each return to the holding torque gives c = 2*zeta*k/wn."""
    J, k, c = 0.33, SIGMA0, 50.12
    wn, zeta = math.sqrt(k / J), c / (2 * math.sqrt(k * J))
    dt, dF, n = 2e-3, 0.11, 250
    t = np.arange(4 * n + 100) * dt
    tau = np.full(len(t), 7.85)
    levels = (1.0, 0.0, -1.0, 0.0)
    test = np.zeros(len(t), int)
    x = np.zeros(len(t))
    for i, lvl in enumerate(levels):
        a = 100 + i * n
        tau[a : a + n] += lvl * dF
        test[a : a + n] = TEST_STEP
    prev = 0.0
    for i, lvl in enumerate(levels):  # superpose the edges' responses
        a = 100 + i * n
        x += _oscillator(t - t[a], wn, zeta, (lvl * dF - prev) / k)
        prev = lvl * dF
    res = 2 * math.pi / 2**26
    log = PreslidingLog(t=t, q=np.round(x / res) * res, dq=np.gradient(x, t), tau=tau, test=test)
    steps = fit_steps(log, sigma0=k, fv=0.12)
    assert len(steps) == 2 and all(s.ok for s in steps)
    for s in steps:
        assert s.damping == pytest.approx(c, rel=0.01) and s.inertia == pytest.approx(J, rel=0.01)
        assert s.damping_stderr < 0.05 * c


def test_breakaway_pairs_directions_and_extrapolates_to_zero_rate():
    """Ramps that slip at fs + lag*rate (gravity offset 3): (u+ - u-)/2 at rate 0 is fs."""
    dt, lag, g = 1e-3, 0.05, 3.0
    t_all, tau_all, q_all, test_all = [], [], [], []
    t0, q = 0.0, 0.0
    for rate in (0.3, 0.6, 1.2):
        for sign in (1, -1):
            T = (FS + lag * rate) / rate
            n = int(T / dt)
            t = t0 + np.arange(n + 50) * dt
            tau = g + np.concatenate([sign * rate * np.arange(n) * dt, np.zeros(50)])
            qq = q + np.concatenate([np.zeros(n - 5), sign * np.linspace(1e-3, 5e-3, 5), np.full(50, sign * 5e-3)])
            lab = np.concatenate([np.full(n, TEST_RAMP), np.zeros(50, int)])
            t_all.append(t), tau_all.append(tau), q_all.append(qq), test_all.append(lab)
            t0, q = t[-1] + dt, qq[-1]
    log = PreslidingLog(t=np.concatenate(t_all), q=np.concatenate(q_all), dq=np.zeros(sum(map(len, t_all))), tau=np.concatenate(tau_all), test=np.concatenate(test_all))
    b = breakaway(log, resolution=1e-7)
    assert len(b.rates) == 3 and np.allclose(b.rates, [0.3, 0.6, 1.2], rtol=0.01)
    assert b.value == pytest.approx(FS, rel=2e-3)


@pytest.mark.slow
def test_presliding_test_on_the_simulated_lugre_joint():
    """Acceptance: configs/friction_rig.toml's LuGre truth: sigma0 within 10 %, break-away within 5 %,
    sigma1 reported with its uncertainty (or flagged)."""
    robot = load_robot(Path(__file__).resolve().parent.parent / "configs" / "friction_rig.toml")
    settings = identification_settings(robot, "j1")
    truth, plant_config = truth_model(robot)
    law = truth.joint("j1").friction.law
    controller = ExperimentController(robot, "j1", presliding_timeline(settings.presliding), settings.gains, settings.presliding)
    with tempfile.TemporaryDirectory() as tmp:
        with SimPlant(truth, 1.0 / settings.rate_hz, plant_config, q0=settings.start) as plant:
            run = run_experiment(plant, robot, controller, rate_hz=settings.rate_hz, paced=False, npz_path=Path(tmp) / "p.npz", kind="presliding")
    assert run.summary.stop_reason == "completed"
    f = fit_presliding(run.presliding, fv=law.fv)
    assert f.sigma0 == pytest.approx(law.sigma0, rel=0.10)
    assert f.breakaway.value == pytest.approx(law.fs, rel=0.05)
    assert (f.sigma1_identified and f.sigma1_stderr > 0) or f.sigma1_reason
    assert f.sigma1 == pytest.approx(law.sigma1, rel=0.1)
    assert f.inertia == pytest.approx(0.33, rel=0.05)
