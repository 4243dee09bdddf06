"""The end of a run: a clean finish holds the last reference, then hands the arm to each backend's own
safe state; a stop (or ``then = "torque-off"``) is the backend's stop at once."""

from __future__ import annotations

import os
import signal

import numpy as np
import pinocchio as pin
import pytest
from test_cia402 import PERIOD_S, lockstep_pair, two_drives
from test_dynamixel import Inertia, lockstep_emulator, wait_until

from mbctl.hardware.cia402.objects import State
from mbctl.hardware.clock import VirtualClock
from mbctl.hardware.dynamixel import DynamixelBus
from mbctl.hardware.interface import JointInterface
from mbctl.hardware.loop import LoopConfig, SafetyLimits, log_columns, run_loop
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.session import CANOPEN_WATCHDOG_FAILURES
from mbctl.hardware.sim import SimPlant

LIMITS = SafetyLimits(lower=np.full(2, -10.0), upper=np.full(2, 10.0), velocity=np.full(2, 50.0), effort=np.full(2, 0.9))


def _hold_at(goal: float):
    """A PD law to ``goal`` (rad) on two joints."""
    return lambda t, state: 2.0 * (goal - state.q) - 0.1 * state.dq


def _run(backend: JointInterface, tmp_path, law, **config) -> tuple:
    loop = LoopConfig(rate_hz=1 / PERIOD_S, duration_s=0.1, paced=False, watchdog_failures=CANOPEN_WATCHDOG_FAILURES, **config)
    summary = run_loop(backend, law, LIMITS, loop, RunLog(tmp_path / "run.npz", log_columns(backend.joint_names)))
    return summary, np.load(tmp_path / "run.npz")


def test_canopen_clean_finish_holds_then_disables_operation(tmp_path):
    """The hold's cycles are logged after the run's, then disable operation (0x0007): the drives sit in
    Switched On, not Switch On Disabled as a quick stop leaves them; the emulated brakes hold the arm."""
    emulator, bus = lockstep_pair(two_drives(), plant=Inertia())
    with emulator, bus:
        summary, log = _run(bus, tmp_path, _hold_at(0.1), end_hold_s=0.05)
        assert wait_until(lambda: all(d.state is State.SWITCHED_ON for d in emulator.drives)), [d.state for d in emulator.drives]
        q_after = emulator.plant.state()[0]  # joint positions (rad)
    assert summary.stop_reason == "completed" and summary.cycles == log["t"].shape[0] == round(0.15 / PERIOD_S)
    assert summary.end.startswith("held the last reference for 0.05 s, then disable operation (controlword 0x0007)")
    assert np.allclose(q_after, log["q"][-1], atol=1e-3)  # braked where the hold left it


def _failing_at(t_fail: float):
    """The PD law of :func:`_hold_at`, failing from ``t_fail`` (s) on."""
    hold = _hold_at(0.1)

    def law(t, state):
        if t >= t_fail:
            raise RuntimeError("a law that fails")
        return hold(t, state)

    return law


@pytest.mark.parametrize("then, reason", [("torque-off", "completed"), ("hand-over", "exception in controller")])
def test_canopen_stop_and_torque_off_are_a_quick_stop(tmp_path, then, reason):
    """A stop (here a failing law) and then = "torque-off" end with quick stop: Switch On Disabled."""
    emulator, bus = lockstep_pair(two_drives(), plant=Inertia())
    law = _hold_at(0.1) if reason == "completed" else _failing_at(0.05)
    with emulator, bus:
        summary, _ = _run(bus, tmp_path, law, end_hold_s=0.05, end=then)
        assert wait_until(lambda: all(d.state is State.SWITCH_ON_DISABLED for d in emulator.drives)), [d.state for d in emulator.drives]
    assert summary.stop_reason.startswith(reason), summary.stop_reason
    assert "quick stop (controlword 0x0002)" in summary.end and (then == "torque-off") == ("asked for" in summary.end)


def test_dynamixel_clean_finish_leaves_the_servos_holding_in_position_mode(tmp_path):
    """Hand-over on the servos: position mode, torque on, goals at the present positions, Bus Watchdog off;
    the bus's closing does not turn torque off after it."""
    with lockstep_emulator() as emulator:
        with DynamixelBus(("a", "b"), emulator.bus, port=emulator.port_name) as bus:
            summary, log = _run(bus, tmp_path, _hold_at(0.1), end_hold_s=0.02)
        servos = emulator.servos
        goals = lambda: bus.units.q_from_counts(np.array([s.get("goal_position") for s in servos], dtype=float))  # noqa: E731
        assert wait_until(lambda: np.allclose(goals(), log["q"][-1], atol=2e-3)), goals()  # a sync write: applied a moment later
        holding = lambda: all(s.torque_on and s.get("operating_mode") == 3 and s.get("bus_watchdog") == 0 for s in servos)  # noqa: E731
        assert wait_until(holding), [(s.torque_on, s.get("operating_mode"), s.get("bus_watchdog")) for s in servos]  # the emulator's thread applies the writes
    assert summary.end.startswith("held the last reference for 0.02 s, then the servos hold their last positions")



class _NoSafeState(SimPlant):
    """The simulated plant as a backend with no safe state to hand the arm to (a ROS 2 arm without a
    holding controller); it counts the reads after ``stop_after`` of them, then sends SIGINT."""

    hand_over_possible = False

    def __init__(self, robot, stop_after: int | None):
        super().__init__(robot, PERIOD_S)
        self.reads, self.stop_after = 0, stop_after

    def read(self):
        self.reads += 1
        if self.reads == self.stop_after:
            os.kill(os.getpid(), signal.SIGINT)  # the user's Ctrl-C
        return super().read()


@pytest.mark.parametrize("paced", [True, False])
def test_no_safe_state_holds_until_stopped_when_paced(robots, tmp_path, paced):
    """Paced: the hold goes on past the end hold until Ctrl-C, then the stop; the run still counts as
    completed. Lock-step: nobody can stop it, so it ends after the end hold with the stop."""
    robot = robots["scara"].with_friction({n: None for n in robots["scara"].joint_names})
    backend = _NoSafeState(robot, stop_after=400 if paced else None)
    clock = VirtualClock()
    limits = SafetyLimits.of(robot)
    loop = LoopConfig(rate_hz=1 / PERIOD_S, duration_s=0.1, paced=paced, end_hold_s=0.05, realtime_priority=None)
    data = robot.model.createData()
    g = lambda t, state: pin.computeGeneralizedGravity(robot.model, data, robot.configuration(state.q)).copy()  # noqa: E731  hold where it is
    with backend:
        summary = run_loop(backend, g, limits, loop, RunLog(tmp_path / "run.npz", log_columns(robot.actuated_names)), clock=clock)
    assert summary.stop_reason == "completed", summary.stop_reason
    if paced:
        assert summary.cycles == 400 - 1 and summary.end.startswith("held the last reference until signal SIGINT")  # the warm-up read is one
    else:
        assert summary.cycles == 150 and summary.end.endswith("(no safe state to hand the arm to; lock-step)")
