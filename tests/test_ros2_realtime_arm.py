"""The arm of the real-timing emulator (mbctl.hardware.ros2.realtime), without ROS: advanced by the time
given, its effort the torque applied, gravity compensated as UR and Franka arms do, held in place;
checked against the two-joint arm's closed form (tests/ros2_helpers.py)."""

from __future__ import annotations

import numpy as np
import pytest
from ros2_helpers import gravity, rk4, write_arm

from mbctl.config.plant import PlantConfig, SensorModel
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.interface import JointCommand
from mbctl.hardware.ros2.realtime import Push, RealtimeArm, RealtimeOptions

START = np.array([0.3, 0.5])
EXACT = PlantConfig(sensors=SensorModel(encoder_counts=0, velocity="exact"))


@pytest.fixture
def arm2(tmp_path):
    return load_robot(write_arm(tmp_path))


def closed_form(tau: np.ndarray, dts: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """The arm from START at rest under ``tau`` (held, plus nothing else) over the updates ``dts`` (s), RK4 on 0.1 ms."""
    q, dq = START.copy(), np.zeros(2)
    for dt in dts:
        n = round(dt / 1e-4)
        for _ in range(n):
            q, dq = rk4(q, dq, tau, dt / n)
    return q, dq


def test_each_update_advances_by_the_time_that_elapsed(arm2):
    """Updates of 2, 2, 7 (a late one) and 1 ms under a held torque: the positions and velocities of the
    closed form over the same 12 ms (within 5e-5 rad, about one 0.25 ms substep's motion of the first-order stepper,
    and 1e-4 rad/s); the late update moved the arm further than a 2 ms one would."""
    tau = np.array([12.0, 2.0])
    arm = RealtimeArm(arm2, EXACT, RealtimeOptions(rate_hz=500.0), START)
    dts = [0.002, 0.002, 0.007, 0.001]
    for dt in dts:
        arm.update(JointCommand.torque(tau), dt)
    q, dq = closed_form(tau, dts)
    got_q, got_dq, _ = arm.measure(0.001)
    assert np.abs(got_q - q).max() < 5e-5 and np.abs(got_dq - dq).max() < 1e-4, (got_q - q, got_dq - dq)
    short, _ = closed_form(tau, [0.002, 0.002, 0.002, 0.001])
    assert np.abs(q - START).max() > 1.5 * np.abs(short - START).max()
    assert arm.motion_s == pytest.approx(0.012)


def test_effort_is_the_torque_applied_and_gravity_compensation_adds_gravity(arm2):
    """Drive effort: the command over the update, clipped to the effort limits (60 and 30 N·m); a gravity-compensating
    arm applies the command plus g(q) (the closed form's gravity) and reports that total."""
    plain = RealtimeArm(arm2, EXACT, RealtimeOptions(), START)
    plain.update(JointCommand.torque(np.array([5.0, 99.0])), 0.001)
    assert np.array_equal(plain.measure(0.001)[2], [5.0, 30.0]) and plain.saturated == 1
    compensated = RealtimeArm(arm2, EXACT, RealtimeOptions(gravity_compensated=True), START)
    compensated.update(JointCommand.torque(np.zeros(2)), 0.001)
    assert compensated.measure(0.001)[2] == pytest.approx(gravity(START), abs=1e-9)
    q, _, _ = compensated.measure(0.001)
    assert np.abs(q - START).max() < 1e-9  # zero command: the arm floats where it is


def test_a_joint_torque_sensor_reads_the_link_side_torque(arm2):
    """joint-torque-sensor effort on the frictionless arm: M ddq + c + g over the update, which is the applied
    torque (within 1 % of it) and, with a push of 4 N·m on the shoulder, the applied torque still (the push is no
    joint torque)."""
    tau = np.array([20.0, 3.0])
    arm = RealtimeArm(arm2, EXACT, RealtimeOptions(effort="joint-torque-sensor", push=Push("shoulder", 4.0, 0.0, 1.0)), START)
    arm.update(JointCommand.torque(tau), 0.001)
    effort = arm.measure(0.001)[2]
    assert np.abs(effort - tau).max() < 0.01 * np.abs(tau).max(), effort


def test_held_the_arm_stands_still_with_its_gravity_torque(arm2):
    """Before a command (and held): positions unchanged, velocity zero, effort the closed form's gravity; a push acts
    only between its start and end (time of motion)."""
    arm = RealtimeArm(arm2, EXACT, RealtimeOptions(push=Push("elbow", 5.0, 0.004, 0.002)), START)
    arm.update(None, 0.01)
    q, dq, effort = arm.measure(0.01)
    assert np.array_equal(q, START) and np.array_equal(dq, np.zeros(2)) and effort == pytest.approx(gravity(START), abs=1e-9)
    pushed = RealtimeArm(arm2, EXACT, RealtimeOptions(push=Push("elbow", 5.0, 0.004, 0.002)), START)
    free = RealtimeArm(arm2, EXACT, RealtimeOptions(), START)
    for dt in (0.002, 0.002, 0.002, 0.002):
        for a in (pushed, free):
            a.update(JointCommand.torque(gravity(START)), dt)
    q_pushed, q_free = pushed.measure(0.002)[0], free.measure(0.002)[0]
    expected, _ = closed_form(np.zeros(2), [0.0])  # nothing: START
    assert np.abs(q_free - expected).max() < 1e-4  # gravity compensated at START: it barely moves
    assert q_pushed[1] - q_free[1] > 1e-4  # the push turned the elbow the positive way
