"""Friction laws: formulas, validation, numpy/CasADi agreement, LuGre dynamics."""

from __future__ import annotations

import math

import casadi as ca
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.integrate import solve_ivp

from mbctl.dynamics.friction.laws import (
    CoulombViscous,
    LuGre,
    Stribeck,
    motion_direction,
    simplify_law,
)
from mbctl.errors import ConfigError

LUGRE = LuGre(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=1.0e4, sigma1=100.0)
STRIBECK = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)


def test_coulomb_viscous_formula():
    """F = fc*sgn(v) + fv*v, and the load scales only the Coulomb part."""
    law = CoulombViscous(fc=0.3, fv=0.2)
    v = np.array([-2.0, -0.1, 0.0, 0.5])
    assert np.allclose(law.steady(v), [-0.3 - 0.4, -0.3 - 0.02, 0.0, 0.3 + 0.1])
    assert np.allclose(law.steady(v, load=10.0), [-3.0 - 0.4, -3.0 - 0.02, 0.0, 3.0 + 0.1])


def test_stribeck_hand_values():
    """At v = vs the bump has decayed by exp(-1) for delta = 2; delta = 1 is Tustin's law."""
    assert STRIBECK.steady(0.05) == pytest.approx(0.8 + 0.3 * math.exp(-1) + 0.12 * 0.05, rel=1e-15)
    assert STRIBECK.steady(-0.1) == pytest.approx(-(0.8 + 0.3 * math.exp(-4)) - 0.012, rel=1e-15)
    tustin = Stribeck(fc=1.0, fs=2.0, vs=0.1, delta=1.0)
    assert tustin.steady(-0.2) == pytest.approx(-(1.0 + math.exp(-2)), rel=1e-15)
    assert STRIBECK.steady(1e-9) == pytest.approx(1.1, rel=1e-9)  # break-away level


def test_motion_direction_uses_acceleration_only_at_rest():
    """sgn(v) where moving, sgn(a) where v == 0, and 0 at rest without acceleration."""
    v = np.array([0.2, -0.1, 0.0, 0.0, 0.0])
    a = np.array([-5.0, 3.0, 2.0, -1.0, 0.0])
    assert motion_direction(v, a).tolist() == [1.0, -1.0, 1.0, -1.0, 0.0]
    assert STRIBECK.steady(0.0, direction=1.0) == pytest.approx(1.1)


laws = st.sampled_from([CoulombViscous(fc=0.4, fv=0.3), STRIBECK, Stribeck(fc=1, fs=1.5, vs=0.2, fv=0.1, delta=1.3), LUGRE])
finite = st.floats(-3.0, 3.0, allow_nan=False)


@settings(max_examples=200, deadline=None)
@given(law=laws, v=finite, z=st.floats(-1e-4, 1e-4), load=st.floats(0.0, 50.0), a=finite)
def test_numpy_and_casadi_evaluations_agree(law, v, z, load, a):
    """Every method of every law gives the same number on numpy and on CasADi SX."""
    sv, sz, sl, sa = (ca.SX.sym(n) for n in "vzla")
    cases = [
        (lambda *x: law.steady(x[0], motion_direction(x[0], x[3]), x[2]), (v, z, load, a)),
        (lambda *x: law.steady(x[0], None, x[2]), (v, z, load, a)),
    ]
    if isinstance(law, LuGre):
        cases += [
            (lambda *x: law.torque(x[0], x[1], x[2]), (v, z, load, a)),
            (lambda *x: law.z_rate(x[0], x[1]), (v, z, load, a)),
            (lambda *x: law.z_step(x[1], x[0], 1e-3), (v, z, load, a)),
            (lambda *x: law.z_steady(x[0]), (v, z, load, a)),
        ]
    for f, values in cases:
        numeric = f(*(np.float64(x) for x in values))
        symbolic = ca.Function("f", [sv, sz, sl, sa], [f(sv, sz, sl, sa)])(*values)
        assert float(symbolic) == pytest.approx(float(numeric), rel=1e-12, abs=1e-14)


@pytest.mark.parametrize("v", [-1.0, -0.05, -0.01, 0.003, 0.02, 0.3, 2.0])
def test_lugre_settles_to_stribeck_with_delta_2(v):
    """At constant speed the integrated LuGre force equals the Stribeck law with delta = 2."""
    law = LUGRE
    sol = solve_ivp(lambda t, z: [law.z_rate(v, z[0])], (0, 2.0), [0.0], method="Radau", rtol=1e-12, atol=1e-16)
    z_end = sol.y[0, -1]
    stribeck = Stribeck(fc=law.fc, fs=law.fs, vs=law.vs, fv=law.fv, delta=2.0)
    assert law.torque(v, z_end) == pytest.approx(stribeck.steady(v), rel=1e-9)
    assert law.steady(v) == pytest.approx(stribeck.steady(v), rel=1e-14)


