"""The bundled XL330 bench's servo (``xl330-pendulum``) against the eight real logs it was fitted
to, and a robot's servo run on a log at another firmware gain."""

from __future__ import annotations

import json

import numpy as np
import pytest

from mbctl.bundled import bundled_servo_logs
from mbctl.config.plant import PlantConfig, SensorModel
from mbctl.dynamics.actuator import robot_servos
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.loop import log_columns
from mbctl.hardware.replay import replay_positions
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.sim import SimPlant
from mbctl.identification.servo import ServoLog, bench_model, read_run_log, read_servo_log, simulate_actuator
from mbctl.identification.servo_datasheet import DATASHEETS

BENCH_DIR = bundled_servo_logs("xl330-pendulum")[0].parent
UP_AND_DOWN_KP400 = "2026-01-15_10h29m29"  # the kp 400 log whose goal (1.57 rad) the servo cannot reach


@pytest.fixture(scope="module")
def logs() -> list[ServoLog]:
    return [read_servo_log(p) for p in bundled_servo_logs("xl330-pendulum")]


def test_a_robots_servo_runs_a_log_with_the_logs_own_gain(tmp_path, logs):
    """A log at kp 100 simulated with a kp 400 robot's servo (torque saturation, supply
    resistance and a sharper friction sign in its table) moves as the simulated plant of the same
    servo with its table set to kp 100 moves under the log's goals, to round-off: the gain comes
    from the log, everything else from the table."""
    physics = (
        "kt = 0.3\nR = 2.2\nvin = 7.4\ntorque_saturation = 0.9\nsupply_resistance = 0.3\nfriction_smoothing = 0.01\narmature = 0.0018\n"
        'friction = { law = "stribeck-load", fc = 0.005, fv = 0.012, fs = 0.04, vs = 0.05, mu = 0.4 }\n'
    )
    (tmp_path / "bench.urdf").write_text((BENCH_DIR / "bench.urdf").read_text())
    robots = {}
    for kp in (100, 400):
        (tmp_path / f"kp{kp}.toml").write_text(f'urdf = "bench.urdf"\n[joints.servo.actuator]\nkp = {kp}\n{physics}')
        robots[kp] = load_robot(tmp_path / f"kp{kp}.toml")
    log = next(g for g in logs if g.model.firmware.kp == 100)
    goals = log.goal[:800]  # 4 s
    plant = SimPlant(robots[100], 0.005, PlantConfig(SensorModel(encoder_counts=0, velocity="exact"), substeps=5))
    with plant:
        replay_positions(plant, goals[:, None], 0.005, RunLog(tmp_path / "run.npz", log_columns(plant.joint_names)), paced=False)
    run = read_run_log(tmp_path / "run.npz", "servo", bench_model(robots[100], "servo"))
    as_logged = ServoLog(name="kp100", t=run.t, position=run.position, goal=run.goal, model=log.model)  # a BAM log's firmware: kp and vin only
    assert as_logged.model.firmware.kp == 100 and as_logged.model.firmware.torque_saturation is None
    assert np.ptp(run.position) > 0.3
    assert np.abs(simulate_actuator(as_logged, robot_servos(robots[400])["servo"]) - run.position).max() < 1e-9


def test_the_bundled_servo_follows_the_eight_logs_and_their_stall(logs):
    """Regression guard on the bundled model (the default fit: torque saturation, R held at the XL330
    data sheet's stall resistance; 26.7 mrad mean, kp 400 ``up_and_down`` stall 8 mrad below the
    measured 0.873 rad; without the saturation 30.1 mrad and 44 mrad): the eight logs, each simulated
    open loop for 6 s, within 28 mrad mean and 45 mrad each, the kp 400 stall within 0.015 rad of the
    measured one, R the data sheet's and kt inside the data sheet's range."""
    servo = robot_servos(load_robot("xl330-pendulum"))["servo"]
    assert servo.firmware.torque_saturation is not None
    sheet = DATASHEETS["xl330"]
    low, high = sheet.torque_constant_range
    assert servo.parameters["R"] == pytest.approx(sheet.resistance, rel=1e-5) and low <= servo.parameters["kt"] <= high
    simulated = {log.name: simulate_actuator(log, servo) for log in logs}
    errors = np.array([np.mean(np.abs(simulated[log.name] - log.position)) for log in logs])
    assert len(logs) == 8 and errors.mean() < 0.028 and errors.max() < 0.045, errors
    up = next(log for log in logs if log.name == UP_AND_DOWN_KP400)
    assert up.goal.max() > 1.5 and abs(simulated[up.name].max() - up.position.max()) < 0.015


def test_the_bundled_servo_is_what_its_command_fits(cli, tmp_path, logs):
    """The command the bundled bench.toml names (the default fit), run now, writes back the servo the
    file holds: every fitted value within one of its standard errors (a held one to the file's six
    digits), and the same mean error to 0.3 mrad."""
    copy, out = tmp_path / "fitted.toml", tmp_path / "fit.json"
    r = cli(
        "identify",
        "logs",
        "xl330-pendulum",
        "--config",
        "xl330-pendulum",
        "--joint",
        "servo",
        "--write-back",
        copy,
        "--out",
        out,
    )
    assert r.code == 0, r.err
    report = json.loads(out.read_text())
    bundled = robot_servos(load_robot("xl330-pendulum"))["servo"]
    values = {**bundled.parameters, "torque_saturation": bundled.firmware.torque_saturation}
    assert set(report["parameters"]) == set(values)
    for name, value in report["parameters"].items():
        assert abs(value - values[name]) <= max(report["standard_errors"][name], 1e-5 * abs(value)), name
    mean = np.mean([np.mean(np.abs(simulate_actuator(log, bundled) - log.position)) for log in logs])
    assert np.mean(list(report["mean_abs_error_rad"]["fitted"].values())) == pytest.approx(mean, abs=3e-4)
    assert robot_servos(load_robot(copy))["servo"].firmware.torque_saturation == pytest.approx(values["torque_saturation"], rel=1e-5)
