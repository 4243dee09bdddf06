"""Incremental run logs: every cycle is on disk within a few milliseconds, the NPZ comes at the end.

While the loop runs, each cycle's row of float64 values is appended to a raw file
``<log>.partial`` (flushed every ``flush_every`` rows and on close). :meth:`RunLog.close`
turns it into the NPZ (atomically, a block of rows at a time: memory stays flat however long
the run) and removes the raw file; if the process dies first, the raw file stays and
:func:`recover` rebuilds the NPZ from it.

NPZ keys: ``columns`` (names) and one array per group (``t``, ``q``, ``dq``, ``q_ref``, ...:
the columns of that group, (cycles,) or (cycles, columns of the group)); every value is
stored once. :func:`log_table` gives the whole table (logs written before also hold it as
``data``).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from mbctl.fileio import RowBlocks, check_output, write_npz

__all__ = ["RunLog", "recover", "log_table"]

# rows of the raw file read at a time when the NPZ is written (8 MiB for a 6-joint log of 44 columns)
BLOCK_ROWS = 2**15


class RunLog:
    """Append-only log of fixed-width rows.

    Args:
        path: Final NPZ path.
        columns: Column names; ``group.name`` columns are also stored as a group array.
        flush_every: Rows between flushes of the raw file.
    """

    def __init__(self, path: str | Path, columns: Sequence[str], flush_every: int = 50):
        self.path = check_output(path, (".npz",))
        self.columns = tuple(columns)
        self.raw_path = self.path.with_name(self.path.name + ".partial")
        self.flush_every = flush_every
        self.rows = 0
        header = self.raw_path.with_name(self.raw_path.name + ".json")
        header.write_text(json.dumps({"columns": self.columns}))
        self._header = header
        self._file = open(self.raw_path, "wb")  # noqa: SIM115 (closed in close())

    def append(self, row: np.ndarray) -> None:
        """Write one row (len(columns) float64 values)."""
        np.asarray(row, dtype=np.float64).tofile(self._file)
        self.rows += 1
        if self.rows % self.flush_every == 0:
            self._file.flush()

    def rehearse(self, row: np.ndarray) -> None:
        """Go through :meth:`append`'s work for one row without adding it (the loop's warm-up)."""
        np.asarray(row, dtype=np.float64).tobytes()
        self._file.flush()

    def close(self) -> Path:
        """Flush, write the NPZ atomically, remove the raw file; returns the NPZ path."""
        if not self._file.closed:
            self._file.close()
        _write_npz(self.path, self.columns, self.raw_path)
        self.raw_path.unlink(missing_ok=True)
        self._header.unlink(missing_ok=True)
        return self.path


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
    raw = Path(raw_path)
    columns = tuple(json.loads(raw.with_name(raw.name + ".json").read_text())["columns"])
    path = raw.with_name(raw.name.removesuffix(".partial"))
    _write_npz(path, columns, raw)
    return path
