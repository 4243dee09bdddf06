"""The workflow tables of a study file, parsed into typed specs (mbctl.config.study): refusals at parse time, defaults."""

from __future__ import annotations

import typing
from pathlib import Path

import numpy as np
import pytest

import mbctl
from mbctl.config.study import (
    BACKENDS,
    CONTROLLERS,
    FEEDFORWARD_MODELS,
    IDENTIFY_LAWS,
    LUGRE_MODES,
    FeedforwardStudy,
    IdentifyStudy,
    RunStudy,
    SimulateStudy,
    StudyTrajectory,
    read_study,
)
from mbctl.errors import ConfigError

TRAJECTORY = "[trajectory]\nwaypoints = [[0, 0, 0, 0], [0.2, 0.3, -0.1, 0.01]]\ndurations = [0.2]\n"
HEADS = {
    "feedforward": f'robot = "scara"\nworkflow = "feedforward"\n{TRAJECTORY}',
    "simulate": 'robot = "fourbar"\nworkflow = "simulate"\n',
    "run": f'robot = "scara"\nworkflow = "run"\n{TRAJECTORY}',
    "identify": 'robot = "friction_rig"\nworkflow = "identify"\n',
}

# (workflow, the workflow table's lines, the dotted field refused, part of the reason)
BAD = {
    "feed-forward model": ("feedforward", 'model = "truth"', "feedforward.model", "unknown value 'truth'"),
    "lugre mode": ("feedforward", 'lugre = "bristles"', "feedforward.lugre", "unknown value 'bristles'"),
    "integrator": ("simulate", 'integrator = "euler"', "simulate.integrator", "unknown value 'euler'"),
    "backend": ("simulate", 'backend = "gpu"', "simulate.backend", "unknown value 'gpu'"),
    "zero step": ("simulate", "step = 0.0", "simulate.step", "must be > 0"),
    "negative duration": ("simulate", "duration = -1.0", "simulate.duration", "must be > 0"),
    "controller": ("run", 'controller = "lqr"', "run.controller", "unknown value 'lqr'"),
    "task-space controller": ("run", 'controller = "task-space"', "run.controller", "unknown value 'task-space'"),
    "zero rate": ("run", "rate_hz = 0", "run.rate_hz", "must be > 0"),
    "compiled as text": ("run", 'compiled = "yes"', "run.compiled", "must be true or false"),
    "fitted law": ("identify", 'joint = "j1"\nlaw = "lugre"', "identify.law", "unknown value 'lugre'"),
    "one speed": ("identify", 'joint = "j1"\ncount = 1', "identify.count", "must be an integer >= 2"),
    "zero speed": ("identify", 'joint = "j1"\nmin_speed = 0.0', "identify.min_speed", "must be > 0"),
    "joint as a number": ("identify", "joint = 1", "identify.joint", "must be a string"),
    "no joint": ("identify", "count = 4", "identify.joint", "missing required field"),
    "unknown field": ("run", "gain = 2.0", "run.gain", "unknown field"),
}


def _study(tmp_path: Path, workflow: str, lines: str | None) -> Path:
    path = tmp_path / "study.toml"
    path.write_text(HEADS[workflow] + ("" if lines is None else f"[{workflow}]\n{lines}\n"))
    return path


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_setting_is_refused_while_the_study_is_read(case, tmp_path):
    """read_study (no robot built) refuses each bad setting with a ConfigError naming the study file and the dotted field."""
    workflow, lines, field, reason = BAD[case]
    path = _study(tmp_path, workflow, lines)
    with pytest.raises(ConfigError) as info:
        read_study(path)
    assert info.value.file == path and info.value.field == field, str(info.value)
    assert reason in info.value.reason


def test_a_bad_setting_from_the_command_line_is_one_line(cli, tmp_path):
    """mbctl sweep with an unknown controller: exit 2, one line naming study file and run.controller, nothing written."""
    path = _study(tmp_path, "run", 'controller = "lqr"')
    res = cli("sweep", path, "--out", tmp_path / "out")
    assert res.code == 2
    assert res.err.strip() == f"mbctl: error: {path}: run.controller: unknown value 'lqr' (expected one of: {', '.join(CONTROLLERS)})"
    assert not (tmp_path / "out").exists()


# the defaults docs/sweep.md states (model robot, lugre dynamic, backend auto, controller
# computed-torque at 1000 Hz compiled, law stribeck; the rest: the robot's own values)
DOCUMENTED = {
    "feedforward": FeedforwardStudy(model="robot", lugre="dynamic"),
    "simulate": SimulateStudy(duration=None, step=None, integrator=None, backend="auto"),
    "run": RunStudy(controller="computed-torque", rate_hz=1000.0, duration=None, compiled=True),
}


@pytest.mark.parametrize("workflow", sorted(DOCUMENTED))
@pytest.mark.parametrize("table", ["absent", "empty"])
def test_a_study_silent_on_a_setting_gets_the_documented_default(workflow, table, tmp_path):
    """No workflow table, or an empty one, gives the documented defaults."""
    study = read_study(_study(tmp_path, workflow, None if table == "absent" else ""))
    assert study.settings == DOCUMENTED[workflow]


