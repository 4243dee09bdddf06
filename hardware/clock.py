"""Time sources of the control loop: the wall clock, and a virtual clock for deterministic tests.

The loop asks a clock two things: the present time and to wait until a deadline.
:class:`WallClock` sleeps until ``spin_s`` before the deadline and busy-waits the
rest (a plain ``sleep`` wakes ~80 µs late, with multi-ms outliers on a loaded VM).
:class:`VirtualClock` only moves when told to (``advance``) or when waited on, so a
test backend whose ``read`` advances it produces overruns exactly where it wants.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

__all__ = ["LoopClock", "WallClock", "VirtualClock"]


class LoopClock(Protocol):
    """Present time (s, arbitrary origin) and waiting for a deadline on the same scale."""

    def now(self) -> float: ...

    def sleep_until(self, deadline: float) -> None: ...


@dataclass(frozen=True)
class WallClock:
    """``time.perf_counter``; waits by sleeping, then spinning the last ``spin_s`` seconds."""

    spin_s: float = 3e-4

    # the C function itself: the loop reads the clock five times a cycle, a Python frame around each counts
    now = staticmethod(time.perf_counter)

    def sleep_until(self, deadline: float) -> None:
        remaining = deadline - time.perf_counter()
        if remaining > self.spin_s:
            time.sleep(remaining - self.spin_s)
        while time.perf_counter() < deadline:
            pass


class VirtualClock:
    """A clock that moves only when advanced or waited on (s).

    Args:
        t: Start time (s).
    """

    def __init__(self, t: float = 0.0):
        self.t = t

    def now(self) -> float:
        return self.t

    def sleep_until(self, deadline: float) -> None:
        self.t = max(self.t, deadline)

    def advance(self, dt: float) -> None:
        """Let ``dt`` seconds pass (the cost of some work)."""
        self.t += dt
