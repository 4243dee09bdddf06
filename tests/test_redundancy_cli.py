"""``mbctl trajectory constraints`` and ``mbctl feedforward`` on the 3-RRR; bad ``[actuation]`` input."""

from __future__ import annotations

import shutil

import numpy as np
import pytest

from mbctl.fileio import read_csv


@pytest.fixture(scope="module")
def rrr3_dir(tmp_path_factory, configs):
    """A copy of the 3-RRR config and its spiral motion sampled at 200 Hz."""
    from mbctl.cli import main

    d = tmp_path_factory.mktemp("rrr3")
    for name in ("rrr3.toml", "rrr3.urdf"):
        shutil.copy(configs / name, d / name)
    assert main(["trajectory", "constraints", str(d / "rrr3.toml"), "--rate", "200", "--out", str(d / "traj.csv")]) == 0
    return d


def test_feedforward_writes_every_mode_and_the_comparison_plot(cli, rrr3_dir, tmp_path):
    """The chosen mode (actuation.mode) fills tau.<drive>; every mode has its columns; the plot is written."""
    out, plot = tmp_path / "tau.csv", tmp_path / "modes.png"
    r = cli("feedforward", rrr3_dir / "rrr3.toml", "--trajectory", rrr3_dir / "traj.csv", "--out", out, "--plot", plot)
    assert r.code == 0, r.err
    assert plot.stat().st_size > 10_000
    table = read_csv(out)
    for mode in ("min-norm", "min-internal-force", "min-power", "non-redundant"):
        assert table.has(f"{mode}.tau.a3") and table.has(f"{mode}.internal_force") and f"  {mode}" in r.out.replace("* ", "  ")
    for j in ("a1", "a2", "a3"):
        assert np.array_equal(table.column(f"tau.{j}"), table.column(f"min-internal-force.tau.{j}"))
    assert np.all(table.column("min-internal-force.internal_force") <= table.column("non-redundant.internal_force") + 1e-12)
    assert table.has("reaction.p3.fy") and len(table.column("t")) == 101


def test_mode_option_overrides_the_table(cli, rrr3_dir, tmp_path):
    """--mode non-redundant writes a1, a2 torques and a zero a3 torque."""
    out = tmp_path / "tau.csv"
    r = cli("feedforward", rrr3_dir / "rrr3.toml", "--trajectory", rrr3_dir / "traj.csv", "--out", out, "--mode", "non-redundant")
    assert r.code == 0, r.err
    table = read_csv(out)
    assert np.all(table.column("tau.a3") == 0.0) and np.abs(table.column("tau.a1")).max() > 0.1
    assert np.array_equal(table.column("tau.a1"), table.column("non-redundant.tau.a1"))


def test_infeasible_limits_exit_2_with_time_and_drive(cli, rrr3_dir, tmp_path):
    """Limits of 1 N·m: the chosen mode fails with one line naming time and drives, nothing written."""
    toml = tmp_path / "rrr3.toml"
    toml.write_text((rrr3_dir / "rrr3.toml").read_text().replace("effort = 3.0 ", "effort = 1.0 "))
    shutil.copy(rrr3_dir / "rrr3.urdf", tmp_path / "rrr3.urdf")
    out = tmp_path / "tau.csv"
    r = cli("feedforward", toml, "--trajectory", rrr3_dir / "traj.csv", "--out", out)
    assert r.code == 2
    assert r.err.count("\n") == 1 and "actuation.effort" in r.err and "infeasible at t = 0.4" in r.err and "a1 (±1 N·m) and a2 (±1 N·m) at their limits" in r.err
    assert not out.exists()


