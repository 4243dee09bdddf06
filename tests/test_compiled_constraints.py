"""Every constraint kind, solver and singularity mode of the compiled core against the interpreted reference.

The compiled diagnostics (one evaluation) must give the accelerations, constraint forces,
multipliers (as the reference reports them: zeros on eliminated rows, NaN for the null-space
solver), violations and normal loads of ``ConstrainedDynamics.evaluate``; short runs must
follow the interpreted runs; and every bundled robot runs on the compiled path.
"""

from __future__ import annotations

import dataclasses

import casadi as ca
import numpy as np
import pytest

from mbctl.bundled import bundled_names
from mbctl.config.simulation import SingularityPolicy
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.kinds import FrameOrientation, FramePosition, FrameVelocity, JointLinear
from mbctl.dynamics.constraints.targets import ExpressionTarget
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.simulation.compiled import diagnostics_function, sample_evaluator, unsupported
from mbctl.dynamics.simulation.compiled_constraints import symmetric_eigenvalues
from mbctl.dynamics.simulation.integrate import simulate
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
from mbctl.dynamics.simulation.structure import parameter_values
from mbctl.errors import ConfigError

FIELDS = ("ddq", "applied", "force", "lam", "phi", "dphi", "normal_loads")


def bundled_system(name: str, singularity: SingularityPolicy | None = None, **overrides):
    robot = load_robot(name)
    setup = simulation_setup(robot)
    if singularity is not None:
        setup = dataclasses.replace(setup, singularity=singularity)
    system = build_dynamics(robot, setup, **overrides)
    q0, dq0 = initial_state(robot, setup, system)
    system.initialize(0.0, q0, dq0)
    return system, q0, dq0


def compiled_state(function: ca.Function, system: ConstrainedDynamics, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray) -> dict:
    nv = system.robot.nv
    out = [np.array(v, dtype=float).ravel() for v in function(t, np.concatenate([q, dq, s]), parameter_values(system))]
    xdot, applied, force, lam, phi, dphi, _, _, loads, _, _, singular = out
    return {
        "ddq": xdot[nv : 2 * nv],
        "applied": applied,
        "force": force,
        "lam": lam,
        "phi": phi,
        "dphi": dphi,
        "normal_loads": loads,
        "singular": bool(singular[0]),
    }


def assert_agrees(system: ConstrainedDynamics, states, tolerance: float = 1e-9) -> list:
    """Compiled diagnostics against ``evaluate`` at ``(t, q, dq)``; agreement to ``tolerance``
    relative to the largest entry (and 1): different factorizations of the same equations
    differ by round-off times the conditioning, 1e-12 here."""
    function = diagnostics_function(system)
    s0 = system.initial_state()
    refs = []
    for t, q, dq in states:
        ref = system.evaluate(t, q, dq, s0)
        got = compiled_state(function, system, t, q, dq, s0)
        for field in FIELDS:
            a, b = got[field], getattr(ref, field)
            if field == "lam" and system.solver == "nullspace":
                assert np.isnan(b).all()  # the reference has none; the sample evaluator reports NaN too
                continue
            scale = max(1.0, float(np.nanmax(np.abs(b)))) if b.size else 1.0
            assert a.shape == b.shape and np.allclose(a, b, rtol=0, atol=tolerance * scale, equal_nan=True), (field, np.nanmax(np.abs(a - b)) / scale)
        assert got["singular"] == ref.singular
        refs.append(ref)
    return refs


def manifold_states(system: ConstrainedDynamics, q0: np.ndarray, dq0: np.ndarray, offset: float = 1e-9, count: int = 3):
    """States near the start: assembled onto the constraints at t, then ``q`` moved by ``offset``
    (rad, m) so that the Baumgarte terms act. Redundant rows stay consistent to ``offset``."""
    rng = np.random.default_rng(11)
    out = []
    for k in range(count):
        t = 0.1 + 0.37 * k
        q = q0 + 2e-3 * rng.standard_normal(len(q0))
        dq = dq0 + 0.05 * rng.standard_normal(len(q0))
        q, dq = system.assemble(t, q, dq)
        out.append((t, q + offset * rng.standard_normal(len(q0)), dq))
    return out


