"""``mbctl commission``'s safety and bookkeeping: the start pose and the keep-out, flags that mean one
thing, results that cannot mix (resume refusals, reruns), the hold test off the start pose, the
default rate on a CANopen bus, and the held joints at 4 ms periods."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pinocchio as pin
import pytest
import scipy.linalg

from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import InputError
from mbctl.hardware.loop import RunSummary
from mbctl.hardware.session import SessionOptions
from mbctl.hardware.sim import truth_model
from mbctl.identification.commission import Commission, CommissionSettings
from mbctl.identification.commission.context import write_json
from mbctl.identification.commission.record import record

sys.path.insert(0, str(Path(__file__).parent))
from test_commission import FAST, TOML, URDF  # noqa: E402  (the two-joint arm and its short plan)

UR5_START = ("--start", "shoulder_lift_joint=-1.5708")  # the docs' start: the upper arm upright


@pytest.fixture
def arm(tmp_path):
    (tmp_path / "arm2.urdf").write_text(URDF)
    (tmp_path / "arm2.toml").write_text(TOML)
    return tmp_path / "arm2.toml"


def _finished(arm: Path, out: Path, steps: tuple[str, ...], settings: CommissionSettings | None = None) -> Commission:
    """A folder whose ``steps`` finished (results with their records), as a run with ``settings`` leaves it."""
    c = Commission(load_robot(arm), SessionOptions(lockstep=True), settings or CommissionSettings(start={"j1": 0.0}, hold_drift=0.05), out)
    for step in steps:
        (out / step).mkdir(parents=True, exist_ok=True)
        write_json(out / step / "result.json", {"arm_time_s": 1.0, "shaped_by": record(c, step)})
        (out / step / "step.log").write_text(f"{step}: the earlier run\n")
    return c


# -- the start pose and the keep-out ---------------------------------------------------------------


def test_no_start_pose_is_refused(arm, tmp_path, cli):
    """Without --start or [identification] start: one line naming --start, exit 2, nothing made."""
    r = cli("commission", arm, "--out", tmp_path / "out", "--lockstep")
    assert r.code == 2 and r.err.count("\n") == 1 and "--start: no start pose" in r.err
    assert not (tmp_path / "out").exists()


def test_the_ur5_from_all_zeros_is_refused_and_from_upright_its_sweeps_pass(cli, tmp_path):
    """The bundled UR5's keep-out: the all-zeros pose is below its mounting plane; from the lift at
    -0.3 rad its sweep goes under it (named with the time and height); from upright every sweep is clear."""
    r = cli("commission", "ur5", "--out", tmp_path / "a", "--lockstep", "--start", "shoulder_pan_joint=0")
    assert r.code == 2 and r.err.count("\n") == 1 and "keepout.floor: the start pose: " in r.err and "below the floor (0 m)" in r.err
    r = cli("commission", "ur5", "--out", tmp_path / "b", "--lockstep", "--start", "shoulder_lift_joint=-0.3")
    assert r.code == 2 and "keepout.floor: the friction sweep of shoulder_lift_joint: " in r.err and " at t = " in r.err
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()
    from mbctl.identification.commission.friction import check_sweeps

    robot = load_robot("ur5")
    c = Commission(robot, SessionOptions(lockstep=True), CommissionSettings(start={"shoulder_lift_joint": -1.5708}), tmp_path / "c")
    check_sweeps(c)  # the control case: no KeepoutError


def test_the_preflight_prints_the_start_pose_and_where_it_came_from(arm, tmp_path):
    """Every joint's start value and its source are lines of the pre-flight's log."""
    from mbctl.identification.commission.envelope import start_origin

    robot = load_robot(arm)
    assert start_origin(robot, {"j1": 0.3}) == "--start (j1); 0 or the envelope's middle (j2)"


# -- flags that mean one thing ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--start", "j1=0.1,j1=0.2"), "--start: j1 is given twice"),
        (("--start", "j1"), "--start: expected JOINT=VALUE"),
        (("--start", "j1=0", "--bandwidth", "wrist=30"), "--bandwidth: no actuated joint 'wrist'"),
        (("--start", "j1=0", "--bandwidth", "j1=10,j1=20"), "--bandwidth: j1 is given twice"),
        (("--start", "j1=0", "--joints", "j2,j2"), "--joints: j2 is given twice"),
        (("--start", "j1=0", "--joints", "j1", "--bandwidth", "j2=10"), "--bandwidth: j2 is not swept"),
        (("--start", "j1=0", "--rate", "250", "--bandwidth", "j1=30"), "--bandwidth: j1: 30 Hz is more than a loop at 250 Hz holds (at most 15.9 Hz"),
        (("--start", "j1=0", "--plant", "canopen", "--bus", "ros2"), "--bus: --plant canopen and --bus ros2 contradict"),
        (("--start", "j1=0", "--emulate"), "--emulate: only for --bus"),
    ],
)
def test_unknown_repeated_or_impossible_flags_are_one_line(arm, tmp_path, cli, args, words):
    """Each is one line naming the option, exit 2, before the output folder is made."""
    r = cli("commission", arm, "--out", tmp_path / "out", "--lockstep", *args)
    assert r.code == 2 and r.err.count("\n") == 1 and words in r.err, r.err
    assert not (tmp_path / "out").exists()


def test_the_resume_command_prints_the_shortest_digits_and_the_bus():
    """--start 0.3 resumes as 0.3 (not 0.29999999999999999); --plant canopen resumes as --bus canopen."""
    from mbctl.cli import build_parser
    from mbctl.cli.commands.commission import resume_command

    argv = ["commission", "arm.toml", "--out", "o", "--start", "j1=0.3", "--bandwidth", "j1=12.5", "--rate", "250", "--bus", "canopen"]
    args = build_parser(argv).parse_args(argv)
    line = resume_command(args, "friction")
    assert "--start j1=0.3 " in line and "--bandwidth j1=12.5 " in line and "--rate 250.0" in line and "--bus canopen" in line
    assert line.endswith("--from friction")


def test_trajectory_s_old_margin_spelling_names_the_new_one(cli, tmp_path):
    """trajectory optimal/ocp: --torque-margin (a fraction used there) is an error naming --torque-scaling."""
    for kind, where in (("optimal", ("--waypoints", "0,0,0,0; 0.1,0.1,0.1,0.01")), ("ocp", ("--from", "0,0,0,0", "--to", "0.1,0.1,0.1,0.01"))):
        r = cli("trajectory", kind, "scara", *where, "--torque-margin", "0.9", "--out", tmp_path / "t.csv")
        assert r.code == 2 and r.err.count("\n") == 1 and "--torque-margin: is --torque-scaling here" in r.err, r.err
    r = cli("trajectory", "optimal", "scara", "--waypoints", "0,0,0,0; 0.1,0.1,0.1,0.01", "--velocity-margin", "0.9", "--out", tmp_path / "t.csv")
    assert r.code == 2 and "--velocity-margin: is --velocity-scaling here" in r.err


def test_run_takes_the_same_bus_words_as_commission(cli, tmp_path):
    """mbctl run --plant canopen (the older spelling) is --bus canopen: the same one-line checks apply."""
    r = cli("run", "ur5", "--trajectory", tmp_path / "t.csv", "--plant", "canopen", "--joint-states", "/js", "--log", tmp_path / "r.npz", "--summary", tmp_path / "r.json")
    assert r.code == 2 and "--joint-states: only for --bus ros2" in r.err, r.err


# -- results that cannot mix -----------------------------------------------------------------------


def test_resume_refuses_other_margins_than_the_stored_preflight(arm, tmp_path, cli):
    """--from friction with another --torque-margin: one line naming the result and the option, exit 2."""
    out = tmp_path / "out"
    _finished(arm, out, ("preflight",))
    r = cli("commission", arm, "--out", out, *FAST, "--torque-margin", "0.3", "--from", "friction")
    assert r.code == 2 and r.err.count("\n") == 1, r.err
    assert "preflight/result.json: the preflight step ran with --torque-margin 0.2, this command gives 0.3" in r.err
    assert not (out / "friction").exists()


def test_resume_refuses_another_robot_s_folder(arm, tmp_path, cli):
    """--from friction into a folder another robot file made: one line naming both files, exit 2."""
    out = tmp_path / "out"
    _finished(arm, out, ("preflight",))
    other = tmp_path / "other.toml"
    other.write_text(TOML.replace("fc = 1.0,", "fc = 1.1,"))  # the same arm, another file content
    r = cli("commission", other, "--out", out, *FAST, "--from", "friction")
    assert r.code == 2 and r.err.count("\n") == 1 and "ran on another robot file" in r.err and str(arm) in r.err, r.err


def test_resume_refuses_a_result_without_a_record(arm, tmp_path, cli):
    """An older mbctl's result (no record of what shaped it) is refused, not trusted."""
    out = tmp_path / "out"
    (out / "preflight").mkdir(parents=True)
    (out / "preflight" / "result.json").write_text("{}\n")
    r = cli("commission", arm, "--out", out, *FAST, "--from", "friction")
    assert r.code == 2 and "has no record of the robot and options that shaped it" in r.err


