"""Time-optimal path timing (mbctl.ctrl.timing): closed forms, agreement of solvers, limits held
between grid points under the full model, jerk limits."""

from __future__ import annotations

import math
from pathlib import Path

import casadi as ca
import numpy as np
import pinocchio as pin
import pytest

from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.timing import Infeasible, optimal_timing, read_path, spline_path, timing_limits
from mbctl.ctrl.timing.dynamics import path_dynamics
from mbctl.ctrl.timing.lp import lp_profile
from mbctl.ctrl.timing.reachability import reachability_profile
from mbctl.ctrl.timing.sampling import profile_duration
from mbctl.ctrl.timing.stages import GridLimits, stage_constraints
from mbctl.dynamics.friction.laws import CoulombViscous, JointFriction
from mbctl.dynamics.inverse import inverse_dynamics
from mbctl.dynamics.model.robot import RobotModel, robot_from_pinocchio
from mbctl.errors import InputError
from mbctl.fileio import write_csv

INERTIA = 0.5  # kg m², about the joint axis

UR5_PATH = np.array([[0.0, -1.4, 1.4, -1.4, -1.57, 0.0], [0.7, -0.9, 0.6, -1.1, -1.3, 0.6], [1.3, -1.5, 1.5, -1.6, -1.5, 1.0]])


def disc(fc: float | None = None) -> RobotModel:
    """One revolute joint about the vertical: a disc of inertia INERTIA, no gravity torque."""
    model = pin.Model()
    jid = model.addJoint(0, pin.JointModelRZ(), pin.SE3.Identity(), "j")
    model.appendBodyToJoint(jid, pin.Inertia(1.0, np.zeros(3), np.diag([INERTIA, INERTIA, INERTIA])), pin.SE3.Identity())
    model.gravity = pin.Motion.Zero()
    robot = robot_from_pinocchio(model, name="disc", urdf=Path("disc.urdf"))
    return robot.with_friction({"j": None if fc is None else JointFriction(CoulombViscous(fc=fc))})


def line(length: float) -> object:
    return spline_path(np.array([[0.0], [length]]), ("j",))


def test_torque_limit_alone_gives_bang_bang():
    """A torque limit alone: full torque then full braking, T = 2 sqrt(L I / tau)."""
    robot, length, tau = disc(), 2.0, 10.0
    res = optimal_timing(robot, line(length), timing_limits(robot, torque={"j": tau}, friction="none"), grid=200)
    assert res.duration == pytest.approx(2 * math.sqrt(length * INERTIA / tau), rel=1e-9)
    assert res.held and res.refinements == 0
    assert res.ratios["torque"] == pytest.approx(1.0, abs=1e-6)


def test_coulomb_friction_accelerates_less_than_it_brakes():
    """With Coulomb friction fc the drive accelerates at (tau - fc)/I and brakes at (tau + fc)/I."""
    robot, length, tau, fc = disc(fc=2.0), 1.0, 10.0, 2.0
    res = optimal_timing(robot, line(length), timing_limits(robot, torque={"j": tau}, friction="coulomb"), grid=1000)
    up, down = (tau - fc) / INERTIA, (tau + fc) / INERTIA
    peak = math.sqrt(2 * length * up * down / (up + down))
    assert res.duration == pytest.approx(peak / up + peak / down, rel=1e-3)


def test_velocity_and_acceleration_limits_give_the_trapezoid():
    """Velocity V and acceleration A limits: T = L/V + V/A, the plateau at the velocity limit itself."""
    robot, length, v, a = disc(), 1.0, 1.0, 2.0
    limits = timing_limits(robot, velocity={"j": v}, acceleration={"j": a}, torque={"j": 1e6}, friction="none")
    res = optimal_timing(robot, line(length), limits, grid=100)
    assert res.duration == pytest.approx(length / v + v / a, rel=1e-9)
    assert np.abs(res.trajectory.dq).max() == pytest.approx(v, rel=1e-9)
    assert res.active_fractions()["velocity:j"] == pytest.approx(0.5, abs=0.02)  # the grid points of the plateau


def test_acceleration_limit_alone_gives_the_triangle():
    """An acceleration limit A alone: T = 2 sqrt(L/A)."""
    robot = disc()
    limits = timing_limits(robot, acceleration={"j": 3.0}, friction="none")
    assert optimal_timing(robot, line(1.5), limits, grid=100).duration == pytest.approx(2 * math.sqrt(1.5 / 3.0), rel=1e-9)


