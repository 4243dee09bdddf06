"""Impossible robots and bad trajectory values through the command line, and the docs table of all bad input.

The cases here add physically impossible URDF bodies (and two trajectory faults) to
those of test_bad_input.py; each exits 2 with one line naming the file, the link or
joint and the field, and writes nothing. Outputs where no file can be made (under
``/proc``, which refuses every user, root included, as a read-only mount does), xacro
descriptions and requests whose limits cannot be met (exit 1, :data:`UNMET`) join them.
docs/bad-input.md is generated from all sets of cases (what the user sees is what the test
observed); the last test fails when the page is out of date, and
``MBCTL_UPDATE_DOCS=1 pytest tests/test_bad_input_table.py`` rewrites it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_bad_input import CASES as FILE_CASES
from test_bad_input import _write
from test_xacro import RECURSIVE, TREE

from mbctl.bundled import bundled_config, bundled_study
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "bad-input.md"
SCARA_TOML = bundled_config("scara").read_text()
SCARA_URDF = bundled_config("scara").with_name("scara.urdf").read_text()
JOINTS = ("j1", "j2", "j3", "j4")


def _scara(tmp: Path, toml: tuple[str, str] | None = None, urdf: tuple[str, str] | None = None) -> list[str]:
    """The bundled SCARA with one replacement in its TOML or URDF; returns the feed-forward command line."""
    text, model = SCARA_TOML, SCARA_URDF
    if toml:
        assert toml[0] in text
        text = text.replace(toml[0], toml[1], 1)
    if urdf:
        assert urdf[0] in model
        model = model.replace(urdf[0], urdf[1], 1)
    (tmp / "scara.toml").write_text(text)
    (tmp / "scara.urdf").write_text(model)
    write_trajectory(tmp / "traj.csv", quintic_rest_to_rest(np.array([[0, 0, 0, 0], [0.1, 0.1, 0.1, 0.01]]), [0.5], 100.0, JOINTS))
    return ["feedforward", str(tmp / "scara.toml"), "--trajectory", str(tmp / "traj.csv"), "--out", str(tmp / "out" / "tau.csv")]


def _trajectory(tmp: Path, edit: Callable[[list[str]], list[str]]) -> list[str]:
    """The SCARA with an edited trajectory CSV (a list of lines in, a list out)."""
    args = _scara(tmp)
    lines = (tmp / "traj.csv").read_text().splitlines()
    (tmp / "traj.csv").write_text("\n".join(edit(lines)) + "\n")
    return args


def _replace_cell(lines: list[str], row: int, col: int, value: str) -> list[str]:
    cells = lines[row].split(",")
    cells[col] = value
    return [*lines[:row], ",".join(cells), *lines[row + 1 :]]


# (what the input is, how to make it) -> the test observes exit code and message
CASES: dict[str, Callable[[Path], list[str]]] = {
    "negative principal inertia": lambda tmp: _scara(tmp, urdf=('ixx="0.26"', 'ixx="-5"')),
    "inertia breaks the triangle inequality": lambda tmp: _scara(tmp, urdf=('izz="0.27"', 'izz="2.7"')),
    "NaN mass": lambda tmp: _scara(tmp, urdf=('<mass value="20"/>', '<mass value="nan"/>')),
    "negative mass": lambda tmp: _scara(tmp, urdf=('<mass value="20"/>', '<mass value="-20"/>')),
    "joint limits out of order": lambda tmp: _scara(tmp, urdf=('lower="-2.9" upper="2.9"', 'lower="2.9" upper="-2.9"')),
    "zero joint axis": lambda tmp: _scara(tmp, urdf=('<axis xyz="0 0 1"/>', '<axis xyz="0 0 0"/>')),
    "negative effort limit": lambda tmp: _scara(tmp, urdf=('effort="120"', 'effort="-120"')),
    "a joint that moves no mass": lambda tmp: _scara(tmp, urdf=(SCARA_URDF[SCARA_URDF.index('<link name="link4">') : SCARA_URDF.index("</robot>")], '<link name="link4"/>\n')),
    "trajectory: text in a number": lambda tmp: _trajectory(tmp, lambda lines: _replace_cell(lines, 3, 2, "x")),
    "trajectory: time not increasing": lambda tmp: _trajectory(tmp, lambda lines: _replace_cell(lines, 3, 0, "0")),
    # sizes (mbctl.budget; the tests see a machine with 16 GiB of memory available, so a budget of 8 GiB, and 100 GiB of disk free)
    "simulate: a duration with two zeros too many": lambda tmp: ["simulate", "fourbar", "--duration", "1e6", "--out", str(tmp / "out" / "run.npz")],
    "simulate: a long run at a tiny step": lambda tmp: ["simulate", "fourbar", "--duration", "1e9", "--step", "1e-12", "--out", str(tmp / "out" / "run.npz")],
    "trajectory: a segment of 1e9 s": lambda tmp: ["trajectory", "quintic", "scara", "--waypoints", "0,0,0,0; 0.8,1.2,-0.6,0.05", "--durations", "1e9", "--out", str(tmp / "out" / "traj.csv")],
    "trajectory excitation: a million harmonics": lambda tmp: ["trajectory", "excitation", "scara", "--harmonics", "1000000", "--period", "10", "--out", str(tmp / "out" / "traj.csv")],
    "trajectory excitation: a period of 1e9 s": lambda tmp: ["trajectory", "excitation", "scara", "--harmonics", "5", "--period", "1e9", "--out", str(tmp / "out" / "traj.csv")],
    "trajectory: an infinite rate": lambda tmp: ["trajectory", "accel", "scara", "--acceleration", "0.1", "--duration", "1", "--rate", "inf", "--out", str(tmp / "out" / "traj.csv")],
    "sweep: a billion samples": lambda tmp: _study(tmp, "samples = 1000000000"),
    "sweep: a grid axis of a billion values": lambda tmp: _study(tmp, "samples = 2", '[parameters."joints.wrist_1_joint.friction.fc"]\nrange = [0.1, 1.0, 1000000000]'),
    "run: a closed loop of 1e9 s": lambda tmp: ["run", *_scara(tmp)[1:4], "--lockstep", "--duration", "1e9", "--log", str(tmp / "out" / "run.npz"), "--summary", str(tmp / "out" / "run.json")],
    "identify: a rate of 1e12 Hz": lambda tmp: ["identify", "run", "friction_rig", "--joint", "j1", "--rate", "1e12", "--out", str(tmp / "out" / "LOG.csv")],
    # commissioning (mbctl commission) and the keep-out
    "commission: no start pose": lambda tmp: ["commission", "friction_rig", "--out", str(tmp / "out" / "c"), "--lockstep"],
    "commission: the all-zeros start of a UR5 on its mounting plane": lambda tmp: ["commission", _ur5(tmp), "--out", str(tmp / "out" / "c"), "--lockstep", "--start", "shoulder_pan_joint=0"],
    "commission: a sweep that goes below the mounting plane": lambda tmp: ["commission", _ur5(tmp), "--out", str(tmp / "out" / "c"), "--lockstep", "--start", "shoulder_lift_joint=-0.3"],
    "commission: a joint given twice": lambda tmp: ["commission", "friction_rig", "--out", str(tmp / "out" / "c"), "--lockstep", "--start", "j1=0.1,j1=0.2"],
    "commission: an unknown joint's bandwidth": lambda tmp: ["commission", "friction_rig", "--out", str(tmp / "out" / "c"), "--lockstep", "--start", "j1=0", "--bandwidth", "wrist=30"],
    "commission: a bandwidth the rate cannot hold": lambda tmp: ["commission", "friction_rig", "--out", str(tmp / "out" / "c"), "--lockstep", "--start", "j1=0", "--rate", "250", "--bandwidth", "j1=30"],
    "commission: resuming with other margins": lambda tmp: _resume(tmp, "ur5.toml", "--torque-margin", "0.3"),
    "commission: resuming in another robot's folder": lambda tmp: _resume(tmp, "other.toml"),
    "trajectory: a move below the mounting plane": lambda tmp: ["trajectory", "quintic", _ur5(tmp), "--waypoints", "0,-1.5708,0,0,0,0; 0,0.5,0,0,0,0", "--durations", "2", "--out", str(tmp / "out" / "traj.csv")],
    "trajectory: a keep-out box inside out": lambda tmp: ["trajectory", "quintic", _ur5(tmp, "[keepout]\nboxes = [{ min = [0, 0, 0], max = [1, -1, 1] }]\n"), "--waypoints", "0,-1.5708,0,0,0,0; 0,-1,0,0,0,0", "--durations", "2", "--out", str(tmp / "out" / "traj.csv")],
    "trajectory optimal: --torque-margin, a fraction used": lambda tmp: ["trajectory", "optimal", "scara", "--waypoints", "0,0,0,0; 0.1,0.1,0.1,0.01", "--torque-margin", "0.9", "--out", str(tmp / "out" / "traj.csv")],
    "a trajectory file larger than the budget": lambda tmp: ["--memory-budget", "1K", *_scara(tmp)],
    "a budget that is not a size": lambda tmp: ["--memory-budget", "lots", *_scara(tmp)],
    # ROS 2 names and positions (no ROS 2 needed: refused before anything opens)
    "run --bus ros2: a joint-states topic with a space": lambda tmp: _ros2_run(tmp, "--joint-states", "bad topic"),
    "run --bus ros2: an empty command topic": lambda tmp: _ros2_run(tmp, "--command-topic", ""),
    "emulate --bus ros2: a joint-states topic with a space": lambda tmp: ["emulate", *_scara(tmp)[1:2], "--bus", "ros2", "--joint-states", "bad topic"],
    "emulate --bus ros2: a command topic with a space": lambda tmp: ["emulate", *_scara(tmp)[1:2], "--bus", "ros2", "--command-topic", "x y"],
    "emulate: a start outside a joint's range": lambda tmp: ["emulate", "ur5", "--bus", "ros2", "--q0", "50,0,0,0,0,0"],
    "run: an end hold of 1e12 s": lambda tmp: _scara_run(tmp, "[control.end]\nhold_s = 1e12"),
    "run: an end hold of an hour, above the budget": lambda tmp: ["--memory-budget", "100M", *_scara_run(tmp, "[control.end]\nhold_s = 3600")],
    # outputs where no file can be made: /proc refuses every user (as a read-only mount does)
    "run: --log where no file can be made": lambda tmp: [*_scara_run(tmp)[:-4], "--log", "/proc/run.npz", "--summary", str(tmp / "out" / "run.json")],
    "commission: --out where no folder can be made": lambda tmp: ["commission", "scara", "--lockstep", "--out", "/proc/self/nope"],
    "description fetch: --out where no file can be made": lambda tmp: ["description", "fetch", "--out", "/proc/robot.urdf"],
    "trajectory: --out that is a directory": lambda tmp: ["trajectory", "accel", "scara", "--acceleration", "0.1", "--duration", "1", "--out", str(tmp / "out")],
    # xacro descriptions
    "xacro: an argument it does not declare (--xacro-arg)": lambda tmp: ["constraints", _xacro(tmp), "--xacro-arg", "nosuch:=1"],
    "xacro: a misspelt argument in [xacro]": lambda tmp: ["constraints", _xacro(tmp, "[xacro]\nrech = 0.5\n")],
    "xacro: a value that breaks the URDF": lambda tmp: ["constraints", _xacro(tmp), "--xacro-arg", "reach:=abc"],
    "xacro: a macro that calls itself": lambda tmp: ["description", "expand", _xacro_file(tmp, RECURSIVE, "again"), "--out", str(tmp / "out" / "r.urdf")],
    "xacro: 800 bytes of macros making 2^18 links": lambda tmp: ["description", "expand", _xacro_file(tmp, TREE, "tree"), "--out", str(tmp / "out" / "t.urdf")],
    "xacro: MBCTL_XACRO_CACHE naming a file": lambda tmp: (["constraints", _xacro(tmp)], {"MBCTL_XACRO_CACHE": _a_file(tmp)}),
}

# requests whose limits cannot be met: exit 1, one line saying why, nothing written (trajectory ocp's, whose message
# quotes IPOPT's iterations, is in tests/test_ocp_cli.py: the page must not depend on the machine)
UNMET: dict[str, Callable[[Path], list[str]]] = {
    "trajectory optimal: torque limits below gravity": lambda tmp: [
        "trajectory", "optimal", _low_torque_ur5(tmp), "--waypoints", "; ".join(UR5_MOVE[1::2]), "--grid", "100", "--out", str(tmp / "out" / "op.csv"),
    ],
}
UR5_MOVE = ("--from", "0,-1.5,1.2,-1.2,-1.57,0", "--to", "1.0,-0.8,0.4,-0.8,-1.0,0.8")  # the poses of the issue
ARM = """<robot name="arm" xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:arg name="reach" default="0.5"/><xacro:arg name="prefix" default=""/>
  <link name="base"/>
  <joint name="$(arg prefix)shoulder" type="revolute"><parent link="base"/><child link="upper"/><axis xyz="0 0 1"/>
    <limit lower="-3" upper="3" velocity="2" effort="10"/></joint>
  <link name="upper"><inertial><origin xyz="0.2 0 0"/><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
  <joint name="$(arg prefix)elbow" type="revolute"><parent link="upper"/><child link="fore"/><origin xyz="$(arg reach) 0 0"/><axis xyz="0 1 0"/>
    <limit lower="-3" upper="3" velocity="2" effort="10"/></joint>
  <link name="fore"><inertial><origin xyz="0.2 0 0"/><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
