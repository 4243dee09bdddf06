"""ROS 2 interface types that PyPI does not ship, built from their definitions at first use.

mbctl's ``ros2`` extra installs rclpy and the message packages that exist as wheels
(``geometry_msgs``, ``sensor_msgs``, ``std_msgs`` ...). Two it needs do not:

- ``tf2_msgs/msg/TFMessage`` for ``/tf`` (what RViz and Foxglove read);
- ``controller_manager_msgs/srv/SwitchController`` and ``ListControllers`` (with its messages
  ``ControllerState`` and ``ChainConnection``), ros2_control's controller manager services.

Where a sourced ROS 2 installation (or any other source on ``sys.path``) provides these packages,
:func:`tf_message_type` and :func:`switch_controller_type` return its classes. Otherwise the
package is generated from the definitions shipped in ``hardware/ros2/idl/`` with rosidl's own
generators (the ``rosidl_*`` Python packages that come with rclpy's wheels: msg -> IDL, the type
description and its RIHS01 hash, the C structs, the C type support of the middleware, the Python
classes and their C extension) and compiled with the system compilers (``cc``/``c++``, as
``$CC``/``$CXX`` may say) into the libraries of ROS's layout and the package's extension module,
which is then imported. No CMake, no ament: the generators are called as Python functions.

The wire names and type hashes are those of the official packages: the same definitions go through
the same generators (tests/test_ros2_interfaces.py compares the hash with an independent computation).

**Type support.** As in the official packages, the C type supports of Fast DDS
(``rosidl_typesupport_fastrtps_c``: serialization) and of introspection
(``rosidl_typesupport_introspection_c``: the type object rmw_fastrtps_cpp registers, and what other
middlewares use) are built, behind rosidl_typesupport_c's dispatch; :func:`_compile` says how the
dispatch finds them in a cache directory that is not on ``LD_LIBRARY_PATH``.

**Cache.** Built packages live in ``$MBCTL_ROS2_INTERFACES_CACHE`` (default
``~/.cache/mbctl/ros2-interfaces``), one directory per package named by the SHA-256 of the
definitions, this module's source, the versions of the generators, of the dependencies and of
the runtime libraries, the Python version and ABI, the compilers and the install prefixes. A build runs in a temporary
directory inside the cache and is renamed into place, with a manifest holding the SHA-256 of every
shared library; an entry whose manifest is missing or does not match its files is removed and
rebuilt. A file lock per entry makes concurrent processes (pytest-xdist workers) wait for one build
instead of repeating it. A cold build takes about 4 s for tf2_msgs and 5 s for
controller_manager_msgs on two busy cores (:attr:`BuildResult.seconds`).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib
import io
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mbctl.hardware.ros2.runtime import INSTALL_HINT, Ros2Unavailable, require_rclpy

__all__ = [
    "CACHE_ENV",
    "PACKAGES",
    "BuildResult",
    "InterfacePackage",
    "build_package",
    "cache_dir",
    "interface_type",
    "list_controllers_type",
    "switch_controller_type",
    "tf_message_type",
]

CACHE_ENV = "MBCTL_ROS2_INTERFACES_CACHE"
IDL_DIR = Path(__file__).resolve().parent / "idl"
_FORMAT = 1  # bump when the build layout changes
_MANIFEST = "mbctl-build.json"


@dataclass(frozen=True)
class InterfacePackage:
    """An interface package built from definitions shipped with mbctl.

    Attributes:
        name: ROS package name (the Python package and the wire name's first part).
        files: Definition files relative to ``idl/<name>/`` (``msg/X.msg``, ``srv/Y.srv``).
        depends: Interface packages its definitions refer to, directly or through others.
        origin: Where the definitions come from, and their licence.
    """

    name: str
    files: tuple[str, ...]
    depends: tuple[str, ...]
    origin: str


PACKAGES: dict[str, InterfacePackage] = {
    "tf2_msgs": InterfacePackage(
        "tf2_msgs", ("msg/TFMessage.msg",), ("geometry_msgs", "std_msgs", "builtin_interfaces"), "ros2/geometry2 (BSD-3-Clause)"
    ),
    "controller_manager_msgs": InterfacePackage(
        "controller_manager_msgs",
        ("msg/ChainConnection.msg", "msg/ControllerState.msg", "srv/ListControllers.srv", "srv/SwitchController.srv"),
        ("builtin_interfaces", "service_msgs"),
        "ros-controls/ros2_control, jazzy (Apache-2.0)",
    ),
}

# rosidl packages whose versions shape the generated code (part of the cache key, with the
# dependencies' and the runtime libraries' versions: the build links against their C structs)
_GENERATORS = (
    "rosidl_adapter", "rosidl_parser", "rosidl_generator_c", "rosidl_generator_py", "rosidl_generator_type_description",
    "rosidl_typesupport_c", "rosidl_typesupport_fastrtps_c", "rosidl_typesupport_introspection_c",
)
# the runtime libraries the compiled module links against (beside the dependencies' own)
_RUNTIME_LIBS = (
    "rosidl_runtime_c", "rosidl_typesupport_c", "rosidl_typesupport_fastrtps_c", "rosidl_typesupport_fastrtps_cpp",
    "rosidl_typesupport_introspection_c", "rosidl_dynamic_typesupport", "fastcdr", "rcutils",
)
# the middleware type supports compiled for every package (rmw_fastrtps_cpp uses both)
_TYPESUPPORTS = ("rosidl_typesupport_fastrtps_c", "rosidl_typesupport_introspection_c")
_INCLUDE_PKGS = (
    "rosidl_runtime_c", "rosidl_typesupport_interface", "rosidl_typesupport_c", "rosidl_typesupport_fastrtps_c",
    "rosidl_typesupport_fastrtps_cpp", "rosidl_typesupport_introspection_c", "rosidl_dynamic_typesupport", "rcutils",
    "rosidl_typesupport_cpp", "rosidl_runtime_cpp", "rmw", "fastcdr", "type_description_interfaces",
)


@dataclass(frozen=True)
class BuildResult:
    """Where a built interface package lives and what its build cost.

    Attributes:
        package: ROS package name.
        path: Directory to put on ``sys.path`` (holds the Python package).
        reused: True when the cache held a valid build.
        seconds: Wall time of the build (0 when reused), in s.
    """

    package: str
    path: Path
    reused: bool
    seconds: float


def cache_dir() -> Path:
    """The build cache: ``$MBCTL_ROS2_INTERFACES_CACHE``, else ``~/.cache/mbctl/ros2-interfaces``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mbctl" / "ros2-interfaces"


def _prefixes() -> list[Path]:
    """Install prefixes to find interface definitions, headers and libraries in.

    ``AMENT_PREFIX_PATH`` (a sourced ROS 2) first, then the prefix rosidl's Python packages were
    installed under (``<prefix>/lib/pythonX.Y/site-packages/...``: a venv or ``/opt/ros/<distro>``).
    """
    found = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    try:
        import rosidl_generator_c

        found.append(Path(rosidl_generator_c.__file__).resolve().parents[4])
    except ImportError:
        pass
    found.append(Path(sys.prefix))
    unique: list[Path] = []
    for p in found:
        if p not in unique and p.is_dir():
            unique.append(p)
    return unique


def _share(prefixes: list[Path], package: str) -> Path:
    for prefix in prefixes:
        if (prefix / "share" / package).is_dir():
            return prefix / "share" / package
    raise Ros2Unavailable(f"ROS 2 package {package} not found under {', '.join(map(str, prefixes)) or 'no prefix'}; {INSTALL_HINT}")


def _compilers() -> tuple[list[str], list[str]]:
    """C and C++ compiler commands: ``$CC``/``$CXX`` (split like a shell would), else cc/gcc and c++/g++."""
    found = []
    for env, names in (("CC", ("cc", "gcc")), ("CXX", ("c++", "g++"))):
        cmd = shlex.split(os.environ.get(env, ""))
        if not (cmd and shutil.which(cmd[0])):
            path = next((shutil.which(n) for n in names if shutil.which(n)), None)
            if path is None:
                raise Ros2Unavailable(f"building ROS 2 interfaces needs a C and a C++ compiler (${env}, or {' or '.join(names)} on the PATH)")
            cmd = [path]
        found.append(cmd)
    return found[0], found[1]


def _compiler_identity(cmd: list[str]) -> str:
    try:
        done = subprocess.run([*cmd, "--version"], capture_output=True, text=True, timeout=30)
        first = (done.stdout or done.stderr).strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        first = []
    return f"{shutil.which(cmd[0])} {' '.join(cmd[1:])} | {first[0] if first else ''}"


def _versions(prefixes: list[Path], names: tuple[str, ...]) -> str:
    """``name=version`` of each ROS package from its ``package.xml`` (wheels and a sourced ROS 2 alike have one)."""
    parts = []
    for name in names:
        try:
            found = re.search(r"<version>([^<]*)</version>", (_share(prefixes, name) / "package.xml").read_text())
            parts.append(f"{name}={found.group(1).strip() if found else '?'}")
        except (Ros2Unavailable, OSError):
            parts.append(f"{name}=?")
    return ";".join(parts)


def _key(pkg: InterfacePackage, prefixes: list[Path], cc: list[str], cxx: list[str]) -> str:
    h = hashlib.sha256()
    for item in (
        f"format {_FORMAT}", pkg.name, _versions(prefixes, (*_GENERATORS, *pkg.depends, *_RUNTIME_LIBS)), sysconfig.get_config_var("EXT_SUFFIX") or "", sys.version,
        _compiler_identity(cc), _compiler_identity(cxx), *map(str, prefixes),
    ):
        h.update(item.encode() + b"\0")
    h.update(Path(__file__).read_bytes())  # the build steps themselves
    for rel in pkg.files:
        h.update(rel.encode() + b"\0" + (IDL_DIR / pkg.name / rel).read_bytes() + b"\0")
    return h.hexdigest()[:20]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _extension_name(pkg: InterfacePackage) -> str:
    return f"{pkg.name}_s__rosidl_typesupport_c{sysconfig.get_config_var('EXT_SUFFIX') or '.so'}"


def _valid(entry: Path) -> bool:
    """A complete build: every shared library the manifest lists, with its SHA-256, and the Python package."""
    try:
        manifest = json.loads((entry / _MANIFEST).read_text())
        binaries = manifest["sha256"]
        return (
            len(binaries) >= 5
            and all(_sha256(entry / rel) == digest for rel, digest in binaries.items())
            and (entry / manifest["package"] / "__init__.py").is_file()
        )
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


@contextlib.contextmanager
def _locked(path: Path):
    """An exclusive advisory lock on ``path`` (created if missing) for the duration of the block."""
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def _generate(pkg: InterfacePackage, prefixes: list[Path], work: Path) -> Path:
    """Run rosidl's generators into ``work/<generator>/<package>``; returns the generated Python package."""
    from rosidl_adapter.msg import convert_msg_to_idl
    from rosidl_adapter.srv import convert_srv_to_idl
    from rosidl_generator_c import generate_c
    from rosidl_generator_py import generate_py
    from rosidl_generator_type_description import generate_type_hash
    from rosidl_typesupport_c import generate_c as generate_typesupport_c
    from rosidl_typesupport_fastrtps_c import generate_typesupport_fastrtps_c
    from rosidl_typesupport_introspection_c import generate_c as generate_introspection_c

    src = work / "src" / pkg.name
    idl_root = work / "idl"
    idl_files = []
    for rel in pkg.files:
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(IDL_DIR / pkg.name / rel, src / rel)
        convert = convert_msg_to_idl if rel.endswith(".msg") else convert_srv_to_idl
        (idl_root / Path(rel).parent).mkdir(parents=True, exist_ok=True)
        convert(src, pkg.name, Path(rel), idl_root / Path(rel).parent)
        idl_files.append(str(Path(rel).with_suffix(".idl")))
    idl_tuples = [f"{idl_root}:{rel}" for rel in idl_files]
    shares = {dep: _share(prefixes, dep) for dep in pkg.depends}
    deps = [f"{dep}:{idl}" for dep, share in shares.items() for idl in sorted(share.glob("*/*.idl"))]

    def arguments(name: str, generator: str, **extra: Any) -> str:
        out = work / name / pkg.name
        path = work / f"{name}.json"
        path.write_text(json.dumps({
            "package_name": pkg.name, "output_dir": str(out), "template_dir": str(_share(prefixes, generator) / "resource"),
            "idl_tuples": idl_tuples, "ros_interface_dependencies": deps, "target_dependencies": [], **extra,
        }))
        return str(path)

    described = work / "description" / pkg.name
    generate_type_hash(arguments("description", "rosidl_generator_type_description", include_paths=[f"{d}:{s}" for d, s in shares.items()]))
    described_tuples = [f"{rel}:{described / Path(rel).with_suffix('.json')}" for rel in idl_files]
    sources = [str(src / rel) for rel in pkg.files]
    for name, generator in (("c", "rosidl_generator_c"), ("fastrtps_c", "rosidl_typesupport_fastrtps_c"), ("introspection_c", "rosidl_typesupport_introspection_c")):
        header = f"{generator}__visibility_control.h"
        text = (_share(prefixes, generator) / "resource" / f"{header}.in").read_text()
        (work / name / pkg.name / "msg").mkdir(parents=True, exist_ok=True)
        (work / name / pkg.name / "msg" / header).write_text(text.replace("@PROJECT_NAME@", pkg.name).replace("@PROJECT_NAME_UPPER@", pkg.name.upper()))
    generate_c(arguments("c", "rosidl_generator_c", type_description_tuples=described_tuples, ros_interface_files=sources))
    generate_typesupport_fastrtps_c(arguments("fastrtps_c", "rosidl_typesupport_fastrtps_c"))
    generate_introspection_c(arguments("introspection_c", "rosidl_typesupport_introspection_c"))
    generate_typesupport_c(arguments("typesupport_c", "rosidl_typesupport_c"), list(_TYPESUPPORTS))
    generate_py(arguments("py", "rosidl_generator_py"), ["rosidl_typesupport_c"])
    py_out = work / "py" / pkg.name
    (py_out / "__init__.py").touch()
    return py_out


def _compile(pkg: InterfacePackage, prefixes: list[Path], work: Path, py_out: Path, lib: Path, cc: list[str], cxx: list[str]) -> Path:
    """Compile the generated sources into the libraries of ROS's layout in ``lib`` and the extension in ``py_out``.

    ``lib<package>__rosidl_generator_c.so`` (structs, functions, type description),
    ``lib<package>__rosidl_typesupport_{fastrtps,introspection}_c.so`` (the middleware type
    supports), ``lib<package>__rosidl_typesupport_c.so`` (the dispatch among them) and
    ``<package>_s__rosidl_typesupport_c`` (the Python extension). The dispatch opens a type support
    (``dlopen``) by its bare file name, which the dynamic linker looks up on the ``LD_LIBRARY_PATH`` the
    process started with, where a cache directory is not; but a library already loaded under that
    name (its SONAME) is returned as it is. So every library carries its file name as SONAME, and the
    extension lists both type supports as its own dependencies (found through its RPATH), so they are
    loaded with it.
    """
    import numpy

    includes = [work / name for name in ("c", "fastrtps_c", "introspection_c", "typesupport_c", "py")]
    for name in (*pkg.depends, *_INCLUDE_PKGS):
        includes += [p / "include" / name for p in prefixes if (p / "include" / name).is_dir()]
    includes += [p / "include" for p in prefixes if (p / "include").is_dir()]  # libraries outside ROS's layout (fastcdr)
    includes += [Path(sysconfig.get_paths()["include"]), Path(numpy.get_include())]
    lib_dirs = [p / "lib" for p in prefixes if (p / "lib").is_dir()]
    flags = ["-O2", "-fPIC", *(f"-I{i}" for i in includes)]
    dep_libs = [f"{dep}__{kind}" for dep in pkg.depends for kind in ("rosidl_generator_c", "rosidl_generator_py", *_TYPESUPPORTS)]
    own: list[str] = []
    units = [
        ("c", f"lib{pkg.name}__rosidl_generator_c.so", work / "c"),
        *((ts.removeprefix("rosidl_typesupport_"), f"lib{pkg.name}__{ts}.so", work / ts.removeprefix("rosidl_typesupport_")) for ts in _TYPESUPPORTS),
        ("typesupport_c", f"lib{pkg.name}__rosidl_typesupport_c.so", work / "typesupport_c"),
        ("py", _extension_name(pkg), py_out),
    ]
    lib.mkdir(parents=True, exist_ok=True)
    for name, target, directory in units:
        objects = []
        for n, source in enumerate(sorted(p for p in directory.rglob("*") if p.suffix in (".c", ".cpp"))):
            obj = work / "obj" / name / f"{n}.o"
            obj.parent.mkdir(parents=True, exist_ok=True)
            compiler = [*cxx, "-std=c++17"] if source.suffix == ".cpp" else [*cc, "-std=c11"]
            _run([*compiler, *flags, "-c", str(source), "-o", str(obj)], source.name)
            objects.append(str(obj))
        out = (py_out if name == "py" else lib) / target
        rpath = ["-Wl,-rpath,$ORIGIN" if name != "py" else f"-Wl,-rpath,$ORIGIN/../{lib.name}", *(f"-Wl,-rpath,{d}" for d in lib_dirs)]
        link = [f"-L{lib}", *(f"-L{d}" for d in lib_dirs), *rpath, *(f"-l{x}" for x in (*own, *dep_libs, *_RUNTIME_LIBS))]
        if name == "py":  # loaded with the extension, so that the dispatch's dlopen by name finds them (see below)
            link = ["-Wl,--no-as-needed", *(f"-l{pkg.name}__{ts}" for ts in _TYPESUPPORTS), "-Wl,--as-needed", *link]
        _run([*cxx, "-shared", f"-Wl,-soname,{target}", "-o", str(out), *objects, *link], target)
        if name in ("c", "typesupport_c"):
            own.append(target.removeprefix("lib").removesuffix(".so"))
    for source in py_out.rglob("*.c"):
        source.unlink()
    return py_out / _extension_name(pkg)


def _run(cmd: list[str], what: str) -> None:
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        lines = [ln.strip() for ln in (done.stderr or done.stdout).splitlines() if "error" in ln] or ["no output"]
        raise Ros2Unavailable(f"building ROS 2 interfaces: {Path(cmd[0]).name} failed on {what}: {lines[0]}")


def build_package(name: str, cache: Path | None = None) -> BuildResult:
    """Build the interface package ``name`` (a key of :data:`PACKAGES`) into the cache, or reuse it.

    Raises:
        Ros2Unavailable: rosidl's generators, a dependency or a compiler is missing, or a build
            step fails (one line naming it).
    """
    pkg = PACKAGES[name]
    require_rclpy("rosidl_generator_c", "rosidl_generator_py", "rosidl_adapter", "rosidl_generator_type_description", *_TYPESUPPORTS, "rosidl_typesupport_c")
    prefixes = _prefixes()
    cc, cxx = _compilers()
    root = cache or cache_dir()
    root.mkdir(parents=True, exist_ok=True)
    entry = root / f"{pkg.name}-{_key(pkg, prefixes, cc, cxx)}"
    if _valid(entry):
        return BuildResult(pkg.name, entry, True, 0.0)
    with _locked(root / f"{entry.name}.lock"):
        if _valid(entry):  # another process built it while this one waited
            return BuildResult(pkg.name, entry, True, 0.0)
        for stale in root.glob(f".{entry.name}.*"):  # left by a killed build: under this lock no build of this entry runs
            shutil.rmtree(stale, ignore_errors=True)
        start = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix=f".{entry.name}.", dir=root) as tmp:
            work, staged = Path(tmp) / "gen", Path(tmp) / "entry"
            with contextlib.redirect_stdout(io.StringIO()):  # the generators print every file they write
                try:
                    py_out = _generate(pkg, prefixes, work)
                except Ros2Unavailable:
                    raise
                except Exception as exc:  # the generators raise anything from KeyError to their own errors
                    raise Ros2Unavailable(f"generating ROS 2 interfaces {pkg.name}: {type(exc).__name__}: {exc}") from None
            _compile(pkg, prefixes, work, py_out, staged / "lib", cc, cxx)
            shutil.move(str(py_out), staged / pkg.name)
            binaries = {str(f.relative_to(staged)): _sha256(f) for f in sorted(staged.rglob("*.so"))}
            manifest = {"package": pkg.name, "origin": pkg.origin, "sha256": binaries}
            (staged / _MANIFEST).write_text(json.dumps(manifest, indent=1))
            if entry.exists():  # a broken entry: moved aside, then removed with the temporary directory
                entry.rename(Path(tmp) / "broken")
            staged.rename(entry)
        return BuildResult(pkg.name, entry, False, time.perf_counter() - start)


