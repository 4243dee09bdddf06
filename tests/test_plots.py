"""mbctl.viz's public plots: each draws a real (small) result into the requested format, derives
what it shows from the result, and refuses a bad path in one line before drawing."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest

import mbctl
import mbctl.viz as viz
from mbctl.bundled import bundled_config
from mbctl.errors import DataError, InputError

MAGIC = {".png": b"\x89PNG\r\n\x1a\n", ".pdf": b"%PDF-"}


def written(path: Path, suffix: str) -> None:
    """``path`` exists, is non-empty and holds the format its suffix names."""
    data = path.read_bytes()
    assert path.suffix == suffix and len(data) > 1000
    if suffix == ".svg":
        assert b"<svg" in data[:2000]
    else:
        assert data.startswith(MAGIC[suffix])


def svg_texts(draw, path: Path) -> str:
    """Call ``draw(path)`` with the SVG's text kept as text (not glyph outlines) and return the SVG."""
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        assert draw(path) == path
    written(path, ".svg")
    return path.read_text()


@pytest.fixture(scope="module")
def scara():
    return mbctl.load_robot("scara")


@pytest.fixture(scope="module")
def trajectory(scara):
    return mbctl.quintic_rest_to_rest([[0.0, 0.0, 0.0, 0.0], [0.5, 0.3, -0.2, 0.01]], [0.3], 200.0, scara.joint_names)


def simulated(name: str, duration: float):
    """A robot and its ``[simulation]`` run for ``duration`` s (interpreted: no C to build)."""
    from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup

    robot = mbctl.load_robot(name)
    setup = dataclasses.replace(simulation_setup(robot), duration=duration)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    return robot, mbctl.simulate_setup(system, q0, dq0, setup, backend="python")


@pytest.fixture(scope="module")
def fourbar():
    return simulated("fourbar", 0.05)


@pytest.fixture(scope="module")
def run_log(tmp_path_factory, scara, trajectory):
    """A lock-step closed-loop run of the SCARA against the simulated plant: its log and summary."""
    log = tmp_path_factory.mktemp("run") / "run.npz"
    summary = mbctl.run_session(scara, trajectory, mbctl.SessionOptions(plant="sim", lockstep=True), log)
    return log, summary


def test_importing_viz_loads_no_numerical_library():
    """`import mbctl.viz` and its public names resolve without numpy, matplotlib or pinocchio until a function is used."""
    code = "import sys, mbctl.viz as v; v.__dir__(); print(sorted(m for m in ('numpy', 'matplotlib', 'pinocchio') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_feedforward_figure_names_the_robot_and_every_actuated_joint(scara, trajectory, tmp_path):
    """The default title is derived from the robot; one panel per actuated joint."""
    svg = svg_texts(lambda p: viz.plot_feedforward(mbctl.feedforward(scara, trajectory), p), tmp_path / "ff.svg")
    assert "scara: feed-forward torques" in svg
    for name in scara.actuated_names:
        assert f">{name} [" in svg


def test_trajectory_figure(trajectory, tmp_path):
    assert viz.plot_trajectory(trajectory, tmp_path / "traj.png") == tmp_path / "traj.png"
    written(tmp_path / "traj.png", ".png")


def test_simulation_figure_draws_the_tool_path_of_the_robots_frame_constraint(tmp_path):
    """With the robot, the SCARA's first frame_position constraint (frame "tool") gives the tool
    panel and [simulation] the title; without it the panel shows the distance from singularity."""
    robot, result = simulated("scara", 0.02)
    svg = svg_texts(lambda p: viz.plot_simulation(result, p, robot=robot), tmp_path / "sim.svg")
    assert "frame tool path against target" in svg
    assert "scara: udwadia-kalaba, rk4, Baumgarte linear alpha=0.5 beta=200" in svg
    bare = svg_texts(lambda p: viz.plot_simulation(result, p), tmp_path / "bare.svg")
    assert "distance from a singular configuration" in bare and "frame tool" not in bare
    assert "simulation: udwadia-kalaba, rk4<" in bare


def test_reactions_figure_of_a_closed_loop(fourbar, tmp_path):
    """The cut joint's force is drawn (computed from the run when not given)."""
    robot, result = fourbar
    svg = svg_texts(lambda p: viz.plot_reactions(result, robot, p), tmp_path / "r.svg")
    assert "cut-joint forces" in svg and ">loop<" in svg
    viz.plot_reactions(result, robot, tmp_path / "r.pdf")
    written(tmp_path / "r.pdf", ".pdf")