@pytest.mark.parametrize(
    ("name", "overrides"),
    [
        ("parallelogram", {}),  # Lagrange, the redundant row eliminated by QR at the start
        ("parallelogram", {"eliminate": ("loop_c.x",)}),  # Lagrange, the row named
        ("parallelogram", {"solver": "udwadia-kalaba"}),  # pseudo-inverse of the rank-deficient rows
        ("parallelogram", {"solver": "nullspace"}),  # independent coordinates by QR at every evaluation
        ("parallelogram", {"solver": "nullspace", "independent": ("crank_a_joint",)}),
        ("mobile", {}),  # frame_offset drive, knife edges (velocity level), Lagrange with 2 rows eliminated
        ("mobile", {"solver": "nullspace"}),
        ("mobile", {"solver": "udwadia-kalaba"}),
        ("threeloop", {}),  # load-dependent friction in closed loops (Lagrange)
        ("threeloop", {"solver": "udwadia-kalaba"}),
        ("fourbar", {"solver": "lagrange"}),
    ],
)
def test_every_solver_on_the_bundled_mechanisms(name, overrides):
    system, q0, dq0 = bundled_system(name, **overrides)
    assert unsupported(system) == ""
    assert_agrees(system, manifold_states(system, q0, dq0))


def test_redundant_rows_off_the_manifold_are_the_least_squares_compromise():
    """Off the manifold the Baumgarte terms of redundant rows disagree; the compiled
    pseudo-inverse takes the same least-squares compromise as the reference while the
    reference still sees the rank (offsets below its rank tolerance's reach)."""
    system, q0, dq0 = bundled_system("parallelogram", solver="udwadia-kalaba")
    assert system.rank < system.constraints.m
    assert_agrees(system, manifold_states(system, q0, dq0, offset=1e-11), tolerance=1e-8)


def scara_damped():
    policy = SingularityPolicy(tolerance=5e-3, action="damped", damping=0.02)
    robot = load_robot("scara").with_friction({j: None for j in ("j1", "j2", "j3", "j4")})
    setup = dataclasses.replace(simulation_setup(robot), singularity=policy)
    return robot, build_dynamics(robot, setup)


def test_the_damped_mode_switches_where_the_reference_does():
    """The SCARA's elbow through stretched: damped least squares below the singular-value
    tolerance, the regular solution above, both as the reference."""
    robot, system = scara_damped()
    q0 = np.radians([30.0, 55.0, 24.0, 0.0])
    dq0 = np.array([-0.157, 0.0001, 0.157, 0.0195])
    system.initialize(0.0, q0, dq0)
    states = [(0.2 * k, np.array([0.3, elbow, 0.1, 0.01]), dq0) for k, elbow in enumerate((0.9, 0.3, 0.04, 0.01, -0.02))]
    refs = assert_agrees(system, states)
    assert {r.singular for r in refs} == {True, False}


