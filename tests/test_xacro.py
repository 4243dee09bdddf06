"""xacro descriptions (mbctl.xacro_files): expanded where a URDF is read, checked against the URDF they stand for."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pinocchio as pin
import pytest

from mbctl.config.robot import read_robot_spec
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import ConfigError, InputError
from mbctl.xacro_files import CACHE_ENV, expand_xacro, package_share, parse_xacro_args, urdf_of

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

# the bundled SCARA (configs/scara.urdf) written with a macro per arm link, an included file of
# properties and arguments: expanded with the defaults it is that URDF
PROPERTIES = """\
<?xml version="1.0"?>
<robot xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:property name="l1" value="0.2"/>
  <xacro:property name="vertical" value="0 0 1"/>
</robot>
"""
MACROS = """\
<?xml version="1.0"?>
<robot xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:macro name="arm_link" params="name parent type:=revolute x:=0 y z:=0 lower upper velocity effort mass com_y ixx iyy izz">
    <joint name="${prefix}j${name}" type="${type}">
      <parent link="${parent}"/>
      <child link="link${name}"/>
      <origin xyz="${x} ${y} ${z}" rpy="0 0 0"/>
      <axis xyz="${vertical}"/>
      <limit lower="${lower}" upper="${upper}" velocity="${velocity}" effort="${effort}"/>
    </joint>
    <link name="link${name}">
      <inertial>
        <origin xyz="0 ${com_y} 0" rpy="0 0 0"/>
        <mass value="${mass}"/>
        <inertia ixx="${ixx}" ixy="0" ixz="0" iyy="${iyy}" iyz="0" izz="${izz}"/>
      </inertial>
    </link>
  </xacro:macro>
</robot>
"""
SCARA = """\
<?xml version="1.0"?>
<robot name="scara" xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:arg name="l2" default="0.25"/>
  <xacro:arg name="prefix" default=""/>
  <xacro:property name="prefix" value="$(arg prefix)"/>
  <xacro:include filename="parts/properties.xacro"/>
  <xacro:include filename="$(dirname)/parts/macros.xacro"/>
  <link name="base"/>
  <xacro:arm_link name="1" parent="base" y="0" lower="-2.9" upper="2.9" velocity="3.0" effort="120" mass="20" com_y="${l1 / 2}" ixx="0.26" iyy="0.03" izz="0.27"/>
  <xacro:arm_link name="2" parent="link1" y="${l1}" lower="-2.5" upper="2.5" velocity="3.0" effort="60" mass="15" com_y="0.125" ixx="0.30" iyy="0.03" izz="0.31"/>
  <xacro:arm_link name="3" parent="link2" y="$(arg l2)" lower="${-2 * 3.14}" upper="${2 * 3.14}" velocity="6.0" effort="20" mass="15" com_y="0" ixx="0.02" iyy="0.02" izz="0.02"/>
  <xacro:arm_link name="4" parent="link3" type="prismatic" y="0" lower="-0.2" upper="0.2" velocity="0.5" effort="150" mass="0.5" com_y="0" ixx="0.001" iyy="0.001" izz="0.0001"/>
  <joint name="tool_joint" type="fixed">
    <parent link="link4"/>
    <child link="tool"/>
    <origin xyz="0 0 0" rpy="0 0 0"/>
  </joint>
  <link name="tool"/>
</robot>
"""


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    """Expansions go to a cache of the test's own."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))


@pytest.fixture
def scara_xacro(tmp_path) -> Path:
    (tmp_path / "parts").mkdir()
    (tmp_path / "parts" / "properties.xacro").write_text(PROPERTIES)
    (tmp_path / "parts" / "macros.xacro").write_text(MACROS)
    path = tmp_path / "scara.urdf.xacro"
    path.write_text(SCARA)
    return path


