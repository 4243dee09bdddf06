"""Constrained dynamics: solver agreement, forces against inverse dynamics, checks and assembly."""

from __future__ import annotations

import math

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.errors import (
    InconsistentConstraintsError,
    SingularConstraintError,
)
from mbctl.dynamics.constraints.kinds import FramePosition, JointLinear
from mbctl.dynamics.constraints.solvers import lagrange, nullspace, udwadia_kalaba
from mbctl.dynamics.constraints.stabilization import Baumgarte, SingularityPolicy
from mbctl.dynamics.constraints.targets import ExpressionTarget
from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)
from mbctl.errors import ConfigError

SOLVERS = ("udwadia-kalaba", "lagrange", "nullspace")
L1, L2 = 0.2, 0.25


def scara_constraints(robot, rows=("tool_xy", "yaw", "tool_z")):
    """Seed 004's programmed constraints (a subset by name)."""
    make = {
        "tool_xy": lambda: FramePosition(robot, "tool_xy", "tool", ["x", "y"], ExpressionTarget(["0.05*sin(0.4*pi*t)", "0.35 + 0.05*cos(0.4*pi*t)"])),
        "yaw": lambda: JointLinear(robot, "yaw", {"j1": 1.0, "j2": 1.0, "j3": 1.0}, ExpressionTarget(["0"])),
        "tool_z": lambda: FramePosition(robot, "tool_z", "tool", ["z"], ExpressionTarget(["0.02*t"])),
    }
    return [make[name]() for name in rows]


def states(nv, n, seed):
    rng = np.random.default_rng(seed)
    for _ in range(n):
        q = rng.uniform(-1.0, 1.0, nv)
        q[1] = rng.uniform(0.4, 2.0) if nv == 4 else q[1]  # SCARA: keep the elbow away from stretched
        yield rng.uniform(0, 3), q, rng.normal(size=nv)


@pytest.mark.parametrize("rows", [("tool_xy",), ("tool_xy", "tool_z"), ("tool_xy", "yaw", "tool_z")])
def test_three_solvers_agree_on_the_scara(robots, rows):
    """Lagrange, Udwadia–Kalaba and null space give the same ddq (1e-9); UK and Lagrange the same forces."""
    robot = robots["scara"]
    bg = Baumgarte("linear", 0.5, 200.0)
    dyn = {s: ConstrainedDynamics(robot, scara_constraints(robot, rows), solver=s, baumgarte=bg, forces=[JointFriction(robot)]) for s in SOLVERS}
    z = np.array([1e-5])
    for t, q, dq in states(robot.nv, 20, seed=1):
        ev = {s: d.evaluate(t, q, dq, z) for s, d in dyn.items()}
        ref = ev["lagrange"]
        scale = max(1.0, np.abs(ref.ddq).max())
        for s in SOLVERS:
            assert np.abs(ev[s].ddq - ref.ddq).max() <= 1e-9 * scale, s
        assert np.abs(ev["udwadia-kalaba"].force - ref.force).max() <= 1e-9 * max(1.0, np.abs(ref.force).max())
        assert np.abs(ev["udwadia-kalaba"].lam - ref.lam).max() <= 1e-9 * max(1.0, np.abs(ref.lam).max())
        assert np.abs(ev["nullspace"].force - ref.force).max() <= 1e-8 * max(1.0, np.abs(ref.force).max())


@pytest.mark.parametrize("config", ["fourbar", "parallelogram"])
def test_three_solvers_agree_on_closed_loops(configs, config):
    """Four-bar (independent rows) and the overconstrained parallelogram (a redundant row): same ddq,
    same UK and Lagrange forces, at assembled states over a range of driving-crank angles and speeds."""
    robot = load_robot(configs / f"{config}.toml")
    setup = simulation_setup(robot)
    dyn = {s: build_dynamics(robot, setup, solver=s) for s in SOLVERS}
    q0, dq0 = initial_state(robot, setup, dyn["lagrange"])
    crank = robot.joint_names[0]
    q, dq = q0.copy(), dq0.copy()
    for k in range(8):
        q[0] -= 0.1  # towards hanging straight down (upwards the slider dyad reaches its dead point)
        dq[0] = 1.0 + 0.5 * k
        q, dq = dyn["lagrange"].assemble(0.0, q, dq, keep=[crank])
        ev = {s: d.evaluate(0.0, q, dq) for s, d in dyn.items()}
        ref = ev["lagrange"]
        for s in SOLVERS:
            assert np.abs(ev[s].ddq - ref.ddq).max() <= 1e-9 * max(1.0, np.abs(ref.ddq).max()), s
        assert np.abs(ev["udwadia-kalaba"].force - ref.force).max() <= 1e-9 * max(1.0, np.abs(ref.force).max())


