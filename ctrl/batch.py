"""Evaluate a CasADi function on every sample of a trajectory at once (CasADi ``map``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import casadi as ca
import numpy as np

__all__ = ["map_rows"]


def map_rows(
    f: ca.Function,
    arrays: Sequence[np.ndarray],
    *,
    threads: int = 1,
    chunk: int = 20_000,
    progress: Callable[[int, int], None] | None = None,
) -> list[np.ndarray]:
    """Evaluate ``f`` on every row of the (N, n_i) ``arrays``, ``chunk`` rows per ``map`` call.

    Args:
        f: Function whose input ``i`` is an ``n_i``-vector.
        arrays: One (N, n_i) array per input.
        threads: Worker threads of the mapped function (1: serial).
        progress: Called with ``(rows_done, rows_total)`` after each chunk.

    Returns:
        One array per output: (N, rows) for a column output, (N, cols, rows) for a
        matrix output (row ``k`` holds the transposed matrix of sample ``k``).
    """
    n = arrays[0].shape[0]
    outs: list[list[np.ndarray]] = [[] for _ in range(f.n_out())]
    mapped: dict[int, ca.Function] = {}
    for start in range(0, n, chunk):
        size = min(chunk, n - start)
        if size not in mapped:
            mapped[size] = f.map(size, "thread", threads) if threads > 1 else f.map(size)
        results = mapped[size].call([np.ascontiguousarray(x[start : start + size].T) for x in arrays])
        for i, value in enumerate(results):
            rows, cols = f.size1_out(i), f.size2_out(i)
            full = value.full()
            # map concatenates the outputs horizontally: (rows, size*cols)
            outs[i].append(full.T if cols == 1 else full.reshape(rows, size, cols).transpose(1, 2, 0))
        if progress is not None:
            progress(start + size, n)
    return [
        np.concatenate(parts)
        if parts
        else np.zeros((0, f.size1_out(i)) if f.size2_out(i) == 1 else (0, f.size2_out(i), f.size1_out(i)))
        for i, parts in enumerate(outs)
    ]
