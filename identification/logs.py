"""Identification logs: the constant-speed log (LOG.csv) and the presliding log (PRE.csv).

Both are plain CSV files with a one-line header, SI units, one row per sample, for
the one joint under test; extra columns are ignored, column order is free.

LOG.csv (constant-speed test):

- ``t`` time (s), strictly increasing;
- ``q`` joint position (rad, m);
- ``dq`` measured joint velocity (rad/s, m/s);
- ``tau`` measured joint torque (N·m, N): the drive's effort, gravity and friction included;
- optional ``dq_ref`` commanded velocity (rad/s, m/s): constant-speed segments are
  the runs of constant non-zero ``dq_ref``; without it they are found from
  velocity plateaus;
- optional ``tau_g`` a gravity torque reference at each sample (N·m, N), e.g. from
  the model; needed only for the asymmetric (per-direction) fit.

A constant-speed log can also be a ROS 2 bag (:mod:`mbctl.rosbag`): the tested joint's
position, velocity and effort from its JointState messages (no ``dq_ref``, no ``tau_g``).

PRE.csv (presliding and break-away test): ``t``, ``q``, ``dq``, ``tau`` as above and

- ``test``: 0 outside the tests, 1 during the slow torque cycle below break-away,
  2 during torque steps below break-away, 3 during a torque ramp through
  break-away. Each contiguous run of one non-zero value is one test; a ramp (3)
  starts from rest and ends when the joint slips.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.errors import DataError
from mbctl.fileio import CsvTable, read_csv, write_csv
from mbctl.rosbag import BagOptions, is_bag, read_joint_states

__all__ = [
    "ConstantSpeedLog",
    "PreslidingLog",
    "read_constant_speed_log",
    "read_presliding_log",
    "write_constant_speed_log",
    "write_presliding_log",
    "TEST_NONE",
    "TEST_CYCLE",
    "TEST_STEP",
    "TEST_RAMP",
]

TEST_NONE, TEST_CYCLE, TEST_STEP, TEST_RAMP = 0, 1, 2, 3
MIN_ROWS = 10


@dataclass(frozen=True)
class ConstantSpeedLog:
    """Samples of a constant-speed test of one joint (SI units, see module docstring).

    Attributes:
        t: Time (s), strictly increasing.
        q: Position (rad, m).
        dq: Measured velocity (rad/s, m/s).
        tau: Measured torque (N·m, N).
        dq_ref: Commanded velocity, or None.
        tau_g: Gravity torque reference, or None.
        source: The file it was read from, for error messages.
    """

    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    dq_ref: np.ndarray | None = None
    tau_g: np.ndarray | None = None
    source: Path | None = None

    def columns(self) -> tuple[list[str], np.ndarray]:
        """Header and (N, ncol) table, as written to LOG.csv."""
        names = ["t", "q", "dq", "tau"]
        cols = [self.t, self.q, self.dq, self.tau]
        for name, col in (("dq_ref", self.dq_ref), ("tau_g", self.tau_g)):
            if col is not None:
                names.append(name)
                cols.append(col)
        return names, np.column_stack(cols)


@dataclass(frozen=True)
class PreslidingLog:
    """Samples of a presliding / break-away test (see module docstring).

    Attributes:
        t, q, dq, tau: As :class:`ConstantSpeedLog`.
        test: Test label per sample (0, 1 cycle, 2 steps, 3 ramp through break-away).
        source: The file it was read from.
    """

    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    tau: np.ndarray
    test: np.ndarray
    source: Path | None = None

    def runs(self, label: int) -> list[tuple[int, int]]:
        """``(start, stop)`` index ranges (stop exclusive) of the contiguous runs of ``label``."""
        mask = np.concatenate([[False], self.test == label, [False]])
        edges = np.flatnonzero(np.diff(mask.astype(int)))
        return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def _required(table: CsvTable, names: tuple[str, ...]) -> list[np.ndarray]:
    missing = [n for n in names if not table.has(n)]
    if missing:
        raise DataError(
            f"missing column{'s' if len(missing) > 1 else ''} {', '.join(missing)} (need {', '.join(names)})",
            file=table.path,
        )
    return [table.column(n) for n in names]


def _check_time(table: CsvTable, t: np.ndarray) -> None:
    if len(t) < MIN_ROWS:
        raise DataError(f"only {len(t)} data rows; an identification log needs at least {MIN_ROWS}", file=table.path)
    bad = np.flatnonzero(np.diff(t) <= 0)
    if bad.size:
        raise DataError(f"time is not strictly increasing at line {table.line_numbers[bad[0] + 1]}", file=table.path, field="t")


def read_constant_speed_log(path: str | Path, joint: str | None = None, bag: BagOptions = BagOptions()) -> ConstantSpeedLog:
    """Read LOG.csv (columns ``t, q, dq, tau`` and optionally ``dq_ref``, ``tau_g``), or the
    messages of ``joint`` in a ROS 2 bag (``bag``: topic and stamps).

    Raises:
        DataError: Missing file or columns, non-numeric or non-finite values (with
            the line), time not strictly increasing, fewer than 10 rows; for a bag, messages
            without velocity or effort, or repeated stamps.
    """
    if is_bag(path):
        if joint is None:
            raise DataError("a bag holds several joints: name the tested one", file=path, field="--joint")
        states = read_joint_states(path, [joint], bag)
        if states.dq is None or states.tau is None:
            raise DataError("a constant-speed log needs the measured velocity and effort of every message", file=path, field=states.topic)
        t = states.t
        if len(t) < MIN_ROWS or not (np.diff(t) > 0).all() or not np.isfinite(np.column_stack([states.q, states.dq, states.tau])).all():
            raise DataError(f"needs at least {MIN_ROWS} messages of finite numbers at increasing stamps", file=path, field=states.topic)
        return ConstantSpeedLog(t=t, q=states.q[:, 0], dq=states.dq[:, 0], tau=states.tau[:, 0], source=Path(path))
    table = read_csv(path)
    t, q, dq, tau = _required(table, ("t", "q", "dq", "tau"))
    _check_time(table, t)
    dq_ref = table.column("dq_ref") if table.has("dq_ref") else None
    tau_g = table.column("tau_g") if table.has("tau_g") else None
    return ConstantSpeedLog(t=t, q=q, dq=dq, tau=tau, dq_ref=dq_ref, tau_g=tau_g, source=table.path)


def read_presliding_log(path: str | Path) -> PreslidingLog:
    """Read PRE.csv (columns ``t, q, dq, tau, test``).

    Raises:
        DataError: As :func:`read_constant_speed_log`, and for ``test`` values other
            than 0, 1, 2, 3.
    """
    table = read_csv(path)
    t, q, dq, tau, test = _required(table, ("t", "q", "dq", "tau", "test"))
    _check_time(table, t)
    bad = np.flatnonzero(~np.isin(test, (TEST_NONE, TEST_CYCLE, TEST_STEP, TEST_RAMP)))
    if bad.size:
        raise DataError(f"value {test[bad[0]]:g} on line {table.line_numbers[bad[0]]} is not 0, 1, 2 or 3", file=table.path, field="test")
    return PreslidingLog(t=t, q=q, dq=dq, tau=tau, test=test.astype(int), source=table.path)


def write_constant_speed_log(path: str | Path, log: ConstantSpeedLog) -> None:
    """Write LOG.csv atomically."""
    header, data = log.columns()
    write_csv(path, header, data)


def write_presliding_log(path: str | Path, log: PreslidingLog) -> None:
    """Write PRE.csv atomically."""
    write_csv(path, ["t", "q", "dq", "tau", "test"], np.column_stack([log.t, log.q, log.dq, log.tau, log.test]))