@pytest.mark.parametrize("v, dt", [(0.01, 1e-3), (-0.3, 2e-4), (2.0, 1e-2), (0.0, 1e-3)])
def test_lugre_exact_step_matches_ode(v, dt):
    """z_step at constant velocity equals an accurate ODE solution, even for dt >> time constant."""
    z0 = 3e-5
    sol = solve_ivp(lambda t, z: [LUGRE.z_rate(v, z[0])], (0, dt), [z0], method="Radau", rtol=1e-12, atol=1e-18)
    assert LUGRE.z_step(z0, v, dt) == pytest.approx(sol.y[0, -1], rel=1e-8, abs=1e-15)


def test_zero_load_leaves_only_viscous_friction():
    """With a zero normal load the dry (Coulomb, Stribeck, bristle) part vanishes."""
    v = np.linspace(-1, 1, 11)
    for law in (CoulombViscous(fc=0.4, fv=0.3), STRIBECK):
        assert np.allclose(law.steady(v, load=0.0), law.fv * v, rtol=0, atol=1e-15)
    assert np.allclose(LUGRE.torque(v, 1e-5, load=0.0), LUGRE.fv * v, rtol=0, atol=1e-15)


@pytest.mark.parametrize(
    "cls, params, field",
    [
        (CoulombViscous, dict(fc=-0.1), "fc"),
        (CoulombViscous, dict(fc=0.1, fv=-1.0), "fv"),
        (Stribeck, dict(fc=1.0, fs=0.5, vs=0.1), "fs"),
        (Stribeck, dict(fc=1.0, fs=1.5, vs=0.0), "vs"),
        (Stribeck, dict(fc=1.0, fs=1.5, vs=0.1, delta=0.0), "delta"),
        (Stribeck, dict(fc=1.0, fs=float("nan"), vs=0.1), "fs"),
        (LuGre, dict(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=0.0, sigma1=1.0), "sigma0"),
        (LuGre, dict(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=1e4, sigma1=-1.0), "sigma1"),
        (LuGre, dict(fc=0.0, fs=0.0, vs=0.02, fv=0.05, sigma0=1e4, sigma1=1.0), "fs"),
    ],
)
def test_non_physical_parameters_are_rejected(cls, params, field):
    """Each non-physical parameter raises a ConfigError naming that field."""
    with pytest.raises(ConfigError) as info:
        cls(**params)
    assert info.value.field == field


def test_passive_speed_limit_is_where_the_dissipativity_condition_turns():
    """sigma1^2*v <= 4*sigma0*(sigma1+fv)*g(v) holds below v_p and fails above it."""
    law = LuGre(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=1.0e3, sigma1=60.0)
    v_p = law.passive_speed_limit()
    margin = lambda v: 4 * law.sigma0 * (law.sigma1 + law.fv) * law.g(v) - law.sigma1**2 * v  # noqa: E731
    assert margin(np.linspace(0, v_p, 200)).min() >= -1e-9
    assert margin(v_p * 1.001) < 0
    assert law.passive_speed_limit(load_dependent=True) < v_p
    assert LuGre(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=1e3, sigma1=0.0).passive_speed_limit() == math.inf


def _cycle_energy(law: LuGre, v_of_t, t_end: float) -> float:
    """Energy F*v supplied over [0, t_end] minus the bristle energy stored at the end (J)."""
    sol = solve_ivp(
        lambda t, z: [law.z_rate(v_of_t(t), z[0])],
        (0, t_end),
        [0.0],
        method="Radau",
        jac=lambda t, z: [[-law.sigma0 * abs(v_of_t(t)) / law.g(v_of_t(t))]],
        rtol=1e-9,
        atol=1e-13,
        dense_output=True,
    )
    t = np.linspace(0, t_end, 200_001)
    v = v_of_t(t)
    z = sol.sol(t)[0]
    power = law.torque(v, z) * v
    work = np.sum(0.5 * (power[1:] + power[:-1]) * np.diff(t))
    return work - 0.5 * law.sigma0 * z[-1] ** 2


def test_lugre_dissipates_energy_within_its_passive_speed_range():
    """Driven by oscillating velocities below v_p, the friction absorbs energy (>= 0)."""
    law = LuGre(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=1.0e3, sigma1=60.0)
    v_max = 0.9 * law.passive_speed_limit()
    for freq in (1.0, 10.0, 100.0):
        assert _cycle_energy(law, lambda t, f=freq: v_max * np.sin(2 * np.pi * f * t), 2.0 / freq) > 0


def test_simplify_law_keeps_parameters():
    """LuGre -> Stribeck(delta=2) -> Coulomb–viscous keep fc, fs, vs, fv; simpler laws stay."""
    s = simplify_law(LUGRE, "stribeck")
    assert s == Stribeck(fc=0.5, fs=0.7, vs=0.02, fv=0.05, delta=2.0)
    assert simplify_law(s, "coulomb-viscous") == CoulombViscous(fc=0.5, fv=0.05)
    assert simplify_law(LUGRE, "coulomb-viscous") == CoulombViscous(fc=0.5, fv=0.05)
    cv = CoulombViscous(fc=1.0)
    assert simplify_law(cv, "stribeck") is cv and simplify_law(LUGRE, "lugre") is LUGRE
