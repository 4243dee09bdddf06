"""Every backend, paced and lock-step, with each bundled robot's shipped configuration (the collision
observer on where it ships on): a run completes with no false stop, its cycle one generated call, which
in lock-step logs what the cycle in Python does to round-off; a dead emulator stops it with the
missing reply as the reason, the log written.

Backends: the simulated plant, the emulated Dynamixel bus (the emulator in its own process on a pty),
CANopen with the emulator in this process (virtual bus) and in its own process (UDP multicast on
loopback), and ROS 2 (``mbctl emulate --bus ros2`` in its own process, over Fast DDS; the dead
emulator over ROS 2 is tests/test_ros2_live.py's). Paced runs follow the wall clock: they may miss deadlines on a loaded machine, so the
overrun limit is off here and only a stop other than the end fails a run.
"""

from __future__ import annotations

import json
import subprocess
import threading
from types import SimpleNamespace

import numpy as np
import pytest
from ros2_domains import ros_domain_fixture  # noqa: F401  (the fixture ros_domain)

import mbctl.hardware.session as session
from mbctl.config.control import EndSpec
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.cia402.emulator import Cia402Emulator

pytestmark = pytest.mark.slow

# start and goal of a short move per robot (rad, m), inside every limit
MOVES = {
    "scara": ([0.0, 0.0, 0.0, 0.0], [0.3, 0.4, -0.2, 0.02]),
    "ur5": ([0.1, -1.3, 1.5, -1.7, -1.5, 0.2], [-0.1, -1.05, 1.25, -1.45, -1.3, 0.4]),
    # 0.1 rad: the shipped observer low-passes velocity at 10 Hz, so fast accelerations show as torque
    # (0.2 rad in 0.4 s, 7 rad/s², reads 3.3 N·m on panda_joint3 against its 2.7)
    "panda_arm": ([0.0, -0.785, 0.0, -2.356, 0.0, 1.571, 0.785], [0.1, -0.685, 0.1, -2.256, 0.1, 1.671, 0.885]),
}
MOVE_S = 0.4
# backend -> (robot, extra arguments of mbctl run, rate (Hz) the bus carries with margin on a busy
# machine: a CANopen TPDO missing 0.9 periods after its SYNC stops a run, and the suite's other worker
# may run a SCHED_FIFO loop of its own beside this one; 250 Hz is in benchmarks/cia402.py)
BACKENDS = {
    "sim-scara": ("scara", [], 1000),
    "sim-ur5": ("ur5", [], 1000),
    "sim-panda": ("panda_arm", [], 1000),
    "dynamixel": ("scara-adapter", ["--plant", "dynamixel", "--emulate"], 100),
    "canopen-virtual": ("ur5", ["--bus", "canopen", "--emulate"], 100),
    "canopen-udp": ("ur5", ["--bus", "canopen", "--emulate", "--interface", "udp_multicast"], 100),
    # mbctl emulate --bus ros2 in its own process, over Fast DDS; at 100 Hz a paced run read a false -8 N·m
    # 30 ms in (the emulator applies a command at its next plant step, a shift that grows with the period)
    "ros2": ("ur5", ["--bus", "ros2", "--emulate"], 250),
}
NO_OVERRUN_LIMIT = ["--max-overrun-fraction", "1", "--max-consecutive-overruns", "0"]


@pytest.fixture(scope="module")
def moves(configs, tmp_path_factory):
    """A trajectory file per robot: a quintic move of MOVE_S from its start; and "scara-adapter", the
    shipped SCARA with the slowest USB adapter's latency (100 ms): its reply timeout then outlasts a
    loaded machine's stalls (the shipped 1 ms gives 4 ms), which is the adapter's business, not the
    controller's. (Its hyphenated name also checks that generated code takes any file name.)"""
    folder = tmp_path_factory.mktemp("moves")
    paths = {}
    for name, (start, goal) in MOVES.items():
        robot = load_robot(name)
        traj = quintic_rest_to_rest(np.array([start, goal]), [MOVE_S], 1000.0, robot.joint_names)
        paths[name] = folder / f"{name}.csv"
        write_trajectory(paths[name], traj)
    (folder / "scara.urdf").write_text((configs / "scara.urdf").read_text())
    (folder / "scara-adapter.toml").write_text((configs / "scara.toml").read_text().replace("latency_ms = 1.0", "latency_ms = 100.0"))
    paths["scara-adapter"] = folder / "scara-adapter.toml"
    return paths


def _robot(backend: str) -> str:
    """The bundled robot a backend runs."""
    return BACKENDS[backend][0].removesuffix("-adapter")


def _run(cli, moves, tmp_path, backend: str, paced: bool, *extra: str):
    robot, args, rate = BACKENDS[backend]
    log, summary = tmp_path / "run.npz", tmp_path / "run.json"
    timing = NO_OVERRUN_LIMIT if paced else ["--lockstep"]
    config = moves[robot] if robot.endswith("-adapter") else robot
    r = cli("run", config, "--trajectory", moves[_robot(backend)], *args, "--rate", str(rate), *timing, *extra, "--log", log, "--summary", summary)
    return r, json.loads(summary.read_text()), np.load(log), rate


