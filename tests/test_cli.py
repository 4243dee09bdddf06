"""End-to-end runs of the mbctl commands on the bundled configs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from mbctl.ctrl.feedforward import feedforward, torque_table
from mbctl.ctrl.trajectory import read_trajectory
from mbctl.fileio import read_csv

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"

TRAJECTORIES = {
    "scara": ("quintic", "--waypoints", "0,0,0,0; 0.5,1.0,-0.4,0.05; 0,0,0,0", "--durations", "1,1.2"),
    "tree5": ("accel", "--acceleration", "0.2", "--duration", "3"),
    "ur5": ("quintic", "--waypoints", "0,-1.2,1.4,-1.6,-1.57,0; 0.8,-0.6,0.9,-1.2,-1.2,0.7", "--durations", "2"),
}


@pytest.mark.parametrize("name", sorted(TRAJECTORIES))
def test_feedforward_cli_writes_what_the_library_computes(cli, configs, robots, tmp_path, name):
    """trajectory + feedforward on scara, tree5 and ur5; the CSV equals the library API's numbers."""
    kind, *options = TRAJECTORIES[name]
    traj_csv, tau_csv, png = tmp_path / "traj.csv", tmp_path / "tau.csv", tmp_path / "tau.png"
    r = cli("trajectory", kind, configs / f"{name}.toml", *options, "--rate", "500", "--out", traj_csv)
    assert r.code == 0, r.err
    r = cli("feedforward", configs / f"{name}.toml", "--trajectory", traj_csv, "--out", tau_csv, "--plot", png, "--reactions")
    assert r.code == 0, r.err
    assert "peak |tau|" in r.out and png.read_bytes().startswith(PNG_MAGIC)

    robot = robots[name]
    expected_header, expected = torque_table(feedforward(robot, read_trajectory(traj_csv, robot.joint_names), reactions=True))
    table = read_csv(tau_csv)
    assert list(table.header) == expected_header
    assert np.array_equal(table.data, expected)  # 17 significant digits round-trip exactly
    assert f"tau.{robot.joint_names[0]}" in table.header and f"wrench.{robot.joint_names[-1]}.tz" in table.header


def test_tree5_friction_variants_are_produced_and_plotted(cli, configs, tmp_path):
    """Seed 003: no friction, Coulomb–viscous and Stribeck torques differ; loads are nonzero."""
    config = configs / "tree5.toml"
    traj = tmp_path / "traj.csv"
    assert cli("trajectory", "accel", config, "--acceleration", "0.2", "--duration", "3", "--out", traj).code == 0
    outputs = {}
    for law in ("none", "coulomb-viscous", "stribeck"):
        out = tmp_path / f"{law}.csv"
        r = cli("feedforward", config, "--trajectory", traj, "--out", out, "--friction", law, "--reactions")
        assert r.code == 0, r.err
        outputs[law] = read_csv(out)
    tau = {law: t.column("tau.joint3") for law, t in outputs.items()}
    # starting from rest, Stribeck needs the break-away level ks*tau_n = 10x Coulomb's kc*tau_n
    assert tau["stribeck"][0] - tau["none"][0] == pytest.approx(10 * (tau["coulomb-viscous"][0] - tau["none"][0]), rel=1e-12)
    assert tau["coulomb-viscous"][0] - tau["none"][0] > 0
    # at 0.6 rad/s the Stribeck bump is gone and both laws agree
    assert tau["stribeck"][-1] == pytest.approx(tau["coulomb-viscous"][-1], rel=1e-12)
    loads = outputs["stribeck"].column("load.joint3")
    assert (loads > 0).all()
    assert "load.joint3" not in outputs["none"].header  # no load model left without friction
    png = tmp_path / "compare.png"
    r = cli("plot", *(tmp_path / f"{law}.csv" for law in outputs), "--labels", "none,coulomb-viscous,stribeck", "--out", png)
    assert r.code == 0, r.err
    assert png.read_bytes().startswith(PNG_MAGIC)


