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

Refused, one line naming the file: an argument the description neither declares
(``<xacro:arg name=...>``) nor reads (``$(arg ...)``), as a TOML table refuses an unknown key (with
"did you mean"); macros nested more than :data:`MAX_DEPTH` deep (a macro that calls itself without
end); an expansion beyond :data:`MAX_LINKS` links or :data:`MAX_ELEMENTS` elements, counted as the
macros expand, so a small file whose macros multiply themselves stops within seconds (xacro's own
work grows with the square of the document).
"""

from __future__ import annotations

import contextlib
import difflib
import hashlib
import io
import os
import re
import tempfile
import xml.parsers.expat
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from mbctl.errors import ConfigError, InputError

__all__ = [
    "CACHE_ENV", "XACRO_OPTION", "MAX_DEPTH", "MAX_LINKS", "MAX_ELEMENTS", "Origin", "cache_dir", "is_xacro", "package_share", "parse_xacro_args",
    "expand_xacro", "urdf_of", "in_expansion",
]

CACHE_ENV = "MBCTL_XACRO_CACHE"
XACRO_OPTION = "--xacro-arg"
MAX_DEPTH = 64  # macros inside macros: real descriptions nest a few levels
MAX_LINKS = 1000  # links an expansion may hold (a robot arm has tens)
MAX_ELEMENTS = 50_000  # XML elements the macros may produce (a link with visual, collision and inertial is about 15)
Origin = tuple["Path | None", str]  # where a xacro argument was given: (TOML file or None, field or option)
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


class _TooLarge(Exception):
    """An expansion beyond the limits of the module docstring (the message says which)."""


class _Arguments(dict):
    """xacro's argument table (it keeps the very mapping it is given): records every name the
    description declares (``<xacro:arg>`` asks whether it was given) or reads (``$(arg ...)``)."""

    def __init__(self, given: Mapping[str, str]):
        super().__init__(given)
        self.given = frozenset(given)
        self.declared: set[str] = set()
        self.read: set[str] = set()

    def __contains__(self, name: object) -> bool:
        self.declared.add(str(name))
        return super().__contains__(name)

    def __getitem__(self, name: str) -> str:
        self.read.add(name)
        return super().__getitem__(name)


class _Guard:
    """Counts the macros as xacro resolves them (once per expansion): nesting depth, links and elements
    (each macro's body counted once, its conditional blocks included), refusing beyond the limits."""

    def __init__(self, xacro: object):
        self.xacro, self.resolve = xacro, xacro.resolve_macro
        self.links = self.elements = 0
        self.sizes: dict[int, tuple[int, int]] = {}

    def __call__(self, fullname: str, macros: object, symbols: object) -> tuple:
        found = self.resolve(fullname, macros, symbols)
        body = found[2].body
        if id(body) not in self.sizes:
            self.sizes[id(body)] = (len(body.getElementsByTagName("link")), len(body.getElementsByTagName("*")))
        links, elements = self.sizes[id(body)]
        self.links += links
        self.elements += elements
        depth = len(self.xacro.macrostack or []) + 1
        if depth > MAX_DEPTH:
            raise _TooLarge(f"macro {fullname!r} is nested {depth} deep, more than {MAX_DEPTH} (a macro that calls itself without end?)")
        if self.links > MAX_LINKS or self.elements > MAX_ELEMENTS:
            size = f"{self.links} links" if self.links > MAX_LINKS else f"{self.elements} elements"
            limit = f"{MAX_LINKS} links" if self.links > MAX_LINKS else f"{MAX_ELEMENTS} elements"
            raise _TooLarge(f"expands to more than {limit} (macro {fullname!r} reached {size}: macros that multiply themselves?)")
        return found


def _innermost(exc: BaseException) -> BaseException:
    """The exception xacro wrapped (its ``exc`` attribute), followed to the bottom."""
    while getattr(exc, "exc", None) is not None and isinstance(exc.exc, BaseException):
        exc = exc.exc
    return exc


@contextlib.contextmanager
def _ros_context(path: Path) -> Iterator[None]:
    """Have xacro's ``$(find pkg)`` use :func:`package_share`, ``$(dirname)`` name the folder of
    ``path`` and its macro resolution count the expansion (:class:`_Guard`), while it runs.

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

    saved = substitution_args._eval_find, substitution_args._eval_dict["find"], xacro.resolve_macro
    substitution_args._eval_find = substitution_args._eval_dict["find"] = find
    xacro.resolve_macro = _Guard(xacro)
    xacro.substitution_args_context["filename"] = str(path.resolve())
    try:
        yield
    finally:
        substitution_args._eval_find, substitution_args._eval_dict["find"], xacro.resolve_macro = saved
        xacro.substitution_args_context.pop("filename", None)


def expand_xacro(path: str | Path, args: Mapping[str, str] | None = None, origin: Mapping[str, Origin] | None = None) -> str:
    """The URDF text of the xacro file ``path`` with the arguments ``args`` (name -> value).

    Args:
        origin: Where each argument was given, for the error that refuses it (default: ``--xacro-arg``).

    Raises:
        ConfigError: One line naming the file (the included file where the fault is) for a
            missing or malformed file, an undefined argument, a failed macro or expression, a
            ``$(find pkg)`` of a package that is not found (named), or an expansion beyond the limits
            (module docstring); naming where it was given, for an argument the file does not know.
    """
    import xacro

    path = Path(path)
    if not path.is_file():
        raise ConfigError("xacro file not found", file=path)
    mappings = _Arguments({str(k): str(v) for k, v in (args or {}).items()})
    try:
        with _ros_context(path), contextlib.redirect_stderr(io.StringIO()):
            document = xacro.process_file(str(path), mappings=mappings, verbosity=0)
        text = document.toprettyxml(indent="  ")
    except (xacro.XacroException, xml.parsers.expat.ExpatError, PackageNotFound, OSError, ValueError, KeyError, NameError, TypeError,
            _TooLarge, RecursionError, MemoryError) as exc:  # fmt: skip
        where = _fault_file(xacro, path)
        cause = _innermost(exc)
        if isinstance(cause, PackageNotFound):
            reason = f"ROS package {cause.package!r} not found ($(find {cause.package}): searched AMENT_PREFIX_PATH and ROS_PACKAGE_PATH)"
        elif isinstance(exc, xml.parsers.expat.ExpatError):
            reason = f"not well-formed XML ({exc})"
        elif isinstance(cause, RecursionError):
            reason = "macros or expressions nested without end (Python's recursion limit reached)"
        elif isinstance(cause, MemoryError):
            reason = "the expansion does not fit in memory"
        elif isinstance(cause, _TooLarge):
            reason = str(cause)
        else:
            reason = " ".join(str(exc).split()) or type(cause).__name__
        raise ConfigError(f"invalid xacro: {reason}", file=where) from None
    _refuse_unknown(path, mappings, origin or {})
    return _PACKAGE_URI.sub(_package_uri, text)


def _refuse_unknown(path: Path, arguments: _Arguments, origin: Mapping[str, Origin]) -> None:
    """Refuse the first argument given that the description neither declared nor read, where it was given."""
    known = arguments.declared | arguments.read
    for name in sorted(set(arguments.given) - known):
        file, field = origin.get(name, (None, f"{XACRO_OPTION} {name}"))
        declared = sorted(arguments.declared)
        expected = f"expected one of: {', '.join(declared)}" if declared else "it declares none"
        close = difflib.get_close_matches(name, declared, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise ConfigError(f"unknown argument of {path.name} ({expected}){hint}", file=file, field=field)


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


def urdf_of(path: str | Path, args: Mapping[str, str] | None = None, origin: Mapping[str, Origin] | None = None) -> Path:
    """The URDF file of the description ``path``: ``path`` itself for a URDF; for a xacro file the
    cached expansion with ``args`` (module docstring; ``origin`` as :func:`expand_xacro`), written
    atomically on first use.

    Raises:
        ConfigError: As :func:`expand_xacro`; or for xacro arguments given with a plain URDF.
        InputError: When the cache cannot hold the expansion (checked before expanding).
    """
    path = Path(path)
    if not is_xacro(path):
        if args:
            raise ConfigError(f"xacro arguments ({', '.join(sorted(args))}) given, but the description is not a xacro file", file=path)
        return path
    directory = _usable_cache()
    text = expand_xacro(path, args, origin)
    stem = path.name[: -len(".xacro")].removesuffix(".urdf") or "robot"
    target = directory / f"{stem}-{hashlib.sha256(text.encode()).hexdigest()[:16]}.urdf"
    if not target.is_file():
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(text)
            os.replace(tmp, target)
        except OSError as exc:  # full, or changed since it was checked
            raise InputError(f"cannot write {target.name} there ({exc.strerror or type(exc).__name__})", **_cache_where(directory)) from None
        finally:
            tmp.unlink(missing_ok=True)
    return target


def in_expansion(exc: InputError, urdf: Path, xacro: Path, args: Mapping[str, str]) -> InputError:
    """``exc`` about the cached expansion ``urdf`` of ``xacro`` as an error about ``xacro`` expanded with
    ``args`` (the cache file's name means nothing to its author); other errors as they are."""
    if exc.file is None or exc.file != urdf:
        return exc
    given = ", ".join(f"{k}:={v}" for k, v in sorted(args.items())) or "its defaults"
    return type(exc)(f"{exc.reason} (in its expansion with {given})", file=xacro, field=exc.field)


def _cache_where(directory: Path) -> dict[str, object]:
    """How an error names the cache: by the variable that set it, else by its path."""
    return {"field": f"{CACHE_ENV}={os.environ[CACHE_ENV]}"} if os.environ.get(CACHE_ENV) else {"file": directory}


def _usable_cache() -> Path:
    """The cache folder, created if needed and checked to take a new file (before any expansion).

    Raises:
        InputError: Naming ``$MBCTL_XACRO_CACHE`` (or the default folder), when it is a file or cannot be
            created or written.
    """
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        reason = "is a file" if directory.is_file() else f"cannot be created or written ({exc.strerror or type(exc).__name__})"
        raise InputError(f"{reason}: the cache of expanded xacro descriptions must be a folder mbctl can write ({CACHE_ENV})", **_cache_where(directory)) from None
    return directory
