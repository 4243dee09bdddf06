"""mbctl over ROS 2 for real (rclpy, Fast DDS, localhost discovery, a domain per test): runs against
mbctl emulate --bus ros2, against a robot node and with a controller node written here."""

from __future__ import annotations

import subprocess
import sys
import time

import numpy as np
import pytest

pytest.importorskip("rclpy", reason='ROS 2 is not installed: pip install "mbctl[ros2]"')

from ros2_helpers import private_domain, write_arm  # noqa: E402

from mbctl.config.control import EndSpec
from mbctl.config.ros2 import Ros2Spec  # noqa: E402
from mbctl.dynamics.model.robot import load_robot  # noqa: E402
from mbctl.hardware.ros2.emulator import Ros2Emulator  # noqa: E402
from mbctl.hardware.ros2.runtime import Ros2Runtime  # noqa: E402
from mbctl.hardware.session import SessionOptions, run_session  # noqa: E402
from mbctl.hardware.sim import truth_model  # noqa: E402

START = (0.3, 0.5)  # rad: the arm's start, and the held pose


@pytest.fixture(autouse=True)
def domain(monkeypatch):
    return private_domain(monkeypatch)


def trajectory(cli, robot: str, path, waypoints: str, duration: float):
    out = path / "t.csv"
    assert cli("trajectory", "quintic", robot, "--waypoints", waypoints, "--durations", f"{duration}", "--out", out).code == 0
    return out


def test_lockstep_over_ros2_equals_the_simulated_plant(tmp_path, cli, configs):
    """UR5 computed torque in lock-step against mbctl emulate --bus ros2 in its own process: the same
    positions as the lock-step run on the simulated plant to 1e-9 rad, with the same sensing."""
    from mbctl.ctrl.trajectory import read_trajectory

    robot = load_robot(configs / "ur5.toml")
    path = trajectory(cli, "ur5", tmp_path, "0.1,-1.3,1.5,-1.7,-1.5,0.2; -0.3,-0.8,1.0,-1.2,-1.1,0.6", 0.5)
    traj = read_trajectory(path, robot.joint_names)
    runs = {}
    for plant in ("sim", "ros2"):
        options = SessionOptions(plant=plant, rate_hz=500.0, duration_s=0.2, lockstep=True, emulate=plant == "ros2", realtime_priority=None)
        summary = run_session(robot, traj, options, tmp_path / f"{plant}.npz")
        assert summary.stop_reason == "completed", summary.stop_reason
        runs[plant] = np.load(tmp_path / f"{plant}.npz")
    assert runs["ros2"]["q"].shape == runs["sim"]["q"].shape == (100 + round(EndSpec.hold_s * 500), 6)  # the move, then the end hold
    assert summary.end.startswith("held the last reference") and "joint_trajectory_controller" in summary.end  # handed over
    assert np.abs(runs["ros2"]["q"] - runs["sim"]["q"]).max() <= 1e-9
    assert np.abs(runs["ros2"]["q"][-1] - runs["ros2"]["q"][0]).max() > 0.1  # it moved


def test_command_joints_in_the_controllers_order(tmp_path, cli):
    """A controller whose joints run elbow, shoulder gets its commands in that order: the run over ROS 2
    (the emulator reading the same [ros2] table) equals the simulated plant's."""
    toml = write_arm(tmp_path, 'command_joints = ["elbow", "shoulder"]')
    path = trajectory(cli, toml, tmp_path, "0.3,0.5; 0.6,0.2", 0.2)
    base = ("run", toml, "--trajectory", path, "--rate", "500", "--lockstep", "--summary", tmp_path / "s.json")
    assert cli(*base, "--log", tmp_path / "sim.npz").code == 0
    result = cli(*base, "--log", tmp_path / "ros2.npz", "--bus", "ros2", "--emulate")
    assert result.code == 0, result.err
    assert "commands on /forward_effort_controller/commands (effort)" in result.out
    sim, ros2 = np.load(tmp_path / "sim.npz"), np.load(tmp_path / "ros2.npz")
    assert np.abs(sim["q"] - ros2["q"]).max() <= 1e-9


