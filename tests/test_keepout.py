"""The Cartesian keep-out: ``[keepout]`` parsed into a spec, planned motions checked with forward
kinematics (against a brute-force pinocchio pass over every sample), and the commands that refuse a
motion that enters it."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.config.keepout import KeepoutSpec
from mbctl.ctrl.keepout import KeepoutError, check_keepout, keepout_violation
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError

UPRIGHT = [0.0, -1.5708, 0.0, 0.0, 0.0, 0.0]  # the UR5's upper arm upright: every frame far above the floor
DOWN = [0.0, 0.5, 0.0, 0.0, 0.0, 0.0]  # the shoulder lift 0.5 rad below horizontal: the wrist 0.39 m under the plane


def _ur5(configs, tmp_path, table: str):
    """The bundled UR5 with another [keepout] table."""
    text = (configs / "ur5.toml").read_text()
    text = text[: text.index("[keepout]")] + table
    path = tmp_path / "ur5.toml"
    path.write_text(text)
    return load_robot(path)


def _brute_force(robot, q: np.ndarray, floor: float) -> tuple[int, float, str]:
    """First sample where a moving link frame is below ``floor``, the lowest height there and after
    (through that excursion), and the frame: forward kinematics at every sample."""
    model, data = robot.model, robot.model.createData()
    frames = [i for i, f in enumerate(model.frames) if f.parentJoint > 0 and f.type == pin.FrameType.BODY]
    heights = []
    for row in q:
        pin.framesForwardKinematics(model, data, robot.configuration(row))
        heights.append([data.oMf[i].translation[2] for i in frames])
    heights = np.array(heights)
    below = (heights < floor).any(axis=1)
    first = int(np.argmax(below))
    end = first + int(np.argmax(~below[first:])) if (~below[first:]).any() else len(q)
    lowest = heights[first:end].min(axis=1)
    k = first + int(np.argmin(lowest))
    return first, float(heights[first:end].min()), model.frames[frames[int(np.argmin(heights[k]))]].name


def test_a_motion_below_the_floor_is_found_where_forward_kinematics_finds_it(robots):
    """The first sample below the bundled UR5's floor, the lowest height of that excursion and its frame
    are those of forward kinematics at every sample."""
    robot = robots["ur5"]
    traj = quintic_rest_to_rest(np.array([UPRIGHT, DOWN]), [2.0], 500.0, robot.joint_names)
    found = keepout_violation(robot, traj.t, traj.q, "the move")
    first, lowest, frame = _brute_force(robot, traj.q, 0.0)
    assert found is not None and found.limit == "floor" and found.field == "keepout.floor"
    assert found.t == pytest.approx(traj.t[first]) and found.worst == pytest.approx(lowest) and found.frame == frame
    assert lowest < -0.3  # the wrist goes well below the plane


def test_a_motion_above_the_floor_passes(robots):
    """The control case: a move between two poses with the arm raised stays clear."""
    robot = robots["ur5"]
    traj = quintic_rest_to_rest(np.array([UPRIGHT, [0.4, -1.2, 1.0, -1.3, -1.2, 0.3]]), [2.0], 500.0, robot.joint_names)
    assert keepout_violation(robot, traj.t, traj.q, "the move") is None
    check_keepout(robot, traj.t, traj.q, "the move")


def test_a_robot_without_a_keepout_checks_nothing(robots):
    """No [keepout]: any motion passes (the SCARA has none)."""
    robot = robots["scara"]
    q = np.full((3, robot.nv), 10.0)
    assert robot.spec.keepout is None and keepout_violation(robot, np.arange(3.0), q, "x") is None


def test_the_refusal_is_one_line_naming_motion_frame_time_and_height(robots):
    """KeepoutError: the robot's TOML, keepout.floor, the motion, the frame, the time and the height."""
    robot = robots["ur5"]
    with pytest.raises(KeepoutError) as err:
        check_keepout(robot, np.array([0.0, 1.0]), np.array([UPRIGHT, DOWN]), "the sweep")
    text = str(err.value)
    assert err.value.file == robot.source and err.value.field == "keepout.floor" and "\n" not in text
    assert "the sweep: " in text and "at t = 1.000 s" in text and "below the floor (0 m)" in text and "height -0.3" in text


