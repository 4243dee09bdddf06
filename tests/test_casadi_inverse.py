"""The CasADi engine of feed-forward gives the pinocchio engine's numbers, for every friction law."""

from __future__ import annotations

import numpy as np
import pytest

from mbctl.ctrl.casadi_inverse import CasadiInverseDynamics
from mbctl.ctrl.trajectory import constant_acceleration, quintic_rest_to_rest
from mbctl.dynamics.friction.laws import CoulombViscous, JointFriction, LuGre, Stribeck
from mbctl.dynamics.friction.loads import Bearing3D, Journal2D
from mbctl.dynamics.inverse import InverseDynamics
from mbctl.errors import DataError
from mbctl.fileio import read_csv

FIELDS = ("tau", "tau_rigid", "tau_friction", "joint_wrench", "normal_load", "friction_state")

LAWS = {
    "coulomb-viscous": CoulombViscous(fc=0.01, fv=0.02),
    "stribeck": Stribeck(fc=0.005, fs=0.05, vs=0.03, fv=0.01, delta=2.0),
    "lugre": LuGre(fc=0.005, fs=0.05, vs=0.03, fv=0.01, sigma0=1e3, sigma1=1.0),
}
LOADS = {"none": None, "bearing3d": Bearing3D(rb=0.05, rp=0.01, rn=0.015), "journal2d": Journal2D(diameter=0.03)}


def _assert_same(a, b) -> None:
    for field in FIELDS:
        x, y = getattr(a, field), getattr(b, field)
        assert (x is None) == (y is None), field
        if x is not None:
            scale = max(1.0, float(np.nanmax(np.abs(x))))
            assert np.allclose(x, y, rtol=0, atol=1e-12 * scale, equal_nan=True), field


@pytest.mark.parametrize("law", sorted(LAWS))
@pytest.mark.parametrize("load", sorted(LOADS))
@pytest.mark.parametrize("lugre", ["dynamic", "steady"])
def test_engines_agree_for_every_law_and_load_model(robots, law, load, lugre):
    """tree5 accelerating from rest with the law (and load model) on every joint, reactions included."""
    base = robots["tree5"]
    robot = base.with_friction({j.name: JointFriction(LAWS[law], LOADS[load]) for j in base.joints})
    traj = constant_acceleration(np.zeros(5), np.full(5, 0.2), 1.0, 200.0, robot.joint_names)
    args = (traj.q, traj.dq, traj.ddq, traj.t)
    reference = InverseDynamics(robot, reactions=True, lugre=lugre)(*args)
    _assert_same(CasadiInverseDynamics(robot, reactions=True, lugre=lugre)(*args), reference)
    if law == "lugre" and lugre == "dynamic":
        assert reference.friction_state is not None and np.nanmax(np.abs(reference.friction_state)) > 0


@pytest.mark.parametrize("name", ["scara", "ur5"])
def test_engines_agree_on_the_bundled_configs(robots, name):
    """scara (LuGre state, prismatic joint) and ur5 along quintic moves, without reactions."""
    robot = robots[name]
    rng = np.random.default_rng(0)
    traj = quintic_rest_to_rest(rng.uniform(-0.3, 0.3, (3, robot.nv)), [0.7, 0.5], 300.0, robot.joint_names)
    args = (traj.q, traj.dq, traj.ddq, traj.t)
    _assert_same(CasadiInverseDynamics(robot, threads=2, chunk=50)(*args), InverseDynamics(robot)(*args))


def test_progress_and_errors_match_the_pinocchio_engine(robots):
    robot = robots["scara"]
    calls = []
    q = np.zeros((30, 4))
    CasadiInverseDynamics(robot, chunk=7)(q, q, q, np.arange(30.0), progress=lambda d, n: calls.append((d, n)))
    assert calls[-1] == (30, 30) and len(calls) == 5
    with pytest.raises(DataError, match="sample times"):
        CasadiInverseDynamics(robot)(q, q, q)
    with pytest.raises(DataError, match="shape"):
        CasadiInverseDynamics(robot)(q[:, :3], q, q)


@pytest.mark.parametrize(
    "name, options",
    [("scara", ["--reactions"]), ("tree5", ["--reactions"]), ("scara", ["--lugre", "steady", "--friction", "stribeck"])],
)
def test_cli_engine_casadi_writes_the_same_csv(cli, configs, tmp_path, name, options):
    """`mbctl feedforward --engine casadi` writes the pinocchio engine's table (to round-off)."""
    config = configs / f"{name}.toml"
    traj = tmp_path / "traj.csv"
    if name == "tree5":
        r = cli("trajectory", "accel", config, "--acceleration", "0.2", "--duration", "2", "--rate", "200", "--out", traj)
    else:
        r = cli(
            "trajectory",
            "quintic",
            config,
            "--waypoints",
            "0,0,0,0; 0.5,1.0,-0.4,0.05; 0,0,0,0",
            "--durations",
            "1,1.2",
            "--rate",
            "200",
            "--out",
            traj,
        )
    assert r.code == 0, r.err
    tables = {}
    for engine in ("pinocchio", "casadi"):
        out = tmp_path / f"{engine}.csv"
        r = cli("feedforward", config, "--trajectory", traj, "--out", out, "--engine", engine, *options)
        assert r.code == 0, r.err
        tables[engine] = read_csv(out)
    a, b = tables["pinocchio"], tables["casadi"]
    assert a.header == b.header
    scale = np.maximum(np.abs(a.data).max(axis=0), 1.0)
    assert np.all(np.abs(a.data - b.data) <= 1e-12 * scale)
