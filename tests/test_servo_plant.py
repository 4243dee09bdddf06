"""The servo model inside the simulated plant and the Dynamixel emulator, run logs of position-mode
runs read back for a fit, and the [joints.<name>.actuator] table."""

from __future__ import annotations

import dataclasses
import json
import math
import time

import numpy as np
import pytest

from mbctl.bundled import bundled_servo_logs
from mbctl.config.plant import PlantConfig, SensorModel
from mbctl.dynamics.actuator import ServoActuator, ServoFirmware, robot_servos
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError, DataError
from mbctl.hardware.drive_config import bus_config
from mbctl.hardware.dynamixel import DynamixelBus
from mbctl.hardware.emulator import DriveEmulator
from mbctl.hardware.interface import CommandMode
from mbctl.hardware.loop import log_columns
from mbctl.hardware.replay import replay_positions
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.sim import SimPlant, TruthPlant
from mbctl.identification.servo import bench_model, fit_servo, read_run_log, read_servo_log, simulate_servo

BENCH_DIR = bundled_servo_logs("xl330-pendulum")[0].parent
COUNT = 2 * math.pi / 4096  # rad per encoder count



def lockstep_bus(robot):
    """The robot's bus with a 100 ms adapter latency: in lock-step the emulator steps the plant before it
    replies, which on a loaded machine can outlast the default ~34 ms reply timeout (time is virtual, so
    the longer timeout changes no result)."""
    return dataclasses.replace(bus_config(robot), latency_s=0.1)

def bench(tmp_path, law="stribeck-load", friction=None, extra=""):
    """The bundled bench's robot, or a copy of it with another servo friction law."""
    if friction is None:
        return load_robot(BENCH_DIR / "bench.toml")
    (tmp_path / "bench.urdf").write_text((BENCH_DIR / "bench.urdf").read_text())
    table = "".join(f", {k} = {v!r}" for k, v in friction.items())
    (tmp_path / "bench.toml").write_text(
        f'urdf = "bench.urdf"\n[joints.servo.actuator]\n{extra}vin = 7.4\nkp = 400\nfriction = {{ law = "{law}"{table} }}\n'
        "[drives]\n[drives.joints.servo]\nid = 1\ntorque_constant = 0.3\ncurrent_unit_mA = 1.0\ncurrent_limit_A = 1.75\n"
    )
    return load_robot(tmp_path / "bench.toml")


def logged_goals(seconds: float) -> np.ndarray:
    """The goals of a real kp 400 log, on whole encoder counts (what a goal register holds)."""
    log = next(g for g in map(read_servo_log, bundled_servo_logs("xl330-pendulum")) if g.model.firmware.kp == 400 and "10h29m14" in g.name)
    n = int(round(seconds / 0.005))
    return np.round(log.goal[:n] / COUNT) * COUNT


def servo_parameters(robot) -> tuple[str, dict[str, float]]:
    servo = robot_servos(robot)["servo"]
    return servo.law, dict(servo.parameters)


def test_the_actuator_table_gives_the_servo(tmp_path):
    """Every field of [joints.<name>.actuator] reaches the servo model with its value."""
    robot = bench(tmp_path, "stribeck", {"fc": 0.03, "fv": 0.01, "fs": 0.06, "vs": 0.3},
                  extra="kt = 0.35\nR = 3.5\narmature = 0.002\ndivisor = 128\npwm_limit = 600\npwm_max = 885\ncounts = 4096\ncurrent_limit = 1.2\nsupply_resistance = 0.4\ntorque_saturation = 0.9\nfriction_smoothing = 0.004\ngear_ratio = 1.0\n")
    assert robot_servos(robot)["servo"] == ServoActuator(
        ServoFirmware(kp=400, vin=7.4, divisor=128, pwm_limit=600, pwm_max=885, counts=4096, current_limit=1.2, gear_ratio=1.0, supply_resistance=0.4, torque_saturation=0.9, friction_smoothing=0.004),
        "stribeck", {"kt": 0.35, "R": 3.5, "armature": 0.002, "fc": 0.03, "fv": 0.01, "fs": 0.06, "vs": 0.3},
    )


