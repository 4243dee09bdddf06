"""The [ros2] table: defaults, overrides, and one line naming file and field for each bad value (no rclpy needed)."""

from __future__ import annotations

import pytest
from ros2_helpers import write_arm

from mbctl.config.robot import read_robot_spec
from mbctl.errors import ConfigError, InputError
from mbctl.hardware.interface import CommandMode
from mbctl.hardware.ros2.backend import Ros2Joints


def test_defaults_and_given_values(tmp_path):
    """Without keys: /joint_states, the effort controller's topic, the robot's order, 5 s wait; given values are kept
    in SI units and the command topic follows the interface."""
    spec = read_robot_spec(write_arm(tmp_path, "command_interface = \"effort\"")).ros2
    assert (spec.joint_states, spec.command, spec.command_joints, spec.topic_timeout_s) == ("/joint_states", "/forward_effort_controller/commands", None, 5.0)
    assert spec.commanding_controller == "forward_effort_controller" and spec.holding_controller is None
    spec = read_robot_spec(write_arm(tmp_path, 'command_interface = "position"\njoint_state_timeout_ms = 25\nholding_controller = "hold"\ncommand_joints = ["elbow", "shoulder"]')).ros2
    assert spec.command == "/forward_position_controller/commands"
    assert spec.joint_state_timeout_s == pytest.approx(0.025) and spec.holding_controller == "hold" and spec.command_joints == ("elbow", "shoulder")
    assert read_robot_spec(write_arm(tmp_path)).ros2 is None
    assert (spec.effort, spec.gravity_compensated) == (None, False)
    spec = read_robot_spec(write_arm(tmp_path, 'effort = "joint-torque-sensor"\ngravity_compensated = true\ncontroller_manager = "none"')).ros2
    assert (spec.effort, spec.gravity_compensated, spec.controller_manager) == ("joint-torque-sensor", True, "none")


