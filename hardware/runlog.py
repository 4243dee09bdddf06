"""Incremental run logs: every cycle is on disk within a few milliseconds, the NPZ comes at the end.

While the loop runs, each cycle's row of float64 values is appended to a raw file
``<log>.partial`` (a block of ``flush_every`` rows at a time, and the rest on close). :meth:`RunLog.close`
turns it into the NPZ (atomically, a block of rows at a time: memory stays flat however long
the run) and removes the raw file; if the process dies first, the raw file stays and
:func:`recover` rebuilds the NPZ from it.

NPZ keys: ``columns`` (names) and one array per group (``t``, ``q``, ``dq``, ``q_ref``, ...:
the columns of that group, (cycles,) or (cycles, columns of the group)); every value is
stored once. :func:`log_table` gives the whole table (logs written before also hold it as
``data``).
"""

from __future__ import annotations

import contextlib
import json
import os
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from mbctl.fileio import RowBlocks, check_output, write_npz

__all__ = ["RunLog", "last_closed_row", "last_raw_row", "log_table", "raw_paths", "recover"]

# rows of the raw file read at a time when the NPZ is written (8 MiB for a 6-joint log of 44 columns)
BLOCK_ROWS = 2**15


class RunLog:
    """Append-only log of fixed-width rows.

    Rows gather in a block of ``flush_every`` rows in memory, written to the raw file when it is full
    (one system call, no buffering in between) and on close: an append is a copy into the block.

    Args:
        path: Final NPZ path.
        columns: Column names; ``group.name`` columns are also stored as a group array.
        flush_every: Rows per block written to the raw file (20: every 20 ms at 1 kHz).
    """

    def __init__(self, path: str | Path, columns: Sequence[str], flush_every: int = 20):
        self.path = check_output(path, (".npz",))
        self.columns = tuple(columns)
        self.raw_path, header = raw_paths(self.path)
        self.flush_every = flush_every
        self.rows = 0
        self._block = np.zeros((flush_every, len(self.columns)))
        self._slots = list(self._block)  # the block's rows as views, made once: an append is one copy into one
        self._filled = 0
        header.write_text(json.dumps({"columns": self.columns}))
        self._header = header
        self._file = open(self.raw_path, "wb", buffering=0)  # noqa: SIM115 (closed in close())

    def append(self, row: np.ndarray) -> None:
        """Add one row (len(columns) float64 values)."""
        self._slots[self._filled][...] = row
        self._filled += 1
        self.rows += 1
        if self._filled == self.flush_every:
            self._write_block()

    def _write_block(self) -> None:
        self._file.write(self._block[: self._filled].tobytes())
        self._filled = 0

    def rehearse(self, row: np.ndarray) -> None:
        """Go through :meth:`append`'s work for one row without adding it (the loop's warm-up)."""
        self._slots[self._filled][...] = row
        self._block[: self._filled].tobytes()

    def discard(self) -> None:
        """Remove the raw file of a log that was never closed (the run failed before its loop started);
        once :meth:`close` has begun, the raw file is the run's record (:func:`recover`) and stays."""
        if self._file.closed:
            return
        self._file.close()
        self.raw_path.unlink(missing_ok=True)
        self._header.unlink(missing_ok=True)

    def close(self) -> Path:
        """Write the last block, the NPZ atomically, remove the raw file; returns the NPZ path."""
        if not self._file.closed:
            self._write_block()
            self._file.close()
        _write_npz(self.path, self.columns, self.raw_path)
        self.raw_path.unlink(missing_ok=True)
        self._header.unlink(missing_ok=True)
        return self.path


def raw_paths(path: str | Path) -> tuple[Path, Path]:
    """The raw rows file ``<log>.partial`` and its column header ``<log>.partial.json`` of the log at ``path``."""
    raw = Path(path).with_name(Path(path).name + ".partial")
    return raw, raw.with_name(raw.name + ".json")


def last_raw_row(path: str | Path) -> tuple[list[str], np.ndarray] | None:
    """The column names and the last complete row of the log at ``path`` while the loop writes it
    (a row being written is skipped); ``None`` without a raw file or before its first row."""
    raw, header = raw_paths(path)
    with contextlib.suppress(OSError, ValueError, KeyError):
        columns = [str(c) for c in json.loads(header.read_text())["columns"]]
        width = 8 * len(columns)
        with open(raw, "rb") as f:
            rows = os.fstat(f.fileno()).st_size // width
            if rows:
                f.seek((rows - 1) * width)
                return columns, np.frombuffer(f.read(width), dtype=np.float64)
    return None


