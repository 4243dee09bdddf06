"""The [control] table: parsed values, and one-line errors with exit code 2 for bad input."""

from __future__ import annotations

import numpy as np
import pytest
from test_bad_input import GOOD_TOML, GOOD_TRAJ, _assert_clean_failure, _write

from mbctl.ctrl.settings import control_settings
from mbctl.dynamics.model.robot import load_robot

CONTROL = """
[control]
effort = { j1 = 8.0 }
[control.computed-torque]
kp = 400.0
kd = { j1 = 40.0, j2 = 30.0 }
[control.pd]
kp = 50.0
kd = 2.0
"""


def test_numbers_and_joint_tables_are_read(tmp_path):
    """A number applies to every actuated joint, a table per joint; effort defaults to the URDF limit."""
    _write(tmp_path, GOOD_TOML + CONTROL, None)
    s = control_settings(load_robot(tmp_path / "r.toml"))
    assert s.computed_torque.kp.tolist() == [400.0, 400.0] and s.computed_torque.kd.tolist() == [40.0, 30.0]
    assert s.pd.kp.tolist() == [50.0, 50.0] and s.pd.kd.tolist() == [2.0, 2.0]
    assert s.effort.tolist() == [8.0, 10.0]  # j2 keeps its URDF effort limit


def test_unactuated_joints_get_no_gain_and_no_torque(tmp_path):
    _write(tmp_path, GOOD_TOML + "[joints.j2]\nactuated = false\n" + CONTROL.replace(", j2 = 30.0", ""), None)
    s = control_settings(load_robot(tmp_path / "r.toml"))
    assert s.computed_torque.kd.tolist() == [40.0, 0.0] and s.effort.tolist() == [8.0, 0.0]


def test_no_control_table_means_effort_limits_and_no_gains(tmp_path):
    _write(tmp_path, GOOD_TOML, None)
    s = control_settings(load_robot(tmp_path / "r.toml"))
    assert s.computed_torque is None and s.pd is None and np.array_equal(s.effort, [10.0, 10.0])


BAD = {
    "unknown field": ("[control]\ngains = 1.0\n", ["control.gains", "unknown field"]),
    "misspelt gain": ("[control.computed-torque]\nkpp = 1.0\nkd = 1.0\n", ["control.computed-torque.kpp", "did you mean 'kp'"]),
    "negative gain": ("[control.computed-torque]\nkp = -1.0\nkd = 1.0\n", ["control.computed-torque.kp", "must be > 0"]),
    "zero joint gain": ("[control.pd]\nkp = { j1 = 1.0, j2 = 0.0 }\nkd = 1.0\n", ["control.pd.kp.j2", "must be > 0"]),
    "missing gain": ("[control.pd]\nkp = 1.0\n", ["control.pd.kd", "missing required field"]),
    "string gain": ('[control.pd]\nkp = 1.0\nkd = "2"\n', ["control.pd.kd", "finite number"]),
    "joint missing from table": ("[control.pd]\nkp = { j1 = 1.0 }\nkd = 1.0\n", ["control.pd.kp.j2", "missing value"]),
    "unknown joint in table": (
        "[control.pd]\nkp = { j1 = 1.0, j2 = 1.0, j3 = 1.0 }\nkd = 1.0\n",
        ["control.pd.kp.j3", "unknown joint"],
    ),
    "not a table": ('[control]\npd = "stiff"\n', ["control.pd", "must be a table"]),
    "effort above the limit": ("[control]\neffort = { j1 = 200.0 }\n", ["control.effort.j1", "above the effort limit 10"]),
    "non-positive effort": ("[control]\neffort = 0.0\n", ["control.effort", "must be > 0"]),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_control_table_fails_cleanly(cli, tmp_path, case):
    """mbctl feedforward checks [control] too: one line naming file and field, exit 2, no output."""
    text, parts = BAD[case]
    _write(tmp_path, GOOD_TOML + text, GOOD_TRAJ)
    result = cli("feedforward", tmp_path / "r.toml", "--trajectory", tmp_path / "traj.csv", "--out", tmp_path / "tau.csv")
    _assert_clean_failure(result, tmp_path, ["r.toml", *parts])


def test_good_control_table_is_accepted_by_the_cli(cli, tmp_path):
    _write(tmp_path, GOOD_TOML + CONTROL, GOOD_TRAJ)
    result = cli("feedforward", tmp_path / "r.toml", "--trajectory", tmp_path / "traj.csv", "--out", tmp_path / "tau.csv")
    assert result.code == 0, result.err