def test_baumgarte_terms_enter_all_solvers_alike(configs):
    """Off the manifold (independent rows), the stabilized accelerations still agree across solvers."""
    robot = load_robot(configs / "fourbar.toml")
    setup = simulation_setup(robot)
    dyn = {s: build_dynamics(robot, setup, solver=s) for s in SOLVERS}
    q0, dq0 = initial_state(robot, setup, dyn["lagrange"])
    rng = np.random.default_rng(2)
    q, dq = q0 + rng.normal(scale=1e-3, size=3), dq0 + rng.normal(scale=1e-2, size=3)
    ev = {s: d.evaluate(0.0, q, dq) for s, d in dyn.items()}
    assert np.abs(ev["lagrange"].phi).max() > 1e-5
    for s in SOLVERS:
        assert ev[s].ddq == pytest.approx(ev["lagrange"].ddq, rel=1e-9, abs=1e-9)


def test_constraint_force_is_the_inverse_dynamics_torque(robots):
    """Fully prescribed SCARA: Q_c equals pinocchio's RNEA torque minus the applied friction at the solved ddq."""
    robot = robots["scara"]
    dyn = ConstrainedDynamics(robot, scara_constraints(robot), baumgarte=Baumgarte("linear", 0.5, 200.0), forces=[JointFriction(robot)])
    data = robot.create_data()
    for t, q, dq in states(robot.nv, 5, seed=4):
        ev = dyn.evaluate(t, q, dq, np.array([2e-5]))
        tau = pin.rnea(robot.model, data, robot.configuration(q), dq, ev.ddq)
        assert ev.force == pytest.approx(tau - ev.applied, abs=1e-10)
        assert ev.programmed_force == pytest.approx(ev.force, abs=1e-10)  # every row is programmed


def test_fully_constrained_accelerations_ignore_the_masses(robots):
    """With as many independent rows as DOF, ddq = A^-1 gamma_stab whatever M and the forces."""
    robot = robots["scara"]
    bg = Baumgarte("squared", 3.0, 7.0)
    dyn = ConstrainedDynamics(robot, scara_constraints(robot), baumgarte=bg)
    t, q, dq = 0.7, np.array([0.3, 1.2, -0.4, 0.01]), np.array([0.2, -0.3, 0.1, 0.05])
    ev = dyn.evaluate(t, q, dq)
    cv = dyn.constraints.evaluate(dyn.kinematics(q, dq), t)
    b = cv.gamma - 2 * 3.0 * ev.dphi - 7.0**2 * cv.phi
    assert ev.ddq == pytest.approx(np.linalg.solve(cv.jac, b), abs=1e-12)


def test_solver_functions_agree_on_a_random_problem():
    """The three solver functions on a random SPD M and full-rank A: same ddq, KKT residual zero."""
    rng = np.random.default_rng(0)
    n, m = 7, 3
    R = rng.normal(size=(n, n))
    M = R @ R.T + n * np.eye(n)
    f, A, b = rng.normal(size=n), rng.normal(size=(m, n)), rng.normal(size=m)
    ddq_l, lam = lagrange(M, f, A, b)
    ddq_u, force, lam_u = udwadia_kalaba(M, f, A, b)
    ddq_n, ind = nullspace(M, f, A, b)
    assert np.allclose(M @ ddq_l + A.T @ lam, f) and np.allclose(A @ ddq_l, b)
    assert ddq_u == pytest.approx(ddq_l) and ddq_n == pytest.approx(ddq_l) and lam_u == pytest.approx(lam)
    assert force == pytest.approx(-A.T @ lam)
    ddq_named, _ = nullspace(M, f, A, b, independent=[0, 2, 4, 6])
    assert ddq_named == pytest.approx(ddq_l)


def test_udwadia_kalaba_handles_duplicate_rows():
    """A repeated row (redundant, consistent) changes nothing: the pseudo-inverse splits its multiplier."""
    rng = np.random.default_rng(1)
    n = 4
    R = rng.normal(size=(n, n))
    M = R @ R.T + n * np.eye(n)
    f, A, b = rng.normal(size=n), rng.normal(size=(2, n)), rng.normal(size=2)
    ddq, force, lam = udwadia_kalaba(M, f, A, b)
    ddq2, force2, lam2 = udwadia_kalaba(M, f, np.vstack([A, A[1]]), np.append(b, b[1]))
    assert ddq2 == pytest.approx(ddq) and force2 == pytest.approx(force)
    assert lam2 == pytest.approx([lam[0], lam[1] / 2, lam[1] / 2])  # minimum-norm split


def test_baumgarte_forms_are_named_and_checked():
    assert Baumgarte("squared", 1e3, 1e2).coefficients == (2e3, 1e4)
    assert Baumgarte("linear", 0.5, 200.0).coefficients == (0.5, 200.0)
    with pytest.raises(ConfigError, match="expected squared, linear"):
        Baumgarte("quadratic", 1.0, 1.0)
    with pytest.raises(ConfigError, match=">= 0"):
        Baumgarte("linear", -1.0, 1.0)


