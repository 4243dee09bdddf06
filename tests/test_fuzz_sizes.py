"""Random values of every command's size options: a one-line refusal naming the option, or a request within the budget.

Durations, steps, rates, sample counts, grid lengths, waypoint counts, harmonics and periods are drawn from
everything a user could type (as ``--option=value``: argparse takes ``--step -1e+16`` for an option) (NaN, infinities, zero, negatives, 1e-300, 1e300, and plausible
values). The work each command would then start (integrating, sampling, the loop, the
experiments, the sweep) is replaced by a stub that raises :class:`Accepted`, so the test sees
the decision without waiting for a run: a request either stops with exit 2, one line naming
one of its size options, and nothing written, or it is accepted and then, counted
independently here, holds no more than the budget (a lower bound of its bytes is used).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from mbctl.bundled import bundled_study
from mbctl.ctrl.excitation import design_excitation as DESIGN  # the real one: tests stub it in its module
from mbctl.ctrl.trajectory import constant_acceleration, quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import InputError

JOINTS = ("j1", "j2", "j3", "j4")
BUDGET = 8 * 2**20  # --memory-budget 8M: large requests are refused, accepted ones stay small
SIZES = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
size = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0.0, -1.0, 1e-300, 1e-12, 1e-6, 1e6, 1e9, 1e300]),
    st.floats(1e-4, 1e4),
)


class Accepted(Exception):  # noqa: N818  (not an error: the request got past every check)
    """The command started its work."""


def accept(*args, **kwargs):
    raise Accepted


def decide(cli, tmp: Path, *argv: str, options: tuple[str, ...]) -> bool:
    """Run ``mbctl --memory-budget 8M ARGV``; True if accepted, False after a clean refusal naming one of ``options``."""
    before = sorted(tmp.rglob("*"))
    try:
        r = cli("--memory-budget", str(BUDGET), *argv)
    except Accepted:
        return True
    assert r.code == 2, r.err
    line = r.err.strip()
    assert "\n" not in line and line.startswith("mbctl: error: ") and any(o in line for o in options), line
    assert sorted(tmp.rglob("*")) == before, "something was written"
    return False


def samples(duration: float, interval: float) -> float:
    """Samples a request over ``duration`` at ``interval`` asks for, at least (independent of mbctl's own count)."""
    return duration / interval


@pytest.fixture
def stub(monkeypatch):
    def replace(module: str, name: str) -> None:
        monkeypatch.setattr(f"{module}.{name}", accept)

    return replace


@SIZES
@given(duration=st.one_of(st.none(), size), step=st.one_of(st.none(), size))
def test_simulate_duration_and_step(cli, stub, duration, step):
    stub("mbctl.cli.commands.simulate", "simulate_setup")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["simulate", "fourbar", "--out", f"{tmp}/run.npz"]
        argv += [f"--duration={duration!r}"] if duration is not None else []
        argv += [f"--step={step!r}"] if step is not None else []
        if decide(cli, Path(tmp), *argv, options=("--duration", "--step", "simulation.")):
            # fourbar records every 1 ms (output_step) or every step if longer; 28 numbers a sample
            d = 2.0 if duration is None else duration
            assert samples(d, max(1e-3, step or 1e-4)) * 28 * 8 <= BUDGET


def within_budget_or_refused_by(generator, duration: float, rate: float, *args) -> None:
    """An accepted trajectory request: a valid one fits the budget (13 numbers a sample at least); an
    invalid one (a duration or rate <= 0) is refused by the generator the stub stood in for, before it allocates."""
    if duration > 0 and rate > 0:
        assert samples(duration, 1.0 / rate) * 13 * 8 <= BUDGET
    else:
        with pytest.raises(InputError):
            generator(*args)


@SIZES
@given(durations=st.lists(size, min_size=1, max_size=3), rate=size, waypoints=st.integers(2, 4))
def test_trajectory_durations_rate_and_waypoints(cli, stub, durations, rate, waypoints):
    stub("mbctl.cli.commands.trajectory", "quintic_rest_to_rest")
    rows = "; ".join(",".join(["0.1"] * 4) for _ in range(waypoints))
    given_durations = durations[: waypoints - 1] or durations
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["trajectory", "quintic", "scara", "--waypoints", rows, "--durations=" + ",".join(map(repr, given_durations)),
                f"--rate={rate!r}", "--out", f"{tmp}/traj.csv"]  # fmt: skip
        if decide(cli, Path(tmp), *argv, options=("--durations", "--rate")):
            valid = len(given_durations) == waypoints - 1 and min(given_durations) > 0
            within_budget_or_refused_by(
                quintic_rest_to_rest, sum(given_durations) if valid else 0.0, rate, [[0.1] * 4] * waypoints, given_durations, rate, JOINTS
            )


@SIZES
@given(duration=size, rate=size)
def test_accel_trajectory_duration_and_rate(cli, stub, duration, rate):
    stub("mbctl.cli.commands.trajectory", "constant_acceleration")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["trajectory", "accel", "scara", "--acceleration", "0.1", f"--duration={duration!r}", f"--rate={rate!r}", "--out", f"{tmp}/t.csv"]
        if decide(cli, Path(tmp), *argv, options=("--duration", "--rate")):
            within_budget_or_refused_by(constant_acceleration, duration, rate, np.zeros(4), np.full(4, 0.1), duration, rate, JOINTS)


@pytest.fixture(scope="module")
def short_trajectory(tmp_path_factory) -> Path:
    from mbctl.ctrl.trajectory import write_trajectory

    path = tmp_path_factory.mktemp("traj") / "traj.csv"
    write_trajectory(path, quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.1, 0.1, 0.1, 0.01]]), [0.5], 100.0, ("j1", "j2", "j3", "j4")))
    return path


