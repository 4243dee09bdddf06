"""Optimal control (mbctl.ctrl.optimal) against closed forms and an independent transcription."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest

from mbctl.ctrl.optimal import Dynamics, OptimalControlProblem
from mbctl.errors import InputError

INF = np.array([np.inf])


def _double_integrator(mass: float, force: float) -> Dynamics:
    q, dq, a = (ca.SX.sym(n) for n in ("q", "dq", "a"))
    return Dynamics(ca.Function("id", [q, dq, a], [mass * a]), -INF, INF, INF, np.array([force]), ("x",))


def test_minimum_time_of_a_double_integrator_is_bang_bang():
    mass, force, distance = 2.0, 4.0, 1.5
    accel = force / mass
    sol = OptimalControlProblem(_double_integrator(mass, force), 20).start_at([0.0]).end_at([distance]).minimize_time().solve()
    assert sol.success
    assert sol.duration == pytest.approx(2.0 * np.sqrt(distance / accel), rel=1e-6)
    # full thrust to the midpoint, full braking after it
    np.testing.assert_allclose(sol.ddq[:10, 0], accel, rtol=1e-4)
    np.testing.assert_allclose(sol.ddq[10:, 0], -accel, rtol=1e-4)
    np.testing.assert_allclose(np.abs(sol.tau_start), force, rtol=1e-4)


def test_a_path_constraint_added_by_the_user_gives_the_coasting_profile():
    # |dq| <= v as a user constraint: accelerate, coast, brake, T = L / v + v / a (L > v² / a)
    mass, force, distance, speed = 1.0, 2.0, 2.0, 1.0
    ocp = OptimalControlProblem(_double_integrator(mass, force), 10).start_at([0.0]).end_at([distance]).minimize_time()
    ocp.add_path_constraint(lambda s: s.dq_end, -speed, speed)
    sol = ocp.solve()
    assert sol.duration == pytest.approx(distance / speed + speed / (force / mass), rel=1e-6)
    assert np.max(np.abs(sol.dq)) == pytest.approx(speed, rel=1e-6)


def _pendulum() -> tuple[Dynamics, float, float, float, float]:
    m, length, g, b = 1.0, 0.5, 9.81, 0.1
    q, dq, a = (ca.SX.sym(n) for n in ("q", "dq", "a"))
    tau = m * length**2 * a + m * g * length * ca.sin(q) + b * dq
    return Dynamics(ca.Function("id", [q, dq, a], [tau]), -INF, INF, INF, INF, ("q",)), m, length, g, b


def _torque_driven_reference(knots: int, duration: float, target: float) -> float:
    """Minimum ``∫ tau² dt`` of the pendulum swing by another transcription: torque inputs, forward
    dynamics, RK4 shooting with the cost as a third state."""
    _, m, length, g, b = _pendulum()
    opti = ca.Opti()
    X, U = opti.variable(3, knots + 1), opti.variable(1, knots)
    inertia = m * length**2

    def f(x, u):
        return ca.vertcat(x[1], (u - m * g * length * ca.sin(x[0]) - b * x[1]) / inertia, u**2)

    h = duration / knots
    for k in range(knots):
        x, u = X[:, k], U[k]
        k1 = f(x, u)
        k2 = f(x + h / 2 * k1, u)
        k3 = f(x + h / 2 * k2, u)
        k4 = f(x + h * k3, u)
        opti.subject_to(X[:, k + 1] == x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4))
    opti.subject_to(X[:, 0] == 0)
    opti.subject_to(X[:2, knots] == ca.vertcat(target, 0))
    opti.minimize(X[2, knots])
    opti.solver("ipopt", {"print_time": False}, {"print_level": 0, "sb": "yes"})
    return float(opti.solve().value(X[2, knots]))


def test_energy_optimal_pendulum_swing_converges_to_an_independent_transcription():
    dyn = _pendulum()[0]
    duration, target = 1.0, 2.0
    reference = _torque_driven_reference(300, duration, target)
    errors = []
    for knots in (40, 80, 160):
        sol = OptimalControlProblem(dyn, knots, duration).start_at([0.0]).end_at([target]).add_effort().solve()
        assert sol.success
        errors.append(sol.cost - reference)
    assert abs(errors[-1]) < 3e-4 * reference
    # second order in the step: halving h divides the error by about four
    assert 3.0 < errors[0] / errors[1] < 5.0 and 3.0 < errors[1] / errors[2] < 5.0


def test_sampled_motion_is_the_transcribed_one():
    sol = OptimalControlProblem(_double_integrator(1.0, 1.0), 8).start_at([0.0]).end_at([1.0]).minimize_time().solve()
    q, dq, ddq = sol.sample(sol.t)
    np.testing.assert_allclose(q, sol.q, atol=1e-8)
    np.testing.assert_allclose(dq, sol.dq, atol=1e-8)


def test_bad_problems_are_refused():
    dyn = _double_integrator(1.0, 1.0)
    with pytest.raises(InputError, match="knots"):
        OptimalControlProblem(dyn, 1)
    with pytest.raises(InputError, match="duration"):
        OptimalControlProblem(dyn, 4, 1.0).minimize_time()
    with pytest.raises(InputError, match="start"):
        OptimalControlProblem(dyn, 4).minimize_time().build()
    with pytest.raises(InputError, match="cost"):
        OptimalControlProblem(dyn, 4, 1.0).start_at([0.0]).end_at([1.0]).build()
