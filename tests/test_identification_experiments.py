"""Experiment plans from [identification] and the host-side loops that run them on the simulated plant."""

from __future__ import annotations

import tempfile
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError
from mbctl.hardware.drive_config import bus_config
from mbctl.hardware.dynamixel import DynamixelBus
from mbctl.hardware.emulator import DriveEmulator
from mbctl.hardware.interface import JointState
from mbctl.hardware.sim import SimPlant, TruthPlant, truth_model
from mbctl.identification.config import identification_settings
from mbctl.identification.experiments import (
    ExperimentController,
    presliding_timeline,
    run_experiment,
)
from mbctl.identification.fitting import fit_friction
from mbctl.identification.logs import TEST_CYCLE, TEST_NONE, TEST_RAMP, TEST_STEP
from mbctl.identification.plan import ControlGains, constant_speed_timeline
from mbctl.identification.processing import find_segments, process_constant_speed

RIG_TEXT = '''urdf = "{urdf}"
gravity = [0.0, 0.0, -9.81]
[joints.j1]
friction = {{ law = "stribeck", fc = 1.0, fs = 1.3, vs = 0.03, fv = 0.1 }}
[identification]
settle_s = 0.3
count = 10
[identification.joints.j1]
range = [-0.4, 0.4]
count = 12
'''


@pytest.fixture
def rig(tmp_path, configs):
    path = tmp_path / "rig.toml"
    path.write_text(RIG_TEXT.format(urdf=(configs / "friction_rig.urdf").as_posix()))
    return load_robot(path)


def test_plan_defaults_come_from_the_friction_prior_and_the_limits(configs):
    """scara j1: grid 0.1*vs .. 40*vs (vs of its Stribeck law) capped by what the range allows, densest at vs."""
    s = identification_settings(load_robot(configs / "scara.toml"), "j1")
    p = s.constant_speed
    assert p.range == (-0.5, 0.5) and len(p.speeds) == 25
    assert min(p.speeds) == pytest.approx(0.005) and max(p.speeds) == pytest.approx(0.75 * 1.0 / (2 * 0.2 + 0.1))
    assert s.presliding.breakaway == 1.1 and s.gains == ControlGains()


def test_joint_table_overrides_the_general_one_and_options_override_both(rig):
    s = identification_settings(rig, "j1")
    assert s.constant_speed.settle_s == 0.3 and len(s.constant_speed.speeds) == 12 and s.constant_speed.range == (-0.4, 0.4)
    s = identification_settings(rig, "j1", {"count": 8, "range": [-0.3, 0.3], "settle_s": None})
    assert len(s.constant_speed.speeds) == 8 and s.constant_speed.range == (-0.3, 0.3) and s.constant_speed.settle_s == 0.3


def test_randomized_order_is_a_seeded_permutation(rig):
    base = identification_settings(rig, "j1").constant_speed.speeds
    a = identification_settings(rig, "j1", {"randomize": True, "seed": 3}).constant_speed.speeds
    b = identification_settings(rig, "j1", {"randomize": True, "seed": 3}).constant_speed.speeds
    assert a == b and a != base and sorted(a) == sorted(base)


def test_a_joint_without_a_stribeck_velocity_needs_speeds(configs):
    """scara j3 has a Coulomb-viscous law: no grid without identification.speeds or stribeck_velocity."""
    s = identification_settings(load_robot(configs / "scara.toml"), "j3")
    assert s.constant_speed is None and "stribeck_velocity" in s.constant_speed_problem
    s = identification_settings(load_robot(configs / "scara.toml"), "j3", {"speeds": [0.1, 0.3]})
    assert s.constant_speed.speeds == (0.1, 0.3)


def test_unknown_fields_name_their_place(tmp_path, configs):
    path = tmp_path / "r.toml"
    path.write_text(f'urdf = "{(configs / "friction_rig.urdf").as_posix()}"\n[identification.joints.j1]\nrnage = [0, 1]\n')
    with pytest.raises(ConfigError, match="identification.joints.j1.rnage.*did you mean 'range'"):
        identification_settings(load_robot(path), "j1")


def test_constant_speed_legs_on_the_scara_hold_the_other_joints(configs):
    """j1 of the SCARA (LuGre truth, payload) at 0.2 and 0.5 rad/s: the cruise speed is the commanded
    one, j2..j4 stay put, and gravity (vertical axes) logs as zero."""
    robot = load_robot(configs / "scara.toml")
    s = identification_settings(robot, "j1", {"speeds": [0.2, 0.5], "range": [-0.3, 0.3]})
    timeline = constant_speed_timeline(s.constant_speed, 0.0)
    truth, cfg = truth_model(robot)
    controller = ExperimentController(robot, "j1", timeline, s.gains)
    with tempfile.TemporaryDirectory() as tmp:
        with SimPlant(truth, 1e-3, cfg) as plant:
            run = run_experiment(plant, robot, controller, rate_hz=1000.0, paced=False, npz_path=Path(tmp) / "r.npz", kind="constant-speed")
            held = np.load(Path(tmp) / "r.npz")["q"][:, 1:]
    assert run.summary.stop_reason == "completed"
    assert np.abs(held).max() < 2e-3  # rad (m for j4): held by their loops while j1 accelerates
    log = run.constant_speed
    segs, dropped, _ = find_segments(log, 0.3)
    assert sorted(round(x.speed, 6) for x in segs) == [-0.5, -0.2, 0.2, 0.5] and not dropped
    for seg in segs:
        t, q = log.t[seg.start : seg.stop], log.q[seg.start : seg.stop]
        assert np.polyfit(t, q, 1)[0] == pytest.approx(seg.speed, rel=2e-3)
    assert np.abs(log.tau_g).max() < 1e-9


