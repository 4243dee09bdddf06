"""The Franka backend against franky-sim (an FR3 in MuJoCo behind libfranka's protocol), each test with a
simulator of its own in its own process, on a loopback address of its own.

Robot-paced runs on a loaded machine may miss states (the run is then degraded, not stopped): the
overrun policy is off here, so what stops a run is the robot's or libfranka's own judgement (a reflex,
no state within the state timeout, 1 s as libfranka's own); franky-sim's Python loop stalls for tens of
milliseconds on a busy machine.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.franka.arm import FrankaArm
from mbctl.hardware.franka.simulator import franky_sim_available, franky_sim_process, kill_when_logged
from mbctl.hardware.interface import JointCommand
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.session import SessionOptions, run_session

pytest.importorskip("pylibfranka", reason='libfranka\'s Python bindings are not installed (pip install "mbctl[franka]")')
if franky_sim_available():
    pytest.skip(franky_sim_available(), allow_module_level=True)
pytestmark = pytest.mark.slow

START = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
GOAL = START + np.array([0.3, 0.2, -0.3, 0.3, 0.3, 0.3, 0.4])
NO_OVERRUN_LIMIT = OverrunPolicy(max_fraction=1.0, max_consecutive=0)
TRACKING_BOUND = 0.02  # rad: measured 0.0043 (joint 7, the model's friction 0.3 N·m above MuJoCo's) at load 2 on 2 cores


@pytest.fixture(scope="module")
def fr3():
    """The bundled FR3 with a state timeout of libfranka's own second (a stalled simulator is not a lost robot)."""
    robot = load_robot("fr3")
    spec = dataclasses.replace(robot.spec.franka, state_timeout_s=1.0)
    return dataclasses.replace(robot, spec=dataclasses.replace(robot.spec, franka=spec))


def franky_gravity_model() -> tuple[pin.Model, pin.Data]:
    """franky-sim's own model of the gravity it adds, built here from its URDF and its hand's documented
    inertial (0.73 kg at (-0.01, 0, 0.03) m in the flange frame): the independent answer."""
    import franky_sim

    model = pin.buildModelFromUrdf(str(Path(franky_sim.__file__).parent / "assets" / "fr3_clean.urdf"))
    flange = model.frames[model.getFrameId("link8")]
    model.inertias[flange.parentJoint] += flange.placement.act(pin.Inertia(0.73, np.array([-0.01, 0.0, 0.03]), np.diag([0.001, 0.0025, 0.0017])))
    return model, model.createData()


def test_a_gentle_move_at_1khz_completes(fr3, tmp_path):
    """A 2 s quintic move under computed torque against franky-sim started at its start: the run completes
    (no reflex, no lost connection), tracks within the bound, ends by handing the arm to the robot's own
    hold, and says whose gravity it removed; the robot's own report (its external torque estimate) is kept."""
    traj = quintic_rest_to_rest(np.array([START, GOAL]), [2.0], 1000.0, fr3.joint_names)
    options = SessionOptions(plant="franka", emulate=True, overrun=NO_OVERRUN_LIMIT)
    summary = run_session(fr3, traj, options, tmp_path / "run.npz")
    assert summary.completed, summary.stop_reason
    assert summary.cycles >= 2000 and summary.max_abs_error < TRACKING_BOUND, summary.tracking_rms
    assert summary.end.endswith("then torque control finished (motion_finished): the robot holds its position under its own joint impedance")
    assert "gravity removed from the commands: libfranka's model of the robot" in summary.sensing and "franky-sim" in summary.sensing
    robot = summary.plant_timing
    assert robot["samples"] == summary.cycles and robot["control_command_success_rate"] == pytest.approx(1.0)
    assert summary.overruns <= robot["missed_samples"]  # a late cycle is one after which the robot sent states the loop missed
    log = np.load(tmp_path / "run.npz")
    assert np.allclose(log["q"][-1], GOAL, atol=TRACKING_BOUND)
    # franky-sim fills the robot's external torque estimate with tau_J: its kept RMS is the logged effort's
    kept = [robot[f"tau_ext_hat_rms.{n}"] for n in fr3.actuated_names]
    assert np.allclose(kept, np.sqrt(np.mean(log["effort"] ** 2, axis=0)), rtol=1e-6)


