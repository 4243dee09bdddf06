"""The paced simulated plant in its own process: same physics as the lock-step plant, failures reported.

No timing assertions: what the plant computes does not depend on when it runs, so the
checks compare it with the in-process lock-step plant step for step.
"""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.interface import CommunicationError, HardwareError, JointCommand
from mbctl.hardware.plant_process import PlantProcess
from mbctl.hardware.sim import PlantConfig, SimPlant

PERIOD_S = 1e-3
Q0 = np.array([0.3])


@pytest.fixture(scope="module")
def rig():
    return load_robot("friction_rig")


def wait_for(plant: PlantProcess, t_s: float, timeout_s: float = 60.0):
    """The first measurement at or after plant time ``t_s``."""
    end = time.monotonic() + timeout_s
    while (state := plant.read()).t < t_s:
        assert time.monotonic() < end, "the plant did not advance"
        time.sleep(0.002)
    return state


def test_held_until_enabled_then_equal_to_the_lockstep_plant(rig):
    """Torque off, the arm is held (brakes); enabled at zero torque it swings, each measurement
    equal to the lock-step plant's after as many periods."""
    with PlantProcess(rig, PERIOD_S, PlantConfig(), q0=Q0) as plant:
        held = wait_for(plant, 0.0)
        time.sleep(0.05)
        after = plant.read()
        assert after.t == held.t and np.array_equal(after.q, held.q)  # nothing moved while held
        plant.enable()
        states = [wait_for(plant, t) for t in (0.02, 0.05)]
    reference = SimPlant(rig, PERIOD_S, PlantConfig(), q0=Q0)
    with reference:
        assert np.array_equal(reference.read().q, held.q)
        reference.enable()
        steps = 0
        for state in states:
            while steps < round(state.t / PERIOD_S):
                reference.write(JointCommand.torque(np.zeros(1)))
                steps += 1
            expected = reference.read()
            assert expected.t == pytest.approx(state.t)
            assert np.array_equal(expected.q, state.q) and np.array_equal(expected.dq, state.dq)
    assert abs(states[-1].q[0] - Q0[0]) > 1e-3  # it moved


def test_torque_reaches_the_plant_and_the_report_follows(rig):
    """A torque well above gravity (7.5 N m here) lifts the arm; close() collects the plant's timing."""
    with PlantProcess(rig, PERIOD_S, PlantConfig(), q0=Q0) as plant:
        plant.enable()
        plant.write(JointCommand.torque(np.array([15.0])))
        start = plant.read().t
        lifted = wait_for(plant, start + 0.1)
        name = plant._shm.name
    assert lifted.q[0] > Q0[0] + 0.01 and lifted.effort[0] == 15.0
    timing = plant.timing()
    assert timing["steps"] >= 100 and timing["real_time_factor"] > 0 and np.isfinite(timing["step_p99_us"])
    assert not os.path.exists(f"/dev/shm/{name}")  # the shared memory is gone


def test_a_plant_that_cannot_start_says_why(rig):
    with pytest.raises(HardwareError, match="did not start: .*"):
        PlantProcess(rig, PERIOD_S, PlantConfig(), q0=np.zeros(5)).open()


def test_a_dead_plant_is_a_communication_error(rig):
    """The loop's failed-read path (and its watchdog) handles a plant process that died."""
    with PlantProcess(rig, PERIOD_S, PlantConfig(), q0=Q0) as plant:
        plant._proc.kill()
        plant._proc.wait()
        with pytest.raises(CommunicationError, match="the simulated plant stopped"):
            for _ in range(10):
                plant.read()


def test_the_plant_stops_when_its_parent_dies(tmp_path):
    """A control process that dies without closing the plant leaves no plant process behind."""
    import subprocess
    import sys

    script = tmp_path / "parent.py"
    script.write_text(
        "import os, numpy as np\n"
        "from mbctl.dynamics.model.robot import load_robot\n"
        "from mbctl.hardware.plant_process import PlantProcess\n"
        "p = PlantProcess(load_robot('friction_rig'), 1e-3, q0=np.array([0.3]))\n"
        "p.open()\n"
        "print(p._proc.pid, flush=True)\n"
        "os._exit(0)\n"
    )
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    child = int(done.stdout.split()[0])
    end = time.monotonic() + 30
    while os.path.exists(f"/proc/{child}") and "zombie" not in open(f"/proc/{child}/status").read():
        assert time.monotonic() < end, "the orphaned plant process kept running"
        time.sleep(0.05)


def test_step_cost_percentiles_from_the_histogram_match_the_costs():
    """The plant counts its step costs in 1.2 %-wide log bins (flat memory): percentiles agree with numpy's within 1.5 %."""
    import numpy as np

    from mbctl.hardware.plant_process import cost_bin, cost_percentile

    costs = np.random.default_rng(3).lognormal(np.log(40e-6), 0.5, 20_000)  # s, around 40 us
    counts = np.zeros(8 * 200)
    for c in costs:
        counts[cost_bin(c)] += 1
    for percent in (50, 99):
        assert abs(cost_percentile(counts, percent) / np.percentile(costs, percent) - 1) < 0.015
    assert cost_bin(0.0) == 0 and cost_bin(1e6) == 8 * 200 - 1  # out of range: the end bins, not an error
