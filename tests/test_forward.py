"""Semi-implicit forward dynamics with friction, against independent solutions."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest
from scipy.integrate import solve_ivp
from scipy.optimize import brentq

from mbctl.dynamics.friction.laws import JointFriction, LuGre, Stribeck
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.stepper import FrictionStepper, PlantState

ROTOR_URDF = """<?xml version="1.0"?><robot name="rotor"><link name="b"/>
<joint name="j" type="continuous"><parent link="b"/><child link="r"/><axis xyz="0 0 1"/><limit velocity="20" effort="10"/></joint>
<link name="r"><inertial><mass value="1"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.05"/></inertial></link>
</robot>"""


@pytest.fixture
def rotor(tmp_path):
    """One vertical-axis rotor, inertia 0.05 kg m^2, frictionless by default."""
    (tmp_path / "rotor.urdf").write_text(ROTOR_URDF)
    (tmp_path / "rotor.toml").write_text('urdf = "rotor.urdf"\n')
    return load_robot(tmp_path / "rotor.toml")


def run(stepper, state, tau, dt, steps):
    for _ in range(steps):
        state = stepper.step(state, tau, dt)
    return state


def test_frictionless_arm_follows_an_accurate_ode_solution(configs):
    """UR5 falling under gravity: converges to scipy's solution of pinocchio ABA as dt shrinks."""
    robot = load_robot(configs / "ur5.toml").with_friction({n: None for n in ("shoulder_pan_joint", "shoulder_lift_joint", "elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint")})
    model, data = robot.model, robot.create_data()
    q0 = np.array([0.0, -1.0, 1.0, 0.0, 0.5, 0.0])

    def rhs(t, x):
        return np.concatenate([x[6:], pin.aba(model, data, x[:6], x[6:], np.zeros(6))])

    ref = solve_ivp(rhs, (0, 0.3), np.concatenate([q0, np.zeros(6)]), rtol=1e-11, atol=1e-12).y[:, -1]
    errors = []
    for dt in (1e-3, 1e-4):
        end = run(FrictionStepper(robot), FrictionStepper(robot).initial(q0), np.zeros(6), dt, round(0.3 / dt))
        errors.append(np.abs(end.q - ref[:6]).max())
    assert errors[1] < 2e-3 and errors[0] / errors[1] > 7  # first order: ~10x smaller for 10x smaller steps


def test_lugre_joint_sticks_below_breakaway_with_presliding_displacement(rotor):
    """Below fs the joint stops after a presliding displacement x = -(fs/sigma0)*ln(1 - tau/fs).

    At low speed g(v) ~ fs, so dz/dx = 1 - sigma0*z/fs while loading, and the joint
    comes to rest where the bristle force sigma0*z equals the torque.
    """
    law = LuGre(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=1e4, sigma1=100.0)
    robot = rotor.with_friction({"j": JointFriction(law)})
    stepper = FrictionStepper(robot)
    end = run(stepper, stepper.initial(np.zeros(1)), np.array([0.4]), 1e-4, 5000)
    assert end.q[0] == pytest.approx(-(law.fs / law.sigma0) * np.log(1 - 0.4 / law.fs), rel=0.02)
    assert law.sigma0 * end.s[0] == pytest.approx(0.4, rel=1e-3)
    assert abs(end.dq[0]) < 1e-6


@pytest.mark.parametrize("law", [LuGre(fc=0.5, fs=0.7, vs=0.02, fv=0.5, sigma0=1e4, sigma1=100.0), Stribeck(fc=0.5, fs=0.7, vs=0.02, fv=0.5)])
def test_sliding_speed_balances_torque_and_steady_friction(rotor, law):
    """A torque above break-away accelerates the rotor to the speed where F_ss(v) = tau."""
    robot = rotor.with_friction({"j": JointFriction(law)})
    tau = 0.75
    v_expected = brentq(lambda v: law.steady(v) - tau, 0.02, 10.0)
    stepper = FrictionStepper(robot)
    end = run(stepper, stepper.initial(np.zeros(1)), np.array([tau]), 2e-4, 7500)
    assert end.dq[0] == pytest.approx(v_expected, rel=1e-3)


def test_stiff_bristles_stay_stable_at_a_coarse_step(rotor):
    """sigma1/J = 2000 1/s would make explicit Euler unstable at dt = 2 ms; this step stays bounded."""
    law = LuGre(fc=0.5, fs=0.7, vs=0.02, fv=0.05, sigma0=1e4, sigma1=100.0)
    robot = rotor.with_friction({"j": JointFriction(law)})
    stepper = FrictionStepper(robot)
    start = PlantState(np.zeros(1), np.array([1.0]), np.zeros(1))  # spinning at 1 rad/s, relaxed bristles
    end = run(stepper, start, np.zeros(1), 2e-3, 2000)
    assert abs(end.dq[0]) < 1e-3 and abs(end.s[0]) <= law.fs / law.sigma0 * 1.01
