"""File helpers shared by every layer: atomic output and validated numeric CSV.

Outputs are written to a temporary file beside the target and renamed into place,
so an interrupted or failed command never leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.errors import DataError, InputError

__all__ = ["atomic_output", "check_output", "write_csv", "read_csv", "CsvTable"]


def check_output(path: str | Path, suffixes: tuple[str, ...] | None = None) -> Path:
    """Check, before any work is done, that ``path`` can be written.

    Raises:
        InputError: If its directory does not exist or its suffix is not one of ``suffixes``.
    """
    path = Path(path)
    if not (path.parent if str(path.parent) else Path(".")).is_dir():
        raise InputError("output directory does not exist", file=path)
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise InputError(f"file type must be one of {', '.join(suffixes)}", file=path)
    return path


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write to; rename it to ``path`` only if the block succeeds.

    The temporary file lives in the target's directory (same file system, so the
    rename is atomic) and keeps the target's suffix, so tools that pick a format
    from the extension (matplotlib) still work.

    Raises:
        InputError: If the target directory does not exist.
    """
    path = check_output(path)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        yield tmp
        # mkstemp creates the file 0600; give it the permissions a plain open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def write_csv(path: str | Path, header: Sequence[str], data: np.ndarray) -> None:
    """Write a numeric table with a one-line header, atomically.

    Numbers are written with 17 significant digits, so reading the file back gives
    the same doubles.
    """
    data = np.asarray(data, dtype=float)
    if data.ndim != 2 or data.shape[1] != len(header):
        raise ValueError(f"table of shape {data.shape} does not match {len(header)} header columns")
    with atomic_output(path) as tmp:
        np.savetxt(tmp, data, delimiter=",", header=",".join(header), comments="", fmt="%.17g")


@dataclass(frozen=True)
class CsvTable:
    """A numeric CSV file: column names, an (N, ncol) array of finite floats, and the
    file line number of every row (for error messages)."""

    path: Path
    header: tuple[str, ...]
    data: np.ndarray
    line_numbers: tuple[int, ...]

    def column(self, name: str) -> np.ndarray:
        """Return one column by name.

        Raises:
            DataError: If the column is missing.
        """
        try:
            return self.data[:, self.header.index(name)]
        except ValueError:
            raise DataError("missing column", file=self.path, field=name) from None

    def has(self, name: str) -> bool:
        return name in self.header


def read_csv(path: str | Path) -> CsvTable:
    """Read a numeric CSV with a header line; every value must be a finite number.

    Raises:
        DataError: If the file is missing, empty, ragged, non-numeric or holds
            NaN/inf (the message names the column and the line).
    """
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        raise DataError("file not found", file=path) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"cannot read file ({exc.__class__.__name__})", file=path) from None
    numbered = [(i + 1, line) for i, line in enumerate(lines) if line.strip()]
    if not numbered:
        raise DataError("empty file", file=path)
    header = tuple(name.strip() for name in numbered[0][1].split(","))
    if len(set(header)) != len(header):
        raise DataError("duplicate column names in header", file=path)
    rows = numbered[1:]
    if not rows:
        raise DataError("no data rows", file=path)
    try:
        data = np.loadtxt([text for _, text in rows], delimiter=",", ndmin=2, dtype=float)
    except ValueError:
        _raise_first_bad_row(path, header, rows)
        raise
    if data.shape[1] != len(header):
        _raise_first_bad_row(path, header, rows)
    bad = ~np.isfinite(data)
    if bad.any():
        row, col = np.argwhere(bad)[0]
        raise DataError(f"non-finite value on line {rows[row][0]}", file=path, field=header[col])
    return CsvTable(path=path, header=header, data=data, line_numbers=tuple(n for n, _ in rows))


def _raise_first_bad_row(path: Path, header: tuple[str, ...], rows: list[tuple[int, str]]) -> None:
    """Find the first ragged or non-numeric line (slow path, only after numpy refused the file)."""
    for lineno, row in rows:
        cells = row.split(",")
        if len(cells) != len(header):
            raise DataError(f"line {lineno} has {len(cells)} values, header has {len(header)}", file=path)
        for name, cell in zip(header, cells):
            try:
                float(cell)
            except ValueError:
                raise DataError(f"line {lineno}: {cell.strip()!r} is not a number", file=path, field=name) from None