@pytest.mark.parametrize(
    "body, field, words",
    [
        ('command_interface = "torque"', "ros2.command_interface", "unknown value 'torque'"),
        ('joint_states = "/joint states"', "ros2.joint_states", "topic name"),
        ('command = ""', "ros2.command", "topic name"),
        ('command_joints = ["elbow", "elbow"]', "ros2.command_joints", "listed twice"),
        ("command_joints = []", "ros2.command_joints", "non-empty list"),
        ("topic_timeout_ms = 0", "ros2.topic_timeout_ms", "must be in (0,"),
        ("joint_state_timeout_ms = -5", "ros2.joint_state_timeout_ms", "must be in (0,"),
        ('holding_controller = ""', "ros2.holding_controller", "controller name"),
        ('comand = "/x"', "ros2.comand", "unknown field"),
        ('effort = "torque"', "ros2.effort", "unknown value 'torque' (expected one of: drive, joint-torque-sensor, none)"),
        ('gravity_compensated = "yes"', "ros2.gravity_compensated", "must be true or false"),
    ],
)
def test_a_bad_value_names_file_and_field(tmp_path, body, field, words):
    """Each bad value: a ConfigError naming the TOML file and the dotted field."""
    toml = write_arm(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        read_robot_spec(toml)
    message = str(info.value)
    assert str(toml) in message and field in message and words in message, message


def test_command_joints_are_checked_against_the_robot(tmp_path):
    """A joint the robot lacks, or an actuated joint left out: a ConfigError at ros2.command_joints, before
    anything is opened; a permutation of the actuated joints is accepted."""
    for body, words in (('command_joints = ["shoulder", "wrist"]', "joint wrist is not an actuated joint"), ('command_joints = ["shoulder"]', "actuated joint elbow is missing")):
        spec = read_robot_spec(write_arm(tmp_path, body)).ros2
        with pytest.raises(ConfigError, match=words) as info:
            Ros2Joints(("shoulder", "elbow"), spec, period_s=0.002)
        assert "ros2.command_joints" in str(info.value)
    spec = read_robot_spec(write_arm(tmp_path, 'command_joints = ["elbow", "shoulder"]')).ros2
    assert Ros2Joints(("shoulder", "elbow"), spec, period_s=0.002).command_joints == ("elbow", "shoulder")


def test_a_position_controller_needs_a_position_interface(tmp_path):
    """Goal positions on an effort interface: one line at ros2.command_interface; on a position interface accepted;
    the joint-state timeout before the stream is timed is 25 control periods, at least 100 ms."""
    effort = read_robot_spec(write_arm(tmp_path)).ros2 or read_robot_spec(write_arm(tmp_path, 'command_interface = "effort"')).ros2
    with pytest.raises(InputError, match="command_interface is effort"):
        Ros2Joints(("shoulder", "elbow"), effort, period_s=0.002, mode=CommandMode.POSITION)
    position = read_robot_spec(write_arm(tmp_path, 'command_interface = "position"')).ros2
    assert Ros2Joints(("shoulder", "elbow"), position, period_s=0.002, mode=CommandMode.POSITION).timeout_s == pytest.approx(0.1)
    assert Ros2Joints(("shoulder", "elbow"), position, period_s=0.01, mode=CommandMode.POSITION).timeout_s == pytest.approx(0.25)


def test_a_torque_controller_needs_an_effort_interface(tmp_path):
    """Torques on a position interface: the message asks for "an effort interface" (the article agrees); on an effort interface accepted."""
    position = read_robot_spec(write_arm(tmp_path, 'command_interface = "position"')).ros2
    with pytest.raises(InputError, match="the torque commands of this controller need an effort interface; "):
        Ros2Joints(("shoulder", "elbow"), position, period_s=0.002, mode=CommandMode.TORQUE)
    effort = read_robot_spec(write_arm(tmp_path, 'command_interface = "effort"')).ros2
    assert Ros2Joints(("shoulder", "elbow"), effort, period_s=0.002, mode=CommandMode.TORQUE).mode is CommandMode.TORQUE


def test_without_rclpy_the_run_says_how_to_get_it(tmp_path, cli, monkeypatch):
    """rclpy not importable: mbctl run --bus ros2 is one line saying how to install it, and nothing is written;
    the same run on the simulated plant (control case) completes."""
    import sys

    toml = write_arm(tmp_path)
    assert cli("trajectory", "quintic", toml, "--waypoints", "0.3,0.5; 0.6,0.2", "--durations", "0.3", "--out", tmp_path / "t.csv").code == 0
    base = ("run", toml, "--trajectory", tmp_path / "t.csv", "--rate", "500", "--lockstep", "--summary", tmp_path / "s.json", "--log", tmp_path / "r.npz")
    assert cli(*base).code == 0
    (tmp_path / "r.npz").unlink()
    monkeypatch.setitem(sys.modules, "rclpy", None)  # import rclpy raises ImportError
    result = cli(*base, "--bus", "ros2")
    assert result.code != 0 and result.err.count("\n") == 1 and 'pip install "mbctl[ros2]"' in result.err, result.err
    assert not (tmp_path / "r.npz").exists()


@pytest.mark.parametrize("bus", ["ros2", "canopen", "dynamixel"])
def test_an_emulated_start_outside_a_joints_range_is_one_line(tmp_path, cli, bus):
    """mbctl emulate --q0 with a position beyond a joint's URDF limits (the UR5's pan at 50 rad, limit 2 pi): one line
    naming --q0, the joint and its range, exit 2, on every bus (the UR5 has [drives] for CANopen; Dynamixel needs a
    bus table it lacks, refused first in its own words)."""
    result = cli("emulate", "ur5", "--bus", bus, "--q0", "50,0,0,0,0,0")
    assert result.code == 2 and result.err.count("\n") == 1, result.err
    if bus != "dynamixel":
        assert "--q0: 50 is outside joint shoulder_pan_joint's range [-6.28319, 6.28319]" in result.err, result.err
