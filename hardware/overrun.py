"""When a paced loop has missed too many deadlines to go on.

A cycle *overruns* when it ends after the next deadline (the loop then skips the
missed deadlines). A few overruns make a run *degraded* — it completes, but its
summary and exit code say so; too many stop it with torque off:

- more than ``max_fraction * window`` of the last ``window`` cycles overran, or
- ``max_consecutive`` cycles in a row overran.

Defaults: 5 % of the last 100 cycles (a sixth overrun within 100 cycles stops the
run), or 5 in a row. Lock-step runs have no deadlines and never overrun.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

__all__ = ["OverrunPolicy", "OverrunMonitor"]


@dataclass(frozen=True)
class OverrunPolicy:
    """Limits on overruns of a paced loop.

    Attributes:
        window: Cycles over which the fraction is counted.
        max_fraction: Largest tolerated fraction of overrun cycles in the window (0..1);
            the run stops when more than ``max_fraction * window`` of them overran.
        max_consecutive: Overruns in a row that stop the run (0: no such limit).
    """

    window: int = 100
    max_fraction: float = 0.05
    max_consecutive: int = 5

    def __post_init__(self) -> None:
        if self.window < 1:
            raise ValueError(f"overrun window must be >= 1 cycle, got {self.window}")
        if not 0.0 <= self.max_fraction <= 1.0:
            raise ValueError(f"max overrun fraction must be within [0, 1], got {self.max_fraction}")
        if self.max_consecutive < 0:
            raise ValueError(f"max consecutive overruns must be >= 0, got {self.max_consecutive}")

    @property
    def max_in_window(self) -> int:
        """Overruns tolerated within one window (more stop the run)."""
        return math.floor(self.max_fraction * self.window + 1e-9)

    @classmethod
    def unlimited(cls) -> OverrunPolicy:
        """Never stop for overruns (they are still counted and make the run degraded)."""
        return cls(window=1, max_fraction=1.0, max_consecutive=0)


class OverrunMonitor:
    """Applies an :class:`OverrunPolicy` to a stream of cycles."""

    def __init__(self, policy: OverrunPolicy):
        self.policy = policy
        self._recent: deque[bool] = deque(maxlen=policy.window)
        self._in_window = 0
        self._consecutive = 0

    def record(self, overran: bool) -> str:
        """Account one cycle; returns why the run must stop, or ''."""
        p = self.policy
        if len(self._recent) == p.window:
            self._in_window -= self._recent[0]
        self._recent.append(overran)
        self._in_window += overran
        self._consecutive = self._consecutive + 1 if overran else 0
        if p.max_consecutive and self._consecutive >= p.max_consecutive:
            return f"overrun limit: {self._consecutive} consecutive overruns (limit {p.max_consecutive})"
        if self._in_window > p.max_in_window:
            return (
                f"overrun limit: {self._in_window} of the last {len(self._recent)} cycles overran "
                f"(limit {100 * p.max_fraction:g} %)"
            )
        return ""
