"""Incremental run logs: every cycle is on disk within a few milliseconds, the NPZ comes at the end.

While the loop runs, each cycle's row of float64 values is appended to a raw file
``<log>.partial`` (flushed every ``flush_every`` rows and on close). :meth:`RunLog.close`
turns it into the NPZ (atomically) and removes the raw file; if the process dies
first, the raw file stays and :func:`recover` rebuilds the NPZ from it.

NPZ keys: ``columns`` (names), ``data`` (cycles x columns), and one array per group
(``t``, ``q``, ``dq``, ``q_ref``, ...: the columns of that group).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mbctl.fileio import atomic_output, check_output

__all__ = ["RunLog", "recover"]


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
        _write_npz(self.path, self.columns, _load_raw(self.raw_path, len(self.columns)))
        self.raw_path.unlink(missing_ok=True)
        self._header.unlink(missing_ok=True)
        return self.path


def _load_raw(raw: Path, ncols: int) -> np.ndarray:
    data = np.fromfile(raw, dtype=np.float64)
    whole = data.size - data.size % ncols  # a crash may cut the last row
    return data[:whole].reshape(-1, ncols)


def _write_npz(path: Path, columns: tuple[str, ...], data: np.ndarray) -> None:
    groups: dict[str, list[int]] = {}
    for i, name in enumerate(columns):
        groups.setdefault(name.split(".", 1)[0], []).append(i)
    arrays = {key: data[:, idx] if len(idx) > 1 else data[:, idx[0]] for key, idx in groups.items()}
    with atomic_output(path) as tmp:
        with open(tmp, "wb") as f:
            np.savez(f, columns=np.array(columns), data=data, **arrays)


def recover(raw_path: str | Path) -> Path:
    """Rebuild the NPZ of a run that died from its ``.partial`` file; returns the NPZ path."""
    raw = Path(raw_path)
    columns = tuple(json.loads(raw.with_name(raw.name + ".json").read_text())["columns"])
    path = raw.with_name(raw.name.removesuffix(".partial"))
    _write_npz(path, columns, _load_raw(raw, len(columns)))
    return path
