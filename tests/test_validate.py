"""Physical checks of robot descriptions: suspicious values warn; every bundled robot passes.

The refused inputs, through the command line, are in test_bad_input_table.py.
"""

from __future__ import annotations

import warnings

import pytest

from mbctl.bundled import bundled_config
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.model.validate import SuspiciousModelWarning

BUNDLED = ["fourbar", "friction_rig", "mobile", "olkc5", "panda", "parallelogram", "rrr3", "scara", "scara_paper_start", "threeloop", "tree5", "ur5"]


def scara_with(tmp_path, old: str, new: str):
    """The bundled SCARA with one URDF string replaced; returns its TOML path."""
    urdf = bundled_config("scara").with_name("scara.urdf").read_text()
    assert old in urdf
    (tmp_path / "scara.urdf").write_text(urdf.replace(old, new, 1))
    (tmp_path / "scara.toml").write_text(bundled_config("scara").read_text())
    return tmp_path / "scara.toml"


def test_suspicious_values_warn(tmp_path):
    """A 20 kg link next to a 0.5 kg one is fine; next to a 5 g one it is probably a unit slip."""
    config = scara_with(tmp_path, '<mass value="0.5"/>', '<mass value="0.005"/>')
    with pytest.warns(SuspiciousModelWarning, match=r"joint j4: link masses 15 and 0.005 kg differ by more than 1000x"):
        load_robot(config)


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_robots_are_physical(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error", SuspiciousModelWarning)
        load_robot(name)
