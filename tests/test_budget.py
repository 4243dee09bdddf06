"""The memory budget: sizes parsed, the budget's source, refusals in one line, estimates against measured memory."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc

import numpy as np
import pytest

from mbctl.budget import Budget, check_disk, check_memory, memory_budget, parse_size
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import MAX_CHUNK_STEPS, recorded_samples, sample_bytes, simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
from mbctl.errors import InputError


@pytest.mark.parametrize(("text", "size"), [("512M", 512 * 2**20), ("8G", 8 * 2**30), ("1.5TiB", int(1.5 * 2**40)), ("2e9", 2_000_000_000), ("64kB", 65536)])
def test_sizes_take_binary_prefixes(text, size):
    assert parse_size(text, field="--memory-budget") == size


@pytest.mark.parametrize("text", ["lots", "", "-1G", "0", "8X", "nan"])
def test_a_bad_size_names_its_field(text):
    with pytest.raises(InputError) as info:
        parse_size(text, field="--memory-budget")
    assert info.value.field == "--memory-budget"


def test_the_option_wins_over_the_environment_which_wins_over_half_the_memory(monkeypatch):
    monkeypatch.setattr("mbctl.budget.available_memory", lambda: 10.0 * 2**30)
    monkeypatch.delenv("MBCTL_MEMORY_BUDGET", raising=False)
    assert memory_budget().bytes == 5 * 2**30
    monkeypatch.setenv("MBCTL_MEMORY_BUDGET", "2G")
    assert memory_budget().bytes == 2 * 2**30 and memory_budget("3G").bytes == 3 * 2**30


def test_a_request_above_the_budget_is_refused_and_one_below_accepted():
    budget = Budget(2**20, "test")
    check_memory(2**20, budget, what="the run", field="--duration")  # exactly the budget: accepted
    for too_much in (2**20 + 1, float("inf"), float("nan")):
        with pytest.raises(InputError) as info:
            check_memory(too_much, budget, what="the run", field="--duration")
        assert info.value.field == "--duration" and "\n" not in str(info.value)


def test_disk_is_the_free_space_where_the_output_goes(tmp_path):
    check_disk(1024, tmp_path / "new" / "deeper" / "out.npz", what="the run", field="--duration")  # directories to be made
    with pytest.raises(InputError, match="free"):
        check_disk(2.0**70, tmp_path / "out.npz", what="the run", field="--duration")


def test_the_simulation_estimate_is_within_a_factor_two_of_what_a_run_holds():
    """tracemalloc's peak (numpy's buffers included) over a 2001-sample four-bar run against samples x sample_bytes."""
    robot = load_robot("fourbar")
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    simulate(system, q0, dq0, 0.01, step=setup.step, output_step=setup.output_step)  # compiled code loaded before measuring
    tracemalloc.start()
    try:
        result = simulate(system, q0, dq0, 2.0, step=setup.step, output_step=setup.output_step)
        measured = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    n = recorded_samples(2.0, setup.step, setup.output_step, setup.integrator)
    assert n == len(result.t) == 2001
    estimate = n * sample_bytes(system)
    assert measured / 2 < estimate < 2 * measured, (estimate, measured)


def test_compiled_rk4_in_chunks_matches_the_interpreted_reference():
    """A record interval of 1230 steps runs as calls of 1000 and 230 steps in C; the states agree with the interpreted RK4."""
    robot = load_robot("fourbar")
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    runs = [simulate(system, q0, dq0, 0.0246, step=1e-5, output_step=0.0123, backend=b) for b in ("compiled", "python")]
    assert round(0.0123 / 1e-5) > MAX_CHUNK_STEPS and len(runs[0].t) == len(runs[1].t) == 3
    assert np.allclose(runs[0].q, runs[1].q, atol=1e-10) and np.allclose(runs[0].dq, runs[1].dq, atol=1e-8)


def test_the_option_is_taken_anywhere_on_the_line(cli, tmp_path):
    """After the command as before it; a refusal names the budget's source; a valid budget lets the run through."""
    out = tmp_path / "f.npz"
    r = cli("simulate", "fourbar", "--duration", "0.05", "--out", out, "--memory-budget", "1K")
    assert r.code == 2 and "above the memory budget of 1 KiB (--memory-budget 1K)" in r.err and not out.exists()
    assert cli("--memory-budget=64M", "simulate", "fourbar", "--duration", "0.05", "--out", out).code == 0 and out.exists()


# Peaks measured in a process of their own: tracemalloc counts every thread's allocations, and
# threads an earlier test left behind (a Dask client's, say) allocate for as long as a run lasts
_PEAKS = """
import json, sys, tracemalloc
from pathlib import Path
import mbctl.cli.commands.simulate as simulate
from mbctl.cli import main

simulate.BATCH_BYTES = 32 * 2**10
directory = Path(sys.argv[1])


def run(name, duration):
    try:
        main(["simulate", "fourbar", "--duration", str(duration), "--out", str(directory / f"{name}.npz"), "--summary", str(directory / f"{name}.json")])
    except SystemExit as exc:
        assert not exc.code, exc.code


run("warm", 0.2)  # the same path once before measuring: compiled code loaded, modules imported
peaks = {}
for name, duration in (("short", 2.0), ("long", 20.0)):
    tracemalloc.start()
    run(name, duration)
    peaks[name] = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
print(json.dumps(peaks))
"""