@SIZES
@given(duration=st.one_of(st.none(), size), rate=size)
def test_run_duration_and_rate(cli, stub, short_trajectory, duration, rate):
    stub("mbctl.cli.commands.run", "run_session")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["run", "scara", "--trajectory", str(short_trajectory), "--lockstep", f"--rate={rate!r}", "--log", f"{tmp}/l.npz", "--summary", f"{tmp}/s.json"]
        argv += [f"--duration={duration!r}"] if duration is not None else []
        if decide(cli, Path(tmp), *argv, options=("--duration", "--rate", "--trajectory")):
            assert samples(0.5 if duration is None else duration, 1.0 / rate) * 30 * 8 <= BUDGET  # 30 log columns a cycle


@SIZES
@given(rate=size, settle=st.one_of(st.none(), size), count=st.one_of(st.none(), st.integers(-2, 10**9)))
@example(rate=1.0, settle=None, count=0)  # once named the file's field, not --count
def test_identify_rate_settle_and_count(cli, stub, rate, settle, count):
    stub("mbctl.hardware.session", "open_backend")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["identify", "run", "friction_rig", "--joint", "j1", "--lockstep", "--out", f"{tmp}/LOG.csv", f"--rate={rate!r}"]
        argv += [f"--settle={settle!r}"] if settle is not None else []
        argv += [f"--count={count}"] if count is not None else []
        if decide(cli, Path(tmp), *argv, options=("--rate", "--settle", "--count", "identification")):
            assert math.isfinite(rate) and rate > 0


@SIZES
@given(samples_=st.one_of(st.integers(-5, 10**12), st.floats(allow_nan=True, allow_infinity=True)), count=st.one_of(st.none(), st.integers(0, 10**12)))
@example(samples_=7.248762640573854e305, count=None)  # a whole number too large for the size's float conversions (found here once)
@example(samples_=7.248762640573854e305, count=248)
def test_sweep_samples_and_grid_length(cli, stub, samples_, count):
    stub("mbctl.study.engine", "prepare")
    text = bundled_study("ur5_payload").read_text().replace("samples = 200", f"samples = {samples_!r}")
    if count is not None:
        text += f'\n[parameters."joints.wrist_1_joint.friction.fc"]\nrange = [0.1, 1.0, {count}]\n'
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "study.toml").write_text(text)
        if decide(cli, Path(tmp), "sweep", f"{tmp}/study.toml", "--out", f"{tmp}/out", options=("samples", "range", "parameters.")):
            assert samples_ * (count or 1) * 200 <= BUDGET


