"""The stall of the servo model: the firmware's current limit, the supply's internal
resistance and the torque saturation bound the torque at rest, in the shared actuator model
and in the simulated plant."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mbctl.bundled import bundled_servo_logs
from mbctl.dynamics.actuator import ServoFirmware, robot_servos, servo_current, servo_step, servo_torque, stall_torque
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError
from mbctl.hardware.sim import TruthPlant

BENCH_DIR = bundled_servo_logs("xl330-pendulum")[0].parent
MGL = 0.49 * 9.81 * 0.1  # N m: the bench's gravity moment, m g l


def test_the_current_solves_the_motor_circuit():
    """Below the limit the current satisfies Kirchhoff's law of the supply, bridge and winding:
    the motor sees ``d`` times the sagged bus, ``d (vin - Rs d i) = R i + kt omega``."""
    firmware = ServoFirmware(kp=400, vin=7.4, supply_resistance=0.8)
    p = {"kt": 0.3, "R": 2.5}
    rng = np.random.default_rng(0)
    error, omega = rng.uniform(-1.2, 1.2, 200), rng.uniform(-4, 4, 200)
    i, damping = servo_current(firmware, p, error, omega)
    d = np.clip(400 * error * 4096 / (2 * math.pi) / 256, -885, 885) / 885
    assert np.allclose(d * (7.4 - 0.8 * d * i), 2.5 * i + 0.3 * omega, rtol=0, atol=1e-12)
    assert np.allclose(damping, 0.3**2 / (2.5 + 0.8 * d**2), rtol=1e-12)
    assert np.abs(d).max() == 1.0 and np.abs(d).min() < 0.1  # saturated and unsaturated duties both checked


@pytest.mark.parametrize(
    ("firmware", "kt", "tau_stall"),
    [
        (ServoFirmware(kp=4000, vin=7.4, current_limit=1.0), 0.35, 0.35 * 1.0),  # kt i_max
        (ServoFirmware(kp=4000, vin=7.4, supply_resistance=1.0), 0.2, 0.2 * 7.4 / (3.5 + 1.0)),  # full duty, kt vin / (R + Rs)
        (ServoFirmware(kp=4000, vin=7.4), 0.2, 0.2 * 7.4 / 3.5),  # the control case: a stiff supply, no limit
        (ServoFirmware(kp=4000, vin=7.4, current_limit=1.0, torque_saturation=0.8), 0.35, 0.35 / (1 + 0.35 / 0.8)),  # sat(kt i_max)
        (ServoFirmware(kp=4000, vin=7.4, torque_saturation=0.5), 0.2, 0.2 * 7.4 / 3.5 / (1 + 0.2 * 7.4 / 3.5 / 0.5)),  # sat(kt vin / R)
    ],
)
def test_a_pendulum_stalls_where_gravity_meets_the_stall_torque(firmware, kt, tau_stall):
    """The bench pendulum sent far above what the servo can lift (goal 1.5 rad, a stiff P loop)
    stops at ``m g l sin(theta) = tau_stall`` (closed form; viscous friction only, so nothing
    else holds it), and :func:`stall_torque` gives that torque."""
    p = {"kt": kt, "R": 3.5, "armature": 0.002, "fc": 0.0, "fv": 0.05}
    q, dq = 0.0, 0.0
    for _ in range(8000):  # 8 s of 1 ms steps
        q, dq, _ = servo_step(firmware, "coulomb-viscous", p, q, dq, 1.5, 1.0, inertia=0.49 * 0.1**2, load=-MGL * math.sin(q), h=1e-3)
    assert q == pytest.approx(math.asin(tau_stall / MGL), abs=1e-6) and abs(dq) < 1e-6
    assert stall_torque(firmware, p, 1.5 - q) == pytest.approx(tau_stall, rel=1e-9)


def test_the_simulated_plant_stalls_with_the_tables_limit_supply_and_saturation(tmp_path):
    """The bench whose actuator table sets a current limit, a supply resistance and a torque
    saturation, run in the simulated plant toward an unreachable goal, stalls where
    ``m g l sin(theta) = sat(kt i_max)``; the table's values reach the servo's firmware."""
    (tmp_path / "bench.urdf").write_text((BENCH_DIR / "bench.urdf").read_text())
    (tmp_path / "bench.toml").write_text(
        'urdf = "bench.urdf"\n[joints.servo.actuator]\nkt = 0.35\nR = 3.5\nvin = 7.4\nkp = 4000\ncurrent_limit = 1.0\n'
        'supply_resistance = 0.5\ntorque_saturation = 1.2\narmature = 0.002\nfriction = { law = "coulomb-viscous", fc = 0.0, fv = 0.05 }\n'
    )
    robot = load_robot(tmp_path / "bench.toml")
    firmware = robot_servos(robot)["servo"].firmware
    assert (firmware.current_limit, firmware.supply_resistance, firmware.torque_saturation) == (1.0, 0.5, 1.2)
    plant = TruthPlant(robot, 1e-3, np.zeros(1), compiled=False)
    for _ in range(800):  # 4 s
        plant.step(np.zeros(1), 0.005, np.array([1.5]))
    assert plant.full.q[0] == pytest.approx(math.asin(0.35 / (1 + 0.35 / 1.2) / MGL), abs=1e-5)


@pytest.mark.parametrize(
    "firmware", [ServoFirmware(kp=400, vin=7.4, torque_saturation=0.4), ServoFirmware(kp=400, vin=7.4, supply_resistance=0.8, torque_saturation=1.5)]
)
def test_the_implicit_damping_is_the_torques_slope_under_saturation(firmware):
    """The damping the semi-implicit step takes, ``-d tau/d dq``, equals the central difference of
    the saturated torque in the speed (motor alone, law ``none``), at saturated and unsaturated
    duties."""
    p = {"kt": 0.3, "R": 2.5, "armature": 0.002}
    for error, dq in [(0.05, 0.3), (0.4, -1.0), (1.5, 2.0), (-0.9, 0.5)]:
        tau, damping = servo_torque(firmware, "none", p, 0.0, dq, error)
        h = 1e-6
        slope = (servo_torque(firmware, "none", p, 0.0, dq + h, error)[0] - servo_torque(firmware, "none", p, 0.0, dq - h, error)[0]) / (2 * h)
        assert damping == pytest.approx(-slope, rel=1e-6), (error, dq)
        assert abs(tau) < firmware.torque_saturation  # the saturation bounds the torque


@pytest.mark.parametrize(("value", "accepted"), [("-0.1", False), ("0.0", True), ("0.4", True)])
def test_a_negative_supply_resistance_is_refused(tmp_path, value, accepted):
    """``supply_resistance`` < 0 is refused naming the dotted field; 0 and positive values load."""
    (tmp_path / "bench.urdf").write_text((BENCH_DIR / "bench.urdf").read_text())
    (tmp_path / "bench.toml").write_text(
        f'urdf = "bench.urdf"\n[joints.servo.actuator]\nkt = 0.35\nR = 3.5\nvin = 7.4\nkp = 400\nsupply_resistance = {value}\n'
    )
    if accepted:
        assert robot_servos(load_robot(tmp_path / "bench.toml"))["servo"].firmware.supply_resistance == float(value)
        return
    with pytest.raises(ConfigError) as info:
        robot_servos(load_robot(tmp_path / "bench.toml"))
    assert info.value.field == "joints.servo.actuator.supply_resistance" and info.value.file == tmp_path / "bench.toml"


@pytest.mark.parametrize("eps", [0.02, 0.004])
def test_a_servo_held_by_its_gearbox_creeps_at_the_speed_the_smoothing_sets(eps):
    """The bench with the torque off, held against gravity by dry friction alone (``fc`` 0.5 N m
    against ``m g l sin(0.5)`` = 0.23 N m), creeps at ``eps atanh(m g l sin(theta) / fc)``, the speed
    where the smoothed Coulomb law balances the load (closed form; ``eps`` the firmware's
    ``friction_smoothing``)."""
    firmware = ServoFirmware(kp=400, vin=7.4, friction_smoothing=eps)
    p = {"kt": 0.3, "R": 2.5, "armature": 0.002, "fc": 0.5, "fv": 0.0}
    q, dq = 0.5, 0.0
    for _ in range(2000):  # 2 s of 1 ms steps
        q, dq, _ = servo_step(firmware, "coulomb-viscous", p, q, dq, 0.0, 0.0, inertia=0.49 * 0.1**2, load=-MGL * math.sin(q), h=1e-3)
    assert -dq == pytest.approx(eps * math.atanh(MGL * math.sin(q) / 0.5), rel=1e-3)