def _toml(tmp_path: Path, urdf: Path, extra: str = "") -> Path:
    """The bundled SCARA's TOML with its URDF replaced by ``urdf``."""
    text = (CONFIGS / "scara.toml").read_text().replace('urdf = "scara.urdf"', f'urdf = "{urdf}"', 1)
    path = tmp_path / "scara_xacro.toml"
    path.write_text(text.replace("\n[joints.j1]", f"{extra}\n[joints.j1]", 1))
    return path


def _minimal(tmp_path: Path, urdf: Path, extra: str = "") -> Path:
    """A robot TOML of ``urdf`` alone (no joint tables, which name the joints)."""
    path = tmp_path / "arm.toml"
    path.write_text(f'urdf = "{urdf}"\n{extra}')
    return path


def _same_model(a: pin.Model, b: pin.Model) -> None:
    assert list(a.names) == list(b.names)
    assert (a.nq, a.nv) == (b.nq, b.nv)
    for i in range(1, a.njoints):
        assert np.allclose(a.jointPlacements[i].homogeneous, b.jointPlacements[i].homogeneous, atol=1e-12)
        assert np.allclose(a.inertias[i].toDynamicParameters(), b.inertias[i].toDynamicParameters(), atol=1e-12)
    rng = np.random.default_rng(3)
    da, db = a.createData(), b.createData()
    for _ in range(5):
        q, v, dv = (rng.uniform(-1, 1, a.nv) for _ in range(3))
        assert np.allclose(pin.rnea(a, da, q, v, dv), pin.rnea(b, db, q, v, dv), rtol=1e-12, atol=1e-12)


def test_xacro_with_defaults_is_the_urdf(scara_xacro):
    """Macros, includes, properties and argument defaults expand to the bundled SCARA: pinocchio builds the same model."""
    expanded = pin.buildModelFromUrdf(str(urdf_of(scara_xacro)))
    reference = pin.buildModelFromUrdf(str(CONFIGS / "scara.urdf"))
    _same_model(expanded, reference)
    assert np.allclose(expanded.upperPositionLimit[2], 6.28)


def test_robot_toml_reads_a_xacro_description(scara_xacro, tmp_path):
    """A robot TOML naming the xacro loads to the SCARA of the URDF, friction overlay and all."""
    robot = load_robot(_toml(tmp_path, scara_xacro))
    reference = load_robot(CONFIGS / "scara.toml")
    _same_model(robot.model, reference.model)
    assert robot.spec.xacro == scara_xacro and robot.spec.urdf.suffix == ".urdf"
    assert [j.friction for j in robot.joints] == [j.friction for j in reference.joints]


def test_arguments_from_toml_and_command_line(scara_xacro, tmp_path):
    """[xacro] arguments change the model; those given to the loader win over the TOML's."""
    toml = _minimal(tmp_path, scara_xacro, extra='[xacro]\nl2 = 0.4\nprefix = "left_"\n')
    robot = load_robot(toml)
    assert robot.joint_names[0] == "left_j1"
    j3 = robot.model.getJointId("left_j3")
    assert robot.model.jointPlacements[j3].translation[1] == pytest.approx(0.4)
    robot = load_robot(toml, xacro_args={"l2": "0.3"})
    assert robot.model.jointPlacements[j3].translation[1] == pytest.approx(0.3)
    assert robot.spec.xacro_args == {"l2": "0.3", "prefix": "left_"}


def test_equal_expansions_share_one_file(scara_xacro, tmp_path):
    """The cache holds one URDF per expanded text: the same arguments give the same file, others another."""
    first, again = urdf_of(scara_xacro), urdf_of(scara_xacro, {"l2": "0.25"})
    other = urdf_of(scara_xacro, {"l2": "0.3"})
    assert first == again != other
    assert len(list((tmp_path / "cache").glob("scara-*.urdf"))) == 2


