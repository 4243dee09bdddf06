"""Robot descriptions written as xacro (``.urdf.xacro``, ``.xacro``): expanded to URDF where a URDF is read.

ROS packages describe their robots in xacro, XML macros over URDF. :func:`urdf_of` gives the URDF
file of a description: a plain URDF as it is; a xacro file expanded by the ``xacro`` package (the
one ROS uses, from PyPI) with its arguments (``<xacro:arg name=... default=...>``, set by
``--xacro-arg name:=value`` or a robot TOML's ``[xacro]`` table), written once to the cache
``$MBCTL_XACRO_CACHE`` (default ``~/.cache/mbctl/xacro``) under a name made of the file's stem and
the SHA-256 of the URDF text, so every reader (pinocchio, the checks, the viewers, a published
``/robot_description``) gets a plain URDF and equal descriptions share one file.

Package references are resolved as ROS resolves them, without ROS: ``$(find pkg)`` and
``package://pkg/...`` name the share folder of ``pkg``, looked up in ``AMENT_PREFIX_PATH``
(``<prefix>/share/ament_index/resource_index/packages/<pkg>`` marks an installed ROS 2 package:
its share folder is ``<prefix>/share/<pkg>``) and then in ``ROS_PACKAGE_PATH`` (folders holding a
``package.xml`` whose ``<name>`` is ``pkg``, up to three levels down). A ``$(find pkg)`` that does
not resolve is an error naming the file and the package (the URDF cannot be written without it);
``package://`` URIs (meshes: not needed for dynamics) become ``file://`` paths where the package
is found and stay as they are otherwise.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import re
import xml.parsers.expat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from mbctl.errors import ConfigError, InputError

__all__ = ["CACHE_ENV", "XACRO_OPTION", "cache_dir", "is_xacro", "package_share", "parse_xacro_args", "expand_xacro", "urdf_of"]

CACHE_ENV = "MBCTL_XACRO_CACHE"
XACRO_OPTION = "--xacro-arg"
_MAX_DEPTH = 3  # folders below a ROS_PACKAGE_PATH entry searched for package.xml
_NAME = re.compile(r"<name>\s*([^<\s]+)\s*</name>")
_PACKAGE_URI = re.compile(r"package://([^/\"'\s<>]+)")


class PackageNotFound(LookupError):
    """A ROS package named in a description is not installed where ROS looks."""

    def __init__(self, package: str):
        super().__init__(package)
        self.package = package


def is_xacro(path: str | Path) -> bool:
    """Whether ``path`` names a xacro file (``.xacro``, including ``.urdf.xacro``)."""
    return Path(path).name.lower().endswith(".xacro")


def _ros_package_dirs(root: Path, depth: int) -> Iterator[Path]:
    """Folders at most ``depth`` levels below ``root`` (itself included) holding a ``package.xml``."""
    if (root / "package.xml").is_file():
        yield root
        return  # ROS does not look for packages inside a package
    if depth == 0:
        return
    with contextlib.suppress(OSError):
        for child in sorted(root.iterdir()):
            if child.is_dir() and not child.name.startswith("."):
                yield from _ros_package_dirs(child, depth - 1)


def package_share(package: str, environ: Mapping[str, str] | None = None) -> Path | None:
    """The share folder of ROS package ``package`` (module docstring), ``None`` where it is not found."""
    env = os.environ if environ is None else environ
    for prefix in filter(None, env.get("AMENT_PREFIX_PATH", "").split(os.pathsep)):
        if (Path(prefix) / "share" / "ament_index" / "resource_index" / "packages" / package).is_file():
            return Path(prefix) / "share" / package
    for root in filter(None, env.get("ROS_PACKAGE_PATH", "").split(os.pathsep)):
        for folder in _ros_package_dirs(Path(root), _MAX_DEPTH):
            with contextlib.suppress(OSError):
                found = _NAME.search((folder / "package.xml").read_text(errors="replace"))
                if found and found.group(1) == package:
                    return folder
    return None


def parse_xacro_args(items: Sequence[str]) -> dict[str, str]:
    """``name:=value`` strings (``--xacro-arg``, repeatable; the last of a name wins) as a mapping.

    Raises:
        InputError: Naming ``--xacro-arg``, for an item without ``:=`` or with an empty name.
    """
    args: dict[str, str] = {}
    for item in items:
        name, sep, value = item.partition(":=")
        if not sep or not name.strip():
            raise InputError(f"expected name:=value, got {item!r}", field=XACRO_OPTION)
        args[name.strip()] = value
    return args


def _innermost(exc: BaseException) -> BaseException:
    """The exception xacro wrapped (its ``exc`` attribute), followed to the bottom."""
    while getattr(exc, "exc", None) is not None and isinstance(exc.exc, BaseException):
        exc = exc.exc
    return exc


@contextlib.contextmanager
def _ros_context(path: Path) -> Iterator[None]:
    """Have xacro's ``$(find pkg)`` use :func:`package_share`, and ``$(dirname)`` name the folder of
    ``path``, while it runs.

    xacro resolves ``find`` through ament_index_python, a ROS package that is not on PyPI, and the
    PyPI release leaves the file of ``$(dirname)`` unset; both are module globals, so they are set
    for the duration of one expansion (xacro keeps its state in module globals anyway: expansions
    do not run concurrently).
    """
    import xacro
    from xacro import substitution_args

    def find(package: str) -> str:
        share = package_share(package)
        if share is None:
            raise PackageNotFound(package)
        return str(share)

    saved = substitution_args._eval_find, substitution_args._eval_dict["find"]
    substitution_args._eval_find = substitution_args._eval_dict["find"] = find
    xacro.substitution_args_context["filename"] = str(path.resolve())
    try:
        yield
    finally:
        substitution_args._eval_find, substitution_args._eval_dict["find"] = saved
        xacro.substitution_args_context.pop("filename", None)


def expand_xacro(path: str | Path, args: Mapping[str, str] | None = None) -> str:
    """The URDF text of the xacro file ``path`` with the arguments ``args`` (name -> value).

    Raises:
        ConfigError: One line naming the file (the included file where the fault is) for a
            missing or malformed file, an undefined argument, a failed macro or expression, or a
            ``$(find pkg)`` of a package that is not found (named).
    """
    import xacro

    path = Path(path)
    if not path.is_file():
        raise ConfigError("xacro file not found", file=path)
    mappings = {str(k): str(v) for k, v in (args or {}).items()}
    try:
        with _ros_context(path), contextlib.redirect_stderr(io.StringIO()):
            document = xacro.process_file(str(path), mappings=mappings, verbosity=0)
        text = document.toprettyxml(indent="  ")
    except (xacro.XacroException, xml.parsers.expat.ExpatError, PackageNotFound, OSError, ValueError, KeyError, NameError, TypeError) as exc:
        where = _fault_file(xacro, path)
        cause = _innermost(exc)
        if isinstance(cause, PackageNotFound):
            reason = f"ROS package {cause.package!r} not found ($(find {cause.package}): searched AMENT_PREFIX_PATH and ROS_PACKAGE_PATH)"
        elif isinstance(exc, xml.parsers.expat.ExpatError):
            reason = f"not well-formed XML ({exc})"
        else:
            reason = " ".join(str(exc).split()) or type(cause).__name__
        raise ConfigError(f"invalid xacro: {reason}", file=where) from None
    return _PACKAGE_URI.sub(_package_uri, text)


def _fault_file(xacro: object, top: Path) -> Path:
    """The file at fault in a failed expansion: where the macro being expanded was defined, else
    the file being read (an included one), else ``top``."""
    macros = getattr(xacro, "macrostack", None) or []
    with contextlib.suppress(AttributeError, IndexError, TypeError):
        if macros and macros[-1].history[-1][-1]:
            return Path(macros[-1].history[-1][-1])
    files = getattr(xacro, "filestack", None) or []
    return Path(files[-1]) if files and files[-1] else top


def _package_uri(match: re.Match[str]) -> str:
    share = package_share(match.group(1))
    return match.group(0) if share is None else share.resolve().as_uri()


def cache_dir() -> Path:
    """Where expanded descriptions go: ``$MBCTL_XACRO_CACHE``, else ``~/.cache/mbctl/xacro``."""
    env = os.environ.get(CACHE_ENV)
    return Path(env).expanduser() if env else Path.home() / ".cache" / "mbctl" / "xacro"


def urdf_of(path: str | Path, args: Mapping[str, str] | None = None) -> Path:
    """The URDF file of the description ``path``: ``path`` itself for a URDF; for a xacro file the
    cached expansion with ``args`` (module docstring), written atomically on first use.

    Raises:
        ConfigError: As :func:`expand_xacro`; or for xacro arguments given with a plain URDF.
    """
    path = Path(path)
    if not is_xacro(path):
        if args:
            raise ConfigError(f"xacro arguments ({', '.join(sorted(args))}) given, but the description is not a xacro file", file=path)
        return path
    text = expand_xacro(path, args)
    stem = path.name[: -len(".xacro")].removesuffix(".urdf") or "robot"
    target = cache_dir() / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.urdf"
    if not target.is_file():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return target