def test_a_stopped_rerun_leaves_no_file_of_the_earlier_run_beside_its_own(arm, tmp_path, cli):
    """A rerun from the excitation into a finished folder moves the earlier excitation, identify and
    verify folders, the report, its figures and the adopted robot into superseded/1 before it starts;
    stopped in the excitation, the folder holds the earlier preflight and friction and this run's files only."""
    out = tmp_path / "out"
    _finished(arm, out, ("preflight", "friction", "excitation", "identify", "verify", "report"))
    (out / "identify" / "candidate.toml").write_text("# the earlier candidate\n")
    (out / "verify" / "step.log").write_text("verify: adopted ... wrote arm2_commissioned.toml\n")
    for name in ("report.json", "report.html", "friction.png", "validation.png", "arm2_commissioned.toml"):
        (out / name).write_text("earlier\n")
    r = cli("commission", arm, "--out", out, *FAST[:-2], "--hold-drift", "0.05", "--from", "excitation", "--period", "0.003")
    assert r.code == 1 and "excitation stopped" in r.err, r.err
    assert sorted(p.name for p in out.iterdir()) == ["excitation", "friction", "preflight", "superseded"]
    assert "the earlier run" not in (out / "excitation" / "step.log").read_text()
    moved = out / "superseded" / "1"
    assert sorted(p.name for p in moved.iterdir()) == sorted(
        ["excitation", "identify", "verify", "report", "report.json", "report.html", "friction.png", "validation.png", "arm2_commissioned.toml"])
    assert (moved / "verify" / "step.log").read_text().startswith("verify: adopted")
    r = cli("commission", arm, "--out", out, *FAST[:-2], "--hold-drift", "0.05", "--from", "excitation", "--period", "0.003")
    assert (out / "superseded" / "2" / "excitation").is_dir()  # the next rerun's earlier files go beside, not over them


