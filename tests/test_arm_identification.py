"""Whole-arm identification: log conditioning, the fit against a simulated truth, payloads,
write-back reproduced by the feed-forward, the real Panda log, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.regressor import inertial_parameters, pseudo_inertia
from mbctl.errors import ConfigError, DataError
from mbctl.hardware.runlog import log_table
from mbctl.identification.arm_fit import ArmFitSettings, fit_arm, predict_torques
from mbctl.identification.arm_log import ArmLog, Conditioning, condition_log, read_arm_log

ROOT = Path(__file__).resolve().parent.parent
PANDA_LOG = ROOT / "data" / "panda-excitation" / "train.csv"

TRUTH_ARMATURE = {"shoulder_pan_joint": 0.5, "shoulder_lift_joint": 0.7, "elbow_joint": 0.45, "wrist_1_joint": 0.26, "wrist_2_joint": 0.17, "wrist_3_joint": 0.24}
"""The simulated arm's rotor inertias (kg m^2), each 15 to 30 % off the bundled UR5's (0.61, 0.21)."""

TRUTH = """
urdf = "example-robot-data:ur5"
gravity = [0.0, 0.0, -9.81]
[joints.shoulder_pan_joint]
armature = 0.5
friction = { law = "coulomb-viscous", fc = 4.0, fv = 6.0 }
[joints.shoulder_lift_joint]
armature = 0.7
friction = { law = "coulomb-viscous", fc = 4.5, fv = 6.5 }
[joints.elbow_joint]
armature = 0.45
friction = { law = "coulomb-viscous", fc = 3.5, fv = 5.0 }
inertial = { mass = 2.9, com = [0.0, 0.01, 0.22], inertia = [0.05, 0.05, 0.006, 0.0, 0.0, 0.001] }
[joints.wrist_1_joint]
armature = 0.26
friction = { law = "coulomb-viscous", fc = 1.2, fv = 1.0 }
[joints.wrist_2_joint]
armature = 0.17
friction = { law = "coulomb-viscous", fc = 1.2, fv = 1.0 }
[joints.wrist_3_joint]
armature = 0.24
friction = { law = "coulomb-viscous", fc = 1.1, fv = 0.9 }
inertial = { mass = 0.6, com = [0.0, 0.03, 0.01], inertia = [0.0008, 0.0006, 0.0009, 0.0, 0.0, 0.0] }
[control.computed-torque]
kp = 400.0
kd = 40.0
[plant]
substeps = 4
encoder_counts = 524288
velocity = "difference"
{payload}
"""


@pytest.fixture(scope="module")
def simulated_runs(tmp_path_factory):
    """Lock-step runs of a perturbed UR5 (inertials, rotor inertias, friction) along a designed excitation, without and with an unmodelled payload."""
    from mbctl.cli import main

    d = tmp_path_factory.mktemp("armsim")
    traj = d / "exc.csv"
    assert main(["trajectory", "excitation", "ur5", "--harmonics", "4", "--period", "10", "--about", "shoulder_lift_joint=-1.5708", "--out", str(traj)]) == 0
    out = {}
    for name, payload in (("truth", ""), ("payload", 'payload = { frame = "tool0", mass = 2.0, com = [0.01, 0.0, 0.06] }')):
        (d / f"{name}.toml").write_text(TRUTH.replace("{payload}", payload))
        code = main(["run", str(d / f"{name}.toml"), "--trajectory", str(traj), "--lockstep", "--log", str(d / f"{name}.npz"), "--summary", str(d / f"{name}.json")])
        assert code == 0
        out[name] = (d / f"{name}.toml", d / f"{name}.npz")
    return out


def _fit(robot, log_path, **settings):
    """As `mbctl identify dynamics --velocity differentiated`: the plant's velocity estimate is a
    filtered difference that lags by a period, the encoder is fine enough to differentiate."""
    cutoff = 20.0
    log = condition_log(read_arm_log(log_path, robot.joint_names), Conditioning(acceleration_cutoff_hz=cutoff, velocity="differentiated"))
    return fit_arm(robot, [log], ArmFitSettings(**settings))


@pytest.mark.slow
def test_simulated_truth_recovered_within_four_standard_errors(simulated_runs):
    """A run of a perturbed UR5 gives back the truth's base parameters (armature included) within 4 standard errors, and its friction."""
    truth_toml, log = simulated_runs["truth"]
    nominal = load_robot("ur5")
    fit = _fit(nominal, log)
    beta_truth = fit.base.base(inertial_parameters(load_robot(truth_toml), armature=True))
    beta_nominal = fit.base.base(inertial_parameters(nominal, armature=True))
    z = (fit.beta_ols - beta_truth) / fit.beta_ols_stderr
    assert np.abs(z).max() < 4.0, dict(zip(fit.base.names, z.round(1)))
    assert np.abs((fit.beta - beta_truth) / fit.beta_ols_stderr).max() < 4.0
    # the perturbation itself is far outside those errors: the test can tell truth from prior
    assert np.abs((beta_nominal - beta_truth) / fit.beta_ols_stderr).max() > 20
    truth = load_robot(truth_toml)
    for j in nominal.joint_names:
        law, true_law = fit.friction[j], truth.joint(j).friction.law
        assert law.fc == pytest.approx(true_law.fc, rel=0.05) and law.fv == pytest.approx(true_law.fv, rel=0.1)


