"""``mbctl commission`` on a two-joint arm in lock-step: the envelope, the whole command end to end, the
adopt-only-if-better rule, and resuming after a stop."""

from __future__ import annotations

import json
import math
import re
import shutil

import numpy as np
import pytest

from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.regressor import base_parameters, inertial_parameters
from mbctl.errors import InputError
from mbctl.hardware.loop_support import SafetyLimits
from mbctl.hardware.sim import truth_model
from mbctl.identification.commission import Envelope, Margins, envelope_robot
from mbctl.identification.commission.envelope import start_pose

URDF = """<?xml version="1.0"?>
<robot name="arm2">
  <link name="base"/>
  <link name="link1"><inertial><origin xyz="0.2 0 0"/><mass value="3.0"/><inertia ixx="0.005" iyy="0.045" izz="0.045" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="link2"><inertial><origin xyz="0.15 0 0"/><mass value="3.0"/><inertia ixx="0.005" iyy="0.05" izz="0.05" ixy="0" ixz="0" iyz="0"/></inertial></link>
  <link name="tool"/>
  <joint name="j1" type="revolute"><parent link="base"/><child link="link1"/><origin xyz="0 0 0.5"/><axis xyz="0 1 0"/>
    <limit lower="-2.5" upper="2.5" velocity="3.0" effort="80"/></joint>
  <joint name="j2" type="revolute"><parent link="link1"/><child link="link2"/><origin xyz="0.4 0 0"/><axis xyz="0 1 0"/>
    <limit lower="-2.5" upper="2.5" velocity="3.0" effort="40"/></joint>
  <joint name="tool_joint" type="fixed"><parent link="link2"/><child link="tool"/><origin xyz="0.3 0 0"/></joint>
</robot>
"""

# the model; [plant] is the arm: a 0.5 kg tool the model lacks, friction 1.6 times the model's
TOML = """urdf = "arm2.urdf"
gravity = [0.0, 0.0, -9.81]
[joints.j1]
friction = { law = "stribeck", fc = 1.0, fs = 1.3, vs = 0.05, delta = 2.0, fv = 0.8 }
[joints.j2]
friction = { law = "stribeck", fc = 0.6, fs = 0.8, vs = 0.05, delta = 2.0, fv = 0.5 }
[control.computed-torque]
kp = 400.0
kd = 40.0
[control.collision]
reaction = "stop"
[plant]
encoder_counts = 524288
payload = { frame = "tool", mass = 0.5, com = [0.0, 0.0, 0.0] }
[plant.joints.j1]
friction = { law = "stribeck", fc = 1.6, fs = 2.1, vs = 0.05, delta = 2.0, fv = 1.3 }
[plant.joints.j2]
friction = { law = "stribeck", fc = 1.0, fs = 1.3, vs = 0.05, delta = 2.0, fv = 0.8 }
"""

# short sweeps and excitation: the whole command in about 10 s of computing
FAST = ("--lockstep", "--start", "j1=0", "--speeds", "8", "--max-leg", "1", "--period", "5", "--hold-drift", "0.05")


@pytest.fixture(scope="module")
def arm(tmp_path_factory):
    folder = tmp_path_factory.mktemp("arm2")
    (folder / "arm2.urdf").write_text(URDF)
    (folder / "arm2.toml").write_text(TOML)
    return folder / "arm2.toml"


@pytest.fixture(scope="module")
def commissioned(arm, tmp_path_factory):
    """The whole command, once: (exit code, stdout, stderr, DIR)."""
    from mbctl.cli import main

    out = tmp_path_factory.mktemp("commission") / "out"
    code = main(["commission", str(arm), "--out", str(out), *FAST])
    return code, out


def test_envelope_is_the_limits_less_the_margins(arm):
    """Positions lose the margin's share of the half range at each end; speed and torque their share."""
    robot = load_robot(arm)
    env = Envelope.of(robot, Margins(position=0.1, velocity=0.2, torque=0.25))
    assert env.lower == pytest.approx([-2.25, -2.25]) and env.upper == pytest.approx([2.25, 2.25])
    assert env.velocity == pytest.approx([2.4, 2.4]) and env.torque == pytest.approx([60.0, 30.0])


