"""Parameter studies (mbctl sweep): design, checks before any run, the Dask engine, resume."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import cloudpickle
import numpy as np
import pytest

import mbctl
from mbctl.config.study import read_study
from mbctl.errors import ConfigError, InputError
from mbctl.study.design import design
from mbctl.study.engine import completed_runs, prepare, run_batch, run_one, run_study
from mbctl.study.summary import read_table, summarize

# the fault-injecting task wrappers below run on the workers, which cannot import this file
cloudpickle.register_pickle_by_value(sys.modules[__name__])

WAYPOINTS = "[[0.0, -1.2, 1.0, 0.0, 0.0, 0.0], [0.6, -0.6, 0.4, 0.3, 0.3, 0.3]]"

UR5_STUDY = f"""
robot = "ur5"
workflow = "feedforward"
samples = 3
seed = 7
runs_per_task = 2
[feedforward]
model = "plant"
[overrides.plant]
payload = {{ frame = "tool0", mass = 1.0, com = [0.0, 0.0, 0.05] }}
[parameters."plant.payload.mass"]
values = [0.5, 2.0, 4.0]
[parameters."joints.elbow_joint.friction.fc"]
distribution = "normal"
mean = 3.5
std = 0.2
[trajectory]
waypoints = {WAYPOINTS}
durations = [1.0]
rate_hz = 200.0
"""


def _write(tmp_path: Path, text: str, name: str = "study.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def client():
    """One 2-worker LocalCluster (processes) for the module: starting one costs seconds."""
    from mbctl.study.cluster import dask_client

    with dask_client(workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def ur5_plan(tmp_path_factory):
    return prepare(read_study(_write(tmp_path_factory.mktemp("study"), UR5_STUDY)))


def _one_by_one(plan) -> dict[str, np.ndarray]:
    rows = [run_one(plan, i)[0] for i in range(len(plan.design))]
    return {c: np.array([r[c] for r in rows]) for c in plan.columns}


def _same_table(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> None:
    assert set(a) == set(b)
    for c in a:
        if c not in ("compile_time_s", "wall_time_s"):
            assert np.array_equal(np.asarray(a[c]), np.asarray(b[c])), c


def test_runs_are_the_grid_times_the_draws_with_the_last_axis_fastest(ur5_plan):
    """Run i = grid point i // samples, draw i % samples; the draws are numpy's normal stream, the same at every grid point."""
    d = design(ur5_plan.study)
    draws = np.random.default_rng(7).normal(3.5, 0.2, 3)
    assert d.paths == ("plant.payload.mass", "joints.elbow_joint.friction.fc")
    assert np.array_equal(d.values[:, 0], np.repeat([0.5, 2.0, 4.0], 3))
    assert np.array_equal(d.values[:, 1], np.tile(draws, 3))


def test_a_row_equals_feedforward_on_the_robot_file_edited_by_hand(ur5_plan, configs, tmp_path):
    """Run 5's peak torques equal mbctl.feedforward on a copy of ur5.toml with its two values typed in."""
    row, _ = run_one(ur5_plan, 5)
    mass, fc = row["param.plant.payload.mass"], row["param.joints.elbow_joint.friction.fc"]
    text = (configs / "ur5.toml").read_text().replace('friction = { law = "stribeck", fc = 3.5,', f'friction = {{ law = "stribeck", fc = {fc!r},')
    text += f'\n[plant]\npayload = {{ frame = "tool0", mass = {mass!r}, com = [0.0, 0.0, 0.05] }}\n'
    path = tmp_path / "ur5_edited.toml"
    path.write_text(text)
    from mbctl.hardware.sim import truth_model

    robot = truth_model(mbctl.load_robot(path))[0]
    assert robot.joint("elbow_joint").friction.law.fc == fc
    traj = mbctl.quintic_rest_to_rest(json.loads(WAYPOINTS), [1.0], 200.0, robot.joint_names)
    stats = {s.name: s for s in mbctl.feedforward(robot, traj).stats()}
    assert row["status"] == "ok"
    for name, s in stats.items():
        assert row[f"tau_peak.{name}"] == pytest.approx(s.peak, rel=1e-12)
        assert row[f"tau_rms.{name}"] == pytest.approx(s.rms, rel=1e-12)


