"""Robot descriptions parsed once into specs; models built from specs, with or without a file."""

from __future__ import annotations

import ast
import pickle
from dataclasses import MISSING, fields
from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from mbctl.bundled import bundled_config
from mbctl.config import FrictionSpec, JointSpec, RobotSpec, read_robot_spec
from mbctl.config.joints import FRICTION_LAWS, LOAD_MODELS
from mbctl.dynamics.friction.laws import LAWS
from mbctl.dynamics.friction.loads import LOAD_MODELS as LOAD_CLASSES
from mbctl.dynamics.model.robot import build_robot, load_robot
from mbctl.errors import ConfigError

ROOT = Path(__file__).resolve().parents[1]
# every layer builds from specs: none reads TOML (identification/report.py edits a robot TOML's text to write fitted values back)
CONVERTED = ["dynamics", "ctrl", "hardware", "identification", "mbctl/study", "mbctl/cli"]
WRITERS = {"identification/report.py"}


@pytest.mark.parametrize("folder", CONVERTED)
def test_converted_physics_reads_no_toml(folder):
    """Modules building robots from specs import neither mbctl.tomlfields nor tomllib at run time."""
    for path in (ROOT / folder).rglob("*.py"):
        if str(path.relative_to(ROOT)) in WRITERS:
            continue
        tree = ast.parse(path.read_text())
        names = {a.name for n in tree.body if isinstance(n, ast.Import) for a in n.names}
        names |= {n.module for n in tree.body if isinstance(n, ast.ImportFrom) and n.module}
        assert not names & {"tomllib", "mbctl.tomlfields"}, path


@pytest.mark.parametrize(("schema", "classes"), [(FRICTION_LAWS, LAWS), (LOAD_MODELS, LOAD_CLASSES)])
def test_schema_matches_the_parameter_classes(schema, classes):
    """The config schema lists exactly each law's (load model's) fields, required ones without defaults."""
    assert set(schema) == set(classes)
    for name, cls in classes.items():
        required = tuple(f.name for f in fields(cls) if f.default is MISSING)
        optional = tuple(f.name for f in fields(cls) if f.default is not MISSING)
        assert (set(schema[name][0]), set(schema[name][1])) == (set(required), set(optional)), name


def test_a_spec_built_in_python_gives_the_bundled_model():
    """The friction rig built from a hand-written spec equals the one loaded from its TOML."""
    urdf = bundled_config("friction_rig").with_name("friction_rig.urdf")
    friction = FrictionSpec("stribeck", {"fc": 1.0, "fs": 1.3, "vs": 0.03, "delta": 2.0, "fv": 0.1})
    by_hand = build_robot(RobotSpec(urdf=urdf, name="friction_rig", gravity=(0.0, 0.0, -9.81), joints={"j1": JointSpec(friction=friction)}))
    from_file = load_robot("friction_rig")
    assert by_hand.joint("j1").friction == from_file.joint("j1").friction
    q = np.array([0.3])
    M = [pin.crba(r.model, r.model.createData(), r.configuration(q)) for r in (by_hand, from_file)]
    g = [pin.computeGeneralizedGravity(r.model, r.model.createData(), r.configuration(q)) for r in (by_hand, from_file)]
    np.testing.assert_array_equal(M[0], M[1])
    np.testing.assert_array_equal(g[0], g[1])
    assert abs(g[0][0]) > 0.1  # gravity acts: the comparison is not between two empty models


def test_spec_is_read_once_and_kept_on_the_model():
    """load_robot keeps the spec it built from; the spec holds typed sections."""
    spec = read_robot_spec("olkc5")
    assert spec.base is not None and spec.base.flexible and len(spec.flexible) == 1
    assert isinstance(spec.joints["j1"].friction, FrictionSpec) and spec.joints["j1"].friction.load is not None
    robot = build_robot(spec)
    assert robot.spec is spec and robot.source == bundled_config("olkc5")
    assert repr(pickle.loads(pickle.dumps(spec))) == repr(spec)  # parallel studies send models to worker processes


def test_out_of_range_friction_is_placed_in_the_file():
    """A law whose numbers are out of range is reported at its TOML field, from the spec's origin."""
    bad = FrictionSpec("stribeck", {"fc": 1.0, "fs": 0.5, "vs": 0.03}, file=Path("rig.toml"), field="joints.j1.friction")
    urdf = bundled_config("friction_rig").with_name("friction_rig.urdf")
    with pytest.raises(ConfigError) as err:
        build_robot(RobotSpec(urdf=urdf, joints={"j1": JointSpec(friction=bad)}))
    assert err.value.file == Path("rig.toml") and err.value.field == "joints.j1.friction.fs"


def test_unknown_law_parameter_is_rejected_when_parsing(tmp_path):
    """A misspelt law parameter is a one-line error naming file and field, before any model is built."""
    urdf = bundled_config("friction_rig").with_name("friction_rig.urdf")
    toml = tmp_path / "rig.toml"
    toml.write_text(f'urdf = "{urdf}"\n[joints.j1]\nfriction = {{ law = "stribeck", fc = 1.0, fs = 1.3, vss = 0.03 }}\n')
    with pytest.raises(ConfigError, match="did you mean 'vs'") as err:
        read_robot_spec(toml)
    assert err.value.file == toml and err.value.field == "joints.j1.friction.vss"