def test_a_streamed_simulate_holds_a_batch_whatever_its_length(tmp_path):
    """Batches of 32 KiB of records (and blocks of 32 KiB of an array as the NPZ is assembled): a run
    10x longer peaks at about the same memory (tracemalloc, numpy's buffers included), far below
    what its records would hold at once; its NPZ and summary cover the whole run; no partial files
    are left."""
    done = subprocess.run([sys.executable, "-c", _PEAKS, str(tmp_path)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    peaks = json.loads(done.stdout.strip().splitlines()[-1])
    short, long = peaks["short"], peaks["long"]
    robot = load_robot("fourbar")
    setup = simulation_setup(robot)
    held_at_once = recorded_samples(20.0, setup.step, setup.output_step, setup.integrator) * sample_bytes(build_dynamics(robot, setup))
    assert long < 1.5 * short and long < held_at_once / 20, (short, long, held_at_once)
    with np.load(tmp_path / "long.npz") as data:
        assert len(data["t"]) == 20001 and data["t"][-1] == pytest.approx(20.0)
    assert json.loads((tmp_path / "long.json").read_text())["samples"] == 20001
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.json", "long.npz", "short.json", "short.npz", "warm.json", "warm.npz"]


def test_the_streamed_npz_equals_the_run_held_in_memory(cli, tmp_path, monkeypatch):
    """Written in batches of 16 KiB of records (a few samples each), the NPZ holds the arrays of the same run kept in memory, bit for bit."""
    from mbctl.cli.commands.simulate import npz_arrays

    monkeypatch.setattr("mbctl.cli.commands.simulate.BATCH_BYTES", 16 * 2**10)
    assert cli("simulate", "fourbar", "--duration", "0.2", "--out", tmp_path / "run.npz").code == 0
    robot = load_robot("fourbar")
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    expected = npz_arrays(simulate(system, *initial_state(robot, setup, system), 0.2, step=setup.step, output_step=setup.output_step))
    with np.load(tmp_path / "run.npz") as data:
        assert set(data.files) == {*expected, "config"}
        for key, value in expected.items():
            np.testing.assert_array_equal(data[key], value, err_msg=key)
            assert data[key].dtype == value.dtype, key


def test_a_batch_sink_gets_every_sample_once_in_order():
    """simulate(sink=...) hands batches of 7 samples whose concatenation is the run kept in memory; the result keeps none."""
    robot = load_robot("fourbar")
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    for integrator, step in (("rk4", 1e-4), ("ros2", 1e-3), ("rk45", 1e-3)):
        kept = simulate(system, q0, dq0, 0.05, integrator=integrator, step=step, output_step=setup.output_step)
        batches = []
        streamed = simulate(system, q0, dq0, 0.05, integrator=integrator, step=step, output_step=setup.output_step, sink=batches.append, batch_samples=7)
        assert [len(b.t) for b in batches] == [7] * 7 + [2] and len(streamed.t) == 0 and streamed.steps == kept.steps
        for key in ("t", "q", "dq", "lam", "tau_c", "sigma_ratio"):
            np.testing.assert_array_equal(np.concatenate([getattr(b, key) for b in batches]), getattr(kept, key), err_msg=f"{integrator} {key}")


def test_summary_and_reactions_do_not_depend_on_the_batches(cli, tmp_path, monkeypatch):
    """A run with reactions written in batches of a few samples and in one batch: the same NPZ and
    the same summary (extremes, first and last values gathered batch by batch), timings aside."""
    runs = {}
    for name, batch in (("small", 16 * 2**10), ("whole", 2**30)):
        monkeypatch.setattr("mbctl.cli.commands.simulate.BATCH_BYTES", batch)
        out = tmp_path / f"{name}.npz"
        assert cli("simulate", "fourbar", "--duration", "0.3", "--reactions", "--out", out, "--summary", out.with_suffix(".json")).code == 0
        summary = json.loads(out.with_suffix(".json").read_text())
        with np.load(out) as data:
            runs[name] = ({k: data[k] for k in data.files if k != "config"}, {k: v for k, v in summary.items() if k not in ("wall_time_s", "compile_time_s")})
    (small, small_summary), (whole, whole_summary) = runs["small"], runs["whole"]
    assert small_summary == whole_summary and small.keys() == whole.keys() and {"joint_wrench", "loop_wrench", "loop_names"} <= small.keys()
    for key in small:
        np.testing.assert_array_equal(small[key], whole[key], err_msg=key)