def test_two_workers_give_the_table_of_the_runs_done_one_by_one(ur5_plan, client, tmp_path):
    """A 2-worker LocalCluster writes the same rows (and curves) as the runs made one after another in this process."""
    result = run_study(ur5_plan, tmp_path, client=client, workers=2)
    assert result.tasks == 5 and result.ran == 9
    table = read_table(result.table)
    _same_table(table, _one_by_one(ur5_plan))
    curves = np.load(tmp_path / "curves.npy")
    assert np.array_equal(curves[4], run_one(ur5_plan, 4)[1])
    csv = np.genfromtxt(tmp_path / "runs.csv", delimiter=",", names=True)
    assert np.array_equal(csv["run"], np.arange(9))


def _kill_worker_once(marker: str, plan, runs, values):
    """Run the batch, except that the first task holding run 4 kills its own worker process."""
    if 4 in runs and not os.path.exists(marker):
        Path(marker).touch()
        os.kill(os.getpid(), signal.SIGKILL)
    return run_batch(plan, runs, values)


def test_a_worker_killed_mid_sweep_loses_no_run(ur5_plan, client, tmp_path):
    """SIGKILL of a worker inside a task: Dask runs the task again and every row is there, equal to the one-by-one runs."""
    marker = tmp_path / "killed"
    out = tmp_path / "out"
    out.mkdir()
    result = run_study(ur5_plan, out, client=client, workers=2, task=functools.partial(_kill_worker_once, str(marker)))
    assert marker.exists()
    table = read_table(result.table)
    assert list(table["status"]) == ["ok"] * 9
    _same_table(table, _one_by_one(ur5_plan))


def _always_lost(plan, runs, values):
    """A task whose worker never comes back (as distributed.KilledWorker after its retries)."""
    raise RuntimeError("worker died")


def test_runs_of_a_lost_task_are_failed_rows_that_a_resume_runs_again(ur5_plan, tmp_path):
    """A task that fails after its retries gives failed rows ('task lost'); --resume runs them again and the table is complete."""
    first = run_study(ur5_plan, tmp_path, task=_always_lost)
    table = read_table(first.table)
    assert set(table["status"]) == {"failed"} and all(r.startswith("task lost: ") and "worker died" in r for r in table["reason"])
    assert completed_runs(tmp_path) == set()
    again = run_study(ur5_plan, tmp_path, resume=True)
    assert again.ran == 9
    _same_table(read_table(again.table), _one_by_one(ur5_plan))


class _StopAfter:
    """A progress callback that interrupts the sweep (like Ctrl-C) once ``rows`` rows are written."""

    def __init__(self, rows: int):
        self.rows = rows

    def __call__(self, done: int, total: int) -> None:
        if done >= self.rows:
            raise KeyboardInterrupt


def test_an_interrupted_sweep_resumes_with_only_the_missing_runs(ur5_plan, client, tmp_path):
    """Interrupted after 4 rows, the sweep keeps whole parts; --resume runs the rest and the table equals the one-by-one runs."""
    with pytest.raises(KeyboardInterrupt):
        run_study(ur5_plan, tmp_path, client=client, workers=2, progress=_StopAfter(4))
    done = completed_runs(tmp_path)
    assert 4 <= len(done) < 9
    with pytest.raises(InputError, match="--resume"):
        run_study(ur5_plan, tmp_path, client=client, workers=2)
    result = run_study(ur5_plan, tmp_path, client=client, workers=2, resume=True)
    assert result.skipped == len(done) and result.ran == 9 - len(done)
    _same_table(read_table(result.table), _one_by_one(ur5_plan))


LUGRE_STUDY = """
robot = "friction_rig"
workflow = "feedforward"
runs_per_task = 4
[overrides.joints.j1]
friction = { law = "lugre", fc = 0.8, fs = 1.1, vs = 0.05, fv = 0.0, sigma0 = 2.0e4, sigma1 = 1.0 }
[parameters."joints.j1.friction.sigma0"]
values = [2.0e4, 1.0e3]
[parameters."joints.j1.friction.sigma1"]
values = [1.0, 1.0e4]
[trajectory]
waypoints = [[0.0], [1.0]]
durations = [1.0]
rate_hz = 200.0
"""