@pytest.mark.parametrize(
    ("extra", "friction", "field"),
    [
        ("kt = 0.35\nR = -1.0\n", {"fc": 0.03, "fv": 0.01}, "joints.servo.actuator.R"),
        ("kt = 0.35\nR = 3.0\n", {"fc": -0.03, "fv": 0.01}, "joints.servo.actuator.friction.fc"),
        ("kt = 0.35\nR = 3.0\npwm_limit = 900\n", {"fc": 0.03, "fv": 0.01}, "joints.servo.actuator.pwm_limit"),
        ("kt = 0.35\n", {"fc": 0.03, "fv": 0.01}, "joints.servo.actuator.R"),
        ("kt = 0.35\nR = 3.0\nkd = 1\n", {"fc": 0.03, "fv": 0.01}, "joints.servo.actuator.kd"),
    ],
)
def test_a_bad_actuator_table_names_its_field(tmp_path, extra, friction, field):
    """A value out of range, a missing field or an unknown one is refused, naming the dotted field."""
    with pytest.raises(ConfigError) as info:
        robot_servos(bench(tmp_path, "coulomb-viscous", friction, extra=extra))
    assert info.value.field == field and info.value.file == tmp_path / "bench.toml"


def test_the_current_limit_caps_the_torque():
    """With a current limit the stalled motor's torque is kt * i_max, not kt * V / R (hand calculation)."""
    firmware = ServoFirmware(kp=4000, vin=7.4, current_limit=0.5)
    p = {"kt": 0.35, "R": 3.5, "armature": 0.0}
    tau, damping = ServoActuator(firmware, "none", p).torque(0.0, 0.0, 1.0)
    free, _ = ServoActuator(ServoFirmware(kp=4000, vin=7.4), "none", p).torque(0.0, 0.0, 1.0)
    assert tau == pytest.approx(0.35 * 0.5) and free == pytest.approx(0.35 * 7.4 / 3.5) and damping == 0.0


LUGRE = {"fc": 0.03, "fv": 0.01, "fs": 0.06, "vs": 0.3, "sigma0": 50.0, "sigma1": 0.3}


@pytest.mark.parametrize("law", ["stribeck-load", "lugre"])
def test_the_simulated_plant_moves_like_the_identified_servo(tmp_path, law):
    """Position commands to the simulated plant (lock-step, 1 ms steps) of the bench with its fitted
    servo (or a LuGre one, whose bristle state the plant carries) give the positions the
    identification's own simulation gives for the same goals, to round-off; the run log reads
    back as the same goals and positions."""
    robot = bench(tmp_path) if law == "stribeck-load" else bench(tmp_path, "lugre", LUGRE, extra="kt = 0.35\nR = 3.5\narmature = 0.002\n")
    goals = logged_goals(2.0)
    plant = SimPlant(robot, 0.005, PlantConfig(SensorModel(encoder_counts=0, velocity="exact"), substeps=5))
    log = RunLog(tmp_path / "sim.npz", log_columns(plant.joint_names))
    with plant:
        replay_positions(plant, goals[:, None], 0.005, log, paced=False)
    run = read_run_log(tmp_path / "sim.npz", "servo", bench_model(robot, "servo"))
    assert np.array_equal(run.goal, goals) and run.enabled.all()
    law, p = servo_parameters(robot)
    assert np.abs(simulate_servo(run, law, p) - run.position).max() < 1e-9


