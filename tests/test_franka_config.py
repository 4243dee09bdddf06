"""The [franka] table and everything refused before a Franka is commanded: one line naming file and field
(no robot or simulator needed)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from mbctl.config.franka import FrankaSpec
from mbctl.config.robot import read_robot_spec
from mbctl.errors import ConfigError, InputError
from mbctl.hardware.franka.arm import FrankaArm
from mbctl.hardware.franka.libfranka import FrankaUnavailable

CONFIGS = Path(__file__).resolve().parent.parent / "configs"
JOINTS = tuple(f"fr3_joint{i}" for i in range(1, 8))


def write_fr3(tmp_path, franka: str | None = "", name: str = "arm.toml"):
    """The bundled FR3's URDF with its fingers locked, and a [franka] table of ``franka`` (None: no table)."""
    body = f'urdf = "{CONFIGS / "fr3" / "fr3.urdf"}"\nlocked = {{ fr3_finger_joint1 = 0.02, fr3_finger_joint2 = 0.02 }}\n'
    if franka is not None:
        body += f"[franka]\n{franka}\n"
    path = tmp_path / name
    path.write_text(body)
    return path


def test_defaults_and_given_values(tmp_path):
    """Without keys: libfranka's defaults (its examples' thresholds, enforce), a 50 ms state timeout and the data
    sheet's rate limit; given values are kept in SI units (the load's inertia as a symmetric 3x3)."""
    spec = read_robot_spec(write_fr3(tmp_path)).franka
    assert spec == FrankaSpec(file=spec.file)
    assert (spec.realtime, spec.state_timeout_s, spec.torque_rate_limit, spec.automatic_error_recovery) == ("enforce", 0.05, 1000.0, False)
    spec = read_robot_spec(write_fr3(tmp_path, 'address = "10.0.0.2"\nstate_timeout_ms = 250\nserver = "franky-sim"\n'
                                               "[franka.load]\nmass = 0.5\ncenter = [0.0, 0.0, 0.05]\ninertia = [0.001, 0.002, 0.0025, 0.0001, 0.0, 0.0]")).franka  # fmt: skip
    assert (spec.address, spec.state_timeout_s, spec.server) == ("10.0.0.2", 0.25, "franky-sim")
    assert spec.load.mass == 0.5 and spec.load.inertia == (0.001, 0.0001, 0.0, 0.0001, 0.002, 0.0, 0.0, 0.0, 0.0025)
    assert read_robot_spec(write_fr3(tmp_path, None)).franka is None


@pytest.mark.parametrize(
    "body, field, words",
    [
        ('address = "172.16.0.2 "', "franka.address", "host name or IP address"),
        ('server = "gazebo"', "franka.server", "unknown value 'gazebo'"),
        ('realtime = "yes"', "franka.realtime", "unknown value 'yes'"),
        ("automatic_error_recovery = 1", "franka.automatic_error_recovery", "true or false"),
        ("state_timeout_ms = 0", "franka.state_timeout_ms", "must be in (0, 60000]"),
        ("torque_rate_limit = -1", "franka.torque_rate_limit", "must be >= 0"),
        ('gravity = "none"', "franka.gravity", "unknown value 'none'"),
        ("joint_impedance = [3000.0, 3000.0]", "franka.joint_impedance", "must be 7 finite numbers"),
        ("joint_impedance = [3000, 3000, 3000, 2500, 2500, 2000, 0]", "franka.joint_impedance", "must be > 0"),
        ("[franka.collision]\ntorque_lower = [20, 20, 18, 18, 16, 14]", "franka.collision.torque_lower", "must be 7 finite numbers"),
        ("[franka.collision]\ntorque_upper = [20, 20, 18, 18, 16, 14, 5]", "franka.collision.torque_upper", "entry 7 (5) is below its contact threshold"),
        ("[franka.collision]\nforce_lower = [20, 20, 20, 25, 25, -1]", "franka.collision.force_lower", "must be > 0"),
        ("[franka.collision]\ntorque = 3.0", "franka.collision.torque", "unknown field"),
        ("[franka.load]\nmass = 4.0", "franka.load.mass", "rated payload"),
        ("[franka.load]\ncenter = [0.0, 2.0, 0.0]", "franka.load.center", "within 1 m"),
        ("[franka.load]\ninertia = [0.001, 0.001, 0.01, 0.0, 0.0, 0.0]", "franka.load.inertia", "not a rigid body's inertia"),
        ("adress = \"172.16.0.2\"", "franka.adress", "did you mean 'address'"),
    ],
)
def test_a_bad_value_names_file_and_field(tmp_path, body, field, words):
    """Each bad value: a ConfigError naming the TOML file and the dotted field."""
    toml = write_fr3(tmp_path, body)
    with pytest.raises(ConfigError) as info:
        read_robot_spec(toml)
    message = str(info.value)
    assert str(toml) in message and field in message and words in message, message