def test_a_run_the_robot_refuses_is_a_failed_row_and_the_others_run(tmp_path):
    """sigma0 = 1e3 with sigma1 = 1e4 is not dissipative up to 3 rad/s: that run is a failed row with the reason, the others are ok."""
    plan = prepare(read_study(_write(tmp_path, LUGRE_STUDY)))
    result = run_study(plan, tmp_path)
    table = read_table(result.table)
    assert list(table["status"]) == ["ok", "ok", "ok", "failed"]
    assert "dissipative" in table["reason"][3] and np.isnan(table["tau_peak.j1"][3])
    assert np.isfinite(table["tau_peak.j1"][:3]).all()
    summary = summarize(plan, table)
    assert (summary["ok"], summary["failed"]) == (3, 1) and list(summary["failure_reasons"]) == [table["reason"][3]]


BAD = {
    "unknown path": ('[parameters."joints.elbow_joint.friction.fcc"]\nvalues = [1.0]\n', "parameters.joints.elbow_joint.friction.fcc", "no such field"),
    "negative std": ('[parameters."plant.payload.mass"]\ndistribution = "normal"\nmean = 1.0\nstd = -0.1\n', "parameters.plant.payload.mass.std", "must be >= 0"),
    "non-physical sample": ('[parameters."plant.payload.mass"]\nvalues = [1.0, -2.0]\n', "parameters.plant.payload.mass", "must be > 0"),
    "fc above fs": ('[parameters."joints.elbow_joint.friction.fc"]\nrange = [3.0, 5.0, 3]\n', "parameters.joints.elbow_joint.friction.fc", "must be >= fc"),
}

BAD_BASE = """
robot = "ur5"
workflow = "feedforward"
[feedforward]
model = "plant"
[overrides.plant]
payload = { frame = "tool0", mass = 1.0 }
[trajectory]
waypoints = [[0, 0, 0, 0, 0, 0], [0.1, 0.1, 0.1, 0.1, 0.1, 0.1]]
durations = [1.0]
"""


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_study_is_refused_in_one_line_before_anything_runs(case, cli, tmp_path):
    """Unknown path, negative std, a non-physical sample: exit 2, one line naming the study file and field, no output directory."""
    text, field, reason = BAD[case]
    study = _write(tmp_path, BAD_BASE + text)
    res = cli("sweep", study, "--out", tmp_path / "out")
    assert res.code == 2, res.err
    line, *rest = res.err.strip().splitlines()
    assert not rest
    assert line.startswith(f"mbctl: error: {study}: {field}: ") and reason in line
    assert not (tmp_path / "out").exists()


def test_a_study_with_draws_needs_a_sample_count(tmp_path):
    """A distribution without samples names the samples field."""
    study = _write(tmp_path, BAD_BASE + '[parameters."plant.payload.mass"]\ndistribution = "uniform"\nlow = 1.0\nhigh = 2.0\n')
    with pytest.raises(ConfigError, match="samples"):
        read_study(study)


SLOW_STUDY = f"""
robot = "ur5"
workflow = "feedforward"
runs_per_task = 1
[parameters."joints.elbow_joint.friction.fc"]
range = [3.0, 4.0, 40]
[trajectory]
waypoints = {WAYPOINTS}
durations = [2.0]
rate_hz = 2000.0
"""