def test_passes_agree_with_highs_and_with_ipopt(robots):
    """The reachability passes, the HiGHS LP and a direct minimum-time NLP (IPOPT) reach the same optimum."""
    robot = robots["ur5"]
    limits = timing_limits(robot, friction="coulomb")
    s = np.linspace(0.0, 1.0, 61)
    pd = path_dynamics(robot, spline_path(UR5_PATH, robot.joint_names), s)
    f0 = pd.friction(np.ones(len(s)), np.zeros(len(s)))
    zero = np.zeros_like(f0)
    con = stage_constraints(pd, GridLimits.of(limits, len(s)), f0, zero, zero, zero[:, 0], zero[:, 0])
    b_passes, b_lp = reachability_profile(con), lp_profile(con)[0]
    np.testing.assert_allclose(b_passes, b_lp, atol=1e-8 * b_lp.max())
    # the NLP: minimise sum 2 ds / (x_i + x_{i+1}) over x = sqrt(b) with the same rows
    opti = ca.Opti()
    x = opti.variable(len(s))
    b = x**2
    a = (b[1:] - b[:-1]) / (2 * con.ds)
    opti.minimize(ca.sum1(2 * con.ds / (x[:-1] + x[1:] + 1e-12)))
    opti.subject_to([x >= 0, x[0] == 0, x[-1] == 0, b <= np.minimum(con.b_max, 1e6)])
    for k in range(con.A.shape[1]):
        opti.subject_to(ca.DM(con.A[:-1, k]) * a + ca.DM(con.B[:-1, k]) * b[:-1] <= ca.DM(con.C[:-1, k]))
    opti.set_initial(x, 0.9 * np.sqrt(b_lp))
    opti.solver("ipopt", {"print_time": False}, {"print_level": 0, "sb": "yes", "tol": 1e-10})
    b_nlp = np.asarray(opti.solve().value(x)).ravel() ** 2
    assert profile_duration(s, b_passes) == pytest.approx(profile_duration(s, b_nlp), rel=1e-5)


def test_full_friction_holds_between_grid_points(robots):
    """Under ur5.toml's Stribeck + viscous friction the feed-forward torques at 1 kHz stay within 0.1 % of the limits."""
    robot = robots["ur5"]
    limits = timing_limits(robot, torque_margin=0.9)
    res = optimal_timing(robot, UR5_PATH, limits, grid=300)
    assert res.held, res.message
    ff = feedforward(robot, res.trajectory)
    assert np.max(np.abs(ff.dynamics.tau) / limits.torque) <= 1.001
    assert np.max(np.abs(res.trajectory.dq) / limits.velocity) <= 1.001
    # and some limit binds (the timing is not merely feasible)
    assert np.max(np.abs(ff.dynamics.tau) / limits.torque) >= 0.99 or np.max(np.abs(res.trajectory.dq) / limits.velocity) >= 0.99
    assert res.trajectory.dq[0] == pytest.approx(np.zeros(6)) and res.trajectory.dq[-1] == pytest.approx(np.zeros(6))


def test_scp_fixed_point_meets_the_full_model_at_the_grid(robots):
    """At the SCP's fixed point the full friction model (evaluated afresh by inverse dynamics) meets the torque
    limits at every grid point, and binds at some."""
    robot = robots["ur5"]
    limits = timing_limits(robot)
    res = optimal_timing(robot, UR5_PATH, limits, grid=200, verify=False)
    q, d1, d2, _ = spline_path(UR5_PATH, robot.joint_names)(res.s)
    a = np.append(res.a, res.a[-1])[:, None]
    b = res.b[:, None]
    tau = inverse_dynamics(robot, q, d1 * np.sqrt(b), d1 * a + d2 * b, lugre="steady").tau[:-1]
    worst = np.max(np.abs(tau) / limits.torque)
    assert 0.999 < worst <= 1 + 1e-6


def test_jerk_limit_holds_at_the_output_rate(robots):
    """With a jerk limit the acceleration is continuous and the sampled jerk stays within the limit."""
    robot = robots["ur5"]
    limits = timing_limits(robot, jerk=dict.fromkeys(robot.joint_names, 60.0))
    res = optimal_timing(robot, UR5_PATH, limits, grid=80)
    traj = res.trajectory
    jerk = np.diff(traj.ddq, axis=0) / np.diff(traj.t)[:, None]
    assert np.abs(jerk).max() <= 60.0 * 1.001
    assert np.abs(traj.ddq[0]).max() < 1e-9 and np.abs(traj.ddq[-1]).max() < 1e-9
    unlimited = optimal_timing(robot, UR5_PATH, timing_limits(robot), grid=80)
    assert res.duration > unlimited.duration