def test_cli_xacro_arg(scara_xacro, tmp_path, cli):
    """`--xacro-arg name:=value` reaches the model of a command (the joint names change with the prefix)."""
    toml = _minimal(tmp_path, scara_xacro)
    out = tmp_path / "traj.csv"
    result = cli("trajectory", "quintic", toml, "--waypoints", "0,0,0,0; 0.1,0.2,0.1,0.01", "--durations", "0.5", "--out", out, "--xacro-arg", "prefix:=right_")
    assert result.code == 0, result.err
    assert "q.right_j1" in out.read_text().splitlines()[0]


def test_find_resolves_ros_packages(tmp_path, monkeypatch):
    """$(find pkg) resolves through ROS_PACKAGE_PATH (package.xml) and AMENT_PREFIX_PATH (the ament index)."""
    package = tmp_path / "src" / "nested" / "my_arm_description"
    (package / "urdf").mkdir(parents=True)
    (package / "package.xml").write_text("<package format='3'><name>my_arm_description</name></package>")
    (package / "urdf" / "props.xacro").write_text(PROPERTIES)
    prefix = tmp_path / "install"
    (prefix / "share" / "ament_index" / "resource_index" / "packages").mkdir(parents=True)
    (prefix / "share" / "ament_index" / "resource_index" / "packages" / "other_pkg").write_text("")
    monkeypatch.setenv("ROS_PACKAGE_PATH", str(tmp_path / "src"))
    monkeypatch.setenv("AMENT_PREFIX_PATH", str(prefix))
    assert package_share("my_arm_description") == package
    assert package_share("other_pkg") == prefix / "share" / "other_pkg"
    assert package_share("missing_pkg") is None
    path = tmp_path / "arm.urdf.xacro"
    path.write_text(
        '<robot name="arm" xmlns:xacro="http://www.ros.org/wiki/xacro"><xacro:include filename="$(find my_arm_description)/urdf/props.xacro"/>'
        '<link name="base"><visual><geometry><mesh filename="package://my_arm_description/meshes/base.stl"/></geometry></visual></link>'
        '<link name="tip"><visual><geometry><mesh filename="package://unknown_pkg/tip.stl"/></geometry></visual></link>'
        '<joint name="j" type="revolute"><parent link="base"/><child link="tip"/><axis xyz="${vertical}"/>'
        '<limit lower="0" upper="${l1}" effort="1" velocity="1"/></joint></robot>'
    )
    text = expand_xacro(path)
    assert 'upper="0.2"' in text and 'xyz="0 0 1"' in text
    assert (package / "meshes" / "base.stl").as_uri() in text  # resolved
    assert "package://unknown_pkg/tip.stl" in text  # left as it was: meshes are not needed for dynamics


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ('<robot name="x" xmlns:xacro="http://www.ros.org/wiki/xacro"><link name="a"></robot>', "not well-formed XML"),
        ('<robot name="x" xmlns:xacro="http://www.ros.org/wiki/xacro"><link name="$(arg missing)"/></robot>', "missing"),
        ('<robot name="x" xmlns:xacro="http://www.ros.org/wiki/xacro"><xacro:include filename="$(find no_such_pkg)/a.xacro"/></robot>',
         "ROS package 'no_such_pkg' not found"),
        ('<robot name="x" xmlns:xacro="http://www.ros.org/wiki/xacro"><xacro:undefined_macro/></robot>', "undefined_macro"),
    ],
)
def test_bad_xacro_is_one_line_naming_the_file(tmp_path, cli, body, expected, monkeypatch):
    """A malformed file, an undefined argument or macro, an unknown package: exit 2, one line naming the file."""
    monkeypatch.delenv("AMENT_PREFIX_PATH", raising=False)
    monkeypatch.delenv("ROS_PACKAGE_PATH", raising=False)
    bad = tmp_path / "bad.urdf.xacro"
    bad.write_text(body)
    result = cli("constraints", _toml(tmp_path, bad))
    assert result.code == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and str(bad) in lines[0] and expected in lines[0], result.err


