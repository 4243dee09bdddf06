"""Why a path cannot be timed (mbctl.ctrl.timing.diagnosis): the least demand at rest, and the joint and limit named."""

from __future__ import annotations

import re
from types import SimpleNamespace

import numpy as np
import pinocchio as pin
import pytest

from mbctl.bundled import bundled_config
from mbctl.ctrl.timing.diagnosis import rest_demand
from mbctl.ctrl.timing.stages import GridLimits

START, END = np.array([0, -1.5, 1.2, -1.2, -1.57, 0]), np.array([1.0, -0.8, 0.4, -0.8, -1.0, 0.8])
WAYPOINTS = f"{','.join(map(str, START))}; {','.join(map(str, END))}"


def test_least_demand_at_rest_is_the_minimax_of_the_lines():
    """Two joints asking |a + 2| and |a - 2| times their limits: no a does better than a = 0, where both ask 2 (closed form)."""
    pd = SimpleNamespace(
        q=np.zeros((1, 2)), tau_a=np.array([[1.0, 1.0]]), tau_0=np.array([[2.0, -2.0]]), dq_ds=np.array([[1.0, 1.0]]),
        friction=lambda a, b: np.zeros((1, 2)),
    )  # fmt: skip
    lim = GridLimits(np.full((1, 2), np.inf), np.full((1, 2), np.inf), np.ones((1, 2)), None)
    rest = rest_demand(pd, lim)
    assert rest.ratio == pytest.approx([2.0])
    np.testing.assert_allclose(rest.demand[0, :2], [2.0, 2.0])
    np.testing.assert_allclose(rest.hold[0, :2], [2.0, 2.0])
    lim = GridLimits(np.full((1, 2), np.inf), np.array([[np.inf, 0.5]]), np.ones((1, 2)), None)  # joint 2 may accelerate 0.5 at most
    assert rest_demand(pd, lim).ratio == pytest.approx([2.0])  # the best a is 0: the acceleration limit does not bind


def _low_torque_ur5(tmp_path):
    path = tmp_path / "lowtau.toml"
    path.write_text(bundled_config("ur5").read_text() + "\n[control]\neffort = 1.0\n")
    return path


@pytest.mark.parametrize("solver", ["reachability", "highs"])
def test_infeasible_timing_names_the_joint_and_the_torque_it_asks(cli, robots, tmp_path, solver):
    """The UR5 at 1 N·m (0.9 with the margin): exit 1, nothing written, the message names the joint holding the most against
    gravity and the torque it asks, equal to pinocchio's gravity plus the break-away friction fs (q' > 0) at that point."""
    out = tmp_path / "t.csv"
    r = cli("trajectory", "optimal", _low_torque_ur5(tmp_path), "--waypoints", WAYPOINTS, "--grid", "100", "--solver", solver, "--out", out)
    assert r.code == 1 and not out.exists()
    found = re.search(r"the limits cannot be met at s = ([\d.]+) \(grid point (\d+) of 100\), even with the path at rest there: holding it "
                      r"asks ([\d.]+) N·m of (\w+) against its torque limit 0.9 N·m", r.err)  # fmt: skip
    assert found, r.err
    s, joint, asked = float(found.group(1)), found.group(4), float(found.group(3))
    robot = robots["ur5"]
    q = START + s * (END - START)  # two waypoints: the straight line
    gravity = pin.computeGeneralizedGravity(robot.model, robot.model.createData(), robot.configuration(q))
    k = robot.joint_names.index(joint)
    fs = robot.joints[k].friction.law.fs
    assert asked == pytest.approx(abs(gravity[k] + np.sign(END[k] - START[k]) * fs), rel=1e-3)
    assert "no path acceleration brings every joint within its limits (the best asks " in r.err


def test_the_same_path_at_the_ur5s_own_limits_is_timed(cli, tmp_path):
    """The valid case: the bundled UR5's limits admit the path."""
    out = tmp_path / "t.csv"
    assert cli("trajectory", "optimal", "ur5", "--waypoints", WAYPOINTS, "--grid", "100", "--out", out).code == 0 and out.is_file()