def test_orientation_and_world_velocity_rows():
    """Kinds no bundled robot uses: Euler angles of a frame (programmed) and a world-axes
    velocity row, on the UR5 with Baumgarte terms acting (the state is off the targets)."""
    robot = load_robot("ur5")
    frame = robot.model.frames[-1].name
    constraints = [
        FrameOrientation(robot, "tool", frame, ["roll", "yaw"], ExpressionTarget(["0.3 + 0.1*sin(t)", "-0.2*t"])),
        FramePosition(robot, "height", frame, ["z"], ExpressionTarget(["0.4 + 0.02*cos(2*t)"])),
        FrameVelocity(robot, "slide", frame, ["x", "y"], ExpressionTarget(["0.05", "0.1*t"]), expressed="world"),
        JointLinear(robot, "sum", {robot.joints[0].name: 1.0, robot.joints[1].name: 0.5}, ExpressionTarget(["0.2*t"])),
    ]
    setup = simulation_setup(robot)
    rng = np.random.default_rng(5)
    for solver in ("udwadia-kalaba", "lagrange", "nullspace"):
        system = ConstrainedDynamics(robot, constraints, solver=solver, baumgarte=setup.baumgarte)
        q = np.array([0.3, -1.0, 1.2, -0.5, 0.8, 0.2])
        system.initialize(0.0, q, np.zeros(6))
        assert_agrees(system, [(0.3 * k, q + 0.05 * rng.standard_normal(6), 0.3 * rng.standard_normal(6)) for k in range(3)])


def test_the_damped_mode_needs_the_udwadia_kalaba_solver():
    robot = load_robot("scara")
    with pytest.raises(ConfigError, match="damped"):
        build_dynamics(robot, dataclasses.replace(simulation_setup(robot), singularity=SingularityPolicy(action="damped")), solver="lagrange")


def test_symmetric_eigenvalues_are_numpys():
    rng = np.random.default_rng(2)
    R = rng.standard_normal((6, 4))
    G = R @ R.T  # rank 4: two zero eigenvalues
    got = np.array(ca.evalf(symmetric_eigenvalues(ca.SX(G)))).ravel()
    assert np.allclose(got, np.sort(np.linalg.eigvalsh(G))[::-1], rtol=0, atol=1e-12 * np.abs(G).max())


@pytest.mark.parametrize(("name", "duration", "step"), [("parallelogram", 0.05, 1e-3), ("mobile", 0.2, 0.02), ("threeloop", 0.05, 1e-3)])
def test_a_compiled_run_follows_the_interpreted_run(name, duration, step):
    """The mechanisms that fell back before: compiled and interpreted runs with each one's own
    integrator; agreement to 1e-7 relative (RK4: round-off; the mobile's rk45: its tolerance 1e-9)."""
    system, q0, dq0 = bundled_system(name)
    setup = simulation_setup(system.robot)
    runs = {
        b: simulate(system, q0, dq0, duration, integrator=setup.integrator, step=step, rtol=setup.rtol, atol=setup.atol, backend=b)
        for b in ("compiled", "python")
    }
    assert runs["compiled"].backend == "compiled"
    for field in ("q", "dq", "ddq", "phi", "lam", "tau_c", "tau_applied"):
        a, b = getattr(runs["compiled"], field), getattr(runs["python"], field)
        scale = max(1.0, float(np.nanmax(np.abs(b))))
        assert a.shape == b.shape and np.allclose(a, b, rtol=0, atol=1e-7 * scale, equal_nan=True), (field, np.nanmax(np.abs(a - b)) / scale)


@pytest.mark.parametrize("name", [n for n in bundled_names() if n != "rrr3_flexible"])  # the FEM model is not a pinocchio model
def test_every_bundled_robot_runs_compiled(name):
    """Three steps (1 ms at most) of each bundled robot's own integrator, on the compiled core."""
    system, q0, dq0 = bundled_system(name)
    assert unsupported(system) == ""
    setup = simulation_setup(system.robot)
    step = min(setup.step, 1e-3)
    run = simulate(system, q0, dq0, 3 * step, integrator=setup.integrator, step=step, rtol=setup.rtol, atol=setup.atol, backend="compiled")
    assert run.backend == "compiled" and np.isfinite(run.q).all()


def test_the_sample_evaluator_reports_the_damped_mode():
    robot, system = scara_damped()
    q = np.array([0.3, 0.01, 0.1, 0.01])
    system.initialize(0.0, np.array([0.3, 0.9, 0.1, 0.0]), np.zeros(4))
    state = sample_evaluator(system)(0.0, np.concatenate([q, np.zeros(4), system.initial_state()]))
    assert state.singular and state.singular == system.evaluate(0.0, q, np.zeros(4)).singular


