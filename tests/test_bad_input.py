"""Bad input: one line on stderr naming file and field, exit code 2, no output left behind."""

from __future__ import annotations

from pathlib import Path

import pytest

GOOD_TRAJ = "t,q.j1,dq.j1,ddq.j1,q.j2,dq.j2,ddq.j2\n0,0,0,0,0,0,0\n0.01,0.001,0.1,0,0,0,0\n"
URDF = """<?xml version="1.0"?><robot name="r"><link name="b"/>
<joint name="j1" type="revolute"><parent link="b"/><child link="l1"/><axis xyz="0 0 1"/>
  <limit lower="-3" upper="3" velocity="2" effort="10"/></joint>
<link name="l1"><inertial><origin xyz="0.2 0 0"/><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
<joint name="j2" type="revolute"><parent link="l1"/><child link="l2"/><origin xyz="0.4 0 0"/><axis xyz="0 1 0"/>
  <limit lower="-3" upper="3" velocity="2" effort="10"/></joint>
<link name="l2"><inertial><origin xyz="0.2 0 0"/><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
</robot>"""
GOOD_TOML = 'urdf = "r.urdf"\n[joints.j1]\nfriction = { law = "coulomb-viscous", fc = 0.1, fv = 0.01 }\n'
LUGRE = 'law = "lugre", fc = 0.5, fs = 0.7, vs = 0.02, fv = 0.05, sigma0 = 1e4'

CASES = {
    # name: (toml text or None for missing, trajectory text or None for missing, expected message parts)
    "missing config": (None, GOOD_TRAJ, ["r.toml", "file not found"]),
    "malformed toml": ('urdf = "r.urdf"\n[joints.j1\n', GOOD_TRAJ, ["r.toml", "malformed TOML"]),
    "missing urdf field": ("gravity = [0, 0, -9.81]\n", GOOD_TRAJ, ["r.toml", "urdf", "missing required field"]),
    "urdf not found": ('urdf = "nope.urdf"\n', GOOD_TRAJ, ["r.toml", "urdf", "not found"]),
    "unknown top-level field": ("gravty = [0, 0, 1]\n" + GOOD_TOML, GOOD_TRAJ, ["gravty", "did you mean 'gravity'"]),
    "bad gravity": ('urdf = "r.urdf"\ngravity = [0, 0]\n', GOOD_TRAJ, ["gravity", "3 finite numbers"]),
    "unknown joint": ('urdf = "r.urdf"\n[joints.j7]\nactuated = true\n', GOOD_TRAJ, ["joints.j7", "no joint 'j7'"]),
    "unknown law": (
        'urdf = "r.urdf"\n[joints.j1]\nfriction = { law = "stribek", fc = 1.0 }\n',
        GOOD_TRAJ,
        ["joints.j1.friction.law", "did you mean 'stribeck'"],
    ),
    "misspelt parameter": (
        'urdf = "r.urdf"\n[joints.j1]\nfriction = { law = "coulomb-viscous", fc = 1.0, fvv = 0.1 }\n',
        GOOD_TRAJ,
        ["joints.j1.friction.fvv", "unknown field"],
    ),
    "missing parameter": (
        'urdf = "r.urdf"\n[joints.j1]\nfriction = { law = "stribeck", fc = 1.0, fs = 1.2 }\n',
        GOOD_TRAJ,
        ["joints.j1.friction.vs", "missing required parameter"],
    ),
    "fs below fc": (
        'urdf = "r.urdf"\n[joints.j2]\nfriction = { law = "stribeck", fc = 1.0, fs = 0.5, vs = 0.1 }\n',
        GOOD_TRAJ,
        ["joints.j2.friction.fs", "must be >= fc"],
    ),
    "negative load arm": (
        'urdf = "r.urdf"\n[joints.j1]\nfriction = { law = "coulomb-viscous", fc = 0.01, load = { model = "bearing3d", rb = -1, rp = 0.01, rn = 0.01 } }\n',
        GOOD_TRAJ,
        ["joints.j1.friction.load.rb", "must be > 0"],
    ),
    "non-dissipative lugre": (
        f'urdf = "r.urdf"\n[joints.j1]\nfriction = {{ {LUGRE}, sigma1 = 5e4 }}\n',
        GOOD_TRAJ,
        ["joints.j1.friction.sigma1", "not dissipative above"],
    ),
    "string for number": (
        'urdf = "r.urdf"\n[joints.j1]\nfriction = { law = "coulomb-viscous", fc = "0.1" }\n',
        GOOD_TRAJ,
        ["joints.j1.friction.fc", "finite number"],
    ),
    "inverted position limits": (
        'urdf = "r.urdf"\n[joints.j1]\nlimits = { position = [1.0, -1.0] }\n',
        GOOD_TRAJ,
        ["joints.j1.limits.position", "must be below"],
    ),
    "missing trajectory": (GOOD_TOML, None, ["traj.csv", "file not found"]),
    "missing column": (GOOD_TOML, "t,q.j1,dq.j1,ddq.j1\n0,0,0,0\n", ["traj.csv", "q.j2", "missing column"]),
    "nan in csv": (GOOD_TOML, GOOD_TRAJ.replace("0.1,0,0", "nan,0,0"), ["traj.csv", "dq.j1", "non-finite value on line 3"]),
    "inf in csv": (GOOD_TOML, GOOD_TRAJ.replace("0.001", "inf"), ["traj.csv", "q.j1", "non-finite"]),
    "ragged csv": (GOOD_TOML, GOOD_TRAJ + "0.02,1\n", ["traj.csv", "line 4 has 2 values"]),
    "empty csv": (GOOD_TOML, "", ["traj.csv", "empty file"]),
}


