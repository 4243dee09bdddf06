"""``mbctl simulate`` end to end on the bundled configs, and its bad-input errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
NPZ_KEYS = {"t", "q", "dq", "ddq", "phi", "dphi", "target", "lam", "tau_c", "tau_programmed", "tau_applied", "state", "sigma_ratio", "joint_names", "row_names", "state_names"}
SUMMARY_KEYS = {"max_violation", "final_violation", "solver", "steps", "status", "rank", "redundancy", "violation_by_row", "initial"}


def run_simulate(cli, config, tmp_path, *extra):
    out, summary, plot = tmp_path / "run.npz", tmp_path / "run.json", tmp_path / "run.png"
    r = cli("simulate", config, "--out", out, "--summary", summary, "--plot", plot, *extra)
    assert r.code == 0, r.err
    with np.load(out) as npz:
        arrays = {k: npz[k] for k in npz.files}
    return r, arrays, json.loads(summary.read_text()), plot


def test_scara_short_run_writes_npz_summary_and_plot(cli, configs, tmp_path):
    """The seed-004 SCARA from its assembled start: clean violation, all outputs there."""
    r, npz, summary, plot = run_simulate(cli, configs / "scara.toml", tmp_path, "--duration", "0.2")
    assert NPZ_KEYS <= set(npz) and SUMMARY_KEYS <= set(summary)
    n = len(npz["t"])
    assert n == 201 and npz["q"].shape == (n, 4) and npz["phi"].shape == (n, 4) and npz["tau_c"].shape == (n, 4)
    assert list(npz["row_names"]) == ["tool_xy.x", "tool_xy.y", "yaw", "tool_z.z"]
    assert summary["status"] == "completed" and summary["solver"] == "udwadia-kalaba" and summary["steps"] == 2000
    assert summary["max_violation"] < 1e-10 and summary["rank"] == 4
    assert plot.read_bytes().startswith(PNG_MAGIC)
    assert "tool_xy.x" in r.out and "wrote" in r.out
    # the z row rises at 0.02 m/s: the recorded target and the coordinate agree
    assert npz["target"][-1, 3] == pytest.approx(0.004) and npz["q"][-1, 3] == pytest.approx(0.004, abs=1e-10)


@pytest.mark.slow
def test_scara_full_run_from_the_config(cli, configs, tmp_path):
    """`mbctl simulate configs/scara.toml` as shipped: 10 s at RK4 1e-4 s, violation stays at round-off."""
    _, npz, summary, _ = run_simulate(cli, configs / "scara.toml", tmp_path)
    assert summary["duration"] == pytest.approx(10.0) and summary["steps"] == 100_000
    assert summary["max_violation"] < 1e-10
    tool = npz["target"][:, :2] + npz["phi"][:, :2]
    assert np.hypot(tool[:, 0], tool[:, 1] - 0.35) == pytest.approx(0.05, abs=1e-10)  # the circle


def test_paper_initial_state_stops_at_the_singularity(cli, configs, tmp_path):
    """scara_paper_start.toml: one line, exit 2, time and configuration of the stretched arm; no output."""
    r = cli("simulate", configs / "scara_paper_start.toml", "--out", tmp_path / "run.npz")
    assert r.code == 2
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: ") and "near-singular at t = 0.12" in lines[0]
    assert "j2 = 0.0" in lines[0] and "damped" in lines[0]
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("config, solver", [("fourbar", "nullspace"), ("parallelogram", "lagrange")])
def test_closed_loop_examples_run(cli, configs, tmp_path, config, solver):
    """The planar closed-loop and overconstrained examples run; the latter reports unique reactions."""
    r, npz, summary, _ = run_simulate(cli, configs / f"{config}.toml", tmp_path, "--duration", "0.2", "--solver", solver, "--step", "5e-4")
    assert summary["max_violation"] < 1e-9 and summary["solver"] == solver
    if config == "parallelogram":
        assert summary["redundancy"] == 1 and summary["reaction_unique"]["loop_e"] and not summary["reaction_unique"]["loop_b"]
        assert "not unique in: loop_b" in r.out


def test_reactions_are_added_to_the_npz(cli, configs, tmp_path):
    _, npz, _, _ = run_simulate(cli, configs / "fourbar.toml", tmp_path, "--duration", "0.05", "--reactions")
    assert npz["joint_wrench"].shape == (51, 3, 6) and npz["loop_wrench"].shape == (51, 1, 6) and list(npz["loop_names"]) == ["loop"]


BASE = """urdf = "scara.urdf"
[[constraints]]
name = "tool_xy"
kind = "frame_position"
frame = "tool"
axes = ["x", "y"]
target = ["0.05*sin(0.4*pi*t)", "0.35 + 0.05*cos(0.4*pi*t)"]
[simulation]
duration = 0.01
step = 1e-3
initial = { q = { j1 = -0.5, j2 = 1.0 }, assemble = true }
"""

CASES = {
    "unknown frame": (BASE.replace('frame = "tool"', 'frame = "tol"'), ["constraints[0].frame", "no frame 'tol'", "did you mean 'tool'"]),
    "unknown joint": (
        BASE + '[[constraints]]\nname = "yaw"\nkind = "joint_linear"\ncoefficients = { j1 = 1.0, j7 = 1.0 }\n',
        ["constraints[1].coefficients.j7", "no joint 'j7'"],
    ),
    "malformed expression": (BASE.replace('"0.05*sin(0.4*pi*t)"', '"0.05*sin(0.4*pi*t"'), ["constraints[0].target[0]", "malformed expression"]),
    "unsafe expression": (BASE.replace('"0.05*sin(0.4*pi*t)"', '"__import__(\'os\').getcwd()"'), ["constraints[0].target[0]", "not allowed"]),
    "unknown name in expression": (BASE.replace("0.4*pi*t", "0.4*pi*time"), ["constraints[0].target[0]", "unknown name 'time'"]),
    "wrong number of targets": (BASE.replace('target = ["0.05*sin(0.4*pi*t)", ', "target = ["), ["constraints[0].target", "needs 2 expressions"]),
    "unknown kind": (BASE.replace('kind = "frame_position"', 'kind = "frame_postion"'), ["constraints[0].kind", "did you mean 'frame_position'"]),
    "unknown constraint field": (BASE.replace('axes = ["x", "y"]', 'axes = ["x", "y"]\naxis = [0, 0, 1]'), ["constraints[0].axis", "unknown field"]),
    "duplicate names": (BASE + '[[constraints]]\nname = "tool_xy"\nkind = "joint_linear"\ncoefficients = { j1 = 1.0 }\n', ["constraints", "used twice"]),
    "inconsistent constraints": (
        BASE.replace("assemble = true", "assemble = false")
        + '[[constraints]]\nname = "a"\nkind = "joint_linear"\ncoefficients = { j4 = 1.0 }\ntarget = "0.1"\n'
        + '[[constraints]]\nname = "b"\nkind = "joint_linear"\ncoefficients = { j4 = 1.0 }\ntarget = "0.2"\n',
        ["constraints", "inconsistent constraints", "rows a, b cannot hold together"],
    ),
    "inconsistent assembly": (
        BASE + '[[constraints]]\nname = "far"\nkind = "frame_position"\nframe = "tool"\naxes = ["x"]\ntarget = ["0.3"]\n',
        ["constraints", "cannot assemble"],
    ),
    "near-singular jacobian": (BASE.replace("initial = { q = { j1 = -0.5, j2 = 1.0 }, assemble = true }", "initial = { q = { j2 = 1e-5 } }"), ["constraints", "near-singular at t = 0 s", "j2 = 1e-05 rad"]),
    "singular jacobian": (BASE.replace("initial = { q = { j1 = -0.5, j2 = 1.0 }, assemble = true }", "initial = { q = { j2 = 0.0 } }"), ["constraints", "rank 1 for 2 rows", "singular configuration", "j2 = 0 rad"]),
    "unknown solver": (BASE.replace("[simulation]", '[simulation]\nsolver = "kkt"'), ["simulation.solver", "unknown value 'kkt'"]),
    "bad baumgarte form": (BASE.replace("[simulation]", '[simulation]\nbaumgarte = { form = "square", alpha = 1.0, beta = 1.0 }'), ["simulation.baumgarte.form", "did you mean 'squared'"]),
    "negative baumgarte": (BASE.replace("[simulation]", '[simulation]\nbaumgarte = { form = "squared", alpha = -1.0, beta = 1.0 }'), ["simulation.baumgarte.alpha", ">= 0"]),
    "unknown initial joint": (BASE.replace("j2 = 1.0 }", "j9 = 1.0 }"), ["simulation.initial.q.j9", "unknown joint"]),
    "unknown eliminated row": (BASE.replace("[simulation]", '[simulation]\nsolver = "lagrange"\neliminate = ["tool_xy.q"]'), ["simulation.eliminate", "no constraint row 'tool_xy.q'"]),
    "negative step": (BASE.replace("step = 1e-3", "step = -1e-3"), ["simulation.step", "must be > 0"]),
    "misspelt simulation field": (BASE.replace("duration =", "durration ="), ["simulation.durration", "did you mean 'duration'"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_simulation_input_fails_cleanly(cli, configs, tmp_path, case):
    """One line naming file and field, exit 2, nothing written."""
    text, parts = CASES[case]
    shutil.copy(configs / "scara.urdf", tmp_path / "scara.urdf")
    (tmp_path / "r.toml").write_text(text)
    r = cli("simulate", tmp_path / "r.toml", "--out", tmp_path / "run.npz", "--summary", tmp_path / "run.json", "--plot", tmp_path / "run.png")
    assert r.code == 2, r.err
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: ") and "Traceback" not in r.err, r.err
    assert "r.toml" in lines[0]
    for part in parts:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.toml", "scara.urdf"]


def test_the_fixture_without_faults_runs(cli, configs, tmp_path):
    """BASE itself is valid, so each failure above comes from the one thing its case breaks."""
    shutil.copy(configs / "scara.urdf", tmp_path / "scara.urdf")
    (tmp_path / "r.toml").write_text(BASE)
    r = cli("simulate", tmp_path / "r.toml", "--out", tmp_path / "run.npz")
    assert r.code == 0, r.err


@pytest.mark.parametrize(
    "args, parts",
    [
        (["--out", "run.csv"], ["run.csv", "file type"]),
        (["--out", "run.npz", "--summary", "run.txt"], ["run.txt", "file type"]),
        (["--out", "run.npz", "--duration", "0"], ["--duration", "must be > 0"]),
        (["--out", "run.npz", "--reactions", "--solver", "nullspace"], ["--reactions", "no multipliers"]),
    ],
)
def test_bad_options_fail_before_any_work(cli, configs, tmp_path, args, parts):
    args = [str(tmp_path / a) if a.startswith("run.") else a for a in args]
    r = cli("simulate", configs / "fourbar.toml", *args)
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1
    for part in parts:
        assert part in r.err
    assert list(Path(tmp_path).iterdir()) == []