@pytest.mark.parametrize("law", ["stribeck-load", "lugre"])
def test_the_compiled_plant_steps_servos_as_the_interpreted_one(tmp_path, law):
    """The plant's generated-C steps (five 1 ms steps per call) and the interpreted stepper,
    driven by the same goals with the torque off for 150 ms and a current limit, a supply
    resistance and a torque saturation on the LuGre servo, agree to round-off in positions and
    bristle states."""
    robot = bench(tmp_path) if law == "stribeck-load" else bench(tmp_path, "lugre", LUGRE, extra="kt = 0.35\nR = 3.5\narmature = 0.002\ncurrent_limit = 1.0\nsupply_resistance = 0.5\ntorque_saturation = 0.6\n")
    compiled, interpreted = TruthPlant(robot, 1e-3, np.zeros(1), period_s=0.005), TruthPlant(robot, 1e-3, np.zeros(1), compiled=False)
    assert compiled._compiled and not interpreted._compiled
    for k, goal in enumerate(logged_goals(1.0)):
        command = np.array([math.nan if 120 < k < 150 else goal])
        compiled.step(np.zeros(1), 0.005, command)
        interpreted.step(np.zeros(1), 0.005, command)
        assert np.allclose(compiled.full.q, interpreted.full.q, rtol=0, atol=1e-12) and np.allclose(compiled.full.s, interpreted.full.s, rtol=0, atol=1e-12)
    assert abs(compiled.full.q[0]) > 0.1 and len(compiled.full.s) == (law == "lugre")


def test_the_paced_plant_process_takes_goal_positions(tmp_path):
    """The paced plant in its own process, sent one goal position (0.6 rad) for a servo with
    viscous friction only: the bench settles where the firmware's P-loop torque at rest balances gravity,
    kt V(e) / R = m g l sin q (solved by bisection), not at the goal itself."""
    from mbctl.hardware.interface import JointCommand
    from mbctl.hardware.plant_process import PlantProcess

    robot = bench(tmp_path, "coulomb-viscous", {"fc": 0.0, "fv": 0.05}, extra="kt = 0.25\nR = 2.0\narmature = 0.0018\n")
    servo = robot_servos(robot)["servo"]
    fw, p, model = servo.firmware, servo.parameters, bench_model(robot, "servo")
    goal = 0.6

    def excess(q: float) -> float:
        volts = fw.kp * (goal - q) * fw.counts / (2 * math.pi) / fw.divisor / fw.pwm_max * fw.vin
        return p["kt"] * volts / p["R"] - model.mass * 9.81 * model.length * math.sin(q)

    lo, hi = 0.0, goal
    for _ in range(60):
        lo, hi = ((lo + hi) / 2, hi) if excess((lo + hi) / 2) > 0 else (lo, (lo + hi) / 2)
    with PlantProcess(robot, 0.005, PlantConfig(SensorModel(encoder_counts=0, velocity="exact"), substeps=5), realtime_priority=None) as plant:
        plant.enable()
        plant.write(JointCommand.position(np.array([goal])))
        end = time.monotonic() + 60.0
        while (state := plant.read()).t < 2.0:
            assert time.monotonic() < end, "the plant did not advance"
            time.sleep(0.01)
        with pytest.raises(ValueError, match="velocity"):
            plant.write(JointCommand.velocity(np.zeros(1)))
    assert goal - lo > 0.01 and state.q[0] == pytest.approx(lo, abs=1e-4)


def test_the_emulated_xl330_moves_like_the_identified_servo(tmp_path):
    """The same through the Dynamixel driver and the emulated bus in lock-step (goals as counts,
    positions read as counts): within half an encoder count of the identification's simulation."""
    robot = bench(tmp_path)
    goals = logged_goals(1.5)
    emulator = DriveEmulator(lockstep_bus(robot), TruthPlant(robot, 1e-3, np.zeros(1)), lockstep_s=0.005, step_s=0.001)
    with emulator:
        bus = DynamixelBus(robot.actuated_names, lockstep_bus(robot), port=emulator.port_name, mode=CommandMode.POSITION)
        log = RunLog(tmp_path / "emu.npz", log_columns(bus.joint_names))
        with bus:
            replay_positions(bus, goals[:, None], 0.005, log, paced=False)
    run = read_run_log(tmp_path / "emu.npz", "servo", bench_model(robot, "servo"))
    law, p = servo_parameters(robot)
    assert np.abs(run.position).max() > 0.3  # it moved
    assert np.abs(simulate_servo(run, law, p) - run.position).max() <= COUNT / 2 + 1e-9