def test_demo_runs_from_the_installed_console_script(tmp_path):
    """`mbctl demo` (the README's main command): feed-forward and closed-loop summaries, and its files.

    Lock-step, so the run is the same on a loaded machine; the paced demo is checked below for honesty only.
    """
    script = Path(sys.executable).with_name("mbctl")
    assert script.exists(), "the mbctl console script is not installed next to this Python"
    done = subprocess.run([script, "demo", "--lockstep", "--out-dir", tmp_path / "demo"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "j1" in done.stdout and "peak |tau|" in done.stdout and "lock-step" in done.stdout
    assert "stop reason: completed\n" in done.stdout and "tracking rms" in done.stdout and not done.stderr
    files = sorted(p.name for p in (tmp_path / "demo").iterdir())
    assert files == ["scara_run.json", "scara_run.npz", "scara_run.png", "scara_torques.csv", "scara_torques.png", "scara_trajectory.csv"]
    assert oct(os.stat(tmp_path / "demo" / "scara_torques.csv").st_mode & 0o777) != "0o600"


def test_paced_demo_never_calls_a_degraded_run_clean(cli, tmp_path):
    """Paced to the wall clock, the demo may overrun on a loaded machine; whatever happens, it says so.
    (In this process: the paced plant runs in a process of its own either way.)"""
    done = cli("demo", "--out-dir", tmp_path)
    summary = json.loads((tmp_path / "scara_run.json").read_text())
    if summary["overruns"] == 0:
        assert done.code == 0 and summary["stop_reason"] == "completed" and not done.err
    else:
        assert summary["stop_reason"] != "completed" and "warning" in done.err
        assert done.code == (0 if summary["stop_reason"].startswith("completed, degraded") else 1)


def test_progress_is_printed_for_long_trajectories(cli, configs, tmp_path):
    traj = tmp_path / "traj.csv"
    upright = ("--q0", "0,-1.5708,0,0,0,0", "--acceleration", "0.01,0,0,0.01,0.01,0.01")  # the arm kept clear of its mounting plane
    assert cli("trajectory", "accel", configs / "ur5.toml", *upright, "--duration", "21", "--rate", "10000", "--out", traj).code == 0
    r = cli("feedforward", configs / "ur5.toml", "--trajectory", traj, "--out", tmp_path / "tau.csv")
    assert r.code == 0 and "feedforward: 210001/210001 samples (100%)" in r.err


def _modules_loaded_by(argv: list[str]) -> set[str]:
    code = (
        "import sys, mbctl.cli\n"
        f"try:\n    mbctl.cli.main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(' '.join(m for m in ('numpy', 'scipy', 'pinocchio', 'casadi', 'matplotlib') if m in sys.modules), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return set(done.stderr.split())


def test_help_imports_no_numerical_library():
    """``mbctl --help`` lists every command without importing any of them."""
    assert _modules_loaded_by(["--help"]) == set()


def test_fitting_a_log_loads_neither_pinocchio_nor_casadi_nor_plotting():
    """``mbctl identify fit`` imports only the fitting stack (matplotlib only when a plot is written)."""
    assert _modules_loaded_by(["identify", "fit", "--help"]).isdisjoint({"pinocchio", "casadi", "matplotlib"})


def test_version_and_bundled_names(cli):
    """``--version`` prints the package version; a misspelt robot name lists the bundled ones."""
    from mbctl import __version__

    version = subprocess.run([sys.executable, "-m", "mbctl.cli", "--version"], capture_output=True, text=True)
    assert version.stdout.strip() == f"mbctl {__version__}"
    typo = cli("feedforward", "scarra", "--trajectory", "t.csv", "--out", "x.csv")
    assert typo.code == 2 and "no bundled robot named 'scarra'" in typo.err and "scara" in typo.err


def test_python_dash_m_mbctl_is_the_mbctl_command(tmp_path):
    """``python -m mbctl`` runs the command line: same version line, same one-line refusal and exit 2."""
    from mbctl import __version__

    version = subprocess.run([sys.executable, "-m", "mbctl", "--version"], capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.strip() == f"mbctl {__version__}"
    bad = subprocess.run([sys.executable, "-m", "mbctl", "simulate", "fourbar", "--duration", "-1", "--out", tmp_path / "f.npz"], capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr == "mbctl: error: --duration: must be > 0, got -1.0\n"
    assert list(tmp_path.iterdir()) == []


def test_a_progress_line_stopped_early_is_ended():
    """On a terminal, a job that stops before its total (a solve that fails) ends its rewritten line, so the error starts a line
    of its own; a job that reached its total already ended it, and end() adds nothing."""
    import io

    from mbctl.cli.console import ProgressPrinter

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    for done, total in ((1, 6), (6, 6)):
        out = Terminal()
        progress = ProgressPrinter("ocp", min_total=1, stream=out, unit="solves")
        progress(done, total)
        progress.end()
        out.write("mbctl: error: no motion found\n")
        assert out.getvalue() == f"\rocp: {done}/{total} solves ({100 * done / total:3.0f}%)\nmbctl: error: no motion found\n"
