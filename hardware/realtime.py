"""Real-time scheduling for paced loops: ask the OS for a fixed priority, say what was granted.

A paced loop that shares its cores with other programs overruns whenever the
scheduler gives its core away. Under ``SCHED_FIFO`` (Linux, needs ``CAP_SYS_NICE``,
root, or an ``rtprio`` limit in ``/etc/security/limits.conf``) a runnable loop
thread preempts every normal process; its sleeps still hand the core back, and the
kernel's real-time throttling (``sched_rt_runtime_us``, 95 % by default) keeps a
runaway loop from locking the machine. Where it is refused the loop runs at normal
priority and the summary says so.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

__all__ = ["DEFAULT_PRIORITY", "realtime_priority"]

DEFAULT_PRIORITY = 80
"""``SCHED_FIFO`` priority of the control loop (1-99; ros2_control's default is 50, drivers' threads often 90)."""


@contextlib.contextmanager
def realtime_priority(priority: int | None = DEFAULT_PRIORITY) -> Iterator[str]:
    """Run the block under ``SCHED_FIFO`` at ``priority`` if the OS allows it; restore the policy after.

    Yields:
        What was granted: ``"SCHED_FIFO 80"``, or ``"normal (...)"`` with the reason.
    """
    if priority is None:
        yield "normal (not requested)"
        return
    if not hasattr(os, "sched_setscheduler"):
        yield "normal (no SCHED_FIFO on this OS)"
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(priority))
    except (PermissionError, OSError) as exc:
        yield f"normal (SCHED_FIFO refused: {exc.strerror or exc})"
        return
    try:
        yield f"SCHED_FIFO {priority}"
    finally:
        os.sched_setscheduler(0, policy, param)