</robot>"""


def _scara_run(tmp: Path, extra: str = "") -> list[str]:
    """A lock-step run of the bundled SCARA (its TOML with ``extra`` appended) along a short trajectory."""
    args = _scara(tmp)
    if extra:
        (tmp / "scara.toml").write_text((tmp / "scara.toml").read_text() + "\n" + extra + "\n")
    return ["run", *args[1:4], "--lockstep", "--log", str(tmp / "out" / "run.npz"), "--summary", str(tmp / "out" / "run.json")]


def _xacro_file(tmp: Path, text: str, name: str = "arm") -> Path:
    path = tmp / f"{name}.urdf.xacro"
    path.write_text(text)
    return path


def _a_file(tmp: Path) -> str:
    (tmp / "notes.txt").write_text("not a folder\n")
    return str(tmp / "notes.txt")


def _xacro(tmp: Path, extra: str = "") -> str:
    """A robot TOML of a two-joint arm written in xacro (arguments ``reach`` and ``prefix``), with ``extra`` appended."""
    _xacro_file(tmp, ARM)
    (tmp / "arm.toml").write_text(f'urdf = "arm.urdf.xacro"\n{extra}')
    return str(tmp / "arm.toml")


def _low_torque_ur5(tmp: Path) -> str:
    """The bundled UR5 with every torque limit at 1 N·m (0.9 with the planning margin): gravity alone asks more."""
    (tmp / "lowtau.toml").write_text(bundled_config("ur5").read_text() + "\n[control]\neffort = 1.0\n")
    return str(tmp / "lowtau.toml")


def _ur5(tmp: Path, keepout: str | None = None) -> str:
    """The bundled UR5 copied to ``tmp/ur5.toml`` (its ``[keepout]`` table replaced by ``keepout``)."""
    text = bundled_config("ur5").read_text()
    if keepout is not None:
        text = text[: text.index("[keepout]")] + keepout
    (tmp / "ur5.toml").write_text(text)
    return str(tmp / "ur5.toml")


def _resume(tmp: Path, robot: str, *options: str) -> list[str]:
    """``commission ROBOT --from friction`` into a folder whose pre-flight the bundled UR5 (copied to
    ``tmp/ur5.toml``, with the default margins) finished."""
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.hardware.session import SessionOptions
    from mbctl.identification.commission import Commission, CommissionSettings
    from mbctl.identification.commission.context import write_json
    from mbctl.identification.commission.record import record

    _ur5(tmp)
    (tmp / "other.toml").write_text((tmp / "ur5.toml").read_text() + "# another arm's file\n")
    c = Commission(load_robot(tmp / "ur5.toml"), SessionOptions(lockstep=True), CommissionSettings(start={"shoulder_lift_joint": -1.5708}), tmp / "out" / "c")
    (tmp / "out" / "c" / "preflight").mkdir(parents=True)
    write_json(tmp / "out" / "c" / "preflight" / "result.json", {"shaped_by": record(c, "preflight")})
    return ["commission", str(tmp / robot), "--out", str(tmp / "out" / "c"), "--lockstep", "--start", "shoulder_lift_joint=-1.5708", *options, "--from", "friction"]


def _ros2_run(tmp: Path, option: str, value: str) -> list[str]:
    """mbctl run of the SCARA over ROS 2 with one bad topic option."""
    return ["run", *_scara(tmp)[1:4], "--bus", "ros2", option, value, "--log", str(tmp / "out" / "run.npz"), "--summary", str(tmp / "out" / "run.json")]


def _study(tmp: Path, samples: str, extra: str = "") -> list[str]:
    """The bundled UR5 payload study with its ``samples = 200`` line replaced and ``extra`` tables appended."""
    (tmp / "study.toml").write_text(bundled_study("ur5_payload").read_text().replace("samples = 200", samples, 1) + extra + "\n")
    return ["sweep", str(tmp / "study.toml"), "--out", str(tmp / "out" / "sweep")]


@pytest.fixture(autouse=True)
def sixteen_gib_available(monkeypatch):
    """The default budget is half of the available memory: the page shows the same numbers on every machine."""
    monkeypatch.setattr("mbctl.budget.available_memory", lambda: 16.0 * 2**30)
    monkeypatch.setattr("mbctl.budget.free_space", lambda directory: 100.0 * 2**30)
    monkeypatch.delenv("MBCTL_MEMORY_BUDGET", raising=False)


def _file_case(name: str) -> Callable[[Path], list[str]]:
    """A case of test_bad_input.py, as a command line."""

    def make(tmp: Path) -> list[str]:
        toml, traj, _ = FILE_CASES[name]
        _write(tmp, toml, traj)
        return ["feedforward", str(tmp / "r.toml"), "--trajectory", str(tmp / "traj.csv"), "--out", str(tmp / "tau.csv")]

    return make


ALL_CASES = {**{name: _file_case(name) for name in FILE_CASES}, **CASES, **UNMET}
PROGRESS = re.compile(r"^\w+: \d+/\d+ \w+ \( *\d+%\)$")  # a solver's progress lines (mbctl.cli.console.ProgressPrinter)


def observe(cli, tmp_path: Path, case: str, monkeypatch: pytest.MonkeyPatch) -> tuple[int, str]:
    """Run a case in ``tmp_path`` (a case gives a command line, or a command line and environment variables); its exit
    code and stderr without progress lines, the temporary folder left out. Nothing may be written."""
    made = ALL_CASES[case](tmp_path)
    args, env = made if isinstance(made, tuple) else (made, {})
    monkeypatch.setenv("MBCTL_XACRO_CACHE", str(tmp_path / "xcache"))
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    for folder in ("out", "xcache"):
        (tmp_path / folder).mkdir(exist_ok=True)

    def files() -> list[str]:
        return sorted(p.name for p in tmp_path.rglob("*") if p.parent.name != "xcache")  # the xacro cache holds expansions, not outputs

    before = files()
    r = cli(*args)
    assert files() == before, "something was written"
    lines = [line for line in r.err.strip().splitlines() if not PROGRESS.match(line)]
    return r.code, "\n".join(lines).replace(str(tmp_path) + "/", "")


@pytest.mark.parametrize("case", CASES)
def test_bad_input_is_one_line_and_exit_2(cli, tmp_path, case, monkeypatch):
    code, message = observe(cli, tmp_path, case, monkeypatch)
    assert code == 2 and "\n" not in message and message.startswith("mbctl: error: "), message
    assert "Traceback" not in message


@pytest.mark.parametrize("case", UNMET)
def test_limits_out_of_reach_are_one_line_and_exit_1(cli, tmp_path, case, monkeypatch):
    code, message = observe(cli, tmp_path, case, monkeypatch)
    assert code == 1 and "\n" not in message and message.startswith("mbctl: error: "), message
    assert "Traceback" not in message


def test_the_valid_counterparts_are_accepted(cli, tmp_path, monkeypatch):
    """The fixtures of the new cases are valid where the one thing broken is mended: the xacro arm with a declared argument,
    a run with a short end hold and a log where files can be made, the UR5's own limits."""
    monkeypatch.setenv("MBCTL_XACRO_CACHE", str(tmp_path / "xcache"))
    assert cli("constraints", _xacro(tmp_path, "[xacro]\nreach = 0.4\n"), "--xacro-arg", "prefix:=left_").code == 0
    (tmp_path / "out").mkdir()
    assert cli(*_scara_run(tmp_path, "[control.end]\nhold_s = 0.5")).code == 0 and (tmp_path / "out" / "run.npz").is_file()
    out = tmp_path / "out" / "op.csv"
    assert cli("trajectory", "optimal", "ur5", "--waypoints", "; ".join(UR5_MOVE[1::2]), "--grid", "100", "--out", out).code == 0 and out.is_file()