def test_assembly_finds_the_closed_form_inverse_kinematics(robots):
    """Assembling at t = 0 from the paper's state lands on the closed-form IK of (0, 0.4) m, elbow q2 > 0."""
    robot = robots["scara"]
    dyn = ConstrainedDynamics(robot, scara_constraints(robot))
    q0 = np.array([math.radians(30), math.radians(55), math.radians(24), 0.0])
    dq0 = np.array([-0.157, 0.0001, 0.157, 0.0195])
    q, dq = dyn.assemble(0.0, q0, dq0)
    x, y = 0.0, 0.4
    q2 = math.acos((x**2 + y**2 - L1**2 - L2**2) / (2 * L1 * L2))
    q1 = math.atan2(-x, y) - math.atan2(L2 * math.sin(q2), L1 + L2 * math.cos(q2))
    assert q == pytest.approx([q1, q2, -q1 - q2, 0.0], abs=1e-12)
    ev = dyn.evaluate(0.0, q, dq)
    assert np.abs(ev.phi).max() < 1e-12 and np.abs(ev.dphi).max() < 1e-12
    assert dq[3] == pytest.approx(0.02)  # z rises at 0.02 m/s


def test_near_singular_start_is_refused(robots):
    """A stretched SCARA under the tool position rows: singular Jacobian, message with time and q."""
    robot = robots["scara"]
    dyn = ConstrainedDynamics(robot, scara_constraints(robot))
    with pytest.raises(SingularConstraintError) as info:
        dyn.evaluate(0.0, np.array([0.1, 1e-5, 0.2, 0.0]), np.zeros(4))
    text = str(info.value)
    assert "near-singular at t = 0 s" in text and "j2 = 1e-05 rad" in text and "\n" not in text


def test_contradicting_rows_are_reported(robots):
    """j1 = 0.1 and j1 = 0.2 cannot hold together: an InconsistentConstraintsError naming the rows."""
    robot = robots["scara"]
    rows = [
        JointLinear(robot, "a", {"j1": 1.0}, ExpressionTarget(["0.1"])),
        JointLinear(robot, "b", {"j1": 1.0}, ExpressionTarget(["0.2"])),
    ]
    for solver in SOLVERS:
        dyn = ConstrainedDynamics(robot, rows, solver=solver, baumgarte=Baumgarte("linear", 1.0, 10.0))
        with pytest.raises(InconsistentConstraintsError, match="inconsistent constraints at t = 0 s"):
            dyn.evaluate(0.0, np.array([0.15, 1.0, 0.0, 0.0]), np.zeros(4))
    with pytest.raises(InconsistentConstraintsError, match="cannot assemble"):
        ConstrainedDynamics(robot, rows).assemble(0.0, np.zeros(4), np.zeros(4))


def test_option_misuse_is_refused(robots):
    robot = robots["scara"]
    cs = scara_constraints(robot, ("tool_xy",))
    with pytest.raises(ConfigError, match="damped mode needs"):
        ConstrainedDynamics(robot, cs, solver="lagrange", singularity=SingularityPolicy(action="damped"))
    with pytest.raises(ConfigError, match="nullspace"):
        ConstrainedDynamics(robot, cs, solver="lagrange", independent=["j3", "j4"])
    dyn = ConstrainedDynamics(robot, cs, solver="nullspace", independent=["j3"])
    with pytest.raises(ConfigError, match="leave 2"):
        dyn.evaluate(0.0, np.array([0.1, 1.0, 0.0, 0.0]), np.zeros(4))
    with pytest.raises(ConfigError, match="no constraint row 'tool_xy.w'"):
        ConstrainedDynamics(robot, cs, solver="lagrange", eliminate=["tool_xy.w"])
    dyn = ConstrainedDynamics(robot, cs, solver="lagrange", eliminate=["tool_xy.x"])
    with pytest.raises(ConfigError, match="eliminate exactly 0 rows"):
        dyn.evaluate(0.0, np.array([0.1, 1.0, 0.0, 0.0]), np.zeros(4))


def test_named_independent_coordinates_give_the_same_motion(robots):
    """nullspace with j3, j4 named independent equals the QR-pivoted choice."""
    robot = robots["scara"]
    cs = scara_constraints(robot, ("tool_xy",))
    a = ConstrainedDynamics(robot, cs, solver="nullspace")
    b = ConstrainedDynamics(robot, cs, solver="nullspace", independent=["j3", "j4"])
    q, dq = np.array([0.1, 1.0, 0.3, 0.0]), np.array([0.2, 0.1, -0.4, 0.1])
    assert b.evaluate(0.2, q, dq).ddq == pytest.approx(a.evaluate(0.2, q, dq).ddq, abs=1e-12)