@SIZES
@given(duration=st.one_of(st.none(), size), step=st.one_of(st.none(), size))
def test_variants_duration_and_step(cli, stub, duration, step):
    stub("mbctl.cli.commands.variants", "run_variant")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["variants", "fourbar", "--out-dir", tmp]
        argv += [f"--duration={duration!r}"] if duration is not None else []
        argv += [f"--step={step!r}"] if step is not None else []
        if decide(cli, Path(tmp), *argv, options=("--duration", "--step", "simulation.")):
            assert samples(2.0 if duration is None else duration, max(1e-3, step or 1e-4)) * 28 * 8 <= BUDGET


@SIZES
@given(duration=st.one_of(st.none(), size), rate=size, step=st.one_of(st.none(), size))
def test_flexfeed_duration_rate_and_step(cli, stub, duration, rate, step):
    """Records are taken at --rate (--step sets the integrator's work, not what is held)."""
    stub("mbctl.ctrl.flexible_feedforward", "flexible_feedforward")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["flexfeed", "rrr3_flexible", "--out-dir", tmp, f"--rate={rate!r}"]
        argv += [f"--duration={duration!r}"] if duration is not None else []
        argv += [f"--step={step!r}"] if step is not None else []
        if decide(cli, Path(tmp), *argv, options=("--duration", "--rate", "--step")):
            assert math.isfinite(rate) and rate > 0 and (step is None or (math.isfinite(step) and step > 0))
            # four records (three modes, the rigid motion) of 1 kB at least
            assert samples(0.5 if duration is None else duration, 1.0 / rate) * 4 * 1024 <= BUDGET


@SIZES
@given(
    harmonics=st.one_of(st.integers(-2, 12), st.integers(10**3, 10**12)),
    period=size,
    by_frequency=st.booleans(),
    periods=st.one_of(st.none(), st.integers(-2, 10**12)),
    grid=st.one_of(st.none(), st.integers(-5, 10**12)),
    rate=size,
)
def test_excitation_harmonics_period_periods_grid_and_rate(cli, stub, harmonics, period, by_frequency, periods, grid, rate):
    """The trajectory (periods x period x rate samples) and the optimisation (SLSQP holds at least the
    triangle of an N x N matrix, N = 4 (2 L - 1) + 1 variables for scara's four joints) within the budget."""
    stub("mbctl.ctrl.excitation", "design_excitation")
    with tempfile.TemporaryDirectory() as tmp:
        argv = ["trajectory", "excitation", "scara", f"--harmonics={harmonics}", f"--rate={rate!r}", "--out", f"{tmp}/e.csv"]
        argv += [f"--base-frequency={1.0 / period!r}" if by_frequency and period != 0 else f"--period={period!r}"]
        argv += [f"--periods={periods}"] if periods is not None else []
        argv += [f"--grid={grid}"] if grid is not None else []
        options = ("--harmonics", "--period", "--base-frequency", "--periods", "--grid", "--rate")
        if not decide(cli, Path(tmp), *argv, options=options):
            return
        period_s = 1.0 / (1.0 / period) if by_frequency and period != 0 else period
        periods = 1 if periods is None else periods
        if not (harmonics >= 2 and math.isfinite(period_s) and period_s > 0 and periods >= 1 and math.isfinite(rate) and rate > 0):
            # not a size: the design itself refuses it before it allocates
            with pytest.raises(InputError):
                DESIGN(load_robot("scara"), harmonics=harmonics, period=period_s, rate_hz=rate, periods=periods, grid=grid)
            return
        assert samples(period_s * periods, 1.0 / rate) * 13 * 8 <= BUDGET
        assert (4 * (2 * harmonics - 1) + 1) ** 2 / 2 * 8 <= BUDGET