def test_the_report_s_files_are_the_ones_moved_aside():
    """Every file the report draws at the top of DIR is one a rerun moves aside."""
    import inspect

    from mbctl.identification.commission.record import REPORT_FILES
    from mbctl.viz import commission as viz

    drawn = {name for name in ("report.html", "friction.png", "base_parameters.png", "validation.png") if f'"{name}"' in inspect.getsource(viz)}
    assert drawn == {"report.html", "friction.png", "base_parameters.png", "validation.png"} and drawn <= set(REPORT_FILES)


# -- the hold test and the rate --------------------------------------------------------------------


def test_an_arm_off_the_start_pose_is_moved_there_before_the_hold_test(arm, tmp_path, monkeypatch):
    """Drives 0.03 rad off the start pose (between the hold's 0.02 bound and a run's 0.05 start
    tolerance): the move back runs first, then the hold test, which starts on the start pose."""
    import mbctl.identification.commission.context as context
    import mbctl.identification.commission.preflight as preflight

    robot = load_robot(arm)
    c = Commission(robot, SessionOptions(plant="canopen", interface="udp_multicast", lockstep=True), CommissionSettings(start={"j1": 0.0}), tmp_path)
    where, runs = [c.q0 + [0.0, 0.03]], []

    @contextlib.contextmanager
    def backend(*args):
        yield SimpleNamespace(read=lambda: SimpleNamespace(q=where[0]))

    def run(model, traj, options, log):
        runs.append(traj)
        where[0] = traj.q[-1].copy()  # the arm ends where the run ends
        return RunSummary(stop_reason="completed")

    monkeypatch.setattr(context, "open_backend", backend)
    monkeypatch.setattr(context, "run_session", run)
    monkeypatch.setattr(preflight, "run_session", run)
    monkeypatch.setattr(preflight, "drift_of", lambda *a: [0.0, 0.0])
    monkeypatch.setattr(preflight, "_drives", lambda c: "emulated")
    preflight.preflight(c, {})
    back, hold = runs
    assert back.q[0] == pytest.approx(c.q0 + [0.0, 0.03]) and back.q[-1] == pytest.approx(c.q0)
    assert hold.q[0] == pytest.approx(c.q0) and hold.q[-1] == pytest.approx(c.q0)