def test_the_docs_table_is_what_the_tests_see(cli, tmp_path_factory, monkeypatch):
    rows = []
    for case in ALL_CASES:
        with monkeypatch.context() as patch:
            code, message = observe(cli, tmp_path_factory.mktemp("case"), case, patch)
        escaped = message.replace("|", "\\|")
        rows.append(f"| {case} | {code} | `{escaped}` |")
    page = (
        "# Bad input and what you see\n\n"
        "Generated by tests/test_bad_input_table.py from the cases the tests run (`mbctl\n"
        "feedforward` on a two-link arm or the bundled SCARA, with one thing broken, requests\n"
        "too large for the memory budget, outputs where no file can be made, xacro descriptions):\n"
        "every one exits with status 2, prints one line naming the file and the field or option,\n"
        "and writes nothing. Output paths are checked before any work by making a file there\n"
        "(`/proc` refuses every user, as a read-only mount does). Requests whose limits cannot be\n"
        "met (the last rows) exit with status 1, say why on one line and write nothing. Sizes are estimated before any work\n"
        "starts and compared with the memory budget (`--memory-budget SIZE` anywhere on the line,\n"
        "else `$MBCTL_MEMORY_BUDGET`, else half of the available memory; these rows were taken with\n"
        "16 GiB available) and with the free disk space. Hardware faults and signals are described\n"
        "in [closed-loop runs](closed-loop.md).\n\n"
        "| input | exit | what the user sees |\n|---|---|---|\n" + "\n".join(rows) + "\n"
    )
    if os.environ.get("MBCTL_UPDATE_DOCS"):
        PAGE.write_text(page)
    assert PAGE.read_text() == page, "docs/bad-input.md is out of date: MBCTL_UPDATE_DOCS=1 pytest tests/test_bad_input_table.py"