def test_error_names_the_included_file(scara_xacro, tmp_path):
    """A fault in an included file names that file."""
    (tmp_path / "parts" / "macros.xacro").write_text(MACROS.replace('${prefix}j${name}', '${prefix}j${name}${no_such_property}'))
    with pytest.raises(ConfigError, match="no_such_property") as info:
        expand_xacro(scara_xacro)
    assert info.value.file == tmp_path / "parts" / "macros.xacro"


def test_refusals_of_arguments(tmp_path, cli):
    """A --xacro-arg without ':=' is refused naming the option; xacro arguments for a plain URDF are refused
    (the accepted cases are the tests above)."""
    with pytest.raises(InputError, match="--xacro-arg"):
        parse_xacro_args(["prefix=left_"])
    assert parse_xacro_args(["a:=1", "b:=x:=y", "a:=2"]) == {"a": "2", "b": "x:=y"}
    result = cli("constraints", CONFIGS / "scara.toml", "--xacro-arg", "prefix:=left_")
    assert result.code == 2 and "not a xacro file" in result.err and len(result.err.strip().splitlines()) == 1
    with pytest.raises(ConfigError, match="not a xacro file"):
        read_robot_spec(_toml(tmp_path, CONFIGS / "scara.urdf", extra='\n[xacro]\nprefix = "a"\n'))


def test_unknown_arguments_are_refused_where_they_were_given(scara_xacro, tmp_path, cli):
    """A [xacro] key or --xacro-arg the description does not know: exit 2, one line naming the key or option, "did you mean"."""
    toml = _minimal(tmp_path, scara_xacro, extra="[xacro]\nl22 = 0.4\n")
    result = cli("constraints", toml)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert f"{toml}: xacro.l22: unknown argument of scara.urdf.xacro (expected one of: l2, prefix); did you mean 'l2'?" in result.err
    result = cli("constraints", _minimal(tmp_path, scara_xacro), "--xacro-arg", "nosuch:=1")
    assert result.code == 2 and "mbctl: error: --xacro-arg nosuch: unknown argument of scara.urdf.xacro (expected one of: l2, prefix)\n" == result.err
    out = tmp_path / "x.urdf"
    result = cli("description", "expand", scara_xacro, "--xacro-arg", "prefx:=a_", "--out", out)
    assert result.code == 2 and "did you mean 'prefix'?" in result.err and not out.exists()


def test_declared_and_read_arguments_are_accepted(scara_xacro, tmp_path, cli):
    """The valid counterparts: a declared argument from the TOML and the command line, and one the file reads without declaring it."""
    assert cli("constraints", _minimal(tmp_path, scara_xacro, extra="[xacro]\nl2 = 0.4\n"), "--xacro-arg", "prefix:=a_").code == 0
    reads = tmp_path / "reads.urdf.xacro"
    reads.write_text(SCARA.replace('<xacro:arg name="prefix" default=""/>', ""))  # $(arg prefix) is still read
    assert expand_xacro(reads, {"prefix": "b_"}).count('name="b_j') == 4


def test_fault_in_the_expansion_names_the_xacro_file_and_arguments(scara_xacro, tmp_path, cli):
    """A bad value reaching the URDF is reported against the xacro file and the arguments that made it; the same file with a number loads."""
    toml = _minimal(tmp_path, scara_xacro)
    result = cli("constraints", toml, "--xacro-arg", "l2:=abc")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    message = result.err.strip()
    assert message.startswith(f"mbctl: error: {scara_xacro}: joint j3 origin: xyz = '0 abc 0'"), message
    assert message.endswith("(in its expansion with l2:=abc)"), message
    assert cli("constraints", toml, "--xacro-arg", "l2:=0.3").code == 0


