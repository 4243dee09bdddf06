"""A loop paced by the robot (a Franka's readOnce waits for its next state), and libfranka's errors in the
loop's terms: on a stand-in backend with a virtual clock, no simulator needed."""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.hardware.clock import VirtualClock
from mbctl.hardware.franka.libfranka import FrankaFault, in_mbctl_terms, libfranka_errors
from mbctl.hardware.interface import CommunicationError, JointCommand, JointInterface, JointState
from mbctl.hardware.loop import LoopConfig, SafetyLimits, log_columns, run_loop
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.runlog import RunLog


class RobotPaced(JointInterface):
    """Two joints held still; each read is the robot's next state on its own clock (ms), skipping the states listed
    in ``skips`` (the loop was late), and costs the host 3 ms: a loop pacing itself would overrun every cycle."""

    paces_loop = True
    sample_clock = True

    def __init__(self, clock: VirtualClock, skips: dict[int, int]):
        self.joint_names = ("a", "b")
        self.clock, self.skips = clock, skips
        self.reads, self.ms, self.missed_samples = 0, 5000, 0

    def open(self):
        pass

    def close(self):
        pass

    def enable(self):
        pass

    def disable(self):
        pass

    def read(self):
        self.reads += 1
        skipped = self.skips.get(self.reads, 0)
        self.ms += 1 + skipped
        self.missed_samples += skipped
        self.clock.advance(3e-3)
        return JointState(t=self.ms * 1e-3, q=np.zeros(2), dq=np.zeros(2), effort=np.zeros(2))

    def write(self, command: JointCommand):
        pass


class NoSleep(VirtualClock):
    def sleep_until(self, deadline: float) -> None:
        raise AssertionError("a loop paced by the robot must not sleep")


def test_the_robot_paces_the_loop(tmp_path):
    """No sleep; the controller's time is the robot's clock since its first state; overruns are exactly the cycles
    after which the robot sent states the loop never read (not the host's 3 ms per cycle)."""
    clock = NoSleep()
    backend = RobotPaced(clock, skips={12: 2, 30: 1})
    seen = []

    def controller(t, state):
        seen.append(t)
        return np.zeros(2)

    limits = SafetyLimits(lower=np.full(2, -1.0), upper=np.full(2, 1.0), velocity=np.full(2, 1.0), effort=np.full(2, 1.0))
    config = LoopConfig(duration_s=0.05, realtime_priority=None, overrun=OverrunPolicy(max_fraction=1.0, max_consecutive=0))
    summary = run_loop(backend, controller, limits, config, RunLog(tmp_path / "r.npz", log_columns(backend.joint_names)), clock=clock)
    assert summary.cycles == 50 and summary.overruns == 2, summary.stop_reason
    assert summary.stop_reason == "completed, degraded: 2 overruns (4.0 %)"
    # the warm-up's t = 0 and the first cycle's; then the robot's clock, 2 and 1 states skipped after reads 12 and 30
    expected = np.concatenate([[0.0], np.cumsum([0] + [1 + {12: 2, 30: 1}.get(k, 0) for k in range(3, 52)]) * 1e-3])
    assert np.allclose(seen, expected)


class NetworkException(RuntimeError):
    """pylibfranka's exception of that name (a stand-in: the mapping goes by name)."""


class ControlException(RuntimeError):
    pass


def test_libfranka_errors_in_the_loops_terms():
    """No state within the timeout and a closed connection are communication errors; a reflex is a fault whose
    message keeps libfranka's error flags, on one line."""
    timeout = in_mbctl_terms(NetworkException("libfranka: UDP receive: Timeout"), "readOnce")
    assert isinstance(timeout, CommunicationError) and timeout.kind == "timeout" and "UDP receive: Timeout" in str(timeout)
    closed = in_mbctl_terms(NetworkException("libfranka: TCP send bytes: I/O error"), "writing")
    assert isinstance(closed, CommunicationError) and closed.kind == "port"
    reflex = in_mbctl_terms(ControlException('libfranka: Move command aborted: motion aborted by reflex! ["joint_reflex"]\ncontrol_command_success_rate: 0.93'), "readOnce")
    assert isinstance(reflex, FrankaFault) and "\n" not in str(reflex)
    assert str(reflex) == 'readOnce: ControlException: libfranka: Move command aborted: motion aborted by reflex! ["joint_reflex"] control_command_success_rate: 0.93'


def test_error_flags_by_name():
    """The set flags of libfranka's Errors, by name; none: the empty string."""
    plf = pytest.importorskip("pylibfranka")
    assert libfranka_errors(plf.Errors()) == ""

    class Flags:
        joint_reflex, tau_j_range_violation, power_limit_violation = True, False, True

        def __bool__(self):
            return True

    assert libfranka_errors(Flags()) == "joint_reflex, power_limit_violation"