def test_run_figure_from_the_log_file_and_from_its_arrays(run_log, tmp_path):
    """From the path: titled with the file name; from the arrays with the summary: its stop reason and counts."""
    log, summary = run_log
    svg = svg_texts(lambda p: viz.plot_run(log, p), tmp_path / "run.svg")
    assert "run.npz" in svg and "overruns" not in svg
    with np.load(log) as arrays:
        svg = svg_texts(lambda p: viz.plot_run(arrays, p, summary=summary, title="scara"), tmp_path / "run2.svg")
    assert f"{summary.stop_reason}; overruns {summary.overruns}/{summary.cycles}" in svg


def test_a_file_that_is_not_a_run_log_is_a_one_line_error(tmp_path):
    bad = tmp_path / "bad.npz"
    np.savez(bad, t=np.arange(3.0))
    with pytest.raises(DataError, match="not a run log") as exc:
        viz.plot_run(bad, tmp_path / "run.png")
    assert "bad.npz" in str(exc.value) and "\n" not in str(exc.value)
    assert not (tmp_path / "run.png").exists()


def test_identification_figure(tmp_path):
    """A Stribeck fit of a synthetic constant-speed log, titled with the joint and the law."""
    from mbctl.dynamics.friction.laws import Stribeck
    from mbctl.identification.pipeline import identify
    from mbctl.identification.plan import ConstantSpeedPlan, speed_grid
    from mbctl.identification.synthetic import SyntheticRig, synthetic_log

    truth = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)
    plan = ConstantSpeedPlan("j1", tuple(speed_grid(0.01, 1.0, 8, 0.05)), (-0.5, 0.5), settle_s=0.2, acceleration=20.0, max_leg_s=2.0, transit_speed=1.0)
    log = synthetic_log(SyntheticRig(truth, torque_noise=0.01), plan, np.random.default_rng(0))
    result = identify(log, "j1", "stribeck")
    svg = svg_texts(lambda p: viz.plot_identification(result, p), tmp_path / "fit.svg")
    assert "j1: stribeck friction" in svg and "gravity profile" in svg


def test_servo_fit_figure(tmp_path):
    """One simulated bench log, fitted: its panel names the log and the firmware gain."""
    from mbctl.dynamics.actuator import ServoFirmware
    from mbctl.identification.servo import ServoLog, ServoModel, fit_servo, simulate_servo

    model = ServoModel(mass=0.49, length=0.1, firmware=ServoFirmware(kp=400.0, vin=7.4))
    t = np.arange(0.0, 1.5, 0.005)
    goal = 1.2 * np.sin(3.0 * t)
    base = ServoLog(name="bench", t=t, position=np.zeros(len(t)), goal=goal, model=model)
    position = simulate_servo(base, "coulomb-viscous", {"kt": 0.35, "R": 3.5, "armature": 0.002, "fc": 0.03, "fv": 0.01})
    log = dataclasses.replace(base, position=position)
    fit = fit_servo([log], "coulomb-viscous", starts=1)
    svg = svg_texts(lambda p: viz.plot_servo_fit(fit, [log], p), tmp_path / "servo.svg")
    assert "bench (kp 400)" in svg and "servo fit, coulomb-viscous" in svg


def test_arm_fit_figure(tmp_path):
    """A payload fit of the UR5 on the torques its own model gives: one panel per joint."""
    from mbctl.identification.arm_fit import ArmFitSettings, fit_arm
    from mbctl.identification.arm_log import ArmLog, Conditioning, condition_log

    ur5 = mbctl.load_robot("ur5")
    home, away = [0.0, -1.2, 1.4, -1.6, -1.57, 0.0], [0.8, -0.6, 0.9, -1.2, -1.2, 0.7]
    traj = mbctl.quintic_rest_to_rest([home, away, home], [1.0, 1.0], 200.0, ur5.joint_names)
    tau = mbctl.feedforward(ur5, traj).dynamics.tau
    raw = ArmLog(source=tmp_path / "synthetic.csv", joint_names=ur5.joint_names, t=traj.t, q=traj.q, dq=traj.dq, tau=tau)
    log = condition_log(raw, Conditioning(rate_hz=200.0, cutoff_hz=20.0, acceleration_cutoff_hz=20.0))
    last = max(ur5.joints, key=lambda j: j.id).name
    fit = fit_arm(ur5, [log], ArmFitSettings(free_bodies=(last,), payload=True))
    svg = svg_texts(lambda p: viz.plot_arm_fit(ur5, fit, [log], p), tmp_path / "arm.svg")
    for name in ur5.joint_names:
        assert f">{name} (N·m)<" in svg