def test_the_default_rate_on_canopen_is_the_fastest_the_bus_carries():
    """The bundled UR5's six drives on 1 Mbit/s: 2005 bits a cycle, 100.3 % at 500 Hz, so 250 Hz (50 %)."""
    from mbctl.hardware.cia402.units import bus_load, canopen_config
    from mbctl.identification.commission.rate import BUS_SHARE, default_rate

    robot = load_robot("ur5")
    rate, why = default_rate(robot, "canopen")
    config = canopen_config(robot)
    assert rate == 250.0 and "50 %" in why
    assert bus_load(6, config.mode, config.bitrate, 1 / 500) > BUS_SHARE >= bus_load(6, config.mode, config.bitrate, 1 / 250)
    assert default_rate(robot, None) == (1000.0, "the default")


# -- the held joints at 4 ms periods ---------------------------------------------------------------


def _spectral_radius(M_plant: np.ndarray, Kp: np.ndarray, Kd: np.ndarray, dt: float) -> float:
    """Largest |eigenvalue| of a PD loop on ``M q'' = tau`` sampled every ``dt`` with a zero-order hold
    and a one-period delay (the command applied at the next period)."""
    n = len(M_plant)
    A = np.block([[np.zeros((n, n)), np.eye(n)], [np.zeros((n, 2 * n))]])
    B = np.vstack([np.zeros((n, n)), np.linalg.inv(M_plant)])
    Z = scipy.linalg.expm(np.block([[A, B], [np.zeros((n, 3 * n))]]) * dt)
    Ad, Bd = Z[: 2 * n, : 2 * n], Z[: 2 * n, 2 * n :]
    closed = np.block([[Ad, Bd], [-np.hstack([Kp, Kd]), np.zeros((n, n))]])
    return float(np.abs(np.linalg.eigvals(closed)).max())


def test_the_coupled_loops_are_stable_at_4_ms_where_per_joint_ones_are_not(robots):
    """The sweeps' loops of the UR5's shoulder lift and elbow (upper arm upright, 10 Hz) against their
    mass matrix: scaled by M's diagonal the sampled loop is stable at 1 ms and unstable at 4 ms; through
    M it is stable at 4 ms."""
    from mbctl.hardware.interface import JointState
    from mbctl.identification.experiments import ExperimentController
    from mbctl.identification.plan import ControlGains, Phase, Timeline

    robot = robots["ur5"]
    q0 = np.array([0.0, -1.5708, 0.0, 0.0, 0.0, 0.0])
    pair = np.ix_([1, 2], [1, 2])
    M = pin.crba(robot.model, robot.create_data(), robot.configuration(q0))
    M = (np.triu(M) + np.triu(M, 1).T)[pair]
    hold = Timeline((Phase("hold", 0.0, 1.0, q0[1], q0[1]),))
    gains = {}
    for coupled in (False, True):
        ctl = ExperimentController(robot, "shoulder_lift_joint", hold, ControlGains(bandwidth_hz=10.0), coupled=coupled)
        ctl(0.0, JointState(t=0.0, q=q0, dq=np.zeros(6), effort=np.zeros(6)))
        gains[coupled] = (ctl.Kp[pair], ctl.Kd[pair]) if coupled else (np.diag(ctl.kp)[pair], np.diag(ctl.kd)[pair])
    assert _spectral_radius(M, *gains[False], 0.001) < 1.0 < _spectral_radius(M, *gains[False], 0.004)
    assert _spectral_radius(M, *gains[True], 0.004) < 1.0


