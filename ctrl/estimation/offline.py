"""The momentum observer over a recorded motion: external joint torques and detections, sample by sample.

The observer of :mod:`mbctl.ctrl.estimation.step` runs causally over the samples (irregular
times allowed: each step is the time since the previous sample), as it would have in the loop,
with the recorded torque as ``tau`` (a measured joint torque, or the command) and, by default,
the recorded velocity. A detection is a run of samples with ``|tau_ext_i| > threshold_i`` on a
joint (runs less than :data:`MERGE_GAP_S` apart are one: a noisy estimate dips below the threshold
in the middle of one collision): its start time, the joint, the peak and its time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mbctl.ctrl.estimation.estimator import StateEstimator
from mbctl.ctrl.estimation.settings import EstimationSettings, estimation_settings
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["MERGE_GAP_S", "Detection", "ObserverRun", "observe"]

MERGE_GAP_S = 0.05
"""Detections on one joint closer than this (s) are reported as one."""


@dataclass(frozen=True)
class Detection:
    """A collision seen on one joint: from ``start_s`` to ``end_s`` (s), ``peak`` (N·m, N) at ``peak_s``."""

    joint: str
    start_s: float
    end_s: float
    peak: float
    peak_s: float


@dataclass(frozen=True, eq=False)
class ObserverRun:
    """The observer over N samples.

    Attributes:
        t: Times (s), (N,).
        tau_ext: External joint torques (N·m, N), (N, nv).
        detected: ``|tau_ext| > threshold`` per sample and joint, (N, nv).
        detections: One entry per run of detected samples on a joint, in time order.
        threshold: The thresholds used (N·m, N), (nv,).
    """

    t: np.ndarray
    tau_ext: np.ndarray
    detected: np.ndarray
    detections: tuple[Detection, ...]
    threshold: np.ndarray


def observe(
    robot: RobotModel,
    t: np.ndarray,
    q: np.ndarray,
    dq: np.ndarray | None,
    tau: np.ndarray,
    settings: EstimationSettings | None = None,
    *,
    compiled: bool = True,
) -> ObserverRun:
    """Run the observer over samples ``(t, q, dq, tau)`` (s; (N, nv) in DOF order; SI units).

    ``dq`` None: the velocity comes from the estimator the settings name (``"measured"`` needs a
    ``dq``, so it becomes ``"model"``). Between samples k-1 and k the torque is the mean of
    ``tau[k-1]`` and ``tau[k]`` (trapezoidal, as the observer integrates its other terms).
    """
    settings = estimation_settings(robot) if settings is None else settings
    if dq is None and settings.velocity == "measured":
        settings = EstimationSettings(**{**settings.__dict__, "velocity": "model"})
    dt = np.diff(t)
    period = float(np.median(dt)) if len(dt) else 1e-3
    est = StateEstimator(robot, period, settings, compiled=compiled)
    velocities = np.zeros_like(q) if dq is None else dq
    n = len(t)
    tau_ext = np.zeros((n, robot.nv))
    est.reset(float(t[0]), q[0], velocities[0])
    for k in range(1, n):
        est.update(float(t[k]), q[k], velocities[k], 0.5 * (tau[k - 1] + tau[k]))
        tau_ext[k] = est.tau_ext
    detected = np.abs(tau_ext) > settings.threshold
    return ObserverRun(t=t, tau_ext=tau_ext, detected=detected, detections=_detections(robot, t, tau_ext, detected), threshold=settings.threshold)


def _detections(robot: RobotModel, t: np.ndarray, tau_ext: np.ndarray, detected: np.ndarray) -> tuple[Detection, ...]:
    out = []
    for i, name in enumerate(robot.joint_names):
        flags = np.r_[False, detected[:, i], False].astype(np.int8)
        starts, ends = np.flatnonzero(np.diff(flags) == 1), np.flatnonzero(np.diff(flags) == -1)
        runs: list[list[int]] = []
        for a, b in zip(starts, ends):
            if runs and t[a] - t[runs[-1][1] - 1] < MERGE_GAP_S:
                runs[-1][1] = b
            else:
                runs.append([a, b])
        for a, b in runs:
            k = a + int(np.argmax(np.abs(tau_ext[a:b, i])))
            out.append(Detection(joint=name, start_s=float(t[a]), end_s=float(t[b - 1]), peak=float(tau_ext[k, i]), peak_s=float(t[k])))
    return tuple(sorted(out, key=lambda d: d.start_s))