@pytest.mark.parametrize("paced", [False, True], ids=["lockstep", "paced"])
@pytest.mark.parametrize("backend", list(BACKENDS))
def test_every_backend_completes_with_the_shipped_observer(cli, moves, tmp_path, request, backend, paced):
    """The shipped configuration runs to its end and hands the arm over, with no false detection."""
    if backend == "ros2":
        pytest.importorskip("rclpy", reason='ROS 2 needs the ros2 extra (pip install -e ".[ros2]")')
        request.getfixturevalue("ros_domain")  # a DDS domain of this test's own, localhost discovery
    r, s, log, rate = _run(cli, moves, tmp_path, backend, paced)
    assert s["completed"] and not s["collision"], s["stop_reason"]
    assert r.code in (0, 3), r.err  # 3: completed with missed deadlines (paced, busy machine)
    hold = round(EndSpec.hold_s * rate)
    assert s["cycles"] == round(MOVE_S * rate) + hold and log["t"].shape[0] == s["cycles"]
    assert s["end"].startswith(f"held the last reference for {EndSpec.hold_s:g} s, then ")
    if load_robot(_robot(backend)).spec.control.collision is not None:
        assert np.isfinite(log["tau_ext"]).all() and s["estimation"].endswith("reaction stop")
    start, goal = (np.array(x) for x in MOVES[_robot(backend)])
    assert (np.abs(log["q"][-1] - start) > 0.5 * np.abs(goal - start)).all(), log["q"][-1] - start  # every joint moved toward its goal
    assert s["cycle"] == "compiled"  # one generated call per cycle, on every backend
    if not paced and backend != "canopen-udp":  # lock-step is deterministic (UDP multicast may reorder)
        r, python, python_log, _ = _run(cli, moves, tmp_path, backend, paced, "--python-cycle")
        assert python["cycle"] == "python" and python["cycles"] == s["cycles"], python["stop_reason"]
        # over ROS 2, round-off in a command (1e-14 N·m) grows in the emulated plant where the UR5's wrist 3
        # (1e-4 kg m² behind 1.4 N·m of stiction) reverses under stick-slip: 2e-7 rad at once, 2e-4 rad at
        # the end (the Python cycle repeats itself exactly): compared at a coarser tolerance
        _same_logs(log, python_log, 1e-3 if backend == "ros2" else 1e-9)
        for key in ("tracking_rms", "torque_step_rms"):
            assert np.allclose(list(s[key].values()), list(python[key].values()), rtol=1e-3, atol=1e-9), key


def _same_logs(a, b, tolerance: float) -> None:
    """Two run logs of the same lock-step run agree (timings aside)."""
    for key in ("t", "read_ok", "q", "dq", "q_ref", "dq_ref", "tau", "effort", "dq_hat", "tau_ext"):
        if key in a.files:
            assert np.allclose(a[key], b[key], rtol=tolerance, atol=tolerance, equal_nan=True), key


def _kill_the_emulator_after(monkeypatch, delay_s: float) -> None:
    """The emulator (a child process, or the drives served in this process) dies ``delay_s`` into the run."""
    victims = []

    def popen(*args, **kwargs):
        victims.append(proc := subprocess.Popen(*args, **kwargs))
        return proc

    # only the session's own child processes (the emulator), not the compiler's
    monkeypatch.setattr(session, "subprocess", SimpleNamespace(Popen=popen, PIPE=subprocess.PIPE, TimeoutExpired=subprocess.TimeoutExpired))
    start = Cia402Emulator.start

    def start_and_keep(self):
        victims.append(self)
        return start(self)

    monkeypatch.setattr(Cia402Emulator, "start", start_and_keep)
    run = session.enable_and_run

    def run_and_kill(*args, **kwargs):
        threading.Timer(delay_s, lambda: [v.kill() if isinstance(v, subprocess.Popen) else v.stop() for v in victims]).start()
        return run(*args, **kwargs)

    monkeypatch.setattr(session, "enable_and_run", run_and_kill)


# the emulated Dynamixel bus is a pty: with its emulator gone the device itself goes, as a USB adapter
# pulled out would; CANopen drives that stop answering leave their TPDOs missing
@pytest.mark.parametrize("backend, fault", [("dynamixel", "port: "), ("canopen-virtual", "no_reply: "), ("canopen-udp", "no_reply: ")])
def test_a_dead_emulator_stops_the_run_with_the_missing_reply(cli, moves, tmp_path, monkeypatch, backend, fault):
    """Killed mid-run: exit 1, the reason is the communication fault (never a collision), the log holds
    every cycle before it."""
    _kill_the_emulator_after(monkeypatch, 1.5)
    r, s, log, rate = _run(cli, moves, tmp_path, backend, True, "--duration", "30")
    assert r.code == 1 and fault in s["stop_reason"] and "collision" not in s["stop_reason"], s["stop_reason"]
    assert not s["stop_reason"].startswith("warm-up")  # it died mid-run
    assert not s["collision"] and 0 < log["t"].shape[0] == s["cycles"] < 30 * rate
    assert s["end"].startswith("stopped: ")