@pytest.mark.slow
def test_held_joints_hold_in_lockstep_at_250_hz(tmp_path):
    """The shoulder lift's sweep of the UR5 with a 3 kg tool it lacks, friction 1.8 times, lock-step on
    the simulated plant at 250 Hz: it completes (the held elbow stopped it before, at 2.66 rad/s against
    its 2.52 limit), the held joints stay within 0.05 rad of the start, and the fitted friction is the
    truth's within 1 %."""
    sys.path.insert(0, str(Path(__file__).parents[1] / "benchmarks"))
    from commission import arm_file

    from mbctl.identification.commission.friction import friction

    robot = load_robot(arm_file(tmp_path))
    settings = CommissionSettings(start={"shoulder_lift_joint": -1.5708}, friction_joints=("shoulder_lift_joint",), speeds=16)
    c = Commission(robot, SessionOptions(lockstep=True, rate_hz=250.0), settings, tmp_path / "out")
    result = friction(c, {})["joints"]["shoulder_lift_joint"]
    log = np.load(tmp_path / "out" / "friction" / "shoulder_lift_joint.npz")
    q = log["q"].reshape(len(log["t"]), -1)
    assert np.delete(np.abs(q - c.q0).max(axis=0), 1).max() < 0.05
    truth = truth_model(robot)[0].joint("shoulder_lift_joint").friction.law
    assert result["parameters"]["fc"] == pytest.approx(truth.fc, rel=0.01) and result["parameters"]["fs"] == pytest.approx(truth.fs, rel=0.01)


def test_a_bad_start_is_refused_before_anything(arm, tmp_path):
    """The library refuses a missing start as the command does (naming --start)."""
    c = Commission(load_robot(arm), SessionOptions(lockstep=True), CommissionSettings(), tmp_path)
    with pytest.raises(InputError, match="no start pose") as err:
        c.q0  # noqa: B018
    assert err.value.field == "--start"


def test_parsed_options_are_kept_in_order(arm):
    """--start's values keep their order and floats (the record and the resume command repeat them)."""
    from mbctl.cli.commands.commission import joint_values

    assert joint_values("j2=0.25, j1=-1e-3", "--start") == {"j2": 0.25, "j1": -0.001}
    assert list(joint_values("j2=1,j1=2", "--start")) == ["j2", "j1"]


@pytest.mark.parametrize("rate, given, expected", [(250.0, None, 0.15 * 250 / (2 * np.pi)), (1000.0, None, 10.0), (250.0, 12.0, 12.0)])
def test_the_default_sweep_loop_is_well_damped_at_the_rate(tmp_path, rate, given, expected):
    """The sweeps' default 10 Hz, lowered to 0.15 rate / 2 pi where that is less (6 Hz at 250 Hz: a drive's own
    delay left 10 Hz ringing), with a line saying so; kept at 1 kHz; a --bandwidth up to the 15.9 Hz limit kept."""
    from mbctl.identification.commission.friction import _sweep

    settings = CommissionSettings(start={"shoulder_lift_joint": -1.5708}, bandwidth_hz={} if given is None else {"elbow_joint": given})
    c = Commission(load_robot("ur5"), SessionOptions(lockstep=True, rate_hz=rate), settings, tmp_path / "out")
    sweep = _sweep(c, "elbow_joint")
    assert sweep.settings.gains.bandwidth_hz == pytest.approx(expected)
    assert ("well damped" in sweep.note) == (given is None and rate == 250.0), sweep.note