def test_a_command_joint_the_robot_lacks_is_one_line_before_any_command(tmp_path, cli):
    """command_joints naming a joint the robot lacks: one line naming the file and field, exit 2, and the
    arm (an emulator serving the topics) received no command."""
    toml = write_arm(tmp_path, 'command_joints = ["shoulder", "wrist"]')
    robot = load_robot(toml)
    truth, config = truth_model(robot)
    path = trajectory(cli, toml, tmp_path, "0.3,0.5; 0.6,0.2", 0.2)
    with Ros2Emulator(truth, config, Ros2Spec(), period_s=0.002, q0=np.array(START), lockstep=True) as emulator:
        result = cli("run", toml, "--trajectory", path, "--rate", "500", "--bus", "ros2", "--lockstep", "--log", tmp_path / "r.npz", "--summary", tmp_path / "s.json")
        time.sleep(0.1)
        commands = emulator.stats.commands
    assert result.code == 2
    assert result.err.count("\n") == 1 and "ros2.command_joints" in result.err and "wrist" in result.err, result.err
    assert commands == 0
    assert not (tmp_path / "r.npz").exists()


def test_no_publisher_is_one_line_after_the_wait(tmp_path, cli):
    """No joint-state publisher: one line naming the topic, after the configured wait, exit 2."""
    toml = write_arm(tmp_path, "topic_timeout_ms = 300")
    path = trajectory(cli, toml, tmp_path, "0.3,0.5; 0.6,0.2", 0.2)
    start = time.monotonic()
    result = cli("run", toml, "--trajectory", path, "--rate", "500", "--bus", "ros2", "--log", tmp_path / "r.npz", "--summary", tmp_path / "s.json")
    assert time.monotonic() - start >= 0.3  # it waited
    assert result.code == 2
    assert result.err.count("\n") == 1 and "/joint_states: no publisher" in result.err and "0.3 s" in result.err, result.err


