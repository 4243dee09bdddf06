"""File helpers shared by every layer: atomic output, NPZ files written a block at a time, validated numeric CSV.

Outputs are written to a temporary file beside the target and renamed into place,
so an interrupted or failed command never leaves a half-written file behind.
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import tempfile
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.errors import DataError, InputError

__all__ = [
    "atomic_output", "check_output", "check_output_dir", "check_writable", "write_csv", "read_csv", "CsvTable", "RowBlocks", "write_npz", "NpzParts", "npz_shapes",
    "read_npz_blocks",
]


def check_output(path: str | Path, suffixes: tuple[str, ...] | None = None) -> Path:
    """Check, before any work is done, that ``path`` can be written: its directory exists and takes a
    new file (:func:`check_writable`), ``path`` is not a directory, its suffix is one of ``suffixes``.

    Raises:
        InputError: Naming ``path``, when it cannot be written (and why).
    """
    path = Path(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise InputError("output directory does not exist", file=path)
    if suffixes is not None and path.suffix.lower() not in suffixes:
        raise InputError(f"file type must be one of {', '.join(suffixes)}", file=path)
    if path.is_dir():
        raise InputError("is a directory, not a file", file=path)
    check_writable(directory, path)
    return path


def check_output_dir(path: str | Path) -> Path:
    """Check, before any work is done, that the output directory ``path`` exists and takes new files,
    or can be created (its parent exists and takes new files); the command creates it
    (``mkdir(exist_ok=True)``) when it writes.

    Raises:
        InputError: If ``path`` is a file, or it (an existing directory) or its parent cannot be written.
    """
    path = Path(path)
    if path.exists() and not path.is_dir():
        raise InputError("is a file, not a directory", file=path)
    if path.is_dir():
        check_writable(path, path)
        return path
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise InputError("output directory does not exist", file=path)
    check_writable(parent, path)
    return path


def check_writable(directory: Path, path: Path) -> None:
    """Check that ``directory`` takes a new file, by making one (unnamed where the file system allows:
    ``O_TMPFILE``) and removing it at once. Permission bits alone do not tell: root ignores them, while a
    read-only mount, ``/proc`` or ``/sys`` refuse every user.

    Raises:
        InputError: Naming ``path`` (the output asked for), with the system's reason.
    """
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise InputError(f"cannot create files in {directory} ({exc.strerror or type(exc).__name__})", file=path) from None


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path to write to; rename it to ``path`` only if the block succeeds.

    The temporary file lives in the target's directory (same file system, so the
    rename is atomic) and keeps the target's suffix, so tools that pick a format
    from the extension (matplotlib) still work.

    Raises:
        InputError: If the target cannot be written (:func:`check_output`).
    """
    path = check_output(path)
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    except OSError as exc:  # the directory changed since the command checked it
        raise InputError(f"cannot write: {exc.strerror or type(exc).__name__}", file=path) from None
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


@dataclass(frozen=True)
class RowBlocks:
    """An array of ``shape`` (rows first) and ``dtype`` given as its consecutive row blocks, so that
    writing it holds one block: ``blocks()`` yields them in order, ``shape[0]`` rows in all."""

    shape: tuple[int, ...]
    dtype: np.dtype
    blocks: Callable[[], Iterable[np.ndarray]]


def write_npz(path: str | Path, arrays: Mapping[str, np.ndarray | RowBlocks], *, compress: bool = False) -> None:
    """Write ``arrays`` as :func:`numpy.savez` (``compress``: :func:`numpy.savez_compressed`) does, atomically,
    one array and, for :class:`RowBlocks`, one block at a time: memory holds one block, whatever the file's size.

    Raises:
        ValueError: If the blocks of an array do not add up to its shape.
    """
    compression = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with atomic_output(path) as tmp, zipfile.ZipFile(tmp, "w", compression=compression, allowZip64=True) as archive:
        for key, value in arrays.items():
            with archive.open(f"{key}.npy", "w", force_zip64=True) as out:
                if not isinstance(value, RowBlocks):
                    np.lib.format.write_array(out, np.asanyarray(value), allow_pickle=False)
                    continue
                header = {"descr": np.lib.format.dtype_to_descr(np.dtype(value.dtype)), "fortran_order": False, "shape": tuple(value.shape)}
                np.lib.format.write_array_header_1_0(out, header)
                rows = 0
                for block in value.blocks():
                    block = np.ascontiguousarray(block, dtype=value.dtype)
                    if block.shape[1:] != tuple(value.shape[1:]):
                        raise ValueError(f"{key}: a block of shape {block.shape} in an array of shape {value.shape}")
                    if block.size:
                        out.write(block)  # its buffer, not a copy
                    rows += len(block)
                if rows != value.shape[0]:
                    raise ValueError(f"{key}: blocks of {rows} rows in all for an array of shape {value.shape}")


def _npy_header(f) -> tuple[tuple[int, ...], bool, np.dtype]:  # noqa: ANN001  (an open .npy member)
    version = np.lib.format.read_magic(f)
    return np.lib.format.read_array_header_1_0(f) if version == (1, 0) else np.lib.format.read_array_header_2_0(f)