def test_runs_keep_to_the_envelope_and_only_log_collisions(arm):
    """The enveloped robot's run limits are the envelope's; its collision reaction is none unless asked."""
    robot = load_robot(arm)
    env = Envelope.of(robot, Margins())
    limits = SafetyLimits.of(envelope_robot(robot, env))
    assert limits.upper == pytest.approx(env.upper) and limits.effort == pytest.approx(env.torque)
    assert envelope_robot(robot, env).spec.control.collision.reaction == "none"
    assert envelope_robot(robot, env, detect_collisions=True).spec.control.collision.reaction == "stop"


def test_start_outside_the_envelope_is_refused(arm):
    """A start pose beyond the envelope is an input error naming --start; one inside is taken as given."""
    robot = load_robot(arm)
    env = Envelope.of(robot, Margins())
    assert start_pose(robot, env, {"j2": 1.0})[robot.joint("j2").idx_v] == 1.0
    with pytest.raises(InputError, match="outside the envelope") as err:
        start_pose(robot, env, {"j2": 2.4})
    assert err.value.field == "--start"


@pytest.mark.slow
def test_written_back_model_is_closer_to_the_truth(arm, commissioned):
    """The adopted robot's base parameters and friction are closer to the arm's truth than the nominal's."""
    code, out = commissioned
    assert code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["adopted"] and (out / "report.html").is_file() and (out / "friction.png").is_file()
    adopted = load_robot(out / "arm2_commissioned.toml")
    nominal = load_robot(arm)
    truth, _ = truth_model(nominal)
    base = base_parameters(nominal)
    beta = {k: base.base(inertial_parameters(r)) for k, r in (("truth", truth), ("nominal", nominal), ("adopted", adopted))}
    assert np.linalg.norm(beta["adopted"] - beta["truth"]) < 0.1 * np.linalg.norm(beta["nominal"] - beta["truth"])
    for j in ("j1", "j2"):
        law, true = adopted.joint(j).friction.law, truth.joint(j).friction.law
        assert law.fc == pytest.approx(true.fc, rel=0.01) and law.fv == pytest.approx(true.fv, rel=0.02)
    rows = report["steps"]["verify"]["joints"]
    assert all(r["torque_ratio"] > 3 and r["tracking_ratio"] > 3 for r in rows.values())


@pytest.mark.slow
def test_worse_model_is_not_written_back(arm, commissioned, tmp_path, cli):
    """A candidate made worse (link 2 at three times its identified mass) fails verification and is not written."""
    out = tmp_path / "out"
    shutil.copytree(commissioned[1], out)
    candidate = out / "identify" / "candidate.toml"
    text = candidate.read_text()
    text = re.sub(r"(\[joints\.j2\][^\[]*?inertial = \{ mass = )([0-9.eE+-]+)", lambda m: f"{m.group(1)}{3 * float(m.group(2)):.6g}", text)
    assert text != candidate.read_text()
    candidate.write_text(text)
    r = cli("commission", arm, "--out", out, *FAST, "--from", "verify")
    assert r.code == 0, r.err
    verify = json.loads((out / "verify" / "result.json").read_text())
    assert not verify["adopted"] and "NOT adopted" in r.out
    assert not (out / "arm2_commissioned.toml").exists()
    assert verify["torque_gain"] < 1 and "worse" in verify["verdict"]


def test_resume_needs_the_earlier_results(arm, tmp_path, cli):
    """--from a later step in an empty folder is one line naming the missing result, exit 2."""
    r = cli("commission", arm, "--out", tmp_path / "out", "--from", "identify", "--lockstep", "--start", "j1=0")
    assert r.code == 2
    assert r.err.count("\n") == 1 and "preflight/result.json" in r.err and "--from preflight" in r.err


@pytest.mark.slow
def test_a_stopped_run_keeps_its_steps_and_resumes(arm, commissioned, tmp_path, cli):
    """A step that stops leaves the earlier results and prints the resume command; resuming finishes it."""
    out = tmp_path / "out"
    shutil.copytree(commissioned[1], out)
    # an excitation whose period cannot carry four harmonics at the rate stops the excitation step
    r = cli("commission", arm, "--out", out, *FAST[:-2], "--from", "excitation", "--period", "0.003")
    assert r.code == 1
    assert "resume with: mbctl commission" in r.err and "--from excitation" in r.err
    assert (out / "friction" / "result.json").is_file() and not (out / "excitation" / "result.json").exists()
    assert not (out / "report.json").exists() or not (out / "report" / "result.json").exists()
    r = cli("commission", arm, "--out", out, *FAST, "--from", "excitation")
    assert r.code == 0, r.err
    assert json.loads((out / "verify" / "result.json").read_text())["adopted"]
    assert math.isfinite(json.loads((out / "report.json").read_text())["arm_time_s"])