def test_an_identify_study_gets_the_plan_of_the_robot_where_it_is_silent(tmp_path):
    """[identify] with only the joint: law stribeck, no overrides of the robot's [identification] plan."""
    study = read_study(_study(tmp_path, "identify", 'joint = "j1"'))
    assert study.settings == IdentifyStudy(joint="j1", law="stribeck", count=None, min_speed=None, max_speed=None)
    assert study.settings.plan_overrides() == {}
    given = read_study(_study(tmp_path, "identify", 'joint = "j1"\ncount = 4\nmax_speed = 1.5'))
    assert given.settings.plan_overrides() == {"count": 4, "max_speed": 1.5}


def test_the_settings_given_are_kept_in_si_units(tmp_path):
    """Every given setting arrives as typed: numbers as floats (s, Hz), booleans, names."""
    study = read_study(_study(tmp_path, "simulate", 'duration = 2\nstep = 1e-3\nintegrator = "ros2"\nbackend = "python"'))
    assert study.settings == SimulateStudy(duration=2.0, step=1e-3, integrator="ros2", backend="python")
    assert isinstance(study.settings.duration, float)
    run = read_study(_study(tmp_path, "run", 'controller = "pd-gravity"\nrate_hz = 500\nduration = 0.1\ncompiled = false'))
    assert run.settings == RunStudy(controller="pd-gravity", rate_hz=500.0, duration=0.1, compiled=False)


def test_the_run_workflow_takes_its_session_options_from_the_spec(tmp_path):
    """A run study without [run] drives computed-torque at 1000 Hz, compiled, for the trajectory's length."""
    from mbctl.study.workflows import _run_options, make_context

    study = read_study(_study(tmp_path, "run", None))
    options = _run_options(make_context(study, mbctl.load_robot("scara")))
    assert (options.law, options.rate_hz, options.duration_s, options.compiled, options.lockstep) == ("computed-torque", 1000.0, None, True, True)


def test_the_simulate_workflow_keeps_the_robots_simulation_where_the_study_is_silent(tmp_path):
    """simulate without settings integrates with the robot's own [simulation]; a given step replaces only the step."""
    from mbctl.dynamics.simulation.setup import simulation_setup
    from mbctl.study.workflows import _sim_setup, make_context

    robot = mbctl.load_robot("fourbar")
    own = simulation_setup(robot)
    silent = read_study(_study(tmp_path, "simulate", None))
    assert _sim_setup(robot, make_context(silent, robot)) == own
    stepped = read_study(_study(tmp_path, "simulate", "step = 2e-4"))
    setup = _sim_setup(robot, make_context(stepped, robot))
    assert setup.step == 2e-4 and (setup.duration, setup.integrator) == (own.duration, own.integrator)


def test_the_choices_agree_with_the_layers_that_use_them():
    """The laws checked at parse time are those the fit accepts (controllers and backends are one
    list shared with the layers that use them), and the spec types say the same."""
    from mbctl.identification.fitting import STATIC_LAWS
    from mbctl.study.workflows import _FITTED

    assert set(IDENTIFY_LAWS) == set(_FITTED) and set(IDENTIFY_LAWS) <= set(STATIC_LAWS)
    for cls, field, names in [
        (FeedforwardStudy, "model", FEEDFORWARD_MODELS),
        (FeedforwardStudy, "lugre", LUGRE_MODES),
        (SimulateStudy, "backend", BACKENDS),
        (RunStudy, "controller", CONTROLLERS),
        (IdentifyStudy, "law", IDENTIFY_LAWS),
    ]:
        assert set(typing.get_args(typing.get_type_hints(cls)[field])) == set(names), (cls.__name__, field)


def test_the_trajectory_table_is_parsed_with_its_default_rate(tmp_path):
    """Waypoints and durations as arrays (rad, s), 500 Hz where the table is silent; a file resolved against the study's folder."""
    study = read_study(_study(tmp_path, "feedforward", None))
    tr = study.trajectory
    assert isinstance(tr, StudyTrajectory) and tr.file is None and tr.rate_hz == 500.0
    np.testing.assert_array_equal(tr.waypoints, [[0, 0, 0, 0], [0.2, 0.3, -0.1, 0.01]])
    np.testing.assert_array_equal(tr.durations, [0.2])
    (tmp_path / "move.csv").write_text("t\n0\n")
    path = tmp_path / "file.toml"
    path.write_text('robot = "scara"\nworkflow = "run"\n[trajectory]\nfile = "move.csv"\n')
    assert read_study(path).trajectory.file == tmp_path / "move.csv"
    path.write_text(HEADS["run"] + "rate_hz = 0.0\n")
    with pytest.raises(ConfigError) as info:
        read_study(path)
    assert (info.value.file, info.value.field) == (path, "trajectory.rate_hz") and "must be > 0" in info.value.reason
