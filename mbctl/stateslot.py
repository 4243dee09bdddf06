"""The latest state of a run in shared memory, for another process to follow (live views, live publishing).

:class:`StateSlot` holds one ``(t, q)``: the process that runs writes it without ever waiting, and a
process of its own (the MeshCat view of :mod:`mbctl.viz.live`, the ROS 2 publisher of
:mod:`mbctl.hardware.ros2.publish`) reads the newest one when it wants; states written in between
are skipped.
"""

from __future__ import annotations

from multiprocessing import resource_tracker, shared_memory

import numpy as np

__all__ = ["StateSlot"]


class StateSlot:
    """The latest ``(t, q)`` in shared memory: one writer that never waits, readers that retry.

    Layout, float64: ``[seq, t, q_0 .. q_{n-1}]``. A write makes ``seq`` odd, writes ``t`` and
    ``q``, then makes it even again (a sequence lock); a reader copies the slot and keeps the
    copy only if ``seq`` was even and unchanged around it, else it retries: a torn state is
    never used, and the writer never waits for a reader. The three steps are separate calls, so
    their stores reach another core in program order on x86 (total store order); on weaker
    memory models (ARM) a torn read is possible in principle: no fence is reachable from Python.

    Args:
        size: Number of positions ``n``.
        name: Attach to the slot of that name (another process's); ``None`` creates one.
    """

    def __init__(self, size: int, name: str | None = None):
        self.size = size
        self._memory = shared_memory.SharedMemory(name=name, create=name is None, size=8 * (size + 2))
        self._owner = name is None
        if not self._owner:  # Python < 3.13 would have this process's resource tracker free it at exit
            resource_tracker.unregister(self._memory._name, "shared_memory")  # type: ignore[attr-defined]
        self._values = np.ndarray((size + 2,), dtype=np.float64, buffer=self._memory.buf)
        if self._owner:
            self._values[:] = 0.0

    @property
    def name(self) -> str:
        return self._memory.name

    def write(self, t: float, q: np.ndarray) -> None:
        """Publish positions ``q`` (rad, m) at time ``t`` (s); never waits."""
        v = self._values
        v[0] += 1.0
        v[1] = t
        v[2:] = q
        v[0] += 1.0

    def read(self, retries: int = 1000) -> tuple[int, float, np.ndarray] | None:
        """``(seq, t, q)`` of the latest write (``seq`` 0: none yet), or ``None`` if every try was torn."""
        v = self._values
        for _ in range(retries):
            before = v[0]
            copy = v.copy()
            if before == v[0] == copy[0] and before % 2 == 0:
                return int(before // 2), float(copy[1]), copy[2:]
        return None

    def close(self) -> None:
        """Detach; the creating side also frees the memory."""
        del self._values
        self._memory.close()
        if self._owner:
            self._memory.unlink()