def test_a_servo_is_recovered_from_an_emulated_run_log(tmp_path):
    """A lock-step emulated run (steps, a sweep, then the torque off) of a bench with known Stribeck
    servo parameters, read back from its NPZ run log and fitted: every parameter within four of
    its standard errors of the truth."""
    truth = {"kt": 0.35, "R": 3.5, "armature": 0.002, "fc": 0.03, "fv": 0.01, "fs": 0.06, "vs": 0.3}
    robot = bench(tmp_path, "stribeck", {k: truth[k] for k in ("fc", "fv", "fs", "vs")}, extra="kt = 0.35\nR = 3.5\narmature = 0.002\n")
    t = np.arange(0, 4.0, 0.005)
    goals = np.where(t < 1.5, 1.4 * np.sign(np.sin(2.1 * t)), 0.9 * np.sin(3.0 * t**1.3))
    goals = np.where(t < 3.0, np.round(goals / COUNT) * COUNT, np.nan)  # last second: torque off
    emulator = DriveEmulator(lockstep_bus(robot), TruthPlant(robot, 1e-3, np.zeros(1)), lockstep_s=0.005, step_s=0.001)
    with emulator:
        bus = DynamixelBus(robot.actuated_names, lockstep_bus(robot), port=emulator.port_name, mode=CommandMode.POSITION)
        log = RunLog(tmp_path / "emu.npz", log_columns(bus.joint_names))
        with bus:
            replay_positions(bus, goals[:, None], 0.005, log, paced=False)
    run = read_run_log(tmp_path / "emu.npz", "servo", bench_model(robot, "servo"))
    assert not run.enabled[-100:].any() and run.enabled[:500].all()
    fit = fit_servo([run], "stribeck", starts=1)
    for name, value in truth.items():
        assert abs(fit.parameters[name] - value) <= 4 * fit.standard_errors[name], (name, fit.parameters[name], fit.standard_errors[name])


def test_the_fit_is_written_back_into_the_robot_toml(tmp_path, cli):
    """identify logs on a run log of the simulated bench, --write-back: the copy loads, its servo has
    the fitted parameters (as the JSON report gives them, to 6 digits) and the old firmware values,
    and every line outside the actuator table is unchanged."""
    robot = bench(tmp_path, "coulomb-viscous", {"fc": 0.02, "fv": 0.01}, extra="kt = 0.35\nR = 3.5\narmature = 0.002\ndivisor = 128\n")
    t = np.arange(0, 2.0, 0.005)
    goals = np.where(t < 1.5, np.round(1.2 * np.sin(2.5 * t) / COUNT) * COUNT, np.nan)
    plant = SimPlant(robot, 0.005, PlantConfig(substeps=5))
    with plant:
        replay_positions(plant, goals[:, None], 0.005, RunLog(tmp_path / "run.npz", log_columns(plant.joint_names)), paced=False)
    config, copy, out = tmp_path / "bench.toml", tmp_path / "fitted.toml", tmp_path / "fit.json"
    r = cli("identify", "logs", tmp_path / "run.npz", "--config", config, "--joint", "servo", "--law", "coulomb-viscous",
            "--stall", "none", "--starts", "1", "--out", out, "--write-back", copy)  # the truth has no saturation
    assert r.code == 0, r.err
    fitted = json.loads(out.read_text())["parameters"]
    servo = robot_servos(load_robot(copy))["servo"]
    assert servo.law == "coulomb-viscous" and servo.firmware == robot_servos(robot)["servo"].firmware
    for name, value in fitted.items():
        assert servo.parameters[name] == pytest.approx(value, rel=1e-5)
    old, new = config.read_text().splitlines(), copy.read_text().splitlines()
    outside = [line for line in old if not line.startswith(("kt", "R ", "vin", "kp", "divisor", "armature", "friction"))]
    assert [line for line in new if line in outside] == outside
    again = cli("identify", "logs", tmp_path / "run.npz", "--config", config, "--joint", "servo", "--starts", "1", "--write-back", copy)
    assert again.code == 2 and "--force" in again.err


