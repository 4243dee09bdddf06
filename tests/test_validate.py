"""Physically impossible robots are refused at load time, naming the file, the link or joint and the field."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from mbctl.bundled import bundled_config
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.dynamics.model.validate import SuspiciousModelWarning
from mbctl.errors import ConfigError

BUNDLED = ["fourbar", "friction_rig", "olkc5", "panda", "parallelogram", "rrr3", "scara", "scara_paper_start", "tree5", "ur5"]


def scara_with(tmp_path, old: str, new: str):
    """The bundled SCARA with one URDF string replaced; returns its TOML path."""
    urdf = bundled_config("scara").with_name("scara.urdf").read_text()
    assert old in urdf
    (tmp_path / "scara.urdf").write_text(urdf.replace(old, new, 1))
    (tmp_path / "scara.toml").write_text(bundled_config("scara").read_text())
    return tmp_path / "scara.toml"


IMPOSSIBLE = {
    "negative principal inertia": ('ixx="0.26"', 'ixx="-5"', r"link link1: inertia is not positive semi-definite"),
    "triangle inequality": ('izz="0.27"', 'izz="2.7"', r"link link1: principal moments .* violate the triangle inequality"),
    "limits out of order": ('lower="-2.9" upper="2.9"', 'lower="2.9" upper="-2.9"', r"joint j1: limit lower = 2.9 is above upper = -2.9"),
    "NaN mass": ('<mass value="20"/>', '<mass value="nan"/>', r"link link1 mass: value = 'nan' must be finite"),
    "negative mass": ('<mass value="20"/>', '<mass value="-20"/>', r"link link1: mass = -20 kg must be >= 0"),
    "zero axis": ('<axis xyz="0 0 1"/>', '<axis xyz="0 0 0"/>', r"joint j1: axis xyz has length 0; give a unit vector"),
    "negative effort limit": ('effort="120"', 'effort="-120"', r"joint j1: limit effort = -120 must be >= 0"),
}


@pytest.mark.parametrize("case", IMPOSSIBLE)
def test_impossible_body_is_refused_by_the_command_line(case, cli, tmp_path):
    """`mbctl feedforward` exits 2 with one line naming file, link or joint and field, and writes nothing."""
    old, new, message = IMPOSSIBLE[case]
    config = scara_with(tmp_path, old, new)
    traj = tmp_path / "traj.csv"
    write_trajectory(traj, quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.1, 0.1, 0.1, 0.01]]), [0.5], 100.0, ("j1", "j2", "j3", "j4")))
    out = tmp_path / "tau.csv"
    r = cli("feedforward", config, "--trajectory", traj, "--out", out)
    assert r.code == 2 and not out.exists()
    line = r.err.strip()
    assert "\n" not in line and "scara.urdf" in line
    with pytest.raises(ConfigError, match=message):
        load_robot(config)


def test_a_massless_moving_body_makes_the_mass_matrix_singular(tmp_path):
    """Without mass or armature, the last joint moves nothing: M(q0) is singular, and the DOF is named."""
    urdf = bundled_config("scara").with_name("scara.urdf").read_text()
    start = urdf.index('<link name="link4">')
    end = urdf.index("</link>", start) + len("</link>")
    config = scara_with(tmp_path, urdf[start:end], '<link name="link4"/>')
    with pytest.raises(ConfigError, match=r"mass matrix is singular .* DOF j4 moves no mass"):
        load_robot(config)


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
