"""Small helpers the steps share: run logs, summaries, trajectories that start and end at the start pose."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np

from mbctl.ctrl.trajectory import Trajectory, quintic_rest_to_rest
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.loop import RunSummary

__all__ = ["actuated", "drift_of", "summary_json", "via_start", "arm_time"]

SUMMARY_KEYS = ("stop_reason", "completed", "cycles", "duration_s", "rate_hz", "tracking_rms", "max_abs_error", "overruns", "saturated", "sensing", "estimation")


def actuated(robot: RobotModel, q: np.ndarray) -> np.ndarray:
    """The actuated joints' entries of a DOF vector."""
    return np.array([q[robot.joint(n).idx_v] for n in robot.actuated_names])


def summary_json(summary: RunSummary) -> dict:
    """The parts of a run summary a step keeps."""
    full = summary.to_json()
    return {k: full[k] for k in SUMMARY_KEYS if k in full}


def drift_of(log: Path, names: Sequence[str], q0: np.ndarray) -> list[float]:
    """Largest ``|q - q0|`` per joint (rad, m) over the logged cycles that read."""
    data = np.load(log)
    if not len(data["t"]):
        return [float("nan")] * len(names)
    q = data["q"].reshape(len(data["t"]), -1)
    ok = data["read_ok"] > 0
    q = q[ok & np.isfinite(q).all(axis=1)]
    if not len(q):
        return [float("nan")] * len(names)
    return np.abs(q - q0[None, :]).max(axis=0).tolist()


def via_start(robot: RobotModel, q0: np.ndarray, motion: Trajectory, speed: np.ndarray, rate_hz: float) -> Trajectory:
    """``motion`` (every DOF) with a quintic transit from ``q0`` to its start before it and back to
    ``q0`` after it, so that a run starts and ends at the start pose. Each transit's duration lets
    every joint's peak speed stay below half ``speed`` (rad/s, m/s; per DOF), and at least 1 s."""
    names = robot.joint_names
    q, dq, ddq = motion.columns(names)
    gap = np.abs(q[0] - q0)
    back = np.abs(q[-1] - q0)
    duration = lambda d: max(1.0, float(np.max(1.875 * d / (0.5 * speed))))  # noqa: E731  (quintic peak speed 1.875 d / T)
    parts = [quintic_rest_to_rest(np.vstack([q0, q[0]]), [duration(gap)], rate_hz, names)]
    parts.append(Trajectory(t=motion.t - motion.t[0], joint_names=names, q=q, dq=dq, ddq=ddq))
    parts.append(quintic_rest_to_rest(np.vstack([q[-1], q0]), [duration(back)], rate_hz, names))
    t, qs, dqs, ddqs, offset = [], [], [], [], 0.0
    for i, p in enumerate(parts):
        keep = slice(1 if i else 0, None)  # each part's first sample is the previous one's last
        t.append(p.t[keep] + offset)
        qs.append(p.q[keep])
        dqs.append(p.dq[keep])
        ddqs.append(p.ddq[keep])
        offset += p.t[-1]
    return Trajectory(t=np.concatenate(t), joint_names=names, q=np.vstack(qs), dq=np.vstack(dqs), ddq=np.vstack(ddqs))


def arm_time(results: dict[str, dict]) -> float:
    """Seconds of arm motion the steps' runs took (what a user waits for on hardware)."""
    return float(sum(r.get("arm_time_s", 0.0) for r in results.values()))