def test_the_fitted_stall_is_written_back(tmp_path, cli):
    """identify logs --stall supply_resistance on a run log of a bench whose supply sags (0.5 ohm,
    a stiff P loop near full duty): the fit recovers it and the copy's table carries it, as the
    JSON report gives it, beside the fitted motor."""
    robot = bench(tmp_path, "coulomb-viscous", {"fc": 0.02, "fv": 0.01}, extra="kt = 0.35\nR = 3.5\narmature = 0.002\nsupply_resistance = 0.5\n")
    t = np.arange(0, 3.0, 0.005)
    goals = np.round(1.6 * np.sin(1.5 * t) / COUNT) * COUNT
    plant = SimPlant(robot, 0.005, PlantConfig(substeps=5))
    with plant:
        replay_positions(plant, goals[:, None], 0.005, RunLog(tmp_path / "run.npz", log_columns(plant.joint_names)), paced=False)
    config, copy, out = tmp_path / "bench.toml", tmp_path / "fitted.toml", tmp_path / "fit.json"
    (tmp_path / "bare.toml").write_text(config.read_text().replace("supply_resistance = 0.5\n", ""))
    r = cli("identify", "logs", tmp_path / "run.npz", "--config", tmp_path / "bare.toml", "--joint", "servo", "--law", "coulomb-viscous",
            "--stall", "supply_resistance", "--starts", "1", "--out", out, "--write-back", copy)
    assert r.code == 0, r.err
    fitted = json.loads(out.read_text())["parameters"]
    assert fitted["supply_resistance"] == pytest.approx(0.5, rel=0.05)
    servo = robot_servos(load_robot(copy))["servo"]
    assert servo.firmware.supply_resistance == pytest.approx(fitted["supply_resistance"], rel=1e-5)
    assert servo.parameters["kt"] == pytest.approx(fitted["kt"], rel=1e-5)


def test_the_emulator_refuses_a_servo_geared_unlike_its_drive(tmp_path):
    """An actuator table with gear_ratio 2 behind a [drives] servo with gear_ratio 1: the goal
    counts would turn the modelled servo twice as far, so the emulator refuses the pair."""
    robot = bench(tmp_path, "none", {}, extra="kt = 0.35\nR = 3.5\ngear_ratio = 2.0\n")
    with pytest.raises(ConfigError, match="gear_ratio"):
        DriveEmulator(bus_config(robot), TruthPlant(robot, 1e-3, np.zeros(1)), lockstep_s=0.005)


def _run_log(path, t, q, goal) -> None:
    log = RunLog(path, log_columns(["servo"]))
    for row in zip(t, q, goal):
        values = np.full(len(log.columns), np.nan)
        values[[log.columns.index(c) for c in ("t", "read_ok", "q.servo", "q_ref.servo")]] = (row[0], 1.0, row[1], row[2])
        log.append(values)
    log.close()


def test_a_run_log_at_an_uneven_step_is_resampled(tmp_path):
    """Jittered sample times: positions of a straight-line motion interpolate onto the median
    step exactly, and each grid time gets the goal last sent before it."""
    t = np.arange(40) * 0.01 + np.tile([0.0, 0.002, -0.001, 0.001], 10)
    _run_log(tmp_path / "run.npz", t, 0.5 * t, np.floor(t / 0.1))
    model = bench_model(load_robot(BENCH_DIR / "bench.toml"), "servo")
    log = read_run_log(tmp_path / "run.npz", "servo", model)
    step = np.median(np.diff(t))
    assert np.allclose(np.diff(log.t), step) and np.allclose(log.position, 0.5 * (t[0] + log.t))
    assert np.array_equal(log.goal, np.floor(t[np.searchsorted(t, t[0] + log.t + 1e-12, side="right") - 1] / 0.1))


def test_a_run_log_without_the_joint_names_the_column(tmp_path):
    """Asking a run log for a joint it does not have: a DataError naming the missing column."""
    _run_log(tmp_path / "run.npz", np.arange(20) * 0.01, np.zeros(20), np.zeros(20))
    model = bench_model(load_robot(BENCH_DIR / "bench.toml"), "servo")
    with pytest.raises(DataError) as info:
        read_run_log(tmp_path / "run.npz", "elbow", model)
    assert info.value.field == "q.elbow" and info.value.file == tmp_path / "run.npz"