def test_a_killed_emulator_stops_the_run_naming_the_topic(tmp_path, cli, domain):
    """mbctl emulate --bus ros2 killed mid-run (SIGKILL after 0.3 s of plant time): exit 1, the log
    written with the cycles before, the reason naming the joint-states topic and the sample's age."""
    toml = write_arm(tmp_path, "joint_state_timeout_ms = 60")  # a margin for a loaded machine (the default: 50 ms at 500 Hz)
    path = trajectory(cli, toml, tmp_path, "0.3,0.5; 0.6,0.2; 0.3,0.5", "1,1")
    emulator = subprocess.Popen([sys.executable, "-m", "mbctl.cli", "emulate", str(toml), "--bus", "ros2", "--period", "0.002", "--q0", "0.3,0.5", "--die-after", "0.3",
                                 "--realtime-priority", "79"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert "on ROS domain" in emulator.stdout.readline()
        result = cli("run", toml, "--trajectory", path, "--rate", "500", "--bus", "ros2", "--no-realtime", "--max-overrun-fraction", "1", "--max-consecutive-overruns", "0",
                     "--log", tmp_path / "r.npz", "--summary", tmp_path / "s.json")
        assert emulator.wait(timeout=10) == -9
    finally:
        emulator.kill()
        emulator.communicate()
    assert result.code == 1, result.out + result.err
    assert "stale: /joint_states: no new JointState for" in result.out and "(timeout 60 ms)" in result.out, result.out
    log = np.load(tmp_path / "r.npz")
    assert 50 < len(log["t"]) < 1000  # the cycles before the kill, not the whole 2 s


def test_lockstep_against_a_robot_that_keeps_its_own_time_is_refused(tmp_path, cli):
    """--lockstep against a robot node that is not mbctl's emulator (an rclpy node written here, stepping on
    each command): one line naming --lockstep and the node, exit 2, and no command reaches it."""
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    toml = write_arm(tmp_path, "controller_manager = \"none\"")
    path = trajectory(cli, toml, tmp_path, "0.3,0.5; 0.6,0.2", 0.3)
    commands = []
    with Ros2Runtime() as ros:
        node = ros.node("test_robot")
        states = node.create_publisher(JointState, "/joint_states", 10)
        node.create_subscription(Float64MultiArray, "/forward_effort_controller/commands", commands.append, 10)
        node.create_timer(0.01, lambda: states.publish(JointState(name=["elbow", "shoulder"], position=[0.5, 0.3], velocity=[0.0, 0.0])))
        result = cli("run", toml, "--trajectory", path, "--rate", "500", "--bus", "ros2", "--lockstep", "--log", tmp_path / "r.npz", "--summary", tmp_path / "s.json")
    assert result.code == 2, result.out + result.err
    assert result.err.count("\n") == 1 and "--lockstep" in result.err and "test_robot" in result.err and "run paced" in result.err, result.err
    assert commands == [] and not (tmp_path / "r.npz").exists()


def test_an_independent_controller_holds_the_emulated_arm(tmp_path):
    """A PD with gravity compensation of its own (closed form), an rclpy node written here, holds
    mbctl emulate --bus ros2's arm still in lock-step (within 1 mrad over 0.4 s); zero torque then lets
    it fall (more than 0.05 rad in 0.2 s): the hold is the controller's doing."""
    from ros2_helpers import gravity
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    toml = write_arm(tmp_path)
    emulator = subprocess.Popen([sys.executable, "-m", "mbctl.cli", "emulate", str(toml), "--bus", "ros2", "--lockstep-period", "0.002", "--q0", "0.3,0.5"],
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    samples: list[tuple[float, np.ndarray, np.ndarray]] = []
    held = np.array(START)
    try:
        assert "on ROS domain" in emulator.stdout.readline()
        with Ros2Runtime() as ros:
            node = ros.node("test_controller")
            commands = node.create_publisher(Float64MultiArray, "/forward_effort_controller/commands", 10)

            def on_state(msg) -> None:
                t = msg.header.stamp.sec + msg.header.stamp.nanosec * 1e-9
                if not commands.get_subscription_count():
                    return  # a command now could be lost (volatile): wait for the emulator's subscription
                if samples and t <= samples[-1][0]:
                    return  # the same sample again
                q, dq = np.asarray(msg.position), np.asarray(msg.velocity)
                samples.append((t, q, dq))
                if len(samples) > 300:
                    return
                tau = gravity(q) + 300.0 * (held - q) - 20.0 * dq if len(samples) <= 200 else np.zeros(2)
                commands.publish(Float64MultiArray(data=list(tau)))

            node.create_subscription(JointState, "/joint_states", on_state, 10)
            deadline = time.monotonic() + 30
            while len(samples) <= 300 and time.monotonic() < deadline:
                time.sleep(0.01)
    finally:
        emulator.terminate()
        emulator.communicate(timeout=10)
    assert len(samples) > 300
    hold = np.array([q for _, q, _ in samples[:201]])
    assert np.abs(hold - held).max() < 1e-3
    assert np.abs(samples[300][1] - held).max() > 0.05
    assert samples[200][0] == pytest.approx(0.4)  # simulated time: one 2 ms period per command


def test_the_position_controller_on_a_position_interface(tmp_path, cli, configs):
    """--controller position with [ros2] command_interface = "position": the trajectory's positions go to the
    emulated servo's firmware loop over ROS 2, in lock-step the same motion as on the simulated plant (1e-9 rad)."""
    import shutil

    bench = configs / "servo-logs" / "xl330-pendulum"
    shutil.copy(bench / "bench.urdf", tmp_path / "bench.urdf")
    toml = tmp_path / "bench.toml"
    toml.write_text((bench / "bench.toml").read_text() + '\n[ros2]\ncommand_interface = "position"\n')
    path = trajectory(cli, toml, tmp_path, "0; 1.0", 0.3)
    base = ("run", toml, "--trajectory", path, "--rate", "200", "--lockstep", "--controller", "position", "--summary", tmp_path / "s.json")
    assert cli(*base, "--log", tmp_path / "sim.npz").code == 0
    result = cli(*base, "--log", tmp_path / "ros2.npz", "--bus", "ros2", "--emulate")
    assert result.code == 0, result.out + result.err
    assert "commands on /forward_position_controller/commands (position)" in result.out
    sim, ros2 = np.load(tmp_path / "sim.npz"), np.load(tmp_path / "ros2.npz")
    assert np.abs(sim["q"] - ros2["q"]).max() <= 1e-9 and np.abs(ros2["q"]).max() > 0.3


def test_a_stale_joint_state_is_a_communication_error(tmp_path):
    """The emulator (paced, in this process) stops publishing after 0.3 s of plant time: a paced read then raises
    CommunicationError("stale") naming the topic, the age and the timeout; before that, reads return new samples."""
    from mbctl.hardware.interface import CommunicationError, JointCommand
    from mbctl.hardware.ros2.backend import Ros2Joints
    from mbctl.hardware.ros2.emulator import Ros2Faults

    robot = load_robot(write_arm(tmp_path))
    truth, config = truth_model(robot)
    spec = Ros2Spec(joint_state_timeout_s=0.2)  # a margin for a loaded machine
    faults = Ros2Faults(stop_after_s=0.3)
    with Ros2Emulator(truth, config, spec, period_s=0.002, q0=np.array(START), faults=faults, tf_period_s=None), \
            Ros2Joints(robot.actuated_names, spec, period_s=0.002) as joints:
        joints.enable()
        stamps = set()
        deadline = time.monotonic() + 10
        with pytest.raises(CommunicationError) as info:
            while time.monotonic() < deadline:
                stamps.add(joints.read().t)
                joints.write(JointCommand.torque(np.zeros(2)))
                time.sleep(0.002)
    assert len(stamps) > 5  # new samples before the stop (fewer reads on a loaded machine)
    assert info.value.kind == "stale" and "/joint_states: no new JointState for" in str(info.value) and "(timeout 200 ms)" in str(info.value)


def test_an_incompatible_qos_is_one_line(tmp_path):
    """A command subscriber asking for transient-local durability (mbctl publishes volatile commands): opening
    says so in one line naming the topic, before any command; the joint states flow meanwhile."""
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState
    from std_msgs.msg import Float64MultiArray

    from mbctl.errors import InputError
    from mbctl.hardware.ros2.backend import Ros2Joints

    received = []
    with Ros2Runtime() as ros:
        node = ros.node("test_picky_arm")
        states = node.create_publisher(JointState, "/joint_states", 10)
        qos = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(Float64MultiArray, "/forward_effort_controller/commands", received.append, qos)
        node.create_timer(0.01, lambda: states.publish(JointState(name=["shoulder", "elbow"], position=[0.3, 0.5], velocity=[0.0, 0.0], effort=[0.0, 0.0])))
        joints = Ros2Joints(("shoulder", "elbow"), Ros2Spec(topic_timeout_s=3.0), period_s=0.002)
        with pytest.raises(InputError) as info:
            joints.open()
    message = str(info.value)
    assert "\n" not in message and "/forward_effort_controller/commands: incompatible QoS" in message, message
    assert received == []


def test_disable_sends_zero_effort_and_sees_it_acknowledged(tmp_path):
    """disable() after commands: one zero-effort command reaches the emulator (which holds it), acknowledged before
    close; a second disable() sends nothing."""
    from mbctl.hardware.interface import JointCommand
    from mbctl.hardware.ros2.backend import Ros2Joints

    robot = load_robot(write_arm(tmp_path))
    truth, config = truth_model(robot)
    spec = Ros2Spec()
    with Ros2Emulator(truth, config, spec, period_s=0.002, q0=np.array(START), lockstep=True, tf_period_s=None) as emulator:
        with Ros2Joints(robot.actuated_names, spec, period_s=0.002, lockstep=True) as joints:
            joints.enable()
            for _ in range(5):
                joints.read()
                joints.write(JointCommand.torque(np.array([3.0, 1.0])))
            joints.read()
            joints.disable()
            assert joints.disable_acked is True
            joints.disable()
        deadline = time.monotonic() + 10  # acknowledged by the middleware; the emulator's callback runs a little later
        while emulator.stats.commands < 6 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert emulator.stats.commands == 6
        assert np.array_equal(emulator._command.value, np.zeros(2))


def test_topic_overrides_on_the_command_line(tmp_path, cli):
    """--joint-states and --command-topic replace the [ros2] topics (the emulator started by --emulate serves the
    same ones): the run completes over them and says so; without an emulator on them, no publisher (exit 2)."""
    toml = write_arm(tmp_path, "topic_timeout_ms = 3000")  # discovery on a loaded machine can take more than a second
    path = trajectory(cli, toml, tmp_path, "0.3,0.5; 0.6,0.2", 0.2)
    base = ("run", toml, "--trajectory", path, "--rate", "500", "--lockstep", "--bus", "ros2", "--joint-states", "/arm/joint_states",
            "--command-topic", "/arm_effort_controller/commands", "--log", tmp_path / "r.npz", "--summary", tmp_path / "s.json")
    result = cli(*base, "--emulate")
    assert result.code == 0, result.out + result.err
    assert "ROS 2 /arm/joint_states" in result.out and "commands on /arm_effort_controller/commands (effort)" in result.out
    result = cli(*base)
    assert result.code == 2 and "/arm/joint_states: no publisher" in result.err, result.err