def npz_shapes(path: str | Path) -> dict[str, tuple[int, ...]]:
    """The shape of every array of the NPZ at ``path``, read from the headers alone.

    Raises:
        OSError, ValueError, zipfile.BadZipFile: If it is not a readable NPZ.
    """
    with zipfile.ZipFile(path) as archive:
        shapes = {}
        for member in archive.namelist():
            with archive.open(member) as f:
                shapes[member.removesuffix(".npy")] = _npy_header(f)[0]
    return shapes


def read_npz_blocks(path: str | Path, keys: Sequence[str], block_rows: int = 4096) -> Iterator[dict[str, np.ndarray]]:
    """The arrays ``keys`` of the NPZ at ``path`` (the same number of rows each, C order, as
    :func:`write_npz` writes them, compressed or not), ``block_rows`` rows at a time: memory holds one
    block of each, whatever the file's size.

    Raises:
        OSError, ValueError, KeyError, zipfile.BadZipFile: If it is not such an NPZ.
    """
    with zipfile.ZipFile(path) as archive, contextlib.ExitStack() as stack:
        members = []
        for key in keys:
            f = stack.enter_context(archive.open(f"{key}.npy"))
            shape, fortran, dtype = _npy_header(f)
            if fortran or not shape:
                raise ValueError(f"{key}: not an array of rows in C order")
            members.append((key, f, shape, dtype, int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize))
        rows = {m[2][0] for m in members}
        if len(rows) > 1:
            raise ValueError(f"arrays {', '.join(keys)} differ in length")
        total = rows.pop() if rows else 0
        for start in range(0, total, block_rows):
            n = min(block_rows, total - start)
            yield {key: np.frombuffer(f.read(n * width), dtype=dtype).reshape(n, *shape[1:]) for key, f, shape, dtype, width in members}


class NpzParts:
    """An NPZ that grows by blocks of rows while a run goes on, with bounded memory.

    Each array's rows are appended to a raw file ``<key>.raw`` in the directory ``PATH.partial``
    as they come (:meth:`append`); :meth:`close` writes ``PATH`` from them with :func:`write_npz`
    (atomically, ``block_bytes`` at a time) and removes the directory. Leaving a ``with`` block by
    an exception (an interrupt) or :meth:`discard` removes the directory and writes nothing.

    Disk: the raw files and the NPZ exist together while :meth:`close` runs (twice the numbers).
    """

    def __init__(self, path: str | Path, *, compress: bool = False, block_bytes: int = 2**20):
        self.path = check_output(path, (".npz",))
        self.directory = self.path.with_name(self.path.name + ".partial")
        self.compress = compress
        self.block_bytes = block_bytes
        self.rows: dict[str, int] = {}
        self._layout: dict[str, tuple[np.dtype, tuple[int, ...]]] = {}
        self._files: dict[str, object] = {}
        shutil.rmtree(self.directory, ignore_errors=True)  # what a killed run left
        self.directory.mkdir()

    def __enter__(self) -> NpzParts:
        return self

    def __exit__(self, kind, *_) -> None:
        if kind is not None:
            self.discard()

    def append(self, arrays: Mapping[str, np.ndarray]) -> None:
        """Add rows to each array (the same dtype and trailing shape every time)."""
        for key, value in arrays.items():
            value = np.ascontiguousarray(value)
            if key not in self._files:
                self._layout[key] = (value.dtype, value.shape[1:])
                self._files[key] = open(self.directory / f"{key}.raw", "wb")  # noqa: SIM115 (closed in close/discard)
                self.rows[key] = 0
            if (value.dtype, value.shape[1:]) != self._layout[key]:
                raise ValueError(f"{key}: rows {value.dtype} {value.shape[1:]} after {self._layout[key]}")
            self._files[key].write(value.tobytes())
            self.rows[key] += len(value)

    def _blocks(self, key: str) -> RowBlocks:
        dtype, tail = self._layout[key]
        width = math.prod(tail)
        shape = (self.rows[key], *tail)
        if width * dtype.itemsize == 0:
            return RowBlocks(shape, dtype, lambda: [np.zeros(shape, dtype)])
        per_block = max(1, self.block_bytes // (width * dtype.itemsize))

        def blocks() -> Iterator[np.ndarray]:
            with open(self.directory / f"{key}.raw", "rb") as raw:
                for start in range(0, shape[0], per_block):  # read() allocates what it is asked for: ask for what is there
                    yield np.frombuffer(raw.read(min(per_block, shape[0] - start) * width * dtype.itemsize), dtype=dtype).reshape(-1, *tail)

        return RowBlocks(shape, dtype, blocks)

    def close(self, extra: Mapping[str, np.ndarray] | None = None) -> Path:
        """Write ``PATH`` (the appended arrays, then ``extra``) and remove the directory; returns ``PATH``."""
        for f in self._files.values():
            f.close()
        write_npz(self.path, {**{key: self._blocks(key) for key in self._files}, **(extra or {})}, compress=self.compress)
        shutil.rmtree(self.directory, ignore_errors=True)
        return self.path

    def discard(self) -> None:
        """Remove the directory; nothing is written."""
        for f in self._files.values():
            f.close()
        shutil.rmtree(self.directory, ignore_errors=True)


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
