"""Logs of whole-arm motions for dynamic identification: reading and conditioning.

A log is a CSV with ``t`` (s), ``q.<joint>`` (rad, m), optionally ``dq.<joint>``
(rad/s, m/s: the drive's own velocity estimate) and ``tau.<joint>`` (N·m, N: measured
joint torque), an mbctl run log (NPZ from ``mbctl run --log``: ``t``, ``q``, ``dq``,
``tau`` groups), or a ROS 2 bag (a directory, ``.mcap`` or ``.db3``: the JointState
messages of one topic, :mod:`mbctl.rosbag`). Other columns are ignored. A run log's ``tau`` is the command the loop
held from its row's time to the next; the torque at a row's time is taken as the mean
of the two holds around it (their midpoints interpolated), as a zero-order hold acts.

Real logs are irregular. :func:`condition_log` turns one into evenly sampled, filtered
``(q, dq, ddq, tau)``:

1. rows that repeat the previous row's measurements are dropped (loggers that re-send
   the last sample), and so are rows whose time does not increase;
2. every channel is interpolated linearly onto a grid of ``rate_hz``;
3. ``q``, ``dq`` and ``tau`` pass a zero-phase Butterworth low-pass (``order``,
   ``cutoff_hz``; forward and backward, so no lag);
4. ``dq`` is the logged velocity where the log has one (``velocity="auto"``), else the
   derivative of the filtered ``q``; ``ddq`` is the derivative of the filtered ``dq``,
   low-passed again at ``acceleration_cutoff_hz`` (differentiation amplifies noise, and
   the acceleration's noise biases the inertias toward zero);
5. ``edge_s`` at each end is dropped, where the filters lack data on one side.

A gap (a step longer than :data:`GAP_FACTOR` times the median step: dropped messages, a
paused logger) is bridged by the linear interpolation of step 2 and named in the notes;
torques and accelerations within about a filter period (1/``cutoff_hz``) of it are
interpolated, not measured.

Why the logged velocity: positions are often stored with few digits (the bundled Panda
log has 1e-4 rad steps), and differentiating them twice swamps the accelerations; the
drive estimates velocity from the raw encoder.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from scipy.signal import butter, sosfiltfilt

from mbctl.config.robot import RobotSpec, locking_variants
from mbctl.errors import DataError
from mbctl.fileio import read_csv
from mbctl.hardware.runlog import log_table
from mbctl.rosbag import BagOptions, is_bag, read_joint_states

__all__ = ["GAP_FACTOR", "ArmLog", "Conditioning", "ConditionedLog", "condition_log", "read_arm_log"]

# a step this many times the median step is a gap (reported)
GAP_FACTOR = 10.0


@dataclass(frozen=True, eq=False)
class ArmLog:
    """A log as read: samples in file order, columns in ``joint_names`` order (SI units).

    Attributes:
        source: The file.
        joint_names: Joints of the columns.
        t: Times (s), shape (N,).
        q: Positions (rad, m), shape (N, n).
        dq: Logged velocities (rad/s, m/s), or None if the log has none.
        tau: Measured joint torques (N·m, N), or None if the log has none.
        notes: What reading it did, in words (a bag's topic, stamps, ignored joints).
    """

    source: Path
    joint_names: tuple[str, ...]
    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray | None
    tau: np.ndarray | None
    notes: tuple[str, ...] = ()


def _group(columns: Sequence[str], data: np.ndarray, group: str, joints: Sequence[str], path: Path, required: bool, spec: RobotSpec | None) -> np.ndarray | None:
    names = [f"{group}.{j}" for j in joints]
    present = [n in columns for n in names]
    if not any(present) and not required:
        return None
    if not all(present):
        missing = names[present.index(False)]
        absent = [j for j, here in zip(joints, present) if not here]
        raise DataError(f"missing column {missing!r} (the robot's joints: {', '.join(joints)}){_locking_hint(spec, absent, len(absent) < len(joints))}", file=path, field=missing)
    index = {c: i for i, c in enumerate(columns)}
    return data[:, [index[n] for n in names]]


def _locking_hint(spec: RobotSpec | None, absent: Sequence[str], some: bool) -> str:
    """For a log without the columns of some (``some``) of the robot's joints: the bundled robot that
    locks them, or how to lock them in the TOML; nothing when no robot description is known."""
    if spec is None or not some:
        return ""
    names = ", ".join(absent)
    variants = locking_variants(spec, absent)
    if variants:
        return f"; the log has no columns of {names}: the bundled {' or '.join(variants)} is {spec.name} with them locked"
    return f"; the log has no columns of {names}: lock them in the robot TOML (locked = {{ {', '.join(f'{j} = 0.0' for j in absent)} }})"


def read_arm_log(
    path: str | Path, joint_names: Sequence[str], *, need_torque: bool = True, bag: BagOptions = BagOptions(), spec: RobotSpec | None = None
) -> ArmLog:
    """Read a CSV, NPZ or ROS 2 bag log for the joints ``joint_names`` (a bag's topic and stamps: ``bag``;
    of the robot ``spec`` describes, if given: a table without some joints' columns then names the
    bundled robot that locks them).

    Raises:
        DataError: Naming the file and column (or topic), for a missing file or column, fewer
            than 10 samples, or non-finite values.
    """
    path = Path(path)
    log = _bag_log(path, joint_names, need_torque, bag) if is_bag(path) else _table_log(path, *_read_table(path), tuple(joint_names), need_torque, spec)
    if len(log.t) < 10:
        raise DataError(f"{len(log.t)} samples; a fit needs many more", file=path)
    return log


def _bag_log(path: Path, joint_names: Sequence[str], need_torque: bool, bag: BagOptions) -> ArmLog:
    """The log of a bag's JointState topic."""
    states = read_joint_states(path, joint_names, bag)
    if need_torque and states.tau is None:
        raise DataError("the messages carry no effort (joint torques)", file=path, field=states.topic)
    if not all(np.isfinite(x).all() for x in (states.q, states.dq, states.tau) if x is not None):
        raise DataError("holds non-finite positions, velocities or efforts", file=path, field=states.topic)
    return ArmLog(source=path, joint_names=states.joint_names, t=states.t, q=states.q, dq=states.dq, tau=states.tau, notes=states.notes)


def _read_table(path: Path) -> tuple[list[str], np.ndarray]:
    """The columns and rows of a CSV log or an mbctl run log (NPZ)."""
    if path.suffix.lower() != ".npz":
        table = read_csv(path)
        return list(table.header), table.data
    try:
        with np.load(path, allow_pickle=False) as z:
            columns, data = log_table(z)
    except (OSError, KeyError, ValueError) as exc:
        raise DataError(f"not an mbctl run log ({exc})", file=path) from None
    if not np.isfinite(data[:, [c.split(".")[0] in ("t", "q", "dq", "tau") for c in columns]]).all():
        raise DataError("holds non-finite samples", file=path)
    return columns, data


def _table_log(path: Path, columns: list[str], data: np.ndarray, joints: tuple[str, ...], need_torque: bool, spec: RobotSpec | None) -> ArmLog:
    """The log of a CSV's or run log's table."""
    if "t" not in columns:
        raise DataError("no column 't' (s)", file=path, field="t")
    t = data[:, columns.index("t")]
    q = _group(columns, data, "q", joints, path, True, spec)
    tau = _group(columns, data, "tau", joints, path, need_torque, spec)
    if path.suffix.lower() == ".npz" and tau is not None and len(t) > 1:
        held_until = np.r_[t[1:], 2 * t[-1] - t[-2]]
        tau = np.column_stack([np.interp(t, 0.5 * (t + held_until), tau[:, c]) for c in range(tau.shape[1])])
    return ArmLog(
        source=path,
        joint_names=joints,
        t=t,
        q=q,  # type: ignore[arg-type]
        dq=_group(columns, data, "dq", joints, path, False, spec),
        tau=tau,
    )


@dataclass(frozen=True)
class Conditioning:
    """How :func:`condition_log` resamples, filters and differentiates (see the module docstring).

    Attributes:
        rate_hz: Resampling rate (Hz).
        cutoff_hz: Low-pass of q, dq and tau (Hz).
        acceleration_cutoff_hz: Low-pass of ddq after differentiation (Hz).
        order: Butterworth order of each pass (the zero-phase filter doubles it).
        velocity: ``"auto"`` (logged if present), ``"logged"`` or ``"differentiated"``.
        edge_s: Time dropped at each end (s).
    """

    rate_hz: float = 1000.0
    cutoff_hz: float = 20.0
    acceleration_cutoff_hz: float = 5.0
    order: int = 4
    velocity: Literal["auto", "logged", "differentiated"] = "auto"
    edge_s: float = 0.1

    def __post_init__(self) -> None:
        for name in ("rate_hz", "cutoff_hz", "acceleration_cutoff_hz"):
            if not np.isfinite(getattr(self, name)) or getattr(self, name) <= 0:
                raise DataError(f"must be a positive number of Hz, got {getattr(self, name)!r}", field=name)
        for name in ("cutoff_hz", "acceleration_cutoff_hz"):
            if getattr(self, name) >= self.rate_hz / 2:
                raise DataError(f"{getattr(self, name):g} Hz must be below half the rate ({self.rate_hz / 2:g} Hz)", field=name)
        if not 1 <= self.order <= 8:
            raise DataError(f"must be 1 to 8, got {self.order}", field="order")
        if not self.edge_s >= 0:
            raise DataError(f"must be >= 0 s, got {self.edge_s!r}", field="edge_s")
        if self.velocity not in ("auto", "logged", "differentiated"):
            raise DataError(f"must be auto, logged or differentiated, got {self.velocity!r}", field="velocity")

    def smooth(self, x: np.ndarray, cutoff_hz: float | None = None) -> np.ndarray:
        """``x`` (samples along axis 0) through the zero-phase low-pass at ``cutoff_hz`` (default: that of q, dq, tau)."""
        return sosfiltfilt(butter(self.order, cutoff_hz or self.cutoff_hz, fs=self.rate_hz, output="sos"), x, axis=0)

    def describe(self) -> str:
        """One line for reports."""
        return (
            f"resampled at {self.rate_hz:g} Hz; zero-phase Butterworth (order {self.order}) at {self.cutoff_hz:g} Hz on q, dq, tau; "
            f"ddq = d(dq)/dt low-passed at {self.acceleration_cutoff_hz:g} Hz; {self.edge_s:g} s dropped at each end"
        )


@dataclass(frozen=True, eq=False)
class ConditionedLog:
    """Evenly sampled, filtered samples of a log (SI units, columns in ``joint_names`` order).

    Attributes:
        source: The file.
        joint_names: Joints of the columns.
        t, q, dq, ddq, tau: Samples; ``tau`` is None for a log without torques.
        notes: What was done, in words (dropped rows, the velocity's source, the filters).
        conditioning: How (the fit filters its discontinuous friction columns alike).
    """

    source: Path
    joint_names: tuple[str, ...]
    t: np.ndarray
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray
    tau: np.ndarray | None
    notes: tuple[str, ...]
    conditioning: Conditioning = Conditioning()

    def __len__(self) -> int:
        return len(self.t)

    def split(self, fraction: float) -> tuple[ConditionedLog, ConditionedLog]:
        """The first ``fraction`` of the samples and the rest (a hold-out by time)."""
        k = int(round(fraction * len(self)))
        if not 0 < k < len(self):
            raise DataError(f"fraction {fraction:g} leaves one part empty", field="fraction")
        part = lambda s: ConditionedLog(  # noqa: E731
            self.source, self.joint_names, self.t[s], self.q[s], self.dq[s], self.ddq[s], None if self.tau is None else self.tau[s], self.notes, self.conditioning
        )
        return part(slice(0, k)), part(slice(k, None))


def condition_log(log: ArmLog, how: Conditioning = Conditioning()) -> ConditionedLog:
    """Resample, filter and differentiate ``log`` as ``how`` says (module docstring).

    Raises:
        DataError: If ``velocity="logged"`` and the log has no velocities, or the log is
            shorter than the filters need.
    """
    if how.velocity == "logged" and log.dq is None:
        raise DataError("velocity = logged, but the log has no dq.<joint> columns", file=log.source, field="dq")
    use_logged = log.dq is not None and how.velocity != "differentiated"
    channels = [log.q] + ([log.dq] if use_logged else []) + ([log.tau] if log.tau is not None else [])
    raw = np.column_stack([log.t, *channels])
    keep = np.ones(len(raw), dtype=bool)
    keep[1:] = np.any(np.diff(raw[:, 1:], axis=0) != 0, axis=1)
    repeated = int(np.count_nonzero(~keep))
    raw = raw[keep]
    order = np.flatnonzero(np.diff(raw[:, 0]) > 0) + 1
    backwards = len(raw) - 1 - len(order)
    raw = raw[np.r_[0, order]]
    t = raw[:, 0]
    dt = 1.0 / how.rate_hz
    grid = np.arange(t[0], t[-1] + 0.5 * dt, dt)
    grid = grid[grid <= t[-1]]
    edge = int(round(how.edge_s * how.rate_hz))
    if len(grid) <= max(2 * edge, 30 * how.order):
        raise DataError(f"{t[-1] - t[0]:.3g} s of samples is too short for the filters", file=log.source)
    smooth = how.smooth(np.column_stack([np.interp(grid, t, raw[:, i]) for i in range(1, raw.shape[1])]))
    n = len(log.joint_names)
    q = smooth[:, :n]
    dq = smooth[:, n : 2 * n] if use_logged else np.gradient(q, dt, axis=0)
    ddq = how.smooth(np.gradient(dq, dt, axis=0), how.acceleration_cutoff_hz)
    tau = smooth[:, -n:] if log.tau is not None else None
    keep_rows = slice(edge, len(grid) - edge)
    gaps = np.diff(t)
    median = float(np.median(gaps))
    wide = np.flatnonzero(gaps > GAP_FACTOR * median)
    notes = [
        *log.notes,
        f"{log.source.name}: {len(log.t)} rows over {t[-1] - t[0]:.3f} s, steps {gaps.min() * 1e3:.3g} to {gaps.max() * 1e3:.3g} ms"
        + (f"; {repeated} repeated rows dropped" if repeated else "")
        + (f"; {backwards} rows with non-increasing time dropped" if backwards else ""),
        ("dq: the logged velocity" if use_logged else "dq: derivative of the filtered q (the log has no velocity)") + "; " + how.describe(),
    ]
    if len(wide):
        k = wide[np.argmax(gaps[wide])]
        notes.append(
            f"{len(wide)} gap{'s' if len(wide) > 1 else ''} longer than {GAP_FACTOR:g} median steps ({median * 1e3:.3g} ms), the longest "
            f"{gaps[k] * 1e3:.4g} ms at t = {t[k]:.4g} s: bridged by linear interpolation (within about {1 / how.cutoff_hz:.3g} s of a gap the "
            "samples are interpolated, not measured)"
        )
    return ConditionedLog(
        source=log.source,
        joint_names=log.joint_names,
        t=grid[keep_rows],
        q=q[keep_rows],
        dq=dq[keep_rows],
        ddq=ddq[keep_rows],
        tau=None if tau is None else tau[keep_rows],
        notes=tuple(notes),
        conditioning=how,
    )