def last_closed_row(path: str | Path, groups: Sequence[str]) -> tuple[list[str], np.ndarray] | None:
    """The column names and the last row of the closed log (NPZ) at ``path``, with the columns of
    ``groups`` filled and the others NaN; only that row of each group array is read (a seek in the
    stored member: an hour's log is GBs). ``None`` if it is not a readable run log."""
    try:
        with zipfile.ZipFile(path) as archive:
            columns = [str(c) for c in np.load(archive.open("columns.npy"))]
            row = np.full(len(columns), np.nan)
            for group, idx in _groups(columns).items():
                if group in groups:
                    row[idx] = _last_npy_row(archive, f"{group}.npy")
    except (OSError, ValueError, KeyError, zipfile.BadZipFile):
        return None
    return columns, row


def _last_npy_row(archive: zipfile.ZipFile, member: str) -> np.ndarray:
    """The last row of the .npy ``member`` of an NPZ, read alone.

    Raises:
        ValueError: If the array is empty or not in C order.
    """
    with archive.open(member) as f:
        version = np.lib.format.read_magic(f)
        shape, fortran, dtype = np.lib.format.read_array_header_1_0(f) if version == (1, 0) else np.lib.format.read_array_header_2_0(f)
        if fortran or not shape or shape[0] == 0:
            raise ValueError(f"{member}: no last row to read")
        width = int(np.prod(shape[1:], dtype=np.int64)) * dtype.itemsize
        f.seek(f.tell() + (shape[0] - 1) * width)
        return np.frombuffer(f.read(width), dtype=dtype).astype(np.float64)


def _groups(columns: Sequence[str]) -> dict[str, list[int]]:
    """Column indices of each group: ``q.j1`` is in ``q``, ``t`` in ``t``."""
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(columns):
        groups.setdefault(str(name).split(".", 1)[0], []).append(i)
    return groups


def _write_npz(path: Path, columns: tuple[str, ...], raw: Path) -> None:
    """The NPZ of the raw rows in ``raw``: ``columns`` and the group arrays, read :data:`BLOCK_ROWS` rows at a time."""
    row_bytes = 8 * len(columns)
    rows = raw.stat().st_size // row_bytes  # a crash may cut the last row

    def group(idx: list[int]) -> RowBlocks:
        def blocks() -> Iterator[np.ndarray]:
            with open(raw, "rb") as f:
                for start in range(0, rows, BLOCK_ROWS):
                    n = min(BLOCK_ROWS, rows - start)
                    block = np.frombuffer(f.read(n * row_bytes), dtype=np.float64).reshape(n, len(columns))
                    yield block[:, idx] if len(idx) > 1 else block[:, idx[0]]

        return RowBlocks((rows, len(idx)) if len(idx) > 1 else (rows,), np.dtype(np.float64), blocks)

    write_npz(path, {"columns": np.array(columns), **{key: group(idx) for key, idx in _groups(columns).items()}})


def log_table(log: Mapping[str, np.ndarray]) -> tuple[list[str], np.ndarray]:
    """The column names and the (cycles, columns) table of a run log's NPZ (an opened :func:`numpy.load`).

    Raises:
        KeyError: If ``log`` is not a run log (no ``columns`` or a group missing).
    """
    columns = [str(c) for c in log["columns"]]
    if "data" in log:  # written before the table was stored once
        return columns, np.asarray(log["data"], dtype=float)
    groups = {key: np.asarray(log[key], dtype=float) for key in _groups(columns)}
    table = np.empty((len(groups["t"]), len(columns)))
    for key, idx in _groups(columns).items():
        table[:, idx] = groups[key].reshape(len(table), len(idx))
    return columns, table


def recover(raw_path: str | Path) -> Path:
    """Rebuild the NPZ of a run that died from its ``.partial`` file; returns the NPZ path."""
    path = Path(raw_path).with_name(Path(raw_path).name.removesuffix(".partial"))
    raw, header = raw_paths(path)
    columns = tuple(json.loads(header.read_text())["columns"])
    _write_npz(path, columns, raw)
    return path