@pytest.mark.slow
def test_simulated_armature_recovered_within_its_interval(simulated_runs):
    """Each armature that is a base parameter of its own (elbow and wrists) comes back within its 95 % interval, unconstrained and consistent."""
    truth_toml, log = simulated_runs["truth"]
    fit = _fit(load_robot("ur5"), log)
    own = [j for j in fit.joint_names if f"{j}.armature" in fit.base.names]
    assert own == ["elbow_joint", "wrist_1_joint", "wrist_2_joint", "wrist_3_joint"]
    for j in own:
        i = fit.base.names.index(f"{j}.armature")
        half = 1.96 * fit.beta_ols_stderr[i]
        assert abs(fit.beta_ols[i] - TRUTH_ARMATURE[j]) < half, (j, fit.beta_ols[i], half)
        assert abs(fit.armature_by_joint[j] - TRUTH_ARMATURE[j]) < half, (j, fit.armature_by_joint[j], half)
        # and the interval is narrow enough to tell the truth from the bundled UR5's estimate
        assert abs(fit.armature_prior[fit.joint_names.index(j)] - TRUTH_ARMATURE[j]) > 2 * half


@pytest.mark.slow
def test_every_identified_body_is_physically_consistent(simulated_runs):
    """Every body of the consistent fit has a positive definite pseudo-inertia."""
    fit = _fit(load_robot("ur5"), simulated_runs["truth"][1], regularisation=1e-5)
    for b in range(len(fit.bodies)):
        assert np.linalg.eigvalsh(pseudo_inertia(fit.theta[10 * b : 10 * b + 10])).min() > 0