def test_a_box_is_entered_where_the_tool_enters_it(configs, tmp_path):
    """A box around the tool's path: found at the first sample where tool0's origin is inside it."""
    robot = _ur5(configs, tmp_path, '[keepout]\nframes = ["tool0"]\nboxes = [{ name = "fixture", min = [0.3, -1.0, -1.0], max = [2.0, 1.0, 2.0] }]\n')
    traj = quintic_rest_to_rest(np.array([[0.0, -1.5708, 0.0, 0.0, 0.0, 0.0], [0.0, -0.6, 0.0, 0.0, 0.0, 0.0]]), [1.0], 500.0, robot.joint_names)
    model, data = robot.model, robot.model.createData()
    tool = model.getFrameId("tool0")
    inside = []
    for row in traj.q:
        pin.framesForwardKinematics(model, data, robot.configuration(row))
        p = data.oMf[tool].translation
        inside.append(bool(np.all((p > [0.3, -1.0, -1.0]) & (p < [2.0, 1.0, 2.0]))))
    found = keepout_violation(robot, traj.t, traj.q, "the move")
    assert any(inside) and found is not None
    assert found.limit == "fixture" and found.frame == "tool0" and found.field == "keepout.boxes[0]"
    assert found.t == pytest.approx(traj.t[inside.index(True)])


@pytest.mark.parametrize(
    ("table", "field"),
    [
        ("[keepout]\nfloor = 'low'\n", "keepout.floor"),
        ("[keepout]\nflor = 0.0\n", "keepout.flor"),
        ("[keepout]\nframes = []\n", "keepout.frames"),
        ("[keepout]\nboxes = [{ min = [0, 0, 0], max = [1, 0, 1] }]\n", "keepout.boxes[0].max"),
        ("[keepout]\nboxes = [{ min = [0, 0], max = [1, 1, 1] }]\n", "keepout.boxes[0].min"),
    ],
)
def test_a_bad_table_names_its_field(configs, tmp_path, table, field):
    """Each bad [keepout] field is a ConfigError naming the file and the dotted field."""
    with pytest.raises(ConfigError) as err:
        _ur5(configs, tmp_path, table)
    assert err.value.field == field and err.value.file == tmp_path / "ur5.toml"


def test_an_unknown_frame_names_keepout_frames(configs, tmp_path):
    """A checked frame the model lacks is refused when a motion is checked."""
    robot = _ur5(configs, tmp_path, '[keepout]\nfloor = 0.0\nframes = ["tool9"]\n')
    with pytest.raises(ConfigError, match="no frame 'tool9'") as err:
        keepout_violation(robot, np.zeros(1), np.zeros((1, 6)), "x")
    assert err.value.field == "keepout.frames"


def test_the_bundled_ur5_keeps_out_of_its_mounting_plane(robots):
    """configs/ur5.toml: the floor is the mounting plane, z = 0 of base_link."""
    assert robots["ur5"].spec.keepout == KeepoutSpec(floor=0.0, file=robots["ur5"].source)


def test_trajectory_refuses_a_move_below_the_floor_and_writes_nothing(cli, tmp_path):
    """trajectory quintic into the floor: one line, exit 2, no CSV; the same move kept up is written."""
    out = tmp_path / "t.csv"
    r = cli("trajectory", "quintic", "ur5", "--waypoints", "0,-1.5708,0,0,0,0; 0,0.5,0,0,0,0", "--durations", "2", "--out", out)
    assert r.code == 2 and r.err.count("\n") == 1 and "keepout.floor: the quintic trajectory: " in r.err and not out.exists()
    r = cli("trajectory", "quintic", "ur5", "--waypoints", "0,-1.5708,0,0,0,0; 0,-1.0,0,0,0,0", "--durations", "2", "--out", out)
    assert r.code == 0 and out.is_file()


def test_run_refuses_a_trajectory_below_the_floor_before_it_runs(cli, robots, tmp_path):
    """mbctl run checks the trajectory it is given: one line, exit 2, no log."""
    traj = tmp_path / "down.csv"
    write_trajectory(traj, quintic_rest_to_rest(np.array([UPRIGHT, DOWN]), [3.0], 1000.0, robots["ur5"].joint_names))
    r = cli("run", "ur5", "--trajectory", traj, "--lockstep", "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")
    assert r.code == 2 and r.err.count("\n") == 1 and f"the trajectory {traj}: " in r.err
    assert not (tmp_path / "r.npz").exists()
