"""Joint trajectories: the sampled ``(t, q, dq, ddq)`` data type, generators and CSV.

CSV format (one header line, SI units, comma-separated)::

    t, q.<joint>..., dq.<joint>..., ddq.<joint>...

``t`` in s, strictly increasing; ``q`` in rad (revolute) or m (prismatic), ``dq``
in rad/s or m/s, ``ddq`` in rad/s² or m/s². Other columns are ignored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.ctrl.limits import position_excess
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import DataError
from mbctl.fileio import read_csv, write_csv

__all__ = [
    "Trajectory", "quintic_rest_to_rest", "constant_acceleration", "read_trajectory", "write_trajectory", "limit_violations",
    "sample_count", "trajectory_bytes", "csv_bytes",
]  # fmt: skip


@dataclass(frozen=True, eq=False)
class Trajectory:
    """Sampled joint trajectory.

    Attributes:
        t: Sample times (s), shape (N,), strictly increasing.
        joint_names: Names of the columns of ``q``, ``dq``, ``ddq``.
        q: Positions (rad or m), shape (N, n).
        dq: Velocities (rad/s or m/s), shape (N, n).
        ddq: Accelerations (rad/s² or m/s²), shape (N, n).
    """

    t: np.ndarray
    joint_names: tuple[str, ...]
    q: np.ndarray
    dq: np.ndarray
    ddq: np.ndarray

    def __post_init__(self) -> None:
        if np.ndim(self.t) != 1 or len(self.t) < 1:
            raise DataError("needs a 1-D array of at least one sample time", field="t")
        n = len(self.t)
        for name in ("q", "dq", "ddq"):
            x = getattr(self, name)
            if x.shape != (n, len(self.joint_names)):
                raise DataError(f"shape {x.shape} does not match ({n}, {len(self.joint_names)})", field=name)
            if not np.isfinite(x).all():
                raise DataError("holds non-finite values", field=name)
        if not np.isfinite(self.t).all() or np.any(np.diff(self.t) <= 0):
            raise DataError("sample times must be finite and strictly increasing", field="t")

    @property
    def duration(self) -> float:
        """Time from the first to the last sample (s)."""
        return float(self.t[-1] - self.t[0])

    def __len__(self) -> int:
        return len(self.t)

    def at(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, dq, ddq)`` at time ``t`` (s), linearly interpolated between samples.

        Before the first sample and after the last the trajectory holds its end
        positions at rest.
        """
        if t <= self.t[0] or t >= self.t[-1]:
            k = 0 if t <= self.t[0] else -1
            zero = np.zeros(len(self.joint_names))
            return self.q[k].copy(), zero, zero.copy()
        k = int(np.searchsorted(self.t, t, side="right")) - 1
        w = (t - self.t[k]) / (self.t[k + 1] - self.t[k])
        return tuple((1 - w) * x[k] + w * x[k + 1] for x in (self.q, self.dq, self.ddq))  # type: ignore[return-value]

    def sample(self, times: np.ndarray) -> np.ndarray:
        """``(q, dq, ddq)`` side by side at each of ``times`` (s): (len(times), 3n), each row what
        :meth:`at` gives, by the same arithmetic."""
        times = np.asarray(times, dtype=float)
        k = np.clip(np.searchsorted(self.t, times, side="right") - 1, 0, len(self.t) - 2)
        w = ((times - self.t[k]) / (self.t[k + 1] - self.t[k]))[:, None]
        rows = np.hstack([(1 - w) * x[k] + w * x[k + 1] for x in (self.q, self.dq, self.ddq)])
        n = len(self.joint_names)
        for outside, end in ((times <= self.t[0], 0), (times >= self.t[-1], -1)):
            rows[outside] = np.concatenate([self.q[end], np.zeros(2 * n)])
        return rows

    def columns(self, names: Sequence[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(q, dq, ddq)`` with columns in the order of ``names``.

        Raises:
            DataError: If a name is not in the trajectory.
        """
        missing = [n for n in names if n not in self.joint_names]
        if missing:
            raise DataError("missing from the trajectory", field=f"q.{missing[0]}")
        idx = [self.joint_names.index(n) for n in names]
        return self.q[:, idx], self.dq[:, idx], self.ddq[:, idx]


def sample_count(duration: float, rate_hz: float) -> float:
    """Samples of a trajectory of ``duration`` s at ``rate_hz`` Hz, as the generators take them; a float
    (inf for an overflowing request), so that sizes are compared before anything is allocated."""
    product = duration * rate_hz
    return max(1.0, math.ceil(product - 1e-9)) + 1.0 if math.isfinite(product) else math.inf


def trajectory_bytes(samples: float, joints: int) -> float:
    """Memory a generated trajectory of ``joints`` joints takes at its peak (bytes): its four columns
    and the profile's intermediate arrays, about ``10 + 9 n`` doubles a sample."""
    return samples * 8.0 * (10 + 9 * joints)


def csv_bytes(samples: float, joints: int) -> float:
    """Its CSV file at most (bytes): ``1 + 3 n`` values of up to 25 characters a row."""
    return samples * 25.0 * (1 + 3 * joints)


def _sample_times(duration: float, rate_hz: float) -> np.ndarray:
    """Times from 0 to ``duration`` inclusive, spaced by at most ``1/rate_hz`` (at least the two ends)."""
    if not duration > 0 or not rate_hz > 0:
        raise DataError(f"duration ({duration}) and rate ({rate_hz}) must be > 0")
    return np.linspace(0.0, duration, max(1, int(np.ceil(duration * rate_hz - 1e-9))) + 1)


def quintic_rest_to_rest(
    waypoints: np.ndarray, durations: Sequence[float], rate_hz: float, joint_names: Sequence[str]
) -> Trajectory:
    """Move through joint waypoints, stopping at each, with quintic profiles.

    On segment ``i`` of duration ``T_i``, with ``s = (t - t_i)/T_i`` and
    ``p(s) = 10 s^3 - 15 s^4 + 6 s^5``, ``q = q_i + (q_{i+1} - q_i) p(s)``: velocity and
    acceleration are zero at every waypoint.

    Args:
        waypoints: (K, n) joint positions (rad or m), K >= 2.
        durations: K - 1 segment durations (s), each > 0.
        rate_hz: Sampling rate (Hz).
        joint_names: Names of the n joints.
    """
    waypoints = np.atleast_2d(np.asarray(waypoints, dtype=float))
    durations = np.asarray(durations, dtype=float)
    if waypoints.shape[0] < 2 or waypoints.shape[1] != len(joint_names):
        raise DataError(f"need at least 2 waypoints of {len(joint_names)} joints, got shape {waypoints.shape}", field="waypoints")
    if durations.shape != (waypoints.shape[0] - 1,) or np.any(durations <= 0):
        raise DataError(f"need {waypoints.shape[0] - 1} durations, each > 0", field="durations")
    starts = np.concatenate([[0.0], np.cumsum(durations)])
    t = _sample_times(starts[-1], rate_hz)
    seg = np.clip(np.searchsorted(starts, t, side="right") - 1, 0, len(durations) - 1)
    T = durations[seg][:, None]
    s = np.clip((t - starts[seg]) / T[:, 0], 0.0, 1.0)[:, None]
    delta = waypoints[seg + 1] - waypoints[seg]
    # products only (no s**3): numpy's power runs the CPU's own SIMD code (SVML on AVX-512), whose
    # last bits differ between machines; a product is correctly rounded everywhere, so a trajectory
    # file is the same bytes on every host (docs/bad-input.md quotes such a file's size)
    p = s * s * s * (10 - 15 * s + 6 * s * s)
    dp = 30 * s**2 * (1 - s) ** 2
    ddp = 60 * s * (1 - s) * (1 - 2 * s)
    return Trajectory(
        t=t,
        joint_names=tuple(joint_names),
        q=waypoints[seg] + delta * p,
        dq=delta * dp / T,
        ddq=delta * ddp / T**2,
    )


def constant_acceleration(
    q0: np.ndarray, acceleration: np.ndarray, duration: float, rate_hz: float, joint_names: Sequence[str]
) -> Trajectory:
    """Start from rest at ``q0`` and accelerate every joint at a constant rate.

    ``q = q0 + a t^2/2``, ``dq = a t``, ``ddq = a`` (the load-dependent friction study's test motion).
    """
    q0 = np.asarray(q0, dtype=float)
    a = np.asarray(acceleration, dtype=float)
    n = len(joint_names)
    if q0.shape != (n,) or a.shape != (n,):
        raise DataError(f"q0 and acceleration need {n} values, got {q0.shape} and {a.shape}")
    t = _sample_times(duration, rate_hz)[:, None]
    return Trajectory(
        t=t[:, 0],
        joint_names=tuple(joint_names),
        q=q0 + 0.5 * a * t**2,
        dq=a * t,
        ddq=np.broadcast_to(a, (len(t), n)).copy(),
    )


def read_trajectory(path: str | Path, joint_names: Sequence[str]) -> Trajectory:
    """Read a trajectory CSV holding ``q.``, ``dq.``, ``ddq.`` columns for every joint named.

    Raises:
        DataError: Naming the file and the column for a missing column, a
            non-finite value or non-increasing times.
    """
    table = read_csv(path)
    t = table.column("t")
    if np.any(np.diff(t) <= 0):
        line = table.line_numbers[int(np.argmax(np.diff(t) <= 0)) + 1]
        raise DataError(f"times must be strictly increasing (line {line})", file=table.path, field="t")
    q, dq, ddq = (np.column_stack([table.column(f"{p}.{j}") for j in joint_names]) for p in ("q", "dq", "ddq"))
    return Trajectory(t=t, joint_names=tuple(joint_names), q=q, dq=dq, ddq=ddq)


def write_trajectory(path: str | Path, traj: Trajectory) -> None:
    """Write a trajectory CSV (atomically)."""
    header = ["t"] + [f"{p}.{j}" for p in ("q", "dq", "ddq") for j in traj.joint_names]
    write_csv(path, header, np.column_stack([traj.t, traj.q, traj.dq, traj.ddq]))


def limit_violations(robot: RobotModel, traj: Trajectory) -> list[str]:
    """Describe every joint whose position or speed leaves the robot's limits."""
    q, dq, _ = traj.columns(robot.joint_names)
    excess = {e.joint: e for e in position_excess(robot, q)}
    out = []
    for j in robot.joints:
        unit = "rad" if j.kind == "revolute" else "m"
        if j.name in excess:
            e = excess[j.name]
            out.append(f"q.{j.name} spans [{e.low:.4g}, {e.high:.4g}] {unit}, outside the limits [{j.limits.lower:.4g}, {j.limits.upper:.4g}] {unit}")
        speed = np.abs(dq[:, j.idx_v]).max()
        if speed > j.limits.velocity:
            out.append(f"dq.{j.name} reaches {speed:.4g} {unit}/s, above the limit {j.limits.velocity:.4g} {unit}/s")
    return out