BAD = {
    # name: (replacement of the [actuation] table, expected message parts)
    "unknown field": ('mode = "min-norm"\nmod = 1\n', ["actuation.mod", "unknown field", "did you mean 'mode'"]),
    "unknown mode": ('mode = "min-force"\n', ["actuation.mode", "unknown value 'min-force'"]),
    "passive drive": ('joints = ["a1", "a2", "a3", "b1"]\n', ["actuation.joints", "'b1' is passive"]),
    "actuated joint left out": ('joints = ["a1", "a2"]\n', ["actuation.joints", "'a3' is actuated in the model but not listed"]),
    "unknown joint": ('joints = ["a1", "a2", "a4"]\n', ["actuation.joints", "no joint 'a4'"]),
    "non_redundant not a drive": ('non_redundant = ["a1", "b2"]\n', ["actuation.non_redundant", "'b2' is not one of the drives"]),
    "non_redundant wrong count": (
        'mode = "non-redundant"\nnon_redundant = ["a1"]\n',
        ["actuation.non_redundant", "needs exactly 2 drives"],
    ),
    "non-redundant without drives": ('mode = "non-redundant"\n', ["actuation.non_redundant", "missing required field"]),
    "negative effort": ("effort = -1.0\n", ["actuation.effort", "must be > 0"]),
    "effort of unknown drive": ("effort = { a1 = 1.0, a5 = 2.0 }\n", ["actuation.effort.a5", "unknown joint"]),
    "zero weight": ("weights = { a2 = 0.0 }\n", ["actuation.weights.a2", "must be > 0"]),
    "bad regularization": ("power_regularization = 0\n", ["actuation.power_regularization", "must be > 0"]),
    "unknown solver": ('solver = "osqp"\n', ["actuation.solver", "unknown value 'osqp'"]),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_actuation_table(cli, rrr3_dir, tmp_path, case):
    """Bad [actuation] input: one line naming file and field, exit 2, no output."""
    table, parts = BAD[case]
    text = (rrr3_dir / "rrr3.toml").read_text()
    text = text[: text.index("[actuation]")] + "[actuation]\n" + table
    toml = tmp_path / "rrr3.toml"
    toml.write_text(text)
    shutil.copy(rrr3_dir / "rrr3.urdf", tmp_path / "rrr3.urdf")
    out = tmp_path / "tau.csv"
    r = cli("feedforward", toml, "--trajectory", rrr3_dir / "traj.csv", "--out", out)
    assert r.code == 2, r.err
    assert r.err.startswith(f"mbctl: error: {toml}: ") and r.err.count("\n") == 1
    for part in parts:
        assert part in r.err
    assert not out.exists()


def test_reactions_option_is_refused_for_a_closed_chain(cli, rrr3_dir, tmp_path):
    """--reactions would give tree wrenches without the loop forces: refused (exit 2)."""
    r = cli("feedforward", rrr3_dir / "rrr3.toml", "--trajectory", rrr3_dir / "traj.csv", "--out", tmp_path / "t.csv", "--reactions")
    assert r.code == 2 and "--reactions" in r.err


def test_trajectory_constraints_needs_a_fully_constrained_mechanism(cli, configs, tmp_path):
    """The four-bar's loop leaves 1 DOF: one-line error, exit 2."""
    r = cli("trajectory", "constraints", configs / "fourbar.toml", "--out", tmp_path / "t.csv")
    assert r.code == 2 and "constraints: the constraints have 2 rows for 3 DOF" in r.err


def test_a_motion_off_the_loops_is_refused(cli, rrr3_dir, tmp_path):
    """A trajectory that opens the loops (a1 shifted by 1 mrad) gives one line naming the time, exit 2."""
    from mbctl.fileio import read_csv, write_csv

    table = read_csv(rrr3_dir / "traj.csv")
    data = np.column_stack([table.column(c) for c in table.header])
    data[:, list(table.header).index("q.a1")] += 1e-3
    bad = tmp_path / "bad.csv"
    write_csv(bad, list(table.header), data)
    r = cli("feedforward", rrr3_dir / "rrr3.toml", "--trajectory", bad, "--out", tmp_path / "t.csv")
    assert r.code == 2 and r.err.startswith(f"mbctl: error: {bad}: the motion leaves the closed loops at t = 0 s (|Phi| = ")