def test_path_csv_matches_the_waypoint_spline(tmp_path, robots):
    """A path CSV of samples of a spline gives the same timing as the spline (to interpolation error)."""
    robot = robots["ur5"]
    spline = spline_path(UR5_PATH, robot.joint_names)
    s = np.linspace(0, 1, 201)
    q = spline(s)[0]
    csv = tmp_path / "p.csv"
    write_csv(csv, ["s", *(f"q.{n}" for n in robot.joint_names)], np.column_stack([s, q]))
    limits = timing_limits(robot, friction="coulomb")
    t_csv = optimal_timing(robot, read_path(csv, robot.joint_names), limits, grid=200, verify=False).duration
    assert t_csv == pytest.approx(optimal_timing(robot, spline, limits, grid=200, verify=False).duration, rel=1e-3)


def test_gravity_beyond_the_torque_limit_is_infeasible(robots):
    """A torque limit below the holding torque: no timing, Infeasible names a grid point."""
    robot = robots["ur5"]
    with pytest.raises(Infeasible, match="grid point"):
        optimal_timing(robot, UR5_PATH, timing_limits(robot, torque={"shoulder_lift_joint": 1.0}), grid=50)


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"velocity": {"nope": 1.0}}, "velocity"), ({"torque_margin": -0.5}, "torque_margin"), ({"velocity_margin": 1.5}, "velocity_margin"),
        ({"jerk": {"elbow_joint": 0.0}}, "jerk"),
    ],
)
def test_bad_limits_name_the_field(robots, kwargs, field):
    """Unknown joints, a margin outside (0, 1] and non-positive limits are InputErrors naming the argument."""
    with pytest.raises(InputError) as exc:
        timing_limits(robots["ur5"], **kwargs)
    assert exc.value.field == field


def test_margins_scale_the_limits_after_the_overrides(robots):
    """velocity_margin and torque_margin multiply the URDF's limits, and an override before scaling."""
    robot = robots["ur5"]
    limits = timing_limits(robot, torque_margin=0.9, velocity_margin=0.95, velocity={"elbow_joint": 2.0})
    urdf_v = np.array([j.limits.velocity for j in robot.joints])
    assert limits.velocity[1] == pytest.approx(0.95 * urdf_v[1]) and limits.velocity[2] == pytest.approx(0.95 * 2.0)
    assert np.allclose(limits.torque, 0.9 * np.array([j.limits.effort for j in robot.joints]))


def test_limits_left_exceeded_are_reported_not_hidden(robots):
    """Without refinements a coarse grid leaves the limits exceeded between grid points: held is False and the
    message says why."""
    robot = robots["ur5"]
    res = optimal_timing(robot, UR5_PATH, timing_limits(robot), grid=20, max_refinements=0)
    assert not res.held and "refinements" in res.message
    assert max(res.ratios.values()) > 1.001


def test_load_dependent_friction_fixed_point_and_samples(robots):
    """tree5 (Stribeck friction scaled by the bearing loads from the joint reactions): at the SCP's fixed point
    inverse dynamics with reactions meets the limits at the grid, and the refined result at 1 kHz."""
    robot = robots["tree5"]
    path = spline_path(np.array([[0, 0, 0, 0, 0], [1.0, 0.8, -0.6, 0.5, 0.4], [1.5, 0.2, 0.4, -0.3, 1.0]]), robot.joint_names)
    limits = timing_limits(robot, torque=dict.fromkeys(robot.joint_names, 8.0))
    grid = optimal_timing(robot, path, limits, grid=150, verify=False)
    q, d1, d2, _ = path(grid.s)
    a, b = np.append(grid.a, grid.a[-1])[:, None], grid.b[:, None]
    result = inverse_dynamics(robot, q, d1 * np.sqrt(b), d1 * a + d2 * b, lugre="steady")
    assert np.nanmax(result.normal_load) > 0  # the loads do enter
    assert 0.999 < np.max(np.abs(result.tau[:-1]) / limits.torque) <= 1 + 1e-6
    res = optimal_timing(robot, path, limits, grid=150)
    assert res.held and np.max(np.abs(feedforward(robot, res.trajectory).dynamics.tau) / limits.torque) <= 1.001
