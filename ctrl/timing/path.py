"""Geometric paths ``q(s)``, ``s`` in [0, 1], and their derivatives along the path parameter.

A time-optimal timing (:mod:`mbctl.ctrl.timing.solve`) needs ``q(s)`` and its first three
derivatives with respect to ``s`` (``q'``, ``q''``, ``q'''``): along the path
``dq = q' sdot``, ``ddq = q' sddot + q'' sdot^2`` and
``dddq = q''' sdot^3 + 3 q'' sdot sddot + q' sdddot``.

Two sources:

- :func:`spline_path`: a cubic spline through joint waypoints placed at uniform ``s``,
  not-a-knot ends (the path toppra's ``SplineInterpolator`` builds from the same
  waypoints, so the two timings can be compared);
- :func:`read_path`: a CSV of samples ``s, q.<joint>...``; ``s`` strictly increasing,
  rescaled to [0, 1], interpolated by the same kind of spline (C2, so the torque along
  the path is continuous).

Units: ``q`` in rad or m; ``q'`` in rad or m per unit ``s`` and so on.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from scipy.interpolate import CubicSpline, PPoly

from mbctl.errors import DataError
from mbctl.fileio import read_csv

__all__ = ["GeometricPath", "spline_path", "spline_path_at", "read_path"]


@dataclass(frozen=True, eq=False)
class GeometricPath:
    """A C2 joint path ``q(s)`` over ``s`` in [0, 1].

    Attributes:
        joint_names: Column names of ``q``.
        spline: The interpolant (a :class:`scipy.interpolate.CubicSpline` with values of shape (n,)).
    """

    joint_names: tuple[str, ...]
    spline: CubicSpline

    def __call__(self, s: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(q, q', q'', q''')`` at path parameters ``s`` (shape (N,)), each (N, n)."""
        s = np.clip(np.asarray(s, dtype=float), 0.0, 1.0)
        return tuple(self.spline(s, k) for k in range(4))  # type: ignore[return-value]

    @property
    def points(self) -> np.ndarray:
        """The points the spline passes through (waypoints or path samples), (K, n)."""
        return self.spline(self.spline.x)

    def turning_points(self) -> np.ndarray:
        """Path parameters where some joint turns (``q_j'(s) = 0`` inside a spline piece), with the
        points' own parameters: every extreme of every joint over [0, 1] is at one of them. Sorted, (M,)."""
        x, c = self.spline.x, self.spline.c  # c: (4, K - 1, n), the cubic pieces per joint
        found = [x]
        for j in range(c.shape[2]):
            found.append(PPoly(c[:, :, j], x).derivative().roots(extrapolate=False))
        s = np.unique(np.concatenate(found))
        return s[np.isfinite(s)]

    def columns(self, names: Sequence[str]) -> GeometricPath:
        """The same path with columns in the order of ``names`` (every name must be a column).

        Raises:
            DataError: Naming the first joint the path does not hold.
        """
        missing = [n for n in names if n not in self.joint_names]
        if missing:
            raise DataError("missing from the path", field=f"q.{missing[0]}")
        idx = [self.joint_names.index(n) for n in names]
        return spline_path_at(self.spline.x, self.spline(self.spline.x)[:, idx], names)


def spline_path_at(s: np.ndarray, q: np.ndarray, joint_names: Sequence[str]) -> GeometricPath:
    """Cubic spline (not-a-knot) through samples ``q`` (K, n) at path parameters ``s`` (K,), increasing from 0 to 1."""
    s = np.asarray(s, dtype=float)
    if len(s) == 2:
        return spline_path(q, joint_names)
    return GeometricPath(joint_names=tuple(joint_names), spline=CubicSpline(s, q, axis=0, bc_type="not-a-knot"))


def spline_path(waypoints: np.ndarray, joint_names: Sequence[str]) -> GeometricPath:
    """Cubic spline through ``waypoints`` (K, n) at ``s = linspace(0, 1, K)``, not-a-knot ends
    (K = 2: a straight line; K = 3: the parabola through the three).

    Raises:
        DataError: For fewer than 2 waypoints, the wrong number of joints or non-finite values.
    """
    q = np.atleast_2d(np.asarray(waypoints, dtype=float))
    if q.shape[0] < 2 or q.shape[1] != len(joint_names):
        raise DataError(f"need at least 2 waypoints of {len(joint_names)} joints, got shape {q.shape}", field="waypoints")
    if not np.isfinite(q).all():
        raise DataError("values must be finite", field="waypoints")
    if q.shape[0] == 2:  # a line: the clamped spline with the chord's slope at both ends
        s = np.array([0.0, 1.0])
        return GeometricPath(tuple(joint_names), CubicSpline(s, q, axis=0, bc_type=((1, q[1] - q[0]), (1, q[1] - q[0]))))
    return spline_path_at(np.linspace(0.0, 1.0, q.shape[0]), q, joint_names)


def read_path(path: str | Path, joint_names: Sequence[str]) -> GeometricPath:
    """Read a path CSV ``s, q.<joint>...`` holding every joint named; ``s`` is rescaled to [0, 1].

    Raises:
        DataError: Naming the file and column for a missing ``s`` or joint column, fewer than
            two rows, or ``s`` not strictly increasing.
    """
    table = read_csv(path)
    s = table.column("s")
    if len(s) < 2:
        raise DataError("needs at least 2 samples", file=table.path, field="s")
    if np.any(np.diff(s) <= 0):
        line = table.line_numbers[int(np.argmax(np.diff(s) <= 0)) + 1]
        raise DataError(f"must be strictly increasing (line {line})", file=table.path, field="s")
    q = np.column_stack([table.column(f"q.{j}") for j in joint_names])
    return spline_path_at((s - s[0]) / (s[-1] - s[0]), q, joint_names)
