"""The end of a clean run over ROS 2 (switch_controller to a holding controller), /tf and /robot_description
of mbctl emulate --bus ros2: over the real middleware, against the emulator in this process."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

pytest.importorskip("rclpy", reason='ROS 2 is not installed: pip install "mbctl[ros2]"')
pytest.importorskip("mbctl.hardware.ros2.interfaces", reason="needs hardware/ros2/interfaces.py (SwitchController and TFMessage for rclpy from PyPI)")

from ros2_helpers import L1, gravity, private_domain, write_arm  # noqa: E402

from mbctl.config.robot import read_robot_spec  # noqa: E402
from mbctl.config.ros2 import Ros2Spec  # noqa: E402
from mbctl.dynamics.model.robot import load_robot  # noqa: E402
from mbctl.hardware.interface import JointCommand  # noqa: E402
from mbctl.hardware.ros2.backend import Ros2Joints  # noqa: E402
from mbctl.hardware.ros2.emulator import Ros2Emulator  # noqa: E402
from mbctl.hardware.ros2.runtime import Ros2Runtime  # noqa: E402
from mbctl.hardware.sim import truth_model  # noqa: E402

START = np.array([0.3, 0.5])


@pytest.fixture(autouse=True)
def domain(monkeypatch):
    return private_domain(monkeypatch)


def emulator_of(toml, **kwargs) -> Ros2Emulator:
    robot = load_robot(toml)
    truth, config = truth_model(robot)
    return Ros2Emulator(truth, config, robot.spec.ros2 or Ros2Spec(), period_s=0.002, q0=START, lockstep=True, urdf=robot.spec.urdf.read_text(), **kwargs)


def drive(joints: Ros2Joints, cycles: int) -> np.ndarray:
    """``cycles`` lock-step cycles of gravity compensation (closed form); the last position read."""
    joints.enable()
    for _ in range(cycles):
        state = joints.read()
        joints.write(JointCommand.torque(gravity(state.q)))
    return joints.read().q


def test_a_clean_finish_hands_the_arm_to_the_holding_controller(tmp_path):
    """hand_over() with holding_controller set: the emulator's controller manager switches from the effort
    controller to the holding one (strict), says so, and no zero-effort command follows (disable sends
    nothing); commands sent after it are ignored and the arm stays where it was."""
    toml = write_arm(tmp_path, 'holding_controller = "hold_position"')
    spec = read_robot_spec(toml).ros2
    with emulator_of(toml) as emulator, Ros2Joints(("shoulder", "elbow"), spec, period_s=0.002, lockstep=True) as joints:
        q = drive(joints, 20)
        sent = emulator.stats.commands
        done = joints.hand_over()
        assert done == "handed over: /controller_manager switched from forward_effort_controller to hold_position"
        assert emulator.holding and not emulator.controllers["forward_effort_controller"]
        joints.disable()
        joints._publish(np.zeros(2))  # a stray command after the switch
        time.sleep(0.2)
        assert emulator.stats.commands == sent and emulator.stats.ignored == 1
        assert np.array_equal(emulator.plant.read().q, q)


def test_without_a_holding_controller_there_is_no_hand_over(tmp_path):
    """No holding_controller: no hand-over is possible (the loop keeps holding) and nothing is switched;
    one the controller manager does not know: the refusal stated, and the stop instead."""
    toml = write_arm(tmp_path)
    with emulator_of(toml) as emulator:
        spec = read_robot_spec(write_arm(tmp_path, "topic_timeout_ms = 5000", name="plain")).ros2
        with Ros2Joints(("shoulder", "elbow"), spec, period_s=0.002, lockstep=True) as joints:
            drive(joints, 5)
            assert not joints.hand_over_possible and not emulator.holding
        spec = read_robot_spec(write_arm(tmp_path, 'holding_controller = "nope"', name="other")).ros2
        with Ros2Joints(("shoulder", "elbow"), spec, period_s=0.002, lockstep=True) as joints:
            drive(joints, 5)
            assert joints.hand_over_possible
            done = joints.hand_over()
            assert "the switch to nope failed" in done and joints.disable_acked, done  # the stop was sent instead
            assert "unknown controller nope" in joints.hand_over_error or "refused" in joints.hand_over_error, joints.hand_over_error
        assert not emulator.holding and emulator.controllers["forward_effort_controller"]


def test_tf_and_robot_description(tmp_path):
    """The emulator publishes the URDF on /robot_description (transient local: a late subscriber gets it) and
    the links' poses on /tf: link2 in link1 is the elbow's origin (0.4 m along x) turned by q_elbow about z."""
    from std_msgs.msg import String

    from mbctl.hardware.ros2.interfaces import tf_message_type
    from mbctl.hardware.ros2.runtime import qos_profiles

    toml = write_arm(tmp_path)
    got: dict[str, object] = {}
    arrived = threading.Event()

    def on_tf(msg) -> None:
        for t in msg.transforms:
            got[t.child_frame_id] = (t.header.frame_id, t.transform)
        if "link2" in got and "description" in got:
            arrived.set()

    def on_description(msg) -> None:
        got["description"] = msg.data

    with emulator_of(toml, tf_period_s=0.002) as emulator:
        assert not emulator.notes, emulator.notes
        with Ros2Runtime() as ros:
            node = ros.node("test_tf")
            node.create_subscription(String, "/robot_description", on_description, qos_profiles()["latched"])
            node.create_subscription(tf_message_type(), "/tf", on_tf, 10)
            assert arrived.wait(10)
    assert got["description"] == (tmp_path / "arm2.urdf").read_text()
    parent, transform = got["link2"]
    q_elbow = START[1]  # lock-step, no command: the arm is where it started
    assert parent == "link1"
    assert [transform.translation.x, transform.translation.y, transform.translation.z] == pytest.approx([L1, 0.0, 0.0], abs=1e-12)
    r = transform.rotation
    assert [r.x, r.y, r.z, r.w] == pytest.approx([0.0, 0.0, np.sin(q_elbow / 2), np.cos(q_elbow / 2)], abs=1e-12)