def test_mbctl_run_drives_a_servo_in_position_mode(cli, tmp_path):
    """``mbctl run --lockstep --controller position`` on the bundled bench: the trajectory's
    positions go to the servo's firmware loop each cycle, and the logged motion is the one
    the identification's simulation gives for the logged goals (same 8 substeps per period),
    to half an encoder count (the plant's encoder quantises)."""
    config = BENCH_DIR / "bench.toml"
    assert cli("trajectory", "quintic", config, "--waypoints", "0; 1.0; -0.5", "--durations", "0.6,0.6", "--out", tmp_path / "traj.csv").code == 0
    r = cli("run", config, "--trajectory", tmp_path / "traj.csv", "--lockstep", "--controller", "position", "--rate", "200",
            "--log", tmp_path / "run.npz", "--summary", tmp_path / "run.json")
    assert r.code == 0, r.err
    robot = load_robot(config)
    run = read_run_log(tmp_path / "run.npz", "servo", bench_model(robot, "servo"))
    law, p = servo_parameters(robot)
    assert np.abs(run.position).max() > 0.3 and run.goal.max() == pytest.approx(1.0, abs=1e-3)
    assert np.abs(simulate_servo(run, law, p, substeps=8) - run.position).max() <= COUNT / 2 + 1e-9


def test_the_position_controller_needs_servos_on_the_simulated_plant(cli, tmp_path):
    """A robot without actuator tables: one line naming the joint and the missing table, exit 2."""
    assert cli("trajectory", "quintic", "scara", "--waypoints", "0,0,0,0; 0.1,0.1,0.1,0.01", "--durations", "0.5", "--out", tmp_path / "t.csv").code == 0
    r = cli("run", "scara", "--trajectory", tmp_path / "t.csv", "--lockstep", "--controller", "position", "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and "[joints.j1.actuator]" in lines[0] and "--controller" in lines[0], r.err
    assert not (tmp_path / "r.npz").exists()


def test_mbctl_simulate_says_it_leaves_the_servo_out(cli, tmp_path):
    """``mbctl simulate`` has no goal positions for a servo: it warns, naming the joint and its table."""
    r = cli("simulate", BENCH_DIR / "bench.toml", "--duration", "0.05", "--out", tmp_path / "sim.npz")
    assert r.code == 0 and "[joints.servo.actuator]" in r.err and "--controller position" in r.err, r.err


def test_a_lugre_servo_is_written_back_with_its_bristle_parameters(tmp_path):
    """The write-back of a LuGre servo keeps sigma0 and sigma1 and the firmware (divisor and
    pwm_limit off their defaults): the copy loads to the same servo."""
    from mbctl.identification.report import write_servo_robot_copy

    robot = bench(tmp_path, "lugre", LUGRE, extra="kt = 0.3\nR = 3.0\narmature = 0.002\ndivisor = 128\npwm_limit = 600\n")
    values = {"kt": 0.3, "R": 3.0, "vin": 7.4, "kp": 400.0, "divisor": 128.0, "pwm_limit": 600.0, "armature": 0.002}
    write_servo_robot_copy(tmp_path / "bench.toml", tmp_path / "copy.toml", "servo", values, "lugre", LUGRE)
    servo = robot_servos(load_robot(tmp_path / "copy.toml"))["servo"]
    assert servo.law == "lugre" and dict(servo.parameters) == {"kt": 0.3, "R": 3.0, "armature": 0.002, **LUGRE}
    assert servo.firmware == robot_servos(robot)["servo"].firmware


@pytest.mark.parametrize(("name", "value"), [("sigma0", 0.0), ("sigma1", -0.1), ("fs", 0.0), ("fc", 0.0)])
def test_a_bad_lugre_servo_names_its_field(tmp_path, name, value):
    """LuGre needs sigma0 > 0, sigma1 >= 0 and fc, fs > 0 (its state equation divides by g >= min(fc, fs))."""
    with pytest.raises(ConfigError) as info:
        robot_servos(bench(tmp_path, "lugre", {**LUGRE, name: value}, extra="kt = 0.35\nR = 3.0\n"))
    assert info.value.field == f"joints.servo.actuator.friction.{name}"