RECURSIVE = """<robot name="r" xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:macro name="again" params="n"><xacro:again n="${n + 1}"/></xacro:macro>
  <link name="base"/><xacro:again n="0"/>
</robot>"""
TREE = """<robot name="tree" xmlns:xacro="http://www.ros.org/wiki/xacro">
  <xacro:arg name="depth" default="17"/>
  <xacro:macro name="node" params="parent name depth">
    <joint name="${name}_j" type="revolute"><parent link="${parent}"/><child link="${name}"/><axis xyz="0 0 1"/>
      <limit lower="-1" upper="1" velocity="1" effort="1"/></joint>
    <link name="${name}"><inertial><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.01" iyz="0" izz="0.01"/></inertial></link>
    <xacro:if value="${depth > 0}">
      <xacro:node parent="${name}" name="${name}a" depth="${depth - 1}"/>
      <xacro:node parent="${name}" name="${name}b" depth="${depth - 1}"/>
    </xacro:if>
  </xacro:macro>
  <link name="base"/><xacro:node parent="base" name="n" depth="$(arg depth)"/>
</robot>"""


@pytest.mark.parametrize("command", ["constraints", "expand"])
def test_a_macro_calling_itself_is_one_line(tmp_path, cli, command):
    """A self-recursive macro: exit 2, one line naming the file and the macro, in a command loading the robot and in description expand."""
    bad = tmp_path / "again.urdf.xacro"
    bad.write_text(RECURSIVE)
    args = ("constraints", _minimal(tmp_path, bad)) if command == "constraints" else ("description", "expand", bad, "--out", tmp_path / "a.urdf")
    result = cli(*args)
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err[-2000:]
    assert f"{bad}: invalid xacro: macro 'again' is nested 65 deep, more than 64" in result.err
    assert not (tmp_path / "a.urdf").exists()


def test_macros_that_multiply_stop_at_the_link_limit(tmp_path, cli, monkeypatch):
    """A tree macro of 2^18 - 1 links is refused as it passes the link limit (here lowered to 40); the same file at depth 3 (15 links) expands."""
    monkeypatch.setattr("mbctl.xacro_files.MAX_LINKS", 40)
    tree = tmp_path / "tree.urdf.xacro"
    tree.write_text(TREE)
    result = cli("description", "expand", tree, "--out", tmp_path / "t.urdf")
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert "invalid xacro: expands to more than 40 links (macro 'node' reached 41 links" in result.err
    assert cli("description", "expand", tree, "--xacro-arg", "depth:=3", "--out", tmp_path / "t.urdf").code == 0
    assert (tmp_path / "t.urdf").read_text().count("<link ") == 16  # the base and 15 of the tree


def test_limits_are_those_documented():
    """The module docstring's limits: 64 levels, 1000 links, 50000 elements."""
    from mbctl import xacro_files

    assert (xacro_files.MAX_DEPTH, xacro_files.MAX_LINKS, xacro_files.MAX_ELEMENTS) == (64, 1000, 50_000)


@pytest.mark.parametrize("cache", ["file", "under a file", "under /proc"])
def test_an_unusable_cache_is_one_line_before_expanding(scara_xacro, tmp_path, cli, monkeypatch, cache):
    """MBCTL_XACRO_CACHE at a file or an impossible path: exit 2, one line naming the variable; a folder still to be created works."""
    (tmp_path / "afile").write_text("x")
    path = {"file": tmp_path / "afile", "under a file": tmp_path / "afile" / "cache", "under /proc": Path("/proc/no/such/cache")}[cache]
    monkeypatch.setenv(CACHE_ENV, str(path))
    result = cli("constraints", _minimal(tmp_path, scara_xacro))
    assert result.code == 2 and len(result.err.strip().splitlines()) == 1, result.err
    assert result.err.startswith(f"mbctl: error: {CACHE_ENV}={path}: ") and "the cache of expanded xacro descriptions must be a folder" in result.err
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "new" / "cache"))
    assert cli("constraints", _minimal(tmp_path, scara_xacro)).code == 0
    assert len(list((tmp_path / "new" / "cache").glob("scara-*.urdf"))) == 1