def test_switches_between_torque_and_position_mode_are_bumpless(configs):
    """A joint that slips in a ramp and then rests where it is: the hold's first torque is the ramp's last."""
    robot = load_robot(configs / "friction_rig.toml")
    s = identification_settings(robot, "j1")
    plan = s.presliding
    timeline = presliding_timeline(plan)
    controller = ExperimentController(robot, "j1", timeline, s.gains, plan)
    ramp = next(p for p in timeline.phases if p.kind == "ramp")
    state = lambda q: JointState(t=0.0, q=np.array([q]), dq=np.zeros(1), effort=np.zeros(1))  # noqa: E731
    for t in np.arange(0.0, ramp.t0, 0.002):  # the earlier phases, the joint not moving
        controller(float(t), state(0.0))
    taus = [controller(float(t), state(0.0)) for t in np.arange(ramp.t0, ramp.t0 + 1.0, 0.002)]
    assert taus[-1][0] - taus[0][0] == pytest.approx(ramp.rate * (len(taus) - 1) * 0.002, rel=1e-6)
    slipped = controller(ramp.t0 + 1.0, state(2 * plan.slip_distance))  # moved: the ramp ends here
    held = controller(ramp.t0 + 1.002, state(2 * plan.slip_distance))
    assert held[0] == pytest.approx(taus[-1][0], abs=1e-9) and slipped[0] > taus[-1][0]
    assert controller.labels[-2:] == [TEST_NONE, TEST_NONE] and controller.labels[-3] == TEST_RAMP


def test_presliding_phases_are_labelled_and_every_ramp_slips(configs):
    """Cycle, steps and ramps carry their labels; every ramp ends when the joint slipped."""
    robot = load_robot(configs / "friction_rig.toml")
    s = identification_settings(robot, "j1")
    plan = s.presliding
    timeline = presliding_timeline(plan)
    truth, cfg = truth_model(robot)
    controller = ExperimentController(robot, "j1", timeline, s.gains, plan)
    with tempfile.TemporaryDirectory() as tmp:
        with SimPlant(truth, 1.0 / s.rate_hz, cfg) as plant:
            run = run_experiment(plant, robot, controller, rate_hz=s.rate_hz, paced=False, npz_path=Path(tmp) / "r.npz", kind="presliding")
    log = run.presliding
    assert [len(log.runs(x)) for x in (TEST_CYCLE, TEST_STEP, TEST_RAMP)] == [1, 1, 2 * len(plan.ramp_rates)]
    assert not run.notes
    for a, b in log.runs(TEST_RAMP):
        assert abs(log.q[b] - log.q[a]) > plan.slip_distance


@pytest.mark.slow
def test_constant_speed_test_through_the_dynamixel_driver(configs):
    """The same experiment through DynamixelBus in current mode, against the drive emulator in
    this process, stepped in lock-step (a fake clock advanced one period per write): the log
    gives the SCARA j3's Coulomb-viscous truth (fc 0.2 N·m, fv 0.02 N·m·s/rad)."""
    robot = load_robot(configs / "scara.toml")
    truth, _ = truth_model(robot)
    s = identification_settings(robot, "j3", {"speeds": [0.2, 0.4, 0.7, 1.0], "range": [-0.4, 0.4], "rate_hz": 500.0})
    bus = replace(bus_config(robot), latency_s=0.1)  # no deadline in lock-step: the longest reply timeout
    now = [0.0]
    controller = ExperimentController(robot, "j3", constant_speed_timeline(s.constant_speed, 0.0), s.gains)
    with DriveEmulator(bus, TruthPlant(truth), clock=lambda: now[0]) as emu:
        with DynamixelBus(robot.actuated_names, bus, port=emu.port_name, clock=lambda: now[0]) as drives:
            write = drives.write

            def lockstep_write(command):
                write(command)
                now[0] += 1.0 / s.rate_hz
                emu.advance(now[0])

            drives.write = lockstep_write
            with tempfile.TemporaryDirectory() as tmp:
                run = run_experiment(drives, robot, controller, rate_hz=s.rate_hz, paced=False, npz_path=Path(tmp) / "r.npz", kind="constant-speed")
    assert run.summary.stop_reason == "completed"
    fit = fit_friction(process_constant_speed(run.constant_speed).points, "coulomb-viscous")
    assert fit.values["fc"] == pytest.approx(0.2, rel=0.02) and fit.values["fv"] == pytest.approx(0.02, rel=0.1)
