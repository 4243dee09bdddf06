"""Task-space computed torque with a null-space objective on the 7-DOF Panda (plus fingers).

The plant is pinocchio's ABA on the same model, integrated by DOP853 at tight
tolerances with the law evaluated continuously (exact simulation); the task error is
measured by pinocchio's forward kinematics and compared with the analytic solution
of ``e'' + kd e' + kp e = 0``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pinocchio as pin
import pytest
from scipy.integrate import solve_ivp

from mbctl.ctrl.controllers import build_controller
from mbctl.ctrl.task_space import (
    build_task_space_function,
    task_space_settings,
    task_tracking,
)
from mbctl.dynamics.codegen import compile_function
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError

Q_MID = np.array([0.0, -0.3, 0.0, -2.2, 0.0, 2.0, 0.8, 0.02, 0.02])
AMPLITUDE = np.array([0.3, 0.2, 0.25, 0.3, 0.4, 0.3, 0.5, 0.0, 0.0])  # rad; the fingers hold still
START_OFFSET = np.array([0.25, 0.12, -0.35, -0.3, 0.3, 0.25, -0.3, 0.0, 0.0])  # rad: off the task and far from mid-range
DURATION = 2.0


def _reference(t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    w = 2 * np.pi * 0.5
    return Q_MID + AMPLITUDE * np.sin(w * t), AMPLITUDE * w * np.cos(w * t), -AMPLITUDE * w**2 * np.sin(w * t)


@pytest.fixture(scope="module")
def panda(configs):
    return load_robot(configs / "panda.toml")


def _simulate(robot, law, times):
    """Exact closed loop: DOP853 (rtol 1e-12) of ABA(q, dq, law(q, dq, reference(t)))."""
    model, data = robot.model, robot.create_data()
    nv = robot.nv
    zero = np.zeros(nv)

    def rhs(t, x):
        q, dq = x[:nv], x[nv:]
        tau, _, saturated = law(q, dq, *_reference(t), zero)
        assert not saturated.any()
        return np.concatenate([dq, pin.aba(model, data, robot.configuration(q), dq, tau)])

    q0 = _reference(0.0)[0] + START_OFFSET
    sol = solve_ivp(rhs, (times[0], times[-1]), np.concatenate([q0, zero]), method="DOP853", t_eval=times, rtol=1e-12, atol=1e-12)
    assert sol.success
    return sol.y[:nv].T, sol.y[nv:].T


def _task_error(robot, task, times, q, dq):
    """x_d - x and its rate from pinocchio's kinematics (world position of the task frame)."""
    model, data = robot.model, robot.create_data()
    fid = model.getFrameId(task.frame)
    e, de = [], []
    for t, qk, dqk in zip(times, q, dq):
        q_d, dq_d, _ = _reference(t)
        pin.forwardKinematics(model, data, robot.configuration(q_d), dq_d)
        target = pin.updateFramePlacement(model, data, fid).translation.copy()
        target_v = pin.getFrameVelocity(model, data, fid, pin.LOCAL_WORLD_ALIGNED).linear.copy()
        pin.forwardKinematics(model, data, robot.configuration(qk), dqk)
        x = pin.updateFramePlacement(model, data, fid).translation.copy()
        v = pin.getFrameVelocity(model, data, fid, pin.LOCAL_WORLD_ALIGNED).linear.copy()
        e.append(target - x)
        de.append(target_v - v)
    return np.array(e), np.array(de)


@pytest.fixture(scope="module")
def runs(panda):
    """Closed-loop runs with the configured objective and with the objective switched off."""
    task = task_space_settings(panda)
    times = np.linspace(0.0, DURATION, 201)
    out = {}
    for name, t in (("objective", task), ("none", dataclasses.replace(task, kp0=0.0))):
        function, _, _ = build_task_space_function(panda, task=t)
        q, dq = _simulate(panda, compile_function(function), times)
        e, de = _task_error(panda, t, times, q, dq)
        out[name] = {"q": q, "e": e, "de": de}
    return task, times, out


def test_task_error_converges_at_the_gains_rate(runs):
    """Every task coordinate follows e(t) = (e0 + (de0 + w e0) t) exp(-w t), w = 10 rad/s, to 1e-8 m."""
    task, times, out = runs
    w = np.sqrt(task.kp)
    assert task.kd == pytest.approx(2 * w)  # critically damped, as configured
    e, de = out["objective"]["e"], out["objective"]["de"]
    analytic = (e[0] + (de[0] + w * e[0]) * times[:, None]) * np.exp(-w * times)[:, None]
    assert np.abs(e[0]).max() > 0.05  # it starts well off the task
    assert np.abs(e - analytic).max() < 1e-8
    assert np.abs(e[-1]).max() < 1e-6


