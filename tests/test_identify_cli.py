"""`mbctl identify run` and `mbctl identify fit` end to end; write-back into a robot TOML copy; bad input."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pytest

from mbctl.config.joints import parse_friction
from mbctl.dynamics.friction.laws import LuGre, Stribeck
from mbctl.dynamics.model.overlay import joint_friction
from mbctl.dynamics.model.robot import load_robot
from mbctl.identification.logs import ConstantSpeedLog, write_constant_speed_log
from mbctl.identification.plan import ConstantSpeedPlan, speed_grid
from mbctl.identification.report import write_robot_copy
from mbctl.identification.synthetic import SyntheticRig, synthetic_log
from mbctl.tomlfields import Table

TRUTH = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)


def synthetic_csv(path: Path, speeds=None, seed: int = 0, **rig) -> Path:
    speeds = speed_grid(0.005, 2.0, 12, 0.05) if speeds is None else speeds
    plan = ConstantSpeedPlan("j1", tuple(speeds), (-0.6, 0.6), settle_s=0.2, acceleration=20.0, max_leg_s=3.0, transit_speed=1.0)
    opts = dict(gravity=6.0, torque_noise=0.016, encoder_counts=4096)
    opts.update(rig)
    write_constant_speed_log(path, synthetic_log(SyntheticRig(TRUTH, **opts), plan, np.random.default_rng(seed)))
    return path


@pytest.fixture(scope="module")
def log_csv(tmp_path_factory) -> Path:
    return synthetic_csv(tmp_path_factory.mktemp("logs") / "LOG.csv")


def one_line_error(r, *parts: str) -> None:
    assert r.code == 2, (r.code, r.out, r.err)
    lines = r.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: "), r.err
    for part in parts:
        assert part in lines[0], (part, lines[0])


def test_fit_prints_the_table_and_writes_summary_and_plot(cli, log_csv, tmp_path):
    """Stribeck fit of a synthetic log: report, printed [joints.j1.friction] table, JSON, PNG."""
    r = cli("identify", "fit", log_csv, "--law", "stribeck", "--joint", "j1", "--summary", tmp_path / "fit.json", "--plot", tmp_path / "fit.png")
    assert r.code == 0, r.err
    table = r.out[r.out.index("[joints.j1.friction]") :]
    law = joint_friction(parse_friction(Table(tomllib.loads(table)["joints"]["j1"]["friction"], Path("x"), "f"))).law
    assert isinstance(law, Stribeck)
    for k in ("fc", "fs", "vs"):
        assert getattr(law, k) == pytest.approx(getattr(TRUTH, k), rel=0.01)
    s = json.loads((tmp_path / "fit.json").read_text())
    assert s["law"] == "stribeck" and set(s["fit"]["ci"]) == {"fc", "fs", "vs", "fv"}
    # the slowest speed's 3 s leg covers 10 encoder counts: too few bins, dropped with the reason
    assert len(s["points"]["speed"]) == 11 and "position bins" in s["dropped"][0]["reason"]
    assert "dropped: " in r.out
    assert (tmp_path / "fit.png").stat().st_size > 10_000


def test_fit_writes_a_standalone_table_and_refuses_to_overwrite_it(cli, log_csv, tmp_path):
    out = tmp_path / "friction.toml"
    assert cli("identify", "fit", log_csv, "--law", "coulomb-viscous", "--joint", "j1", "--out", out).code == 0
    doc = tomllib.loads(out.read_text())
    assert doc["joints"]["j1"]["friction"]["law"] == "coulomb-viscous"
    before = out.read_text()
    one_line_error(cli("identify", "fit", log_csv, "--law", "stribeck", "--joint", "j1", "--out", out), "exists", "--force")
    assert out.read_text() == before
    assert cli("identify", "fit", log_csv, "--law", "stribeck", "--joint", "j1", "--out", out, "--force").code == 0
    assert tomllib.loads(out.read_text())["joints"]["j1"]["friction"]["law"] == "stribeck"


@pytest.mark.parametrize("joint", ["j1", "j2", "j3"])
def test_write_back_changes_only_the_joints_friction(configs, tmp_path, joint):
    """Inline table (j1), [joints.j2.friction] table (j2), one-line inline (j3): the copy
    parses to the original document with only that friction replaced, and loads."""
    law = Stribeck(fc=0.61, fs=0.93, vs=0.04, fv=0.07, delta=2.0)
    out = tmp_path / "sub" / "scara_identified.toml"
    out.parent.mkdir()
    write_robot_copy(configs / "scara.toml", out, joint, law)
    old = tomllib.loads((configs / "scara.toml").read_text())
    new = tomllib.loads(out.read_text())
    assert new["joints"][joint]["friction"] == {"law": "stribeck", **law.parameters()}
    assert new["urdf"] == "../../" + "scara.urdf" or (out.parent / new["urdf"]).resolve() == (configs / "scara.urdf").resolve()
    old["joints"][joint]["friction"] = new["joints"][joint]["friction"]
    old["urdf"] = new["urdf"]
    assert new == old
    assert load_robot(out).joint(joint).friction.law == law
    # comments and other text survive
    assert "# Programmed constraints of the SCARA constraint study" in out.read_text()


def test_write_back_adds_a_table_for_a_joint_without_friction(tmp_path, configs):
    src = tmp_path / "rig.toml"
    shutil.copy(configs / "friction_rig.urdf", tmp_path / "friction_rig.urdf")
    src.write_text('urdf = "friction_rig.urdf"\n')
    law = LuGre(fc=0.8, fs=1.1, vs=0.05, fv=0.12, sigma0=2e4, sigma1=50.0)
    write_robot_copy(src, tmp_path / "out.toml", "j1", law)
    assert load_robot(tmp_path / "out.toml").joint("j1").friction.law == law


def test_write_back_never_overwrites_the_robot_file(cli, log_csv, configs, tmp_path):
    src = tmp_path / "scara.toml"
    shutil.copy(configs / "scara.toml", src)
    shutil.copy(configs / "scara.urdf", tmp_path / "scara.urdf")
    before = src.read_text()
    r = cli("identify", "fit", log_csv, "--law", "stribeck", "--joint", "j1", "--config", src, "--out", src, "--force")
    one_line_error(r, "will not overwrite the robot's own TOML")
    assert src.read_text() == before
    r = cli("identify", "fit", log_csv, "--law", "stribeck", "--joint", "j1", "--config", src, "--out", tmp_path / "copy.toml")
    assert r.code == 0, r.err
    assert load_robot(tmp_path / "copy.toml").joint("j1").friction.law.fs == pytest.approx(1.1, rel=0.01)


def test_bad_inputs_are_one_line_errors(cli, log_csv, tmp_path, configs):
    """Missing columns, NaNs, missing reverse runs, too few speeds, lugre without presliding, bad options."""
    cols = tmp_path / "cols.csv"
    cols.write_text("t,q,tau\n" + "\n".join(f"{i * 0.001},{i * 1e-4},0.5" for i in range(20)) + "\n")
    one_line_error(cli("identify", "fit", cols, "--law", "stribeck", "--joint", "j1"), "cols.csv", "missing column dq")
    nan = tmp_path / "nan.csv"
    lines = log_csv.read_text().splitlines()
    lines[7] = ",".join(["nan"] + lines[7].split(",")[1:])
    nan.write_text("\n".join(lines) + "\n")
    one_line_error(cli("identify", "fit", nan, "--law", "stribeck", "--joint", "j1"), "nan.csv", "t", "non-finite value on line 8")
    forward = tmp_path / "forward.csv"
    data = np.loadtxt(log_csv, delimiter=",", skiprows=1)
    header = log_csv.read_text().splitlines()[0].split(",")
    keep = data[:, header.index("dq_ref")] >= 0
    from mbctl.identification.logs import read_constant_speed_log

    log = read_constant_speed_log(log_csv)
    write_constant_speed_log(forward, ConstantSpeedLog(t=log.t[keep], q=log.q[keep], dq=log.dq[keep], tau=log.tau[keep], dq_ref=log.dq_ref[keep]))
    one_line_error(cli("identify", "fit", forward, "--law", "stribeck", "--joint", "j1"), "forward.csv", "no reverse runs")
    few = synthetic_csv(tmp_path / "few.csv", speeds=[0.01, 0.05, 0.2])
    one_line_error(cli("identify", "fit", few, "--law", "stribeck", "--joint", "j1"), "few.csv", "only 3 speeds", "at least 6")
    one_line_error(cli("identify", "fit", log_csv, "--law", "lugre", "--joint", "j1"), "--presliding", "sigma0")
    one_line_error(cli("identify", "fit", tmp_path / "none.csv", "--law", "stribeck", "--joint", "j1"), "none.csv", "file not found")
    one_line_error(cli("identify", "fit", log_csv, "--law", "stribeck", "--joint", "j1", "--delta", "zero"), "--delta")
    one_line_error(cli("identify", "fit", log_csv, "--law", "stribeck", "--joint", "j1", "--asymmetric"), "tau_g")
    one_line_error(cli("identify", "run", configs / "friction_rig.toml", "--joint", "j9", "--out", tmp_path / "x.csv"), "--joint", "j9")
    one_line_error(cli("identify", "run", configs / "friction_rig.toml", "--joint", "j1", "--range=-2,0.5", "--out", tmp_path / "x.csv"), "position limits")
    one_line_error(cli("identify", "run", configs / "friction_rig.toml", "--joint", "j1", "--speeds", "0.1,5", "--out", tmp_path / "x.csv"), "velocity limit")
    one_line_error(cli("identify", "run", configs / "friction_rig.toml", "--joint", "j1"), "--out")
    typo = tmp_path / "typo.toml"
    shutil.copy(configs / "friction_rig.urdf", tmp_path / "friction_rig.urdf")
    typo.write_text('urdf = "friction_rig.urdf"\n[identification]\nsetle_s = 0.1\n')
    one_line_error(cli("identify", "run", typo, "--joint", "j1", "--out", tmp_path / "x.csv"), "typo.toml", "identification.setle_s", "did you mean 'settle_s'")
    assert not (tmp_path / "x.csv").exists()


@pytest.mark.slow
def test_run_then_fit_through_the_simulated_plant(cli, configs, tmp_path):
    """identify run (lock-step, constant speed and presliding) then identify fit --law lugre:
    the static parameters, sigma0 (10 %) and the break-away torque (5 %) of the LuGre truth."""
    log, pre = tmp_path / "LOG.csv", tmp_path / "PRE.csv"
    r = cli("identify", "run", configs / "friction_rig.toml", "--joint", "j1", "--lockstep", "--max-leg", "1", "--count", "15", "--out", log, "--presliding", pre)
    assert r.code == 0, r.err
    header = log.read_text().splitlines()[0]
    assert header == "t,q,dq,tau,dq_ref,tau_g" and pre.read_text().splitlines()[0] == "t,q,dq,tau,test"
    out = tmp_path / "rig_identified.toml"
    r = cli("identify", "fit", log, "--law", "lugre", "--joint", "j1", "--presliding", pre, "--config", configs / "friction_rig.toml", "--out", out, "--summary", tmp_path / "s.json", "--plot", tmp_path / "fit.png")
    assert r.code == 0, r.err
    law = load_robot(out).joint("j1").friction.law
    truth = LuGre(fc=0.8, fs=1.1, vs=0.05, fv=0.12, sigma0=2.0e4, sigma1=50.0)
    for k, tol in (("fc", 0.005), ("fs", 0.005), ("vs", 0.02), ("fv", 0.03), ("sigma0", 0.10)):
        assert getattr(law, k) == pytest.approx(getattr(truth, k), rel=tol), k
    s = json.loads((tmp_path / "s.json").read_text())["presliding"]
    assert s["breakaway"]["value"] == pytest.approx(1.1, rel=0.05)
    if s["sigma1_identified"]:
        assert s["sigma1_stderr"] > 0 and law.sigma1 == pytest.approx(50.0, rel=0.1)
    else:
        assert s["sigma1_reason"]
    # the gravity profile is the rig's m*g*l*cos(q), to 0.4 % of m*g*l (residual transients at the ends)
    g = json.loads((tmp_path / "s.json").read_text())["gravity_profile"]
    err = np.array(g["tau"]) - 2.0 * 9.81 * 0.4 * np.cos(g["q"])
    assert np.abs(err).max() < 0.03 and np.sqrt(np.mean(err**2)) < 0.01