@pytest.mark.slow
def test_ctrl_c_keeps_the_finished_steps_and_resumes(arm, tmp_path):
    """SIGINT during the friction sweeps: exit 130 with the resume command; resuming from there finishes."""
    import os
    import signal
    import subprocess
    import sys
    import time

    out = tmp_path / "out"
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "mbctl.cli", "commission", str(arm), "--out", str(out), "--lockstep", "--start", "j1=0", "--hold-drift", "0.05"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline = time.monotonic() + 300  # waits for an event (the pre-flight's result), generous on a loaded machine
    while not (out / "preflight" / "result.json").exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)  # the friction step runs for ~25 s of computing from here
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err
    step = re.search(r"--from (\w+)", err).group(1)
    assert "interrupted" in err and "torque off" in err and step in ("friction", "excitation")
    assert (out / "preflight" / "result.json").is_file() and not (out / step / "result.json").exists()
    from mbctl.cli import main

    assert main(["commission", str(arm), "--out", str(out), *FAST, "--from", step]) == 0
    assert json.loads((out / "report.json").read_text())["adopted"]


@pytest.mark.parametrize(
    ("args", "field"),
    [
        (("--position-margin", "1.5"), "--position-margin"),
        (("--joints", "j9"), "--joints"),
        (("--start", "j1=2.4"), "--start"),
        (("--speeds", "4"), "--speeds"),
        (("--friction-law", "lugre"), "--friction-law"),
        (("--emulate",), "--emulate"),
    ],
)
def test_bad_options_are_one_line_and_write_nothing(arm, tmp_path, cli, args, field):
    """Each bad option exits 2 with one line naming it, before the output folder is made."""
    out = tmp_path / "out"
    r = cli("commission", arm, "--out", out, "--lockstep", *args)
    assert r.code == 2 and r.err.count("\n") == 1 and field in r.err, r.err
    assert not out.exists()


def test_the_command_line_knows_the_steps():
    """The CLI's step names (kept light for --help) are the library's."""
    from mbctl.cli.commands.commission import STEPS as CLI_STEPS
    from mbctl.identification.commission import STEPS

    assert CLI_STEPS == STEPS


def test_a_step_moves_an_arm_left_off_the_start_pose_back_first(arm, tmp_path, monkeypatch):
    """Drives stay where a run left them: a step reads them, and only where a joint is off the start
    pose runs a quintic from there back to it (with the model it is given) before its own run."""
    import contextlib
    from types import SimpleNamespace

    import mbctl.identification.commission.context as context
    from mbctl.hardware.loop import RunSummary
    from mbctl.hardware.session import SessionOptions
    from mbctl.identification.commission import Commission, CommissionSettings

    robot = load_robot(arm)
    c = Commission(robot, SessionOptions(plant="canopen", interface="udp_multicast", lockstep=True), CommissionSettings(start={"j1": 0.0}), tmp_path)
    where, runs = [c.q0 + [0.0, 0.3]], []

    @contextlib.contextmanager
    def backend(*args):
        yield SimpleNamespace(read=lambda: SimpleNamespace(q=where[0]))

    def run(model, traj, options, log):
        runs.append((model, traj, options.law))
        return RunSummary(stop_reason="completed")

    monkeypatch.setattr(context, "open_backend", backend)
    monkeypatch.setattr(context, "run_session", run)
    c.bring_to_start("verify", c.run_robot)
    (model, traj, law), = runs
    assert model is c.run_robot and law == "computed-torque"
    assert traj.q[0] == pytest.approx(c.q0 + [0.0, 0.3]) and traj.q[-1] == pytest.approx(c.q0)
    assert np.abs(traj.dq).max(axis=0)[1] <= 0.5 * robot.joints[1].limits.velocity + 1e-9  # at most half the speed limit
    where[0] = c.q0 + 5e-4
    c.bring_to_start("verify")
    assert len(runs) == 1  # within a milliradian: no move
    c.options = SessionOptions(plant="sim", lockstep=True)
    where[0] = c.q0 + 1.0
    c.bring_to_start("verify")
    assert len(runs) == 1  # the simulated plant starts each run at its trajectory's start
