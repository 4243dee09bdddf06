"""The seed-000 open-chain manipulator (configs/olkc5.toml): structure, energy, variants."""

from __future__ import annotations

import json

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.variants import (
    Variant,
    _time_mean,
    available_variants,
    rms,
    run_variant,
)


@pytest.fixture(scope="module")
def olkc(configs):
    return load_robot(configs / "olkc5.toml")


def test_coordinates_follow_the_paper(olkc):
    """Six base coordinates, j1, j2, the flexible link's RFE coordinates, j3, j4, j5."""
    rfe = [f"upper_arm_sde{k}_{d}" for k in range(1, 5) for d in ("twist", "bend_y", "bend_z")]
    assert olkc.joint_names == ("base_x", "base_y", "base_z", "base_rx", "base_ry", "base_rz", "j1", "j2", *rfe, "j3", "j4", "j5")
    assert olkc.actuated_names == ("j1", "j2", "j3", "j4", "j5")
    assert [olkc.joint(n).kind for n in ("j4", "j5")] == ["prismatic", "prismatic"]


def test_eight_variants_are_available(olkc):
    """Support rigid/flexible x link rigid/flexible x frictionless/friction."""
    names = [v.name for v in available_variants(olkc)]
    assert len(names) == 8 and "rigid-rigid-frictionless" in names and "flexible-flexible-friction" in names
    assert Variant.parse("flexible-rigid-friction") == Variant("flexible", "rigid", "config")


def test_rms_is_the_root_mean_square_over_time():
    """RMS of sin over whole periods is 1/sqrt(2); of a constant, the constant."""
    t = np.linspace(0.0, 2.0, 20001)
    assert rms(t, np.sin(2 * np.pi * t)) == pytest.approx(1 / np.sqrt(2), rel=1e-7)
    assert np.allclose(rms(t, np.full((len(t), 2), [3.0, -2.0])), [3.0, 2.0])
    assert _time_mean(t, 5.0 + np.sin(2 * np.pi * t)) == pytest.approx(5.0, rel=1e-12)


def _energy_run(olkc, duration: float):
    robot = olkc.with_friction({n: None for n in olkc.actuated_names})
    elastic = ElasticForces(robot, damping=False)
    system = ConstrainedDynamics(robot, [], forces=[elastic])
    q0, dq0 = np.zeros(robot.nv), np.zeros(robot.nv)
    for name, q, dq in (("j1", -0.1, 0.4), ("j2", -0.3, -0.2), ("j3", 0.75, 0.3), ("j4", 0.0, 0.1), ("j5", 0.0, -0.1)):
        q0[robot.joint(name).idx_v], dq0[robot.joint(name).idx_v] = q, dq
    # elastic coordinates start undeformed: base and link spring into their sag and vibrate
    run = simulate(system, q0, dq0, duration, step=1e-5, output_step=1e-3)
    model, data = robot.model, robot.create_data()

    def energy(q, dq):
        qp = robot.configuration(q)
        return pin.computeKineticEnergy(model, data, qp, dq) + pin.computePotentialEnergy(model, data, qp) + elastic.potential_energy(q)

    E = np.array([energy(q, dq) for q, dq in zip(run.q, run.dq)])
    kinetic0 = pin.computeKineticEnergy(model, data, robot.configuration(q0), dq0)
    moved = np.abs(run.q[:, [robot.joint(n).idx_v for n in robot.elastic_names]]).max()
    return E, kinetic0, moved


def test_energy_is_conserved_without_damping_short(olkc):
    """No dampers, friction or constraints, 50 ms at RK4 1e-5 s: T + V_gravity + V_springs
    stays constant to 1e-9 of the initial kinetic energy."""
    E, kinetic0, moved = _energy_run(olkc, 0.05)
    assert moved > 1e-4  # the springs did work
    assert np.abs(E - E[0]).max() < 1e-9 * kinetic0


@pytest.mark.slow
def test_energy_is_conserved_without_damping_over_one_second(olkc):
    """The acceptance run: 1 s, relative drift (to the initial kinetic energy, ~0.55 J, and
    a fortiori to the total) below 1e-6."""
    E, kinetic0, moved = _energy_run(olkc, 1.0)
    assert moved > 1e-3
    assert np.abs(E - E[0]).max() < 1e-6 * kinetic0