@pytest.mark.slow
def test_log_cholesky_coordinates_give_back_the_body():
    """The consistent fit's parametrisation: a UR5 body's log-Cholesky coordinates give back its ten parameters and its pseudo-inertia (round-off)."""
    import casadi as ca

    from mbctl.identification.arm_consistent import body_from_log_cholesky, log_cholesky

    theta_all = inertial_parameters(load_robot("ur5"))
    for b in range(len(theta_all) // 10):
        theta = theta_all[10 * b : 10 * b + 10]
        x = ca.SX.sym("x", 10)
        back, J = ca.Function("body", [x], list(body_from_log_cholesky(x)))(log_cholesky(theta))
        np.testing.assert_allclose(np.asarray(back).ravel(), theta, rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(np.asarray(J), pseudo_inertia(theta), rtol=1e-10, atol=1e-12)


def test_payload_mass_recovered_within_two_percent(simulated_runs):
    """With the arm known, the identified payload on the last body is the plant's 2.0 kg within 2 %, at its centre of mass."""
    truth_toml, log = simulated_runs["payload"]
    arm = load_robot(truth_toml)  # the arm as the plant has it; the payload is what the model lacks
    fit = _fit(arm, log, free_bodies=("wrist_3_joint",), payload=True)
    assert fit.payload_mass == pytest.approx(2.0, rel=0.02)
    tool = arm.model.frames[arm.model.getFrameId("tool0")].placement
    com_in_joint = tool.act(np.array([0.01, 0.0, 0.06]))
    assert np.linalg.norm(fit.payload_com - com_in_joint) < 0.01


@pytest.mark.slow
def test_write_back_is_what_feedforward_predicts(cli, simulated_runs, tmp_path):
    """`mbctl feedforward COPY.toml` on a measured log reproduces the fit's predicted torques."""
    truth_toml, log = simulated_runs["truth"]
    csv = tmp_path / "log.csv"
    with np.load(log) as z:
        cols, data = log_table(z)
        keep = [i for i, c in enumerate(cols) if c == "t" or c.split(".")[0] in ("q", "dq", "tau")]
        np.savetxt(csv, data[:, keep], delimiter=",", header=",".join(cols[i] for i in keep), comments="")
    r = cli("identify", "dynamics", "ur5", csv, "--write-back", tmp_path / "copy.toml", "--out", tmp_path / "fit.json")
    assert r.code == 0, r.err
    r = cli("feedforward", tmp_path / "copy.toml", "--trajectory", csv, "--out", tmp_path / "tau.csv")
    assert r.code == 0, r.err
    assert "against the log's measured tau" in r.out
    copy = load_robot(tmp_path / "copy.toml")
    fit = json.loads((tmp_path / "fit.json").read_text())
    log_c = condition_log(read_arm_log(csv, copy.joint_names))
    predicted = predict_torques(copy, inertial_parameters(copy), {j.name: j.friction.law for j in copy.joints}, log_c)
    written = np.loadtxt(tmp_path / "tau.csv", delimiter=",", skiprows=1)[:, 1 : 1 + copy.nv]
    assert np.abs(written - predicted).max() < 1e-9
    # and the copy's numbers are the fit's to six significant digits (half a unit of the sixth: 5e-6 relative), the armature too
    for j, values in fit["inertials"].items():
        assert copy.model.inertias[copy.model.getJointId(j)].mass == pytest.approx(values["mass"], rel=5e-6)
    for j, value in fit["armature"].items():
        assert copy.model.armature[copy.joint(j).idx_v] == pytest.approx(value, rel=5e-6, abs=1e-12)


def test_conditioning_of_an_irregular_log_matches_derivatives(tmp_path):
    """Repeated rows are dropped, and a slow sine sampled irregularly comes back with its analytic derivatives."""
    rng = np.random.default_rng(0)
    t = np.sort(np.r_[0.0, rng.uniform(0.0, 6.0, 5000)])
    t = np.repeat(t, 2)[:-1]  # every sample logged twice, with a later time: a logger re-sending its last sample
    t[1::2] += 3e-4
    w = 2 * np.pi * 0.5
    q = 0.3 * np.sin(w * np.repeat(t[::2], 2)[: len(t)])
    log = ArmLog(tmp_path / "x.csv", ("j",), t, q[:, None], None, 0.2 * q[:, None])
    c = condition_log(log, Conditioning(velocity="differentiated"))
    assert "repeated rows dropped" in c.notes[0]
    inner = slice(500, -500)  # the 5 Hz acceleration filter needs ~0.5 s to forget the ends
    assert np.abs(c.dq[inner, 0] - 0.3 * w * np.cos(w * c.t[inner])).max() < 2e-3 * 0.3 * w
    assert np.abs(c.ddq[inner, 0] + 0.3 * w**2 * np.sin(w * c.t[inner])).max() < 2e-2 * 0.3 * w**2


def test_panda_fit_beats_the_urdf_on_held_out_motion():
    """On the real Panda log, the consistent fit on the first 70 % predicts the rest better than the URDF on every joint."""
    robot = load_robot("panda_arm")
    raw = read_arm_log(PANDA_LOG, robot.joint_names)
    train = condition_log(raw, Conditioning(acceleration_cutoff_hz=20.0)).split(0.7)[0]
    test = condition_log(raw).split(0.7)[1]
    fit = fit_arm(robot, [train], ArmFitSettings())
    rms = lambda e: np.sqrt(np.mean(e**2, axis=0))  # noqa: E731
    identified = rms(predict_torques(robot, fit.theta, fit.friction, test, armature=fit.armature_by_joint) - test.tau)
    urdf = rms(predict_torques(robot, fit.theta_prior, {}, test) - test.tau)
    assert np.all(identified < urdf), (identified, urdf)
    # the URDF's last body carries the hand; the arm in the log evidently did not: the fit shows it
    last = next(c for c in fit.changes if c.body == "panda_joint7")
    assert last.mass < 0.8 * last.mass_prior


def test_panda_link_side_torques_show_no_rotor_inertia():
    """The Panda's torques are measured on the link side of its gears: no armature is above zero by two standard errors,
    and the consistent fit puts every one below 1e-3 kg m^2 (Franka gives 0.2 to 0.6 for its drives' rotors)."""
    robot = load_robot("panda_arm")
    log = condition_log(read_arm_log(PANDA_LOG, robot.joint_names), Conditioning(acceleration_cutoff_hz=20.0))
    fit = fit_arm(robot, [log], ArmFitSettings())
    for j in fit.joint_names:
        if f"{j}.armature" in fit.base.names:
            i = fit.base.names.index(f"{j}.armature")
            assert fit.beta_ols[i] < 2 * fit.beta_ols_stderr[i], (j, fit.beta_ols[i], fit.beta_ols_stderr[i])
    assert fit.armature.max() < 1e-3, fit.armature_by_joint


def test_bundled_identified_panda_is_what_the_command_writes(cli, tmp_path):
    """configs/panda_arm_identified.toml holds what `mbctl identify dynamics panda_arm train.csv` writes today."""
    r = cli("identify", "dynamics", "panda_arm", PANDA_LOG, "--write-back", tmp_path / "copy.toml")
    assert r.code == 0, r.err
    mine, bundled = load_robot(tmp_path / "copy.toml"), load_robot("panda_arm_identified")
    assert np.allclose(inertial_parameters(mine, armature=True), inertial_parameters(bundled, armature=True), rtol=1e-4, atol=1e-6)
    for j in mine.joints:
        assert j.friction.law == bundled.joint(j.name).friction.law


def test_locked_joints_keep_the_mass_and_leave_the_dofs():
    """Locking the Panda's fingers removes two DOF and keeps the total mass."""
    full, arm = load_robot("panda"), load_robot("panda_arm")
    assert arm.nv == full.nv - 2 and "panda_finger_joint1" not in arm.joint_names
    assert pin.computeTotalMass(arm.model) == pytest.approx(pin.computeTotalMass(full.model), rel=1e-12)


@pytest.mark.parametrize(
    ("toml", "field"),
    [
        ('locked = { nope = 0.0 }', "locked.nope"),
        ('locked = { panda_finger_joint1 = 0.5 }', "locked.panda_finger_joint1"),
        ('[joints.panda_joint7]\ninertial = { mass = 1.0, com = [0.0, 0.0, 0.0], inertia = [1.0, 0.1, 0.1, 0.0, 0.0, 0.0] }', "joints.panda_joint7.inertial.inertia"),
        ('[joints.panda_joint7]\ninertial = { mass = -1.0, com = [0.0, 0.0, 0.0], inertia = [0.1, 0.1, 0.1, 0.0, 0.0, 0.0] }', "joints.panda_joint7.inertial.mass"),
        ('[joints.panda_joint7]\ninertial = { mass = 1.0, com = [0.0, 0.0] , inertia = [0.1, 0.1, 0.1, 0.0, 0.0, 0.0] }', "joints.panda_joint7.inertial.com"),
    ],
)
def test_bad_locked_and_inertial_tables_name_their_field(tmp_path, toml, field):
    """Unknown or out-of-range locked joints and impossible inertials are refused at their field."""
    path = tmp_path / "r.toml"
    path.write_text(f'urdf = "example-robot-data:panda"\n{toml}\n')
    with pytest.raises(ConfigError) as info:
        load_robot(path)
    assert info.value.field == field


def test_a_valid_inertial_table_is_used(tmp_path):
    """The control case: a consistent inertial replaces the body, in the joint frame."""
    path = tmp_path / "r.toml"
    path.write_text('urdf = "example-robot-data:panda"\n[joints.panda_joint7]\ninertial = { mass = 1.0, com = [0.0, 0.0, 0.1], inertia = [0.1, 0.1, 0.1, 0.0, 0.0, 0.0] }\n')
    robot = load_robot(path)
    body = robot.model.inertias[robot.model.getJointId("panda_joint7")]
    assert body.mass == 1.0 and np.allclose(body.lever, [0.0, 0.0, 0.1])


def test_bad_logs_and_options_are_refused_in_one_line(cli, tmp_path):
    """A log without a joint's column, or a hold-out fraction out of range, exits 2 naming the file or option."""
    bad = tmp_path / "bad.csv"
    bad.write_text("t,q.panda_joint1\n" + "".join(f"{k * 1e-3},0.1\n" for k in range(50)))
    r = cli("identify", "dynamics", "panda_arm", bad)
    assert r.code == 2 and "bad.csv" in r.err and "q.panda_joint2" in r.err and len(r.err.strip().splitlines()) == 1
    r = cli("identify", "dynamics", "panda_arm", PANDA_LOG, "--holdout", "1.5")
    assert r.code == 2 and "--holdout" in r.err
    r = cli("identify", "dynamics", "panda_arm", PANDA_LOG, "--fit-cutoff", "900")
    assert r.code == 2 and "--fit-cutoff" in r.err
    with pytest.raises(DataError):
        Conditioning(cutoff_hz=-1.0)


def _log_of(path: Path, joints: list[str]) -> Path:
    columns = ["t", *(f"{g}.{j}" for g in ("q", "dq", "tau") for j in joints)]
    path.write_text(",".join(columns) + "\n" + "".join(f"{k * 1e-3}" + ",0.1" * (len(columns) - 1) + "\n" for k in range(20)))
    return path


def test_a_log_without_locked_joints_names_the_robot_that_locks_them(cli, tmp_path):
    """The Panda's seven arm joints against the bundled `panda` (fingers free): the one-line error names
    panda_arm, the same URDF with both fingers locked; a UR5 log without its wrist joint suggests the
    TOML's `locked` table; a log of other joints altogether gets no hint."""
    arm = load_robot("panda_arm").joint_names
    r = cli("identify", "dynamics", "panda", _log_of(tmp_path / "arm.csv", list(arm)))
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert "q.panda_finger_joint1" in r.err and "no columns of panda_finger_joint1, panda_finger_joint2: the bundled panda_arm" in r.err
    ur5 = load_robot("ur5").joint_names
    r = cli("identify", "dynamics", "ur5", _log_of(tmp_path / "ur5.csv", list(ur5[:-1])))
    assert r.code == 2 and f"locked = {{ {ur5[-1]} = 0.0 }}" in r.err and len(r.err.strip().splitlines()) == 1, r.err
    r = cli("identify", "dynamics", "ur5", tmp_path / "arm.csv")
    assert r.code == 2 and "missing column" in r.err and "no columns of" not in r.err