def _write(tmp_path: Path, toml: str | None, traj: str | None) -> None:
    (tmp_path / "r.urdf").write_text(URDF)
    if toml is not None:
        (tmp_path / "r.toml").write_text(toml)
    if traj is not None:
        (tmp_path / "traj.csv").write_text(traj)


def _assert_clean_failure(result, tmp_path: Path, parts: list[str]) -> None:
    assert result.code == 2, result.err
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("mbctl: error: "), result.err
    assert "Traceback" not in result.err
    for part in parts:
        assert part in lines[0], f"{part!r} not in {lines[0]!r}"
    leftovers = [p.name for p in tmp_path.iterdir() if p.name.startswith(".") or p.name.startswith("tau")]
    assert leftovers == [], leftovers


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_input_fails_cleanly(cli, tmp_path, case):
    toml, traj, parts = CASES[case]
    _write(tmp_path, toml, traj)
    result = cli(
        "feedforward", tmp_path / "r.toml", "--trajectory", tmp_path / "traj.csv", "--out", tmp_path / "tau.csv", "--plot", tmp_path / "tau.png"
    )
    _assert_clean_failure(result, tmp_path, parts)


def test_good_input_of_the_same_fixture_succeeds(cli, tmp_path):
    """The fixture is valid, so the failures above come from the one thing each case breaks."""
    _write(tmp_path, GOOD_TOML, GOOD_TRAJ)
    result = cli("feedforward", tmp_path / "r.toml", "--trajectory", tmp_path / "traj.csv", "--out", tmp_path / "tau.csv")
    assert result.code == 0, result.err
    assert (tmp_path / "tau.csv").is_file()


def test_invalid_urdf_is_reported(cli, tmp_path):
    _write(tmp_path, GOOD_TOML, GOOD_TRAJ)
    (tmp_path / "r.urdf").write_text("<robot name='r'><link name='b'/><joint name='j1' type='revolute'>")
    result = cli("feedforward", tmp_path / "r.toml", "--trajectory", tmp_path / "traj.csv", "--out", tmp_path / "tau.csv")
    _assert_clean_failure(result, tmp_path, ["r.urdf", "invalid URDF"])


@pytest.mark.parametrize(
    "out, plot, parts",
    [("nodir/tau.csv", None, ["nodir/tau.csv", "output directory does not exist"]), ("tau.csv", "tau.jpg", ["tau.jpg", "file type"])],
)
def test_bad_output_paths_fail_before_any_work(cli, tmp_path, out, plot, parts):
    _write(tmp_path, GOOD_TOML, GOOD_TRAJ)
    args = ["feedforward", tmp_path / "r.toml", "--trajectory", tmp_path / "traj.csv", "--out", tmp_path / out]
    result = cli(*args, *(["--plot", tmp_path / plot] if plot else []))
    _assert_clean_failure(result, tmp_path, parts)


@pytest.mark.parametrize(
    "args, parts",
    [
        (["quintic", "--waypoints", "0,0;1", "--durations", "1"], ["--waypoints", "equally many"]),
        (["quintic", "--waypoints", "0,0;1,x", "--durations", "1"], ["--waypoints", "comma-separated numbers"]),
        (["quintic", "--waypoints", "0,0;1,1", "--durations", "0"], ["durations", "each > 0"]),
        (["accel", "--acceleration", "1,2,3", "--duration", "1"], ["need 1 or 2 values"]),
    ],
)
def test_bad_trajectory_options_fail_cleanly(cli, tmp_path, args, parts):
    _write(tmp_path, GOOD_TOML, None)
    result = cli("trajectory", args[0], tmp_path / "r.toml", *args[1:], "--out", tmp_path / "tau_traj.csv")
    _assert_clean_failure(result, tmp_path, parts)


def test_exit_code_of_the_real_process_is_2(tmp_path):
    """The console script itself exits with status 2 and prints no traceback."""
    import subprocess
    import sys

    script = Path(sys.executable).with_name("mbctl")
    done = subprocess.run([script, "feedforward", tmp_path / "none.toml", "--trajectory", "x.csv", "--out", tmp_path / "o.csv"], capture_output=True, text=True)
    assert done.returncode == 2 and "Traceback" not in done.stderr and "file not found" in done.stderr


def test_output_paths_are_checked_by_making_a_file(tmp_path):
    """check_output and check_output_dir refuse a folder that takes no files (/proc refuses every user, root included, as a
    read-only mount does) and a file path that is a folder; a writable folder is accepted and left as it was."""
    from mbctl.errors import InputError
    from mbctl.fileio import check_output, check_output_dir

    for refused, check in (("/proc/out.csv", check_output), ("/proc/self/out", check_output_dir), ("/proc/self", check_output_dir)):
        with pytest.raises(InputError, match="cannot create files in /proc"):
            check(refused)
    with pytest.raises(InputError, match="is a directory, not a file"):
        check_output(tmp_path)
    assert check_output(tmp_path / "out.csv") == tmp_path / "out.csv" and check_output_dir(tmp_path / "new") == tmp_path / "new"
    assert check_output_dir(tmp_path) == tmp_path and list(tmp_path.iterdir()) == []
