"""Bad [flexible], [base] and elastic-DOF input: one line naming file and field, exit 2, nothing written."""

from __future__ import annotations

from pathlib import Path

import pytest

URDF = """<?xml version="1.0"?><robot name="r"><link name="b"><inertial><origin xyz="0 0 0.1"/><mass value="10"/>
<inertia ixx="0.1" ixy="0" ixz="0" iyy="0.1" iyz="0" izz="0.1"/></inertial></link>
<joint name="j1" type="revolute"><parent link="b"/><child link="l1"/><origin xyz="0 0 0.2"/><axis xyz="0 0 1"/>
  <limit lower="-3" upper="3" velocity="2" effort="10"/></joint>
<link name="l1"><inertial><origin xyz="0.25 0 0"/><mass value="0.5"/><inertia ixx="1e-4" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
<joint name="tipj" type="fixed"><parent link="l1"/><child link="tip"/><origin xyz="0.5 0 0"/></joint>
<link name="tip"/>
</robot>"""

FLEX = """[flexible.l1]
method = "rfe"
elements = 3
axis = "x"
length = 0.5
E = 70e9
G = 26e9
section = { A = 1e-4, Iy = 5e-9, Iz = 5e-9, J = 1e-8 }
density = 2700
damping = { ratio = 0.01 }
"""
BASE = """[base]
support = "flexible"
supports = [
  { position = [0.1, 0.1, 0.0], stiffness = [1e5, 1e5, 1e5], damping = 100.0 },
  { position = [0.1, -0.1, 0.0], stiffness = [1e5, 1e5, 1e5] },
  { position = [-0.1, 0.0, 0.0], stiffness = 1e5 },
]
"""
GOOD = 'urdf = "r.urdf"\n' + FLEX + BASE + '[simulation]\nduration = 0.002\nstep = 1e-3\n'


def _flex(old: str, new: str) -> str:
    assert old in GOOD, old
    return GOOD.replace(old, new, 1)


CASES = {
    "unknown flexible field": (_flex("elements = 3", "elemnts = 3"), ["flexible.l1.elemnts", "did you mean 'elements'"]),
    "unknown method": (_flex('method = "rfe"', 'method = "modal"'), ["flexible.l1.method", "unknown value 'modal'"]),
    "fem in a pinocchio command": (_flex('method = "rfe"', 'method = "fem"'), ["flexible.l1.method", "not a pinocchio model"]),
    "fractional elements": (_flex("elements = 3", "elements = 2.5"), ["flexible.l1.elements", "whole number"]),
    "bad axis": (_flex('axis = "x"', 'axis = "w"'), ["flexible.l1.axis", "expected one of: x, y, z"]),
    "negative modulus": (_flex("E = 70e9", "E = -70e9"), ["flexible.l1.E", "must be > 0"]),
    "missing torsion constant": (_flex(", J = 1e-8 }", " }"), ["flexible.l1.section.J", "missing required field"]),
    "density and mass per length": (_flex("density = 2700", "density = 2700\nmass_per_length = 0.3"), ["flexible.l1", "either density"]),
    "negative damping ratio": (_flex("ratio = 0.01", "ratio = -0.01"), ["flexible.l1.damping.ratio", "must be >= 0"]),
    "partial explicit damping": (_flex("{ ratio = 0.01 }", "{ twist = 0.1, bend_y = 0.1 }"), ["flexible.l1.damping.bend_z", "missing required field"]),
    "unknown link": (_flex("[flexible.l1]", "[flexible.l7]"), ["flexible.l7", "no link 'l7'", "links: b, l1, tip"]),
    "unknown support kind": (_flex('support = "flexible"', 'support = "elastic"'), ["base.support", "unknown value 'elastic'"]),
    "support stiffness of two numbers": (_flex("stiffness = 1e5 }", "stiffness = [1e5, 1e5] }"), ["base.supports[2].stiffness", "3 finite numbers"]),
    "negative support damping": (_flex("damping = 100.0", "damping = -100.0"), ["base.supports[0].damping", "must be >= 0"]),
    "unknown support field": (_flex("damping = 100.0", "dampng = 100.0"), ["base.supports[0].dampng", "unknown field"]),
    "supports on one line": (
        _flex("[-0.1, 0.0, 0.0]", "[0.1, 0.0, 0.0]").replace("[0.1, 0.1, 0.0]", "[0.1, 0.2, 0.0]").replace("[0.1, -0.1, 0.0]", "[0.1, -0.2, 0.0]"),
        ["base.supports", "do not hold the base in every direction", "base_ry"],
    ),
    "flexible base without supports": ('urdf = "r.urdf"\n[base]\nsupport = "flexible"\n', ["base.supports", "at least one support point"]),
    "joint table for an elastic coordinate": (GOOD + '[joints.l1_sde1_twist]\nactuated = true\n', ["joints.l1_sde1_twist", "elastic DOF"]),
    "initial value of an elastic coordinate": (
        GOOD.replace("step = 1e-3\n", "step = 1e-3\ninitial = { q = { base_z = -0.001 } }\n"),
        ["simulation.initial.q.base_z", "static equilibrium"],
    ),
    "negative armature": (GOOD + "[joints.j1]\narmature = -1.0\n", ["joints.j1.armature", "must be >= 0"]),
}


def _assert_clean_failure(result, tmp_path: Path, parts: list[str]) -> None:
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: "), result.err
    assert "r.toml" in lines[0]
    for part in parts:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    assert not (tmp_path / "run.npz").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_flexible_input_fails_cleanly(cli, tmp_path, case):
    toml, parts = CASES[case]
    (tmp_path / "r.urdf").write_text(URDF)
    (tmp_path / "r.toml").write_text(toml)
    _assert_clean_failure(cli("simulate", tmp_path / "r.toml", "--out", tmp_path / "run.npz"), tmp_path, parts)


def test_good_flexible_input_simulates(cli, tmp_path):
    """The fixture is valid (base on three feet, a three-element link), so each case above
    fails for the one thing it breaks."""
    (tmp_path / "r.urdf").write_text(URDF)
    (tmp_path / "r.toml").write_text(GOOD)
    result = cli("simulate", tmp_path / "r.toml", "--out", tmp_path / "run.npz")
    assert result.code == 0, result.err
    assert (tmp_path / "run.npz").is_file()
