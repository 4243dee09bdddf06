"""ROS2 written once (mbctl.dynamics.simulation.ros2): order two on a closed form, generated steps equal numpy steps."""

from __future__ import annotations

import casadi as ca
import numpy as np
import pytest
import scipy.linalg

from mbctl.dynamics.simulation import ros2

# a slow oscillator (10 rad/s, lightly damped) coupled to a stiff, heavily damped one (eigenvalues
# near -2e5 and -5 1/s): x = [q1, q2, v1, v2], M = I, forces -K q - D v
K = np.array([[101.0, -1.0], [-1.0, 1e6]])
D = np.array([[0.2, 0.0], [0.0, 2e5]])
A_SYSTEM = np.block([[np.zeros((2, 2)), np.eye(2)], [-K, -D]])
X0 = np.array([1.0, 0.5, 0.0, -3.0])


def kkt_function() -> ca.Function:
    q = ca.SX.sym("q", 2)
    return ca.Function("oscillator_kkt", [q], [ca.SX.eye(2) + 0 * ca.dot(q, q), ca.SX(0, 2)], ["q"], ["M", "A"])


def updates() -> dict[str, ros2.JacobianUpdate]:
    """The exact Jacobian in both policies, and a W-method with only the stiff coordinate's block."""
    stiff = np.zeros((2, 2)), np.zeros((2, 2))
    stiff[0][1, 1], stiff[1][1, 1] = K[1, 1], D[1, 1]
    return {
        "state diagonal, exact J": ros2.StateDiagonalUpdate(lambda t, x: A_SYSTEM.copy(), 4, lambda x: np.zeros(0)),
        "stiff block, exact J": ros2.StiffBlockUpdate(kkt_function(), K, D),
        "stiff block of q2 only": ros2.StiffBlockUpdate(kkt_function(), *stiff),
    }


def run(update: ros2.JacobianUpdate, h: float, duration: float = 1.0) -> np.ndarray:
    n = round(duration / h)
    out: list[np.ndarray] = []
    advance = ros2.python_steps(lambda t, x: A_SYSTEM @ x, update)
    ros2.integrate(advance, update, X0, 0.0, h, n, 1, every=n, refresh_every=n, record=lambda t, x: out.append(x), check=lambda t, x: None)
    return out[-1]


@pytest.mark.parametrize("which", list(updates()))
def test_error_falls_with_the_square_of_the_step(which):
    """On x' = A x (closed form expm(A t) x0) ROS2 at h = 5, 2.5, 1.25 ms, where h |lambda| of the stiff
    mode is 250 and beyond, stays stable and its error at t = 1 s falls about 4x per halving (order 2)."""
    update = updates()[which]
    exact = scipy.linalg.expm(A_SYSTEM) @ X0
    errors = [np.abs(run(update, h) - exact).max() for h in (5e-3, 2.5e-3, 1.25e-3)]
    assert errors[0] < 5e-2 * np.abs(exact).max()
    for coarse, fine in zip(errors, errors[1:]):
        assert 3.3 < coarse / fine < 4.5, errors


@pytest.mark.parametrize("which", list(updates()))
def test_generated_steps_equal_the_numpy_steps(which):
    """The generated k-step function of f(t, x, p, w) = A x + p sin(t) + w (p held, w one column per
    step) gives the numpy steps of the same f to round-off, with two recorded states per call."""
    update = updates()[which]
    t, x, p, w = ca.SX.sym("t"), ca.SX.sym("x", 4), ca.SX.sym("p", 4), ca.SX.sym("w", 4)
    f = ca.Function("forced_oscillator", [t, x, p, w], [ca.DM(A_SYSTEM) @ x + p * ca.sin(t) + w], ["t", "x", "p", "w"], ["xdot"])
    p0 = np.array([0.0, 0.0, 3.0, -1e3])
    h, n = 2e-3, 50
    chunk = ros2.chunk_steps(n, 5, n, 10, several=True)
    assert chunk == 10

    def extra(ta: float, tb: float) -> tuple[np.ndarray, np.ndarray]:
        return p0, np.outer([0.0, 0.0, 1.0, 50.0], np.cos(np.arange(ta, tb - h / 2, h)))

    stepper = ros2.ros2_stepper(f, chunk, update, outputs=2, per_step=(1,))
    runs = []
    for advance in (
        lambda t, x, h, count, extra, inputs: stepper(t, x, h, *extra, *inputs)[0],
        ros2.python_steps(lambda t, x, p, w: A_SYSTEM @ x + p * np.sin(t) + w, update, outputs=2, per_step=(1,)),
    ):
        out: list[np.ndarray] = []
        ros2.integrate(advance, update, X0, 0.1, h, n, chunk, every=5, refresh_every=n, record=lambda t, x: out.append(x), check=lambda t, X: None, extra=extra)
        runs.append(np.array(out))
    assert runs[0].shape == (11, 4)
    assert np.abs(runs[0] - runs[1]).max() < 1e-12 * np.abs(runs[1]).max()
    assert np.abs(runs[1][-1] - X0).max() > 0.1  # it moved


def test_state_diagonal_woodbury_equals_the_refactored_solve():
    """The LuGre update: W^-1 b by the Woodbury identity on W_inv taken at d_ref equals the solve with
    the states' diagonal of J replaced by d(x) (1e-10 relative)."""
    rng = np.random.default_rng(4)
    n, first = 8, 6
    J = rng.standard_normal((n, n)) * 50.0

    def diagonal(x):
        return -1e4 * (1.0 + np.abs(x[first // 2 : first][: n - first]))  # from dq

    update = ros2.StateDiagonalUpdate(lambda t, x: J.copy(), first, diagonal)
    h, x_ref = 1e-3, rng.standard_normal(n)
    inputs = update.refresh(0.0, x_ref, h)
    x = x_ref + rng.standard_normal(n)
    b = rng.standard_normal(n)
    Jx = J.copy()
    Jx[range(first, n), range(first, n)] = diagonal(x)
    direct = np.linalg.solve(np.eye(n) - ros2.GAMMA * h * Jx, b)
    assert np.abs(update.solver(0.0, x, h, inputs)(b) - direct).max() < 1e-10 * np.abs(direct).max()
