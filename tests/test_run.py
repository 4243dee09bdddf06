"""`mbctl run` and `mbctl emulate` end to end: simulated plant, emulated Dynamixel bus, bad input."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from dynamixel_sdk import COMM_SUCCESS, PacketHandler, PortHandler

import mbctl.hardware.session as session
from mbctl.config.control import EndSpec
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import InputError
from mbctl.hardware.sim import SimPlant

GAINS = "[control.computed-torque]\nkp = 400.0\nkd = 40.0\n"
SUMMARY_KEYS = {"cycles", "overruns", "clean", "completed", "phases_us", "period_jitter_us", "period_p50_us", "period_p99_us", "compute_p99_us", "tracking_rms", "max_abs_error", "stop_reason", "comm_errors"}


@pytest.fixture(scope="module")
def scara_traj(configs, tmp_path_factory):
    robot = load_robot(configs / "scara.toml")
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.5, 0.7, -0.4, 0.03], [0.2, 0.3, 0.0, 0.0]]), [0.6, 0.6], 1000.0, robot.joint_names)
    path = tmp_path_factory.mktemp("traj") / "traj.csv"
    write_trajectory(path, traj)
    return path


def test_lockstep_run_on_the_simulated_plant(cli, configs, scara_traj, tmp_path):
    """Computed torque against the [plant] truth (LuGre j1, payload, encoders): completes, tracks, logs."""
    log, summary = tmp_path / "run.npz", tmp_path / "run.json"
    r = cli("run", configs / "scara.toml", "--trajectory", scara_traj, "--lockstep", "--log", log, "--summary", summary, "--plot", tmp_path / "run.png")
    assert r.code == 0, r.err
    s = json.loads(summary.read_text())
    cycles = 1200 + round(EndSpec.hold_s * 1000)  # the move, then the end hold
    assert SUMMARY_KEYS <= set(s) and s["stop_reason"] == "completed" and s["clean"] and s["cycles"] == cycles
    assert max(s["tracking_rms"][j] for j in ("j1", "j2", "j3")) < 2e-3  # rad
    assert s["tracking_rms"]["j4"] < 6e-3  # m: the unmodelled 0.1 kg payload sags the quill
    data = np.load(log)
    assert data["q"].shape == (cycles, 4) and np.isfinite(data["tau"]).all()
    again = tmp_path / "again.npz"
    assert cli("run", configs / "scara.toml", "--trajectory", scara_traj, "--lockstep", "--log", again, "--summary", tmp_path / "a.json").code == 0
    assert np.array_equal(np.load(again)["q"], data["q"])  # lock-step is deterministic


def test_same_controller_over_the_emulated_dynamixel_bus(cli, configs, tmp_path):
    """The Dynamixel path (SDK on a pty, `mbctl emulate` in a child process) closes the same loop.

    Lock-step: the emulated plant moves one period per sync read, so the run is the
    same on a loaded machine, and two runs log identical states.
    """
    robot = load_robot(configs / "scara.toml")
    slow = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.4, 0.5, -0.3, 0.02]]), [1.5], 1000.0, robot.joint_names)
    write_trajectory(tmp_path / "slow.csv", slow)
    # the largest latency budget keeps replies in time on a loaded machine (the reply timeout is
    # 2*latency + 2 ms; 42 ms was once too short there); lock-step, the timeout changes no result
    (tmp_path / "scara.urdf").write_text((configs / "scara.urdf").read_text())
    (tmp_path / "scara.toml").write_text((configs / "scara.toml").read_text().replace("latency_ms = 1.0", "latency_ms = 100.0"))
    logs = []
    for name in ("a", "b"):
        summary = tmp_path / f"{name}.json"
        log = tmp_path / f"{name}.npz"
        r = cli("run", tmp_path / "scara.toml", "--trajectory", tmp_path / "slow.csv", "--plant", "dynamixel", "--emulate", "--lockstep", "--duration", "0.5", "--log", log, "--summary", summary)
        s = json.loads(summary.read_text())
        assert r.code == 0 and s["stop_reason"] == "completed", s["stop_reason"]
        assert s["cycles"] == 500 + round(EndSpec.hold_s * 1000) and s["failed_reads"] == 0 and s["plant"] == "dynamixel"
        logs.append(np.load(log))
    assert np.array_equal(logs[0]["q"], logs[1]["q"]) and np.array_equal(logs[0]["tau"], logs[1]["tau"])
    error = logs[0]["q"] - logs[0]["q_ref"]
    assert np.sqrt((error**2).mean(axis=0)).max() < 1e-2 and np.abs(logs[0]["q"][-1] - logs[0]["q"][0]).max() > 0.1  # it tracked a real motion


def test_a_robot_away_from_the_start_is_refused(configs, scara_traj, tmp_path, monkeypatch):
    robot = load_robot(configs / "scara.toml")
    traj = quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.3, 0, 0, 0]]), [1.0], 100.0, robot.joint_names)
    opened = session.open_backend

    def displaced(robot_, options, q0_):
        q0 = np.array([0.0, 0.2, 0.0, 0.0])
        return SimPlant(robot_, 1e-3, q0=q0)

    monkeypatch.setattr(session, "open_backend", displaced)
    with pytest.raises(InputError, match=r"is 0\.\d+ away from the trajectory's start at joint j2"):
        session.run_session(robot, traj, session.SessionOptions(lockstep=True), tmp_path / "run.npz")
    assert not (tmp_path / "run.npz").exists()
    assert opened is not displaced


@pytest.mark.parametrize(
    "extra, table, parts",
    [
        ([], "[control.computed-torque]\nkp = 400.0\n", ["control.computed-torque.kd", "missing required field"]),
        (["--plant", "dynamixel", "--emulate"], GAINS + "[drives]\nbaudrate = 4000000\n[drives.joints.j1]\nid = 1\n", ["drives.joints.j1.torque_constant"]),
        ([], GAINS + "[plant]\nvelocity = \"guess\"\n", ["plant.velocity", "unknown value 'guess'"]),
    ],
)
def test_bad_run_configs_fail_cleanly(cli, configs, scara_traj, tmp_path, extra, table, parts):
    (tmp_path / "scara.urdf").write_text((configs / "scara.urdf").read_text())
    (tmp_path / "scara.toml").write_text('urdf = "scara.urdf"\n' + table)
    r = cli("run", tmp_path / "scara.toml", "--trajectory", scara_traj, "--lockstep" if not extra else "--rate", *(["1000"] if extra else []), *extra, "--log", tmp_path / "run.npz", "--summary", tmp_path / "run.json")
    assert r.code == 2, r.err
    line = r.err.strip()
    assert len(line.splitlines()) == 1 and all(p in line for p in parts), line
    assert not (tmp_path / "run.npz").exists() and not (tmp_path / "run.json").exists()


def test_emulate_command_serves_the_official_sdk(configs):
    """`mbctl emulate` prints a pty path; dynamixel_sdk pings servo 3 there; SIGINT stops it cleanly."""
    script = Path(sys.executable).with_name("mbctl")
    proc = subprocess.Popen([script, "emulate", configs / "scara.toml"], stdout=subprocess.PIPE, text=True)
    try:
        first = proc.stdout.readline()
        port_name = first.split(" on ")[1].split()[0]
        assert "j3: ID 3" in first and os.path.exists(port_name)
        port = PortHandler(port_name)
        assert port.openPort() and port.setBaudRate(4000000)
        # the SDK waits one latency-timer period (16 ms) for a reply: on a loaded machine the emulator's
        # process may not be scheduled that soon, so a few tries, as a host retries a missed reply
        for _ in range(5):
            model, result, error = PacketHandler(2.0).ping(port, 3)
            if result == COMM_SUCCESS:
                break
        port.closePort()
        assert (result, error, model) == (COMM_SUCCESS, 0, 1020)
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "served" in out


def test_exit_codes_tell_clean_degraded_and_stopped_runs_apart():
    """0 clean, 3 completed with overruns, 1 stopped (safety or overrun limit)."""
    from mbctl.cli.commands.run import exit_code
    from mbctl.hardware.loop import RunSummary

    assert exit_code(RunSummary(stop_reason="completed")) == 0
    assert exit_code(RunSummary(stop_reason="completed, degraded: 212 overruns (4.7 %)")) == 3
    assert exit_code(RunSummary(stop_reason="overrun limit: 5 consecutive overruns (limit 5)")) == 1
    assert exit_code(RunSummary(stop_reason="limit breach: q.j1 = 3 outside [-2.9, 2.9]")) == 1


@pytest.mark.parametrize(
    "option, value, message",
    [("--max-overrun-fraction", "1.5", "must be within [0, 1]"), ("--overrun-window", "0", "must be >= 1"), ("--max-consecutive-overruns", "-1", "must be >= 0")],
)
def test_bad_overrun_options_are_refused(cli, configs, scara_traj, tmp_path, option, value, message):
    r = cli("run", configs / "scara.toml", "--trajectory", scara_traj, option, value, "--log", tmp_path / "run.npz", "--summary", tmp_path / "run.json")
    assert r.code == 2 and option in r.err and message in r.err, r.err
    assert len(r.err.strip().splitlines()) == 1 and not (tmp_path / "run.npz").exists()