def interface_type(package: str, kind: str, name: str) -> Any:
    """The class ``package.kind.name`` (e.g. ``"tf2_msgs", "msg", "TFMessage"``).

    Imported from wherever Python finds ``package`` (a sourced ROS 2); else built from mbctl's
    definitions (:func:`build_package`) and imported from the cache.

    Raises:
        Ros2Unavailable: rclpy is missing or the package cannot be built (one line).
    """
    require_rclpy()
    module = f"{package}.{kind}"
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        if package not in PACKAGES or package in sys.modules:
            raise Ros2Unavailable(f"ROS 2 interface {package}/{kind}/{name} cannot be imported; {INSTALL_HINT}") from None
    built = build_package(package)
    if str(built.path) not in sys.path:
        sys.path.insert(0, str(built.path))
    importlib.invalidate_caches()
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise Ros2Unavailable(f"ROS 2 interface {package}/{kind}/{name} built in {built.path} but not importable: {exc}") from None


def tf_message_type() -> Any:
    """``tf2_msgs.msg.TFMessage`` (wire name ``tf2_msgs/msg/TFMessage``): ``transforms``, a list of
    ``geometry_msgs.msg.TransformStamped`` (translation in m, rotation as a unit quaternion x, y, z, w)."""
    return interface_type("tf2_msgs", "msg", "TFMessage")


def switch_controller_type() -> Any:
    """``controller_manager_msgs.srv.SwitchController`` (wire name ``controller_manager_msgs/srv/SwitchController``).

    Request: ``activate_controllers``, ``deactivate_controllers`` (controller names),
    ``strictness`` (``BEST_EFFORT`` = 1, ``STRICT`` = 2), ``activate_asap``, ``timeout``
    (builtin_interfaces Duration; zero waits without limit). Response: ``ok``, ``message``.
    """
    return interface_type("controller_manager_msgs", "srv", "SwitchController")


def list_controllers_type() -> Any:
    """``controller_manager_msgs.srv.ListControllers``: an empty request; the response's ``controller``
    lists ``ControllerState`` messages (``name``, ``state``: ``"active"``, ``"inactive"``, ...,
    ``type``, ``claimed_interfaces``, ...)."""
    return interface_type("controller_manager_msgs", "srv", "ListControllers")
