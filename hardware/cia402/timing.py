"""The host's timing policy for late and missing TPDOs (used by :class:`~mbctl.hardware.cia402.bus.Cia402Bus`).

A cycle whose TPDOs are not all there at their deadline costs that cycle its sample, not the run:
:meth:`SamplePolicy.missing` returns the last complete sample again, with its own time (the
estimator sees no new sample), and counts it. The run stops (a ``no_reply``
:class:`~mbctl.hardware.interface.CommunicationError` naming the node and the count) at the
``missing_max``-th cycle in a row without a complete sample, when the last complete sample is older
than ``sample_timeout_s``, or when no sample was ever complete. Counts go to the bus's
``comm_errors``: ``missing`` TPDOs, ``reused`` samples (and, counted by the bus, ``late`` TPDOs).

Defaults (``[drives] tpdo_missing_max``, ``sample_timeout_ms``): five cycles; ten periods, at least
20 ms. In the spirit of ROS 2's joint-state timeout (ten periods, at least 50 ms), tighter: a CAN bus
is deterministic and a drive's heartbeat times out after 30 ms.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from mbctl.hardware.cia402.objects import TORQUE_ACTUAL
from mbctl.hardware.interface import CommunicationError, JointState

__all__ = ["SAMPLE_TIMEOUT_MIN_S", "SAMPLE_TIMEOUT_PERIODS", "SamplePolicy", "effort_source"]

SAMPLE_TIMEOUT_PERIODS = 10  # default sample timeout: ten periods ...
SAMPLE_TIMEOUT_MIN_S = 0.02  # ... and at least 20 ms


def effort_source(tpdo_maps: Sequence[Sequence[tuple[int, int]]]) -> str:
    """``"torque actual value 0x6077"`` where a TPDO layout maps it (the drives report the torque they
    applied), else ``""`` (:attr:`~mbctl.hardware.interface.JointInterface.effort_source`)."""
    return "torque actual value 0x6077" if any(index == TORQUE_ACTUAL for layout in tpdo_maps for index, _ in layout) else ""


class SamplePolicy:
    """The last complete sample and the cycles since it.

    Args:
        missing_max: Cycles in a row without a complete sample that stop the run.
        sample_timeout_s: Age of the last complete sample (s) that stops the run (None: ten periods,
            at least 20 ms).
        cycle_s: The SYNC period (s).
        comm_errors: The bus's counts, added to.
    """

    def __init__(self, missing_max: int, sample_timeout_s: float | None, cycle_s: float, comm_errors: Counter[str]):
        self.missing_max = missing_max
        self.sample_timeout_s = sample_timeout_s or max(SAMPLE_TIMEOUT_PERIODS * cycle_s, SAMPLE_TIMEOUT_MIN_S)
        self.comm_errors = comm_errors
        self.sample: JointState | None = None
        self.in_row = 0

    def fresh(self, sample: JointState) -> JointState:
        """A complete sample: kept, and the count of cycles without one reset."""
        self.sample, self.in_row = sample, 0
        return sample

    def missing(self, now: float, what: str, missing: int) -> JointState:
        """A cycle with ``missing`` TPDOs (``what``: the first, e.g. ``"node 3 (elbow_joint): TPDO1 missing
        0.9 ms after the SYNC"``) at ``now`` (s): the last complete sample again.

        Raises:
            CommunicationError: ``no_reply``, when a limit is reached or no sample was ever complete.
        """
        self.comm_errors["missing"] += missing
        self.in_row += 1
        if self.sample is None:
            self.comm_errors["no_reply"] += 1
            raise CommunicationError("no_reply", f"{what}, and no earlier sample to reuse")
        stale_s = now - self.sample.t
        if self.in_row >= self.missing_max or stale_s > self.sample_timeout_s + 1e-9:
            self.comm_errors["no_reply"] += 1
            raise CommunicationError("no_reply", f"{what}, {self.in_row} cycles in a row; no fresh sample for {stale_s * 1e3:.3g} ms "
                                                 f"(limits: tpdo_missing_max {self.missing_max}, sample_timeout_ms {self.sample_timeout_s * 1e3:.3g})")  # fmt: skip
        self.comm_errors["reused"] += 1
        return self.sample

    @property
    def degraded(self) -> str:
        """What was let through, for the stop reason of a completed run (``""``: nothing)."""
        reused, missing, late = (self.comm_errors.get(key, 0) for key in ("reused", "missing", "late"))
        if not (reused or late):
            return ""
        return f"{reused} CANopen samples reused ({missing} TPDOs missing at their deadline, {late} late)"
