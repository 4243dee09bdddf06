"""The momentum observer: a known push in closed loop (magnitude and joint), the reactions to a
detection, the offline command on logs (a run log, the real Panda log), and bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from mbctl.config.control import EndSpec
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot

ROOT = Path(__file__).resolve().parent.parent
PANDA_LOG = ROOT / "data" / "panda-excitation" / "train.csv"
Q0 = np.array([0, -1.2, 1.4, -1.6, -1.57, 0])
PUSH = {"frame": "wrist_1_link", "force": [0.0, 0.0, -20.0], "start": 0.3, "duration": 0.2}  # the end of the forearm


def _ur5(tmp_path: Path, reaction: str, push: dict = PUSH) -> Path:
    """The bundled UR5 with a reaction and a push on its plant."""
    text = load_robot("ur5").source.read_text().replace('reaction = "stop"', f'reaction = "{reaction}"')
    text += f"\n[plant.contact]\nframe = \"{push['frame']}\"\nforce = {push['force']}\nstart = {push['start']}\nduration = {push['duration']}\n"
    path = tmp_path / f"ur5_{reaction}.toml"
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def hold_still(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("hold") / "hold.csv"
    write_trajectory(path, quintic_rest_to_rest(np.array([Q0, Q0]), [0.8], 1000.0, load_robot("ur5").joint_names))
    return path


@pytest.fixture(scope="module")
def move(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("move") / "move.csv"
    end = Q0 + np.array([0.6, 0.4, -0.4, 0.4, 0.5, 0.4])
    write_trajectory(path, quintic_rest_to_rest(np.array([Q0, end]), [1.0], 1000.0, load_robot("ur5").joint_names))
    return path


def _run(cli, robot, traj, tmp_path, name):
    r = cli("run", robot, "--trajectory", traj, "--lockstep", "--log", tmp_path / f"{name}.npz", "--summary", tmp_path / f"{name}.json")
    return r, json.loads((tmp_path / f"{name}.json").read_text()), np.load(tmp_path / f"{name}.npz")


def test_observer_measures_a_known_push(cli, tmp_path, move):
    """A 20 N push on the forearm of a moving UR5: the observer follows J^T F (pinocchio's frame
    Jacobian at the measured pose) on the joints it loads, and reads ~0 before and after.
    (In motion: at rest, static friction would take up part of the push, which no observer can tell
    from it.)"""
    r, summary, log = _run(cli, _ur5(tmp_path, "none"), move, tmp_path, "push")
    assert r.code == 3 and summary["stop_reason"].startswith("completed, degraded: collision detected: tau_ext.shoulder_lift_joint")
    robot = load_robot("ur5")
    t, tau_ext = log["t"], log["tau_ext"]
    k = int(np.searchsorted(t, 0.49))  # 190 ms into the push: 38 observer time constants
    data = robot.create_data()
    J = pin.computeFrameJacobian(robot.model, data, robot.configuration(log["q"][k]), robot.model.getFrameId("wrist_1_link"), pin.LOCAL_WORLD_ALIGNED)
    expected = J[:3].T @ np.array(PUSH["force"])
    assert np.abs(expected[1:3]).min() > 5.0  # the push loads shoulder_lift and elbow
    assert np.allclose(tau_ext[k], expected, atol=0.03 * np.abs(expected).max())
    before, after = tau_ext[(t > 0.05) & (t < 0.29)], tau_ext[(t > 0.6) & (t < 0.95)]
    assert np.abs(before[:, :5]).max() < 0.5 and np.abs(after).max() < 0.5
    # wrist_3 sticks until its command passes break-away (0.14 s): the static friction beyond the
    # model's smoothed one reads as up to 0.92 N·m there, 55 % of its threshold 1.68
    assert np.abs(before[:, 5]).max() < 0.6 * 1.68


def test_a_push_stops_the_arm_within_ten_milliseconds(cli, tmp_path, move):
    """Reaction stop: a push on the moving arm, torque off within 10 ms, the joint named, the log kept."""
    r, summary, log = _run(cli, _ur5(tmp_path, "stop"), move, tmp_path, "stop")
    reason = summary["stop_reason"]
    assert r.code == 1 and reason.startswith("collision detected: tau_ext.shoulder_lift_joint") and reason.endswith("torque off")
    detected_at = float(reason.split("at t = ")[1].split(" s")[0])
    assert PUSH["start"] < detected_at <= PUSH["start"] + 0.010
    # the detecting cycle is logged with its estimate, and nothing was commanded in it
    assert log["t"][-1] == pytest.approx(detected_at, abs=5e-4) and np.isnan(log["tau"][-1]).all() and summary["collision"] in reason
    assert np.abs(log["tau_ext"][-1, 1]) > 7.0 and summary["end"].startswith("stopped: ")


def test_hold_reaction_keeps_the_arm_compliantly_in_place(cli, tmp_path, hold_still):
    """Reaction hold: the run goes on in gravity compensation with soft springs; under the push the
    arm gives way a little, and after it comes to rest near where it was held (the soft springs
    leave it where joint friction holds it), and the reason says so."""
    r, summary, log = _run(cli, _ur5(tmp_path, "hold"), hold_still, tmp_path, "hold")
    assert r.code == 1 and summary["stop_reason"].endswith("held compliantly to the end") and summary["cycles"] == 800 + round(EndSpec.hold_s * 1000)
    q, t = log["q"], log["t"]
    held = q[np.searchsorted(t, 0.31)]
    assert 0.005 < np.abs(q[t < 0.5] - held).max() < 0.1  # it yields to the push
    assert np.abs(q[-1] - held).max() < 0.05 and np.abs(log["dq"][-1]).max() < 0.01  # at rest near it


def test_observe_command_finds_the_push_in_a_run_log(cli, tmp_path, move):
    """mbctl observe on a run log: the push found on shoulder_lift within 10 ms, columns as documented."""
    _run(cli, _ur5(tmp_path, "none"), move, tmp_path, "logged")
    r = cli("observe", "ur5", tmp_path / "logged.npz", "--out", tmp_path / "obs.csv")
    assert r.code == 0, r.err
    first = [line for line in r.out.splitlines() if line.startswith("detected at")][0]
    start = float(first.split("t = ")[1].split(" s")[0])
    assert "shoulder_lift_joint" in first and PUSH["start"] < start <= PUSH["start"] + 0.010
    header = (tmp_path / "obs.csv").read_text().splitlines()[0].split(",")
    names = load_robot("ur5").joint_names
    assert header == ["t", *(f"tau_ext.{j}" for j in names), *(f"detected.{j}" for j in names), "detected"]


@pytest.mark.slow
def test_real_panda_log_free_motion_and_a_torque_bump(cli, tmp_path):
    """Real Panda log: a model identified on the first half; on the second half no detection at the
    default thresholds; a 5 N·m bump added to one joint's measured torque for 0.1 s is detected on
    that joint within 20 ms."""
    rows = list(csv.reader(PANDA_LOG.open()))
    header, body = rows[0], rows[1:]
    t = np.array([float(row[0]) for row in body])
    half = t[-1] / 2
    for name, part in (("first", [row for row, ti in zip(body, t) if ti < half]), ("second", [row for row, ti in zip(body, t) if ti >= half])):
        with (tmp_path / f"{name}.csv").open("w", newline="") as f:
            csv.writer(f).writerows([header, *part])
    r = cli("identify", "dynamics", "panda_arm", tmp_path / "first.csv", "--write-back", tmp_path / "half.toml")
    assert r.code == 0, r.err
    r = cli("observe", tmp_path / "half.toml", tmp_path / "second.csv", "--out", tmp_path / "free.csv")
    assert r.code == 0 and "no detection" in r.out, r.out
    joint, t0 = "panda_joint6", 9.0
    column = header.index(f"tau.{joint}")
    second = list(csv.reader((tmp_path / "second.csv").open()))
    for row in second[1:]:
        if t0 <= float(row[0]) < t0 + 0.1:
            row[column] = repr(float(row[column]) + 5.0)
    with (tmp_path / "bump.csv").open("w", newline="") as f:
        csv.writer(f).writerows(second)
    r = cli("observe", tmp_path / "half.toml", tmp_path / "bump.csv", "--out", tmp_path / "bump_obs.csv")
    lines = [line for line in r.out.splitlines() if line.startswith("detected at")]
    assert len(lines) == 1 and joint in lines[0], r.out
    assert t0 < float(lines[0].split("t = ")[1].split(" s")[0]) <= t0 + 0.020


@pytest.mark.parametrize(
    "table, field",
    [
        ("[plant.contact]\nframe = \"tool0\"\nforce = [0.0, 0.0, 1.0]\nstart = 0.1\nduration = 0.0", "plant.contact.duration"),
        ("[plant.contact]\nframe = \"no_such_frame\"\nforce = [0.0, 0.0, 1.0]\nstart = 0.1\nduration = 0.1", "plant.contact.frame"),
        ("[plant]\nencoder_counts = { elbow_joint = -3 }", "plant.encoder_counts.elbow_joint"),
        ("[plant.contact]\nframe = \"tool0\"\nstart = 0.1\nduration = 0.1", "plant.contact.force"),
    ],
)
def test_bad_plant_tables_name_the_field(cli, tmp_path, hold_still, table, field):
    """A bad contact or encoder table (a contact with neither force nor torque among them): one line naming the
    field, exit 2, nothing written."""
    path = tmp_path / "bad.toml"
    path.write_text(load_robot("ur5").source.read_text() + "\n" + table + "\n")
    r = cli("run", path, "--trajectory", hold_still, "--lockstep", "--log", tmp_path / "x.npz", "--summary", tmp_path / "x.json")
    assert r.code == 2 and field in r.err and len(r.err.strip().splitlines()) == 1, r.err
    assert not (tmp_path / "x.npz").exists()


def test_bad_collision_settings_name_the_field(cli, tmp_path, hold_still):
    """A threshold <= 0 or an unknown reaction: one line naming the field, exit 2."""
    for old, new, field in (('reaction = "stop"', 'reaction = "brake"', "control.collision.reaction"), ('reaction = "stop"', 'reaction = "stop"\nthreshold = -1.0', "control.collision.threshold")):
        path = tmp_path / "bad.toml"
        path.write_text(load_robot("ur5").source.read_text().replace(old, new))
        r = cli("observe", path, tmp_path / "none.csv", "--out", tmp_path / "o.csv")
        assert r.code == 2 and field in r.err, r.err


def test_a_contact_may_be_a_torque_alone(tmp_path):
    """The control case of the refusal above: a contact with a torque and no force is read, its force zero."""
    from mbctl.config.robot import read_robot_spec

    path = tmp_path / "torque.toml"
    path.write_text(load_robot("ur5").source.read_text() + '\n[plant.contact]\nframe = "tool0"\ntorque = [0.0, 0.0, 2.0]\nstart = 0.1\nduration = 0.1\n')
    contact = read_robot_spec(path).plant.config.contact
    assert contact.force == (0.0, 0.0, 0.0) and contact.torque == (0.0, 0.0, 2.0)
