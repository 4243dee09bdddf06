"""Shared timing helper of the benchmark scripts (run them as ``python benchmarks/<name>.py``)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def median_seconds(fn: Callable[[], object], repeat: int) -> float:
    """Median wall time (s) of ``repeat`` calls of ``fn``, after one warm-up call.

    Shared machines are noisy: the median of several runs, compared with a reference
    measured the same way in the same process, is what the scripts report.
    """
    fn()
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)