def test_variant_run_reports_its_comparison_quantities(configs):
    """A short flexible-flexible-friction run (ROS2, 2 ms): joint forces carry the arm's
    weight, the violation decays from the off-rectangle start, elastic DOF stay unactuated."""
    run = run_variant(configs / "olkc5.toml", Variant("flexible", "flexible", "config"), integrator="ros2", step=2e-3, duration=0.4)
    assert run.joints == ("j1", "j2", "j3", "j4", "j5")
    assert run.q.shape == run.joint_force.shape == run.drive_force.shape == (len(run.result.t), 5)
    carried = sum(i.mass for i in run.robot.model.inertias[run.robot.joint("j1").id :]) * 9.81
    assert np.median(run.joint_force[:, 0]) == pytest.approx(carried, rel=0.05)  # the column carries the arm
    assert run.violation[0] > 5e-3 and run.violation[-1] < run.violation[0] * np.exp(-5 * 0.4) * 1.2
    assert run.tool.shape == (len(run.result.t), 3) and run.tool_axes == ("x", "y", "z")


def test_variants_command_writes_one_png_per_quantity_and_the_rms_table(cli, configs, tmp_path):
    """mbctl variants on two variants: six PNGs (deflection.png for the flexible link), a JSON table with RMS per joint, a 3-D page per variant."""
    res = cli(
        "variants", configs / "olkc5.toml", "--out-dir", tmp_path, "--variants", "rigid-rigid-frictionless,flexible-flexible-friction",
        "--integrator", "ros2", "--step", "2e-3", "--duration", "0.3", "--animate", "--magnify", "10",
    )
    assert res.code == 0, res.err
    assert "elastic deflections drawn x10" in (tmp_path / "flexible-flexible-friction.html").read_text()
    assert "MeshCat.Viewer" in (tmp_path / "rigid-rigid-frictionless.html").read_text()
    for name in ("paths.png", "joints.png", "forces.png", "rms.png", "violation.png", "deflection.png"):
        assert (tmp_path / name).stat().st_size > 1000
    table = json.loads((tmp_path / "rms.json").read_text())
    assert set(table["variants"]) == {"rigid-rigid-frictionless", "flexible-flexible-friction"}
    assert set(table["variants"]["rigid-rigid-frictionless"]["joint_force_rms_N"]) == {"j1", "j2", "j3", "j4", "j5"}
    assert "rigid-rigid-frictionless" in res.out


def test_variants_command_refuses_a_variant_the_file_cannot_make(cli, configs, tmp_path):
    """The SCARA has no flexible parts: asking for one is a one-line error, nothing written."""
    res = cli("variants", configs / "scara.toml", "--out-dir", tmp_path, "--variants", "flexible-rigid-frictionless")
    assert res.code == 2
    assert "--variants" in res.err and "not available" in res.err and len(res.err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["soft-rigid-friction", "rigid-flexible", "rigid-rigid-lugre"])
def test_variants_command_refuses_a_malformed_variant_name(cli, configs, tmp_path, name):
    res = cli("variants", configs / "olkc5.toml", "--out-dir", tmp_path, "--variants", name)
    assert res.code == 2
    assert "--variants" in res.err and "unknown variant" in res.err and len(res.err.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())


def test_variants_command_creates_its_output_directory(cli, tmp_path):
    """--out-dir that does not exist yet is created (as sweep --out is) and holds the table; one whose parent
    is missing, or a file, is refused in one line (exit 2), and a refused request creates nothing."""
    res = cli("variants", "fourbar", "--out-dir", tmp_path / "new", "--duration", "0.01")
    assert res.code == 0, res.err
    assert set(json.loads((tmp_path / "new" / "rms.json").read_text())["variants"]) == {"rigid-rigid-frictionless"}
    res = cli("variants", "fourbar", "--out-dir", tmp_path / "refused", "--variants", "flexible-rigid-frictionless")
    assert res.code == 2 and not (tmp_path / "refused").exists()
    (tmp_path / "file").write_text("")
    for out, reason in ((tmp_path / "missing" / "new", "output directory does not exist"), (tmp_path / "file", "is a file, not a directory")):
        for command in (("variants", "fourbar"), ("flexfeed", "rrr3_flexible")):
            res = cli(*command, "--out-dir", out, "--duration", "0.01")
            assert res.code == 2 and reason in res.err and len(res.err.strip().splitlines()) == 1, res.err
    assert not (tmp_path / "missing").exists()