def test_variants_figures_are_the_listed_files(tmp_path):
    """The fourbar's one variant (rigid, frictionless): every figure of VARIANT_PLOTS but the deflection."""
    from mbctl.dynamics.simulation.variants import available_variants, run_variant
    from mbctl.viz.variants import VARIANT_PLOTS

    robot = mbctl.load_robot("fourbar")
    runs = [run_variant(bundled_config("fourbar"), v, duration=0.05) for v in available_variants(robot)]
    files = viz.plot_variants(runs, tmp_path)
    assert sorted(p.name for p in files) == sorted(n for n in VARIANT_PLOTS if n != "deflection.png")
    for p in files:
        written(p, ".png")


@pytest.mark.slow
def test_flexfeed_figures_are_the_listed_files(tmp_path):
    """5 ms of the 3-RRR with FEM levers in one mode, with the RFE cross-check: all four figures."""
    from mbctl.config.robot import read_robot_spec
    from mbctl.ctrl.flexible_feedforward import flexible_feedforward
    from mbctl.viz.variants import FLEXFEED_PLOTS

    spec = read_robot_spec(bundled_config("rrr3_flexible"))
    mode = "min-internal-force"
    result = flexible_feedforward(spec, duration=0.005, rate=2000.0, modes=(mode,), rfe_mode=mode, stiff_check=False, rfe_elements=2, compiled_steps=False)
    files = viz.plot_flexfeed(result, tmp_path)
    assert [p.name for p in files] == list(FLEXFEED_PLOTS)
    for p in files:
        written(p, ".png")


UR5_STUDY = """
robot = "ur5"
workflow = "feedforward"
samples = 3
seed = 7
runs_per_task = 3
[parameters."plant.payload.mass"]
values = [0.5, 2.0]
[parameters."joints.elbow_joint.friction.fc"]
distribution = "normal"
mean = 3.5
std = 0.2
[overrides.plant]
payload = { frame = "tool0", mass = 1.0, com = [0.0, 0.0, 0.05] }
[feedforward]
model = "plant"
[trajectory]
waypoints = [[0.0, -1.2, 1.0, 0.0, 0.0, 0.0], [0.6, -0.6, 0.4, 0.3, 0.3, 0.3]]
durations = [0.5]
rate_hz = 100.0
"""


def test_sweep_figures_from_the_directory_and_from_the_table(tmp_path):
    """A 2 x 3 feed-forward sweep run in this process: a scatter per varied parameter, the histograms and
    the torque bands, from the output directory; the same files from the table into another directory."""
    from mbctl.config.study import read_study
    from mbctl.study.engine import prepare, run_study
    from mbctl.study.summary import read_table, torque_bands

    study = tmp_path / "study.toml"
    study.write_text(UR5_STUDY)
    plan = prepare(read_study(study), pilot=False)
    out = tmp_path / "out"
    out.mkdir()
    table = read_table(run_study(plan, out).table)
    assert torque_bands(plan, out, table["status"] == "ok") is not None  # bands.npz, as mbctl sweep writes it
    expected = [*(f"scatter-{p}.png" for p in plan.design.paths), "histograms.png", "torque-bands.png"]
    files = viz.plot_sweep(out)
    assert [p.name for p in files] == expected and all(p.parent == out for p in files)
    manifest = json.loads((out / "sweep.json").read_text())
    assert manifest["parameters"] == list(plan.design.paths)
    again = tmp_path / "again"
    again.mkdir()
    assert [p.name for p in viz.plot_sweep(table, again)] == expected[:-1]  # a table brings no bands
    for p in files:
        written(p, ".png")


def test_a_sweep_without_a_table_is_a_one_line_error(tmp_path):
    with pytest.raises(InputError, match="runs.parquet") as exc:
        viz.plot_sweep(tmp_path)
    assert str(tmp_path) in str(exc.value)


def test_a_bad_suffix_is_refused_naming_the_path_before_drawing(fourbar, trajectory, run_log, tmp_path):
    """Every single-figure plot refuses .jpg in one line naming the file and writes nothing."""
    robot, result = fourbar
    calls = {
        "plot_trajectory": lambda p: viz.plot_trajectory(trajectory, p),
        "plot_simulation": lambda p: viz.plot_simulation(result, p, robot=robot),
        "plot_reactions": lambda p: viz.plot_reactions(result, robot, p),
        "plot_run": lambda p: viz.plot_run(run_log[0], p),
    }
    for name, draw in calls.items():
        path = tmp_path / f"{name}.jpg"
        with pytest.raises(InputError) as exc:
            draw(path)
        message = str(exc.value)
        assert str(path) in message and ".png, .pdf, .svg" in message and "\n" not in message, name
        assert not path.exists() and list(tmp_path.iterdir()) == [], name
