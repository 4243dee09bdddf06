"""Run time estimated before a run starts: durations parsed, the pilot's counts, refusals in one line, the estimate printed."""

from __future__ import annotations

import argparse
import dataclasses
import math

import pytest

from mbctl.budget import format_duration, parse_duration
from mbctl.cli.arguments import check_estimate
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.pilot import RunTimeEstimate, estimate_run_time
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
from mbctl.errors import InputError


@pytest.mark.parametrize(("text", "seconds"), [("90", 90.0), ("90s", 90.0), ("30min", 1800.0), ("12h", 43200.0), ("1.5d", 129600.0), ("none", math.inf)])
def test_durations_take_units(text, seconds):
    assert parse_duration(text, field="--time-limit") == seconds


@pytest.mark.parametrize("text", ["", "12 hours", "-1h", "0", "h"])
def test_a_bad_duration_names_its_field(text):
    with pytest.raises(InputError, match="--time-limit"):
        parse_duration(text, field="--time-limit")


@pytest.mark.parametrize(("seconds", "text"), [(42.0, "42 s"), (150.0, "2.5 min"), (5 * 3600.0, "5 h"), (89 * 86400.0, "89 days"), (3.156e10, "1e+03 years")])
def test_durations_print_in_a_readable_unit(seconds, text):
    assert format_duration(seconds) == text


def _fourbar(**overrides):
    robot = load_robot("fourbar")
    setup = dataclasses.replace(simulation_setup(robot), **overrides)
    system = build_dynamics(robot, setup)
    return system, *initial_state(robot, setup, system), setup


@pytest.mark.parametrize(("overrides", "units", "unit"), [({"duration": 10.0, "step": 1e-12}, 1e13, "steps"), ({"integrator": "radau", "duration": 1.0, "output_step": 1e-3}, 1000, "samples")])
def test_the_pilot_counts_the_runs_units_and_times_a_few(overrides, units, unit):
    """Steps (RK4) or recorded samples (adaptive) as the run takes them; the pilot timed at most 2000 of them."""
    system, q0, dq0, setup = _fourbar(**overrides)
    e = estimate_run_time(system, q0, dq0, setup)
    assert e.units == units and e.unit == unit and 0 < e.timed <= 2000
    assert e.seconds == pytest.approx(e.per_unit_s * units) and e.per_unit_s > 0


def test_an_estimate_above_a_minute_is_printed_and_one_above_the_limit_refused(capsys):
    """Printed before the run (stdout) above 60 s; refused above --time-limit, naming the option given; none lifts it."""
    two_minutes = RunTimeEstimate(seconds=120.0, units=1e6, unit="steps", per_unit_s=1.2e-4, timed=2000)
    check_estimate(argparse.Namespace(time_limit="24h"), two_minutes, what="scara: the run", field="--duration")
    assert capsys.readouterr().out == "scara: the run: estimated run time 2 min (1000000 steps at 120 µs each, timed on 2000 here)\n"
    check_estimate(argparse.Namespace(time_limit="24h"), dataclasses.replace(two_minutes, seconds=59.0), what="the run", field="--duration")
    assert capsys.readouterr().out == ""
    with pytest.raises(InputError, match=r"^--duration: the run \(1000000 steps .*\) would take about 2 min, above the time limit of 90 s \(--time-limit raises it\)$"):
        check_estimate(argparse.Namespace(time_limit="90s"), two_minutes, what="the run", field="--duration")
    check_estimate(argparse.Namespace(time_limit="none"), dataclasses.replace(two_minutes, seconds=1e12), what="the run", field="--duration")


@pytest.mark.parametrize(
    ("command", "steps"),
    [
        (("simulate", "fourbar", "--out", "x.npz"), "10000000000000 steps"),
        (("variants", "fourbar", "--out-dir", "x"), "10000000000000 steps"),
        (("flexfeed", "rrr3_flexible", "--out-dir", "x"), "50000000000000 steps"),  # three modes, the stiff limit, the RFE check
    ],
)
def test_a_mistyped_step_is_refused_before_the_run(cli, tmp_path, monkeypatch, command, steps):
    """`--duration 10 --step 1e-12` (1e13 steps a run, days at any speed): one line naming --step, the estimate
    and --time-limit, exit 2, nothing written."""
    monkeypatch.chdir(tmp_path)
    r = cli(*command, "--duration", "10", "--step", "1e-12")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert r.err.startswith("mbctl: error: --step: ") and steps in r.err and "(--time-limit raises it)" in r.err, r.err
    assert not list(tmp_path.iterdir())
    r = cli(*command, "--duration", "0.01", "--time-limit", "soon")
    assert r.code == 2 and "--time-limit: expected a duration" in r.err


def test_a_pilot_that_fails_gives_no_estimate_and_the_run_says_why(cli, tmp_path):
    """A step far too large for the four-bar: the pilot's first steps blow up, so no estimate (None, which
    check_estimate lets pass), and the run itself stops with its own one-line error, as without the pilot."""
    system, q0, dq0, setup = _fourbar(duration=1.0, step=0.2)
    assert estimate_run_time(system, q0, dq0, setup) is None
    check_estimate(argparse.Namespace(time_limit="1s"), None, what="the run", field="--step")
    r = cli("simulate", "fourbar", "--duration", "1", "--step", "0.2", "--out", tmp_path / "x.npz")
    assert r.code != 0 and len(r.err.strip().splitlines()) == 1 and "t = 0.5 s" in r.err and not (tmp_path / "x.npz").exists(), r.err