def test_expression_targets_keep_each_components_derivatives():
    """A constant component has structurally zero derivatives; the others' must not shift into its place."""
    g, dg, ddg = ExpressionTarget(["0.1", "0.2*t", "0.5*t**2"])(1.0)
    assert np.allclose(g, [0.1, 0.2, 0.5]) and np.allclose(dg, [0.0, 0.2, 1.0]) and np.allclose(ddg, [0.0, 0.0, 1.0])


def test_a_damped_run_through_the_singular_configuration_follows_the_interpreted_run():
    """The frictionless SCARA from the paper's start reaches the stretched arm at ~0.13 s; with the
    damped mode both cores run through it, switching at the same steps: 0.2 s of RK4 at 1e-4 s
    agree to 1e-7 relative (round-off, amplified near the singular configuration)."""
    robot, _ = scara_damped()
    q0 = np.radians([30.0, 55.0, 24.0, 0.0])
    dq0 = np.array([-0.157, 0.0001, 0.157, 0.0195])
    runs = {}
    for backend in ("compiled", "python"):
        _, system = scara_damped()
        runs[backend] = simulate(system, q0, dq0, 0.2, step=1e-4, output_step=1e-3, backend=backend)
    assert runs["compiled"].backend == "compiled"
    assert runs["python"].singular_samples > 0 and runs["compiled"].singular_samples == runs["python"].singular_samples
    for field in ("q", "dq", "ddq", "lam", "tau_c"):
        a, b = getattr(runs["compiled"], field), getattr(runs["python"], field)
        scale = max(1.0, float(np.abs(b).max()))
        assert np.allclose(a, b, rtol=0, atol=1e-7 * scale), (field, np.abs(a - b).max() / scale)


LOADED_LUGRE = {  # journal2d: coefficient-scaled LuGre (fc, fs dimensionless; sigma0 1/rad, 1/m; sigma1 s/rad, s/m)
    "psi11": 'law = "lugre"\nfc = 0.08\nfs = 0.12\nvs = 0.01\nfv = 0.02\nsigma0 = 3200.0\nsigma1 = 0.5\nload = { model = "journal2d", diameter = 0.03 }\n',
    "x12": 'law = "lugre"\nfc = 0.08\nfs = 0.12\nvs = 0.002\nfv = 10.0\nsigma0 = 800.0\nsigma1 = 0.5\nload = { model = "journal2d", diameter = 0.02 }\n',
    "z21": 'law = "lugre"\nfc = 0.08\nfs = 0.12\nvs = 0.002\nfv = 3.0\nsigma0 = 5300.0\nsigma1 = 0.5\nload = { model = "journal2d", diameter = 0.02 }\n',
}


def test_load_dependent_lugre_in_the_rpsup_loop(configs, tmp_path):
    """The RPSUP (flexible base, RFE coupler, a 3D revolute cut) with load-dependent LuGre on its
    drives and guide: the normal loads include the loop-closure forces on the bodies."""
    text = (configs / "rpsup.toml").read_text().replace('urdf = "rpsup.urdf"', f'urdf = "{configs / "rpsup.urdf"}"')
    for joint, body in LOADED_LUGRE.items():
        start = text.index(f"[joints.{joint}.friction]")
        end = text.index("\n[", start + 1)
        text = text[:start] + f"[joints.{joint}.friction]\n" + body + text[end:]
    path = tmp_path / "rpsup_loaded.toml"
    path.write_text(text)
    robot = load_robot(path)
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    system.initialize(0.0, q0, dq0)
    assert any(f.reaction_joints for f in system.forces) and unsupported(system) == ""
    refs = assert_agrees(system, manifold_states(system, q0, dq0))
    assert min(np.abs(r.normal_loads).max() for r in refs) > 10.0  # loaded joints carry tens of N
