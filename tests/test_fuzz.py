"""Property-based tests of every reader: random and mutated input ends in a documented error, never a crash.

Readers may raise only :class:`~mbctl.errors.InputError` (ConfigError for robot
descriptions, DataError for CSV files); anything else escaping is a bug. Round trips
(write, then read) return the same numbers. Example counts are bounded so the
suite stays fast; the Protocol 2.0 packet decoder has its own in test_protocol2.py.
"""

from __future__ import annotations

import json
import math
import tempfile
import warnings
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from mbctl.bundled import bundled_config
from mbctl.ctrl.trajectory import Trajectory, read_trajectory, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.model.validate import SuspiciousModelWarning
from mbctl.errors import InputError
from mbctl.identification.logs import ConstantSpeedLog, read_constant_speed_log, write_constant_speed_log

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
SCARA_TOML = bundled_config("scara").read_text()
SCARA_URDF = bundled_config("scara").with_name("scara.urdf").read_text()

# ---- TOML: random documents over the robot description's own vocabulary -------------------------

KEYS = [
    "urdf", "gravity", "joints", "j1", "j2", "j3", "j4", "jx", "limits", "position", "velocity", "effort", "armature", "actuated",
    "friction", "law", "fc", "fs", "vs", "fv", "delta", "sigma0", "sigma1", "sigma2", "load", "model", "rb", "rp", "rn",
    "flexible", "link1", "elements", "E", "G", "density", "base", "support", "supports", "name", "stiffness", "damping",
    "control", "computed-torque", "pd", "kp", "kd", "plant", "substeps", "seed", "encoder_counts", "latency_cycles",
    "drives", "port", "baud", "ids", "simulation", "solver", "integrator", "step", "duration", "constraints", "kind", "frame",
    "axes", "target", "identification", "speeds", "stribeck", "lugre", "coulomb-viscous", "none", "bearing3d",
]  # fmt: skip
scalars = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(2**40), 2**40),
    st.booleans(),
    st.sampled_from(KEYS),
    st.text(max_size=8),
)
values = st.recursive(
    scalars,
    lambda children: st.one_of(st.lists(children, max_size=4), st.dictionaries(st.sampled_from(KEYS), children, max_size=4)),
    max_leaves=12,
)


def toml_value(value) -> str:
    """A TOML literal (inline tables for nesting): enough of TOML to write what ``values`` draws."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    return "{" + ", ".join(f'"{k}" = {toml_value(v)}' for k, v in value.items()) + "}"


def load_quietly(path: Path) -> None:
    """Load a robot; InputError is the only allowed failure."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SuspiciousModelWarning)
        try:
            load_robot(path)
        except InputError:
            pass


@FUZZ
@given(sections=st.dictionaries(st.sampled_from(KEYS), values, max_size=5))
def test_random_robot_descriptions_fail_cleanly(sections):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "scara.urdf").write_text(SCARA_URDF)
        lines = ['urdf = "scara.urdf"'] + [f'"{k}" = {toml_value(v)}' for k, v in sections.items() if k != "urdf"]
        (Path(tmp) / "robot.toml").write_text("\n".join(lines) + "\n")
        load_quietly(Path(tmp) / "robot.toml")


@FUZZ
@given(data=st.data())
def test_mutated_bundled_description_fails_cleanly(data):
    """The SCARA's TOML with one line cut, swapped or garbled."""
    lines = SCARA_TOML.splitlines()
    i = data.draw(st.integers(0, len(lines) - 1))
    action = data.draw(st.sampled_from(["drop", "duplicate", "truncate", "replace-value"]))
    if action == "drop":
        del lines[i]
    elif action == "duplicate":
        lines.insert(i, lines[i])
    elif action == "truncate":
        lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
    elif "=" in lines[i]:
        lines[i] = lines[i].split("=")[0] + "= " + toml_value(data.draw(values))
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "scara.urdf").write_text(SCARA_URDF)
        (Path(tmp) / "scara.toml").write_text("\n".join(lines) + "\n")
        load_quietly(Path(tmp) / "scara.toml")


@FUZZ
@given(raw=st.binary(max_size=200))
def test_random_bytes_as_a_robot_description_fail_cleanly(raw):
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "robot.toml").write_bytes(raw)
        load_quietly(Path(tmp) / "robot.toml")


# ---- URDF: random inertial and joint numbers --------------------------------------------------

number = st.one_of(st.floats(allow_nan=True, allow_infinity=True, width=32), st.floats(-1e3, 1e3), st.sampled_from(["", "x", "1 2"]))
plausible = st.floats(0.001, 10.0)  # drawn as often as anything else, so some robots load and reach the model checks