@pytest.mark.slow
def test_sigterm_then_resume_from_the_command_line(tmp_path):
    """mbctl sweep stopped by SIGTERM (exit 143) keeps its parts; --resume completes the table and writes summary and plots."""
    study = _write(tmp_path, SLOW_STUDY)
    out = tmp_path / "out"
    cmd = [sys.executable, "-m", "mbctl.cli", "sweep", str(study), "--out", str(out), "--workers", "1"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen = []
    for line in proc.stderr:  # progress lines, one per task: stop the sweep once three runs are done
        seen.append(line)
        if line.startswith("sweep: ") and int(line.split()[1].split("/")[0]) >= 3:
            break
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, "".join(seen) + err
    assert "--resume" in err and not (out / "runs.parquet").exists()
    first = completed_runs(out)  # what had finished was written as the sweep stopped
    assert 3 <= len(first) < 40
    done = subprocess.run([*cmd, "--resume"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    table = read_table(out / "runs.parquet")
    assert list(table["run"]) == list(range(40)) and set(table["status"]) == {"ok"}
    summary = json.loads((out / "summary.json").read_text())
    assert summary["runs"] == 40 and summary["failed"] == 0
    assert (out / "torque-bands.png").exists() and (out / "scatter-joints.elbow_joint.friction.fc.png").exists()


SIM_STUDY = """
robot = "fourbar"
workflow = "simulate"
[simulate]
duration = 0.02
[parameters."simulation.baumgarte.alpha"]
values = [0.0, 2000.0]
"""


def test_a_simulate_row_equals_the_simulation_of_the_edited_file(tmp_path, configs):
    """The simulate workflow's drift and drive force equal a simulation of fourbar.toml with alpha typed in."""
    from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulate_setup, simulation_setup

    plan = prepare(read_study(_write(tmp_path, SIM_STUDY)), pilot=False)
    table = read_table(run_study(plan, tmp_path).table)
    text = (configs / "fourbar.toml").read_text()
    assert 'alpha = 500.0' in text
    for k, alpha in enumerate((0.0, 2000.0)):
        edited = tmp_path / f"fourbar_{k}.toml"
        edited.write_text(text.replace('alpha = 500.0', f"alpha = {alpha!r}").replace('urdf = "fourbar.urdf"', f'urdf = "{configs / "fourbar.urdf"}"'))
        robot = mbctl.load_robot(edited)
        setup = simulation_setup(robot)
        setup = dataclasses.replace(setup, duration=0.02)
        system = build_dynamics(robot, setup)
        result = simulate_setup(system, *initial_state(robot, setup, system), setup, backend="auto")  # the workflow's default
        assert result.backend == "compiled"
        assert table["status"][k] == "ok"
        assert table["drift_max"][k] == result.violation().max()
        assert table["velocity_drift_max"][k] == result.velocity_violation().max()
    assert table["drift_max"][1] != table["drift_max"][0]


RUN_STUDY = """
robot = "scara"
workflow = "run"
[run]
duration = 0.05
[parameters."control.computed-torque.kp"]
values = [100.0, 900.0]
[trajectory]
waypoints = [[0, 0, 0, 0], [0.2, 0.3, -0.1, 0.01]]
durations = [0.2]
rate_hz = 1000.0
"""


@pytest.mark.slow
def test_a_run_row_equals_a_lockstep_session_of_the_edited_file(tmp_path, configs):
    """The run workflow's tracking errors equal run_session on scara.toml with kp typed in (lock-step, deterministic, to round-off)."""
    from mbctl.hardware.session import SessionOptions, run_session

    plan = prepare(read_study(_write(tmp_path, RUN_STUDY)), pilot=False)
    table = read_table(run_study(plan, tmp_path).table)
    text = (configs / "scara.toml").read_text()
    traj = mbctl.quintic_rest_to_rest([[0, 0, 0, 0], [0.2, 0.3, -0.1, 0.01]], [0.2], 1000.0, ("j1", "j2", "j3", "j4"))
    for k, kp in enumerate((100.0, 900.0)):
        head, tail = text.split("[control.computed-torque]", 1)
        tail = re.sub(r"(?m)^kp = [^\n#]*", f"kp = {kp!r}", tail, count=1)
        edited = tmp_path / f"scara_{k}.toml"
        edited.write_text((head + "[control.computed-torque]" + tail).replace('urdf = "scara.urdf"', f'urdf = "{configs / "scara.urdf"}"'))
        summary = run_session(mbctl.load_robot(edited), traj, SessionOptions(duration_s=0.05, lockstep=True, compiled=False), tmp_path / f"run_{k}.npz")
        assert table["status"][k] == "ok"
        # the study's compiled cycle against the interpreted session's Python one: equal to round-off
        assert table["track_max"][k] == pytest.approx(summary.max_abs_error, rel=1e-9)
        for name, value in summary.tracking_rms.items():
            assert table[f"track_rms.{name}"][k] == pytest.approx(value, rel=1e-9)
    assert table["track_rms.j3"][0] != table["track_rms.j3"][1]  # (j1, j2 saturate at their effort limits)


@pytest.mark.slow
def test_variants_on_two_dask_workers_give_the_table_of_one_process(cli, tmp_path):
    """mbctl variants --jobs 2 (a LocalCluster through the sweep engine) writes the RMS table of --jobs 1."""
    tables = []
    for jobs in ("1", "2"):
        out = tmp_path / jobs
        out.mkdir()
        res = cli("variants", "scara", "--out-dir", out, "--duration", "0.02", "--jobs", jobs)
        assert res.code == 0, res.err
        table = json.loads((out / "rms.json").read_text())["variants"]
        tables.append({name: {k: v for k, v in row.items() if k != "wall_time_s"} for name, row in table.items()})
    assert set(tables[0]) == {"rigid-rigid-frictionless", "rigid-rigid-friction"}
    assert tables[0] == tables[1]


OTHER_BAD = {
    "unknown joint": ('robot = "friction_rig"\nworkflow = "identify"\n[identify]\njoint = "j9"\n', "identify.joint", "no joint 'j9'"),
    "another workflow's table": ('robot = "fourbar"\nworkflow = "simulate"\n[run]\nduration = 1.0\n', "run", "another workflow"),
    "unknown quantity": ('robot = "fourbar"\nworkflow = "simulate"\nquantities = ["tau_peak"]\n', "quantities", "unknown 'tau_peak'"),
    "text for a number": ('robot = "fourbar"\nworkflow = "simulate"\n[simulate]\nduration = "long"\n', "simulate.duration", "must be a finite number, got 'long'"),
    "waypoints of another robot": (
        'robot = "scara"\nworkflow = "feedforward"\n[trajectory]\nwaypoints = [[0, 0], [1, 1]]\ndurations = [1.0]\n', "trajectory.waypoints", "needs 4 positions"),
}


@pytest.mark.parametrize("case", sorted(OTHER_BAD))
def test_a_bad_workflow_setting_is_refused_in_one_line(case, cli, tmp_path):
    """Workflow settings that do not fit the robot or the workflow: exit 2, one line naming the study file and field."""
    text, field, reason = OTHER_BAD[case]
    study = _write(tmp_path, text)
    res = cli("sweep", study, "--out", tmp_path / "out")
    assert res.code == 2, res.err
    line, *rest = res.err.strip().splitlines()
    assert not rest and line.startswith(f"mbctl: error: {study}: {field}: ") and reason in line, line
    assert not (tmp_path / "out").exists()


ID_STUDY = """
robot = "friction_rig"
workflow = "identify"
[identify]
joint = "j1"
law = "coulomb-viscous"
count = 4
min_speed = 0.5
max_speed = 1.5
[parameters."plant.joints.j1.friction.fv"]
values = [0.12, 0.2]
"""


@pytest.mark.slow
def test_identification_rows_recover_the_varied_truth(tmp_path):
    """Fits on the simulated rig find the plant's viscous coefficient of each run (LuGre truth: fc 0.8) within 5 standard errors."""
    plan = prepare(read_study(_write(tmp_path, ID_STUDY)), pilot=False)
    table = read_table(run_study(plan, tmp_path).table)
    assert list(table["status"]) == ["ok", "ok"]
    for k, fv in enumerate((0.12, 0.2)):
        assert abs(table["fit.fv"][k] - fv) < 5 * table["stderr.fv"][k]
        assert abs(table["fit.fc"][k] - 0.8) < 5 * table["stderr.fc"][k]
        assert table["error.fv"][k] == pytest.approx(table["fit.fv"][k] - fv, abs=1e-15)