def test_secondary_objective_improves_without_disturbing_the_task(runs):
    """The joint-limit criterion ends well below its start and below the run without it (whose
    self-motion drifts), and the task error of the two runs is the same to 1e-8 m."""
    task, times, out = runs
    with_objective = task.objective_value(out["objective"]["q"])
    without = task.objective_value(out["none"]["q"])
    assert with_objective[-1] < 0.5 * with_objective[0]
    assert with_objective[-1] < 0.2 * without[-1] and with_objective.mean() < 0.5 * without.mean()
    assert np.abs(out["objective"]["e"] - out["none"]["e"]).max() < 1e-8


def test_fingers_hold_their_reference(runs):
    """The finger joints, outside the task chain, stay at their reference opening."""
    _, _, out = runs
    assert np.abs(out["objective"]["q"][:, 7:] - 0.02).max() < 1e-9


def test_task_tracking_summary(panda, runs):
    """task_tracking measures the task error by forward kinematics and the objective at both ends."""
    task, times, out = runs
    q = out["objective"]["q"]
    q_ref = np.array([_reference(t)[0] for t in times])
    tracking = task_tracking(panda, task, q, q_ref)
    assert tracking.max_abs_error == pytest.approx(np.abs(out["objective"]["e"]).max(), rel=1e-9)
    assert tracking.objective_end == pytest.approx(task.objective_value(q[-1]))


def test_the_law_is_built_through_build_controller(panda):
    """build_controller(robot, "task-space") gives the same function."""
    controller = build_controller(panda, "task-space")
    q, zero = Q_MID, np.zeros(9)
    reference = build_task_space_function(panda)[0]
    ours = controller.function(q, zero, q + 0.01, zero, zero, zero)[0].full()
    assert np.allclose(ours, reference(q, zero, q + 0.01, zero, zero, zero)[0].full(), atol=1e-12)


BAD = {
    "missing table": ("", ["control.task-space", "missing required table"]),
    "unknown frame": (
        '[control.task-space]\nframe = "panda_hnd"\nkp = 1.0\nkd = 1.0\n[control.task-space.nullspace]\nkp = 1.0\nkd = 1.0\n',
        ["control.task-space.frame", "no frame 'panda_hnd'", "did you mean"],
    ),
    "zero gain": (
        '[control.task-space]\nframe = "panda_hand"\nkp = 0.0\nkd = 1.0\n[control.task-space.nullspace]\nkp = 1.0\nkd = 1.0\n',
        ["control.task-space.kp", "must be > 0"],
    ),
    "unknown objective": (
        '[control.task-space]\nframe = "panda_hand"\nkp = 1.0\nkd = 1.0\n[control.task-space.nullspace]\nobjective = "manipulability"\nkp = 1.0\nkd = 1.0\n',
        ["control.task-space.nullspace.objective", "unknown value 'manipulability'"],
    ),
    "posture of a finger": (
        '[control.task-space]\nframe = "panda_hand"\nkp = 1.0\nkd = 1.0\n[control.task-space.nullspace]\nobjective = "posture"\n'
        "kp = 1.0\nkd = 1.0\nposture = { panda_finger_joint1 = 0.0 }\n",
        ["control.task-space.nullspace.posture.panda_finger_joint1", "unknown joint"],
    ),
    "bad axis": (
        '[control.task-space]\nframe = "panda_hand"\naxes = ["x", "w"]\nkp = 1.0\nkd = 1.0\n[control.task-space.nullspace]\nkp = 1.0\nkd = 1.0\n',
        ["control.task-space.axes", "distinct axes among x, y, z"],
    ),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_task_space_table(tmp_path, case):
    """A bad [control.task-space] table is a ConfigError naming file and field."""
    table, parts = BAD[case]
    path = tmp_path / "panda.toml"
    path.write_text('urdf = "example-robot-data:panda"\n[control.computed-torque]\nkp = 400.0\nkd = 40.0\n' + table)
    with pytest.raises(ConfigError) as info:
        build_controller(load_robot(path), "task-space")
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    for part in parts:
        assert part in message


def test_mbctl_run_with_the_task_space_law(cli, configs, tmp_path):
    """mbctl run --controller task-space: the hand follows the task reference to well under a
    millimetre at 1 kHz while the joint-limit criterion falls; the summary reports both."""
    import json

    traj, log, summary = tmp_path / "traj.csv", tmp_path / "run.npz", tmp_path / "run.json"
    r = cli(
        "trajectory", "quintic", configs / "panda.toml", "--out", traj, "--durations", "1.0",
        "--waypoints", "0,-0.3,0,-2.2,0,2.0,0.8,0.02,0.02; 0.6,0.2,-0.4,-1.6,0.5,2.4,0.2,0.02,0.02",
    )  # fmt: skip
    assert r.code == 0, r.err
    r = cli("run", configs / "panda.toml", "--trajectory", traj, "--controller", "task-space", "--lockstep", "--log", log, "--summary", summary)
    assert r.code == 0, r.err
    s = json.loads(summary.read_text())
    assert s["stop_reason"] == "completed" and s["saturated"] == 0
    assert s["task_max_abs_error_m"] < 1e-4 and s["objective_end"] < s["objective_start"]
    assert "task (panda_hand_tcp) error rms" in r.out