@FUZZ
@given(
    mass=st.one_of(plausible, number),
    inertia=st.lists(st.one_of(plausible, plausible, st.just(0.0), number), min_size=6, max_size=6),
    limits=st.lists(st.one_of(plausible, number), min_size=4, max_size=4),
    axis=st.lists(st.floats(-2, 2), min_size=3, max_size=3),
)
def test_random_link_and_joint_numbers_fail_cleanly(mass, inertia, limits, axis):
    """Link 2's inertial and joint 2's limits and axis replaced; a loaded robot has a positive-definite mass matrix."""
    import pinocchio as pin

    urdf = SCARA_URDF
    start = urdf.index("<mass", urdf.index('<link name="link2">'))
    end = urdf.index("/>", urdf.index("<inertia ", start)) + 2
    keys = ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")
    urdf = urdf[:start] + f'<mass value="{mass}"/>\n<inertia ' + " ".join(f'{k}="{v}"' for k, v in zip(keys, inertia)) + "/>" + urdf[end:]
    j2 = urdf.index('<joint name="j2"')
    lim_start, lim_end = urdf.index("<limit", j2), urdf.index("/>", urdf.index("<limit", j2)) + 2
    names = ("lower", "upper", "velocity", "effort")
    urdf = urdf[:lim_start] + "<limit " + " ".join(f'{k}="{v}"' for k, v in zip(names, limits)) + "/>" + urdf[lim_end:]
    ax_start = urdf.index("<axis", j2)
    ax_end = urdf.index("/>", ax_start) + 2
    urdf = urdf[:ax_start] + f'<axis xyz="{axis[0]} {axis[1]} {axis[2]}"/>' + urdf[ax_end:]
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "scara.urdf").write_text(urdf)
        (Path(tmp) / "scara.toml").write_text(SCARA_TOML)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SuspiciousModelWarning)
            try:
                robot = load_robot(Path(tmp) / "scara.toml")
            except InputError:
                event("refused")
                return
    event("loaded")
    M = pin.crba(robot.model, robot.model.createData(), robot.configuration(np.zeros(robot.nv)))
    assert np.isfinite(M).all() and np.linalg.eigvalsh(np.triu(M) + np.triu(M, 1).T)[0] > 0


# ---- CSV: trajectories and identification logs --------------------------------------------------

cells = st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(["", "x", "1e999", "-", "1,2", " "]))


@FUZZ
@given(header=st.lists(st.sampled_from(["t", "q.j1", "dq.j1", "ddq.j1", "q.j2", "x", ""]), min_size=1, max_size=5), rows=st.lists(st.lists(cells, max_size=6), max_size=5))
def test_random_trajectory_files_fail_cleanly(header, rows):
    text = ",".join(header) + "\n" + "\n".join(",".join(str(c) for c in row) for row in rows)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "traj.csv").write_text(text)
        try:
            read_trajectory(Path(tmp) / "traj.csv", ("j1",))
        except InputError:
            pass


finite = st.floats(-1e6, 1e6, allow_nan=False)


@FUZZ
@given(n=st.integers(1, 20), data=st.data())
def test_trajectory_round_trip(n, data):
    t = np.cumsum(data.draw(st.lists(st.floats(1e-6, 1.0), min_size=n, max_size=n)))
    q, dq, ddq = (np.array(data.draw(st.lists(st.lists(finite, min_size=2, max_size=2), min_size=n, max_size=n))) for _ in range(3))
    traj = Trajectory(t=t, joint_names=("a", "b"), q=q, dq=dq, ddq=ddq)
    with tempfile.TemporaryDirectory() as tmp:
        write_trajectory(Path(tmp) / "traj.csv", traj)
        back = read_trajectory(Path(tmp) / "traj.csv", ("a", "b"))
    for name in ("t", "q", "dq", "ddq"):
        assert np.array_equal(getattr(back, name), getattr(traj, name)), name


@FUZZ
@given(header=st.lists(st.sampled_from(["velocity", "torque", "speed", "tau", "t", "x"]), min_size=1, max_size=4), rows=st.lists(st.lists(cells, max_size=5), max_size=5))
def test_random_identification_logs_fail_cleanly(header, rows):
    text = ",".join(header) + "\n" + "\n".join(",".join(str(c) for c in row) for row in rows)
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "log.csv").write_text(text)
        try:
            read_constant_speed_log(Path(tmp) / "log.csv")
        except InputError:
            pass


@FUZZ
@given(n=st.integers(10, 30), data=st.data())  # a log needs 10 rows
def test_constant_speed_log_round_trip(n, data):
    columns = ("q", "dq", "tau", "dq_ref", "tau_g")
    draw = {name: np.array(data.draw(st.lists(finite, min_size=n, max_size=n))) for name in columns}
    log = ConstantSpeedLog(t=np.cumsum(data.draw(st.lists(st.floats(1e-6, 1.0), min_size=n, max_size=n))), **draw)
    with tempfile.TemporaryDirectory() as tmp:
        write_constant_speed_log(Path(tmp) / "log.csv", log)
        back = read_constant_speed_log(Path(tmp) / "log.csv")
    for name in ("t", *columns):
        assert np.array_equal(getattr(back, name), getattr(log, name)), name