def test_a_bad_field_is_one_line_and_nothing_is_written(tmp_path, cli):
    """mbctl run --bus franka on a bad [franka] table: exit 2, one line naming file and field, no log or summary."""
    toml = write_fr3(tmp_path, 'realtime = "always"')
    (tmp_path / "t.csv").write_text("t," + ",".join(f"q.{j}" for j in JOINTS) + "\n0," + ",".join(["0.1"] * 7) + "\n")
    r = cli("run", toml, "--bus", "franka", "--trajectory", tmp_path / "t.csv", "--log", tmp_path / "r.npz", "--summary", tmp_path / "s.json")
    assert r.code == 2 and len(r.err.strip().splitlines()) == 1, r.err
    assert f"{toml}: franka.realtime: unknown value 'always'" in r.err
    assert not (tmp_path / "r.npz").exists() and not (tmp_path / "s.json").exists()


def test_options_only_a_franka_run_takes(tmp_path, cli, configs):
    """--robot-ip without --bus franka, a rate other than FCI's 1 kHz and lock-step: one line each, exit 2."""
    csv = tmp_path / "t.csv"
    assert cli("trajectory", "quintic", "fr3", "--waypoints", "0,-0.4,0,-2,0,1.6,0.8; 0.1,-0.3,0,-1.9,0,1.7,0.9", "--durations", "0.5", "--out", csv).code == 0
    out = ("--log", tmp_path / "r.npz", "--summary", tmp_path / "s.json")
    for extra, words in ((("--robot-ip", "127.0.0.1"), "--robot-ip: only for --bus franka"),
                         (("--bus", "franka", "--rate", "500"), "--rate: FCI exchanges a state and a command every millisecond"),
                         (("--bus", "franka", "--emulate", "--lockstep"), "--lockstep: a Franka (and franky-sim) runs on its own clock")):  # fmt: skip
        r = cli("run", "fr3", "--trajectory", csv, *extra, *out)
        assert r.code == 2 and words in r.err and len(r.err.strip().splitlines()) == 1, r.err


def test_the_arm_has_seven_joints():
    """A robot with another number of actuated joints: one line at [franka]."""
    with pytest.raises(InputError, match="a Franka arm has 7 joints; the robot has 2 actuated"):
        FrankaArm(("a", "b"), FrankaSpec())


def test_enforce_needs_a_real_time_kernel(monkeypatch):
    """realtime = "enforce" on a kernel without real-time scheduling: refused before connecting, naming the way out."""
    pytest.importorskip("pylibfranka")
    monkeypatch.setattr("mbctl.hardware.franka.arm.realtime_kernel", lambda: False)
    with pytest.raises(InputError, match='set realtime = "ignore"') as info:
        FrankaArm(JOINTS, FrankaSpec(realtime="enforce")).open()
    assert info.value.field == "franka.realtime"


def test_nothing_at_the_address_is_one_line(tmp_path):
    """No FCI server at the address: libfranka's reason and the [franka] address, as input to fix (nothing was commanded)."""
    pytest.importorskip("pylibfranka")
    toml = write_fr3(tmp_path, 'address = "127.251.3.4"\nrealtime = "ignore"')
    with pytest.raises(InputError) as info:
        FrankaArm(JOINTS, read_robot_spec(toml).franka).open()
    assert "franka.address" in str(info.value) and "cannot connect to a Franka at 127.251.3.4: libfranka: Connection to FCI refused" in str(info.value)


def test_without_pylibfranka_the_run_says_how_to_get_it(monkeypatch):
    """pylibfranka not importable: one line naming pip install "mbctl[franka]"."""
    monkeypatch.setitem(sys.modules, "pylibfranka", None)
    with pytest.raises(FrankaUnavailable, match=r'pip install "mbctl\[franka\]"'):
        FrankaArm(JOINTS, FrankaSpec(realtime="ignore")).open()