def test_gravity_is_removed_as_the_robot_adds_it(fr3):
    """The gravity the backend removes (libfranka's model, on the served URDF) equals pinocchio's on franky-sim's
    own model at the same q (libfranka's state socket got the state timeout, the thread kept its scheduling); and holding the arm with the full gravity torque as mbctl's command, the torque the
    simulated robot applied (tau_J) is that command."""
    model, data = franky_gravity_model()
    q0 = START + 0.2
    spec = dataclasses.replace(fr3.spec.franka, state_timeout_s=0.75)
    scheduling = os.sched_getscheduler(0), os.sched_getparam(0)
    with franky_sim_process(q0) as sim, FrankaArm(fr3.actuated_names, dataclasses.replace(spec, address=sim.address)) as arm:
        assert arm.state_timeout_s == 0.75  # libfranka's state socket found and given the timeout
        # libfranka raises the connecting thread to SCHED_FIFO 99: the backend puts it back; the simulator runs normal
        assert (os.sched_getscheduler(0), os.sched_getparam(0)) == scheduling and os.sched_getscheduler(sim.process.pid) == os.SCHED_OTHER
        state = arm.read()
        g_pin = pin.computeGeneralizedGravity(model, data, state.q)
        assert np.allclose(arm._g, g_pin, atol=1e-3), (arm._g, g_pin)
        arm.enable()
        applied, commanded = [], []
        for _ in range(300):
            state = arm.read()
            if commanded:
                applied.append(state.effort)
            tau = pin.computeGeneralizedGravity(model, data, state.q) + 50.0 * (q0 - state.q) - 5.0 * state.dq
            commanded.append(tau)
            arm.write(JointCommand.torque(tau))
        assert arm.hand_over().startswith("torque control finished")
        assert (os.sched_getscheduler(0), os.sched_getparam(0)) == scheduling
    error = np.abs(np.array(applied) - np.array(commanded[:-1]))
    assert error.max() < 0.05, error.max(axis=0)  # N·m: the arm moves a hair between a command and its step


def test_a_killed_simulator_stops_the_run(fr3, tmp_path, cli):
    """franky-sim killed mid-run: mbctl run exits 1, its stop reason names libfranka's reason, and the log keeps
    the cycles before."""
    traj = quintic_rest_to_rest(np.array([START, GOAL]), [4.0], 1000.0, fr3.joint_names)
    csv = tmp_path / "move.csv"
    write_trajectory(csv, traj)
    toml = tmp_path / "fr3.toml"
    text = Path(fr3.source).read_text().replace('urdf = "fr3/fr3.urdf"', f'urdf = "{Path(fr3.source).parent / "fr3" / "fr3.urdf"}"')
    toml.write_text(re.sub(r"(?m)^state_timeout_ms = .*$", "state_timeout_ms = 1000", text))
    with franky_sim_process(START) as sim:
        killer = kill_when_logged(tmp_path / "run.npz", 500, sim.process.pid)
        r = cli("run", toml, "--bus", "franka", "--robot-ip", sim.address, "--trajectory", csv, "--log", tmp_path / "run.npz",
                "--summary", tmp_path / "s.json", "--max-overrun-fraction", "1", "--max-consecutive-overruns", "0")  # fmt: skip
        if killer.poll() is None:  # the run ended before its 500th cycle: no kill
            killer.kill()
        killer.wait()
    assert r.code == 1 and killer.returncode == 0, r.out + r.err
    summary = json.loads((tmp_path / "s.json").read_text())
    # killed while the loop waited for a state, or while it computed the command
    reasons = ("readOnce: libfranka: UDP receive: Timeout", "writeOnce: libfranka: server closed connection")
    assert any(reason in summary["stop_reason"] for reason in reasons), summary["stop_reason"]
    assert 500 <= summary["cycles"] < 4000
