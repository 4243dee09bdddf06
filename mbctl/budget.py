"""Memory, disk and time budgets: a request's size is estimated before the work starts, and refused in one line if it does not fit.

Every command that records samples, rows or cycles computes what it would hold in
memory (``count x bytes per item``, from the request alone) and what it would write,
before anything is allocated, compiled or written:

- memory: refused above the **memory budget**: ``--memory-budget SIZE`` on the command
  line, else the environment variable ``MBCTL_MEMORY_BUDGET``, else half of the memory
  the kernel reports available (``MemAvailable`` in ``/proc/meminfo``);
- disk: refused above the free space of the output's file system (no option raises it).

A refusal is an :class:`~mbctl.errors.InputError` naming the option or field that sets
the size and the estimate, e.g. ``--duration: the run would hold about 7.45 GiB in
memory (1000000002 samples), above the memory budget of 3.9 GiB (half of the
available memory; --memory-budget raises it)``. Sizes are written with binary
prefixes: ``512M``, ``8G``, ``1.5T`` (``K``/``M``/``G``/``T`` = 1024^1..4 bytes; an
optional ``iB`` or ``B``), or a plain number of bytes.

Time: a long computation (a simulation) estimates its wall time before it starts (a pilot
of its first steps, :mod:`mbctl.dynamics.simulation.pilot`); above the **time limit**
(``--time-limit DURATION``, default :data:`DEFAULT_TIME_LIMIT_S` = 24 h; ``none`` lifts it)
it is refused in one line naming the option that sets the size and the estimate; above
:data:`ANNOUNCE_S` the estimate is printed before the run starts. Durations: ``90``,
``90s``, ``30min``, ``12h``, ``3d``.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from dataclasses import dataclass
from pathlib import Path

from mbctl.errors import InputError

__all__ = ["ENV", "OPTION", "TIME_OPTION", "DEFAULT_TIME_LIMIT_S", "ANNOUNCE_S", "parse_duration", "format_duration", "check_run_time", "Budget", "memory_budget", "available_memory", "parse_size", "format_bytes", "format_count", "check_memory", "check_disk", "check_read", "free_space"]

ENV = "MBCTL_MEMORY_BUDGET"
OPTION = "--memory-budget"
# memory per byte of a numeric CSV file read whole and computed on (text, lines, numbers, results;
# measured 3 on a 19 MB trajectory through mbctl feedforward)
READ_FACTOR = 4.0
_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
TIME_OPTION = "--time-limit"
DEFAULT_TIME_LIMIT_S = 24 * 3600.0
# runs estimated longer than this (s) say so before they start
ANNOUNCE_S = 60.0
_TIME_UNITS = {"": 1.0, "s": 1.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*(s|min|h|d)?\s*$", re.IGNORECASE)
_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([KMGTP]?)(?:i?B)?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Budget:
    """How much memory a request may hold (bytes) and where that number came from (for messages)."""

    bytes: float
    source: str


def parse_size(text: str, *, field: str) -> int:
    """``"8G"`` -> 8589934592 bytes (binary prefixes K, M, G, T, P; optional ``iB``/``B``).

    Raises:
        InputError: Naming ``field``, for anything else or a size of zero.
    """
    match = _SIZE.match(str(text))
    if not match:
        raise InputError(f"expected a size such as 512M, 8G or 1.5T, got {text!r}", field=field)
    value = float(match.group(1)) * _UNITS[match.group(2).upper()]
    if not (math.isfinite(value) and value >= 1):
        raise InputError(f"must be at least one byte, got {text!r}", field=field)
    return int(value)


def available_memory() -> float:
    """Memory the kernel can give without swapping (bytes): ``MemAvailable``, else free physical pages."""
    try:
        with open("/proc/meminfo") as fh:
            for line in fh:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0  # the file says kB and means KiB
    except OSError:
        pass
    return float(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))


def memory_budget(option: str | None = None) -> Budget:
    """The memory budget: ``option`` (the ``--memory-budget`` value), else ``$MBCTL_MEMORY_BUDGET``,
    else half of :func:`available_memory`."""
    if option is not None:
        return Budget(parse_size(option, field=OPTION), f"{OPTION} {option}")
    env = os.environ.get(ENV)
    if env:
        return Budget(parse_size(env, field=ENV), f"{ENV}={env}")
    return Budget(available_memory() / 2.0, f"half of the available memory; {OPTION} raises it")


def format_bytes(n: float) -> str:
    """``7.45 GiB``, ``512 MiB``, ``7.28 TiB``: three significant digits, binary prefixes."""
    for unit, size in (("PiB", 1024**5), ("TiB", 1024**4), ("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def format_count(n: float) -> str:
    """A count of samples or rows for a message: ``1000000001``, ``1e+21``, ``unbounded``."""
    return "unbounded" if not math.isfinite(n) else f"{n:.0f}" if n < 1e15 else f"{n:.3g}"


def check_memory(estimate_bytes: float, budget: Budget, *, what: str, field: str, file: str | Path | None = None) -> None:
    """Refuse a request that would hold more than ``budget`` in memory.

    Args:
        estimate_bytes: What the request would hold (bytes); a non-finite estimate counts as too large.
        what: The request in a few words, e.g. ``"the run (1000000002 samples)"``.
        field: The option or file field that sets the size (``--duration``, ``samples``).

    Raises:
        InputError: Naming ``file`` and ``field``, the estimate and the budget.
    """
    if not estimate_bytes <= budget.bytes:  # NaN too
        size = f"would hold about {format_bytes(estimate_bytes)} in memory" if math.isfinite(estimate_bytes) else "has no finite size"
        raise InputError(f"{what} {size}, above the memory budget of {format_bytes(budget.bytes)} ({budget.source})", file=file, field=field)


def check_disk(estimate_bytes: float, path: str | Path, *, what: str, field: str, file: str | Path | None = None) -> None:
    """Refuse a request that would write more than the free space where ``path`` goes.

    Raises:
        InputError: Naming ``file`` and ``field``, the estimate and the free space.
    """
    directory = Path(path).parent if str(Path(path).parent) else Path(".")
    while not directory.exists() and directory != directory.parent:  # an output directory still to be created
        directory = directory.parent
    free = free_space(directory)
    if not estimate_bytes <= free:
        size = f"would write about {format_bytes(estimate_bytes)}" if math.isfinite(estimate_bytes) else "has no finite size to write"
        raise InputError(f"{what} {size} to {directory}, which has {format_bytes(free)} free", file=file, field=field)


def free_space(directory: Path) -> float:
    """Bytes free for an unprivileged user on the file system of ``directory``."""
    return float(shutil.disk_usage(directory).free)


def check_read(path: str | Path, budget: Budget, *, field: str, factor: float = READ_FACTOR) -> None:
    """Refuse to read a data file (or a directory's files) whose contents, read whole (``factor`` x its size), exceed ``budget``.

    A missing file passes: the reader reports it.

    Raises:
        InputError: Naming ``path`` and ``field``.
    """
    path = Path(path)
    try:
        # a directory is a ROS 2 bag: its files together
        size = sum(f.stat().st_size for f in path.iterdir() if f.is_file()) if path.is_dir() else path.stat().st_size
    except OSError:
        return
    check_memory(size * factor, budget, what=f"reading it ({format_bytes(size)})", field=field, file=path)


def parse_duration(text: str, *, field: str) -> float:
    """``"90"``, ``"90s"``, ``"30min"``, ``"12h"``, ``"3d"`` -> seconds; ``"none"`` -> infinity (no limit).

    Raises:
        InputError: Naming ``field``, for anything else or a duration of zero.
    """
    if str(text).strip().lower() in ("none", "inf"):
        return math.inf
    match = _DURATION.match(str(text))
    if not match:
        raise InputError(f"expected a duration such as 90s, 30min, 12h or 3d (or none), got {text!r}", field=field)
    value = float(match.group(1)) * _TIME_UNITS[(match.group(2) or "").lower()]
    if not (math.isfinite(value) and value > 0):
        raise InputError(f"must be > 0, got {text!r}", field=field)
    return value


def format_duration(seconds: float) -> str:
    """``42 s``, ``3.5 min``, ``2.1 h``, ``12 days``, ``3.2e+05 years``: two or three significant digits."""
    if not math.isfinite(seconds):
        return "forever"
    for unit, size, below in (("s", 1.0, 120.0), ("min", 60.0, 7200.0), ("h", 3600.0, 72 * 3600.0), ("days", 86400.0, 730 * 86400.0)):
        if seconds < below:
            return f"{seconds / size:.2g} {unit}" if seconds / size < 10 else f"{seconds / size:.0f} {unit}"
    return f"{seconds / (365.25 * 86400.0):.3g} years"


def check_run_time(estimate_s: float, limit_s: float, *, what: str, field: str, file: str | Path | None = None) -> None:
    """Refuse a request estimated to take longer than ``limit_s`` (s; see the module docstring).

    Args:
        what: The request and how its estimate came about, e.g. ``"the run (1e+13 steps of 5.1 µs measured here)"``.
        field: The option or file field that sets the size (``--step``, ``simulation.duration``).

    Raises:
        InputError: Naming ``file`` and ``field``, the estimate and the limit.
    """
    if not estimate_s <= limit_s:
        raise InputError(f"{what} would take about {format_duration(estimate_s)}, above the time limit of {format_duration(limit_s)} ({TIME_OPTION} raises it)", file=file, field=field)
