"""Verification on the arm: a validation trajectory the fit never saw, run with computed torque on the
nominal and on the identified model; the identified robot is adopted only if it is better.

The validation trajectory is another excitation (seed ``seed + 1``, period ``0.8 T``), with the same
transits from and back to the start pose. It runs twice, closed loop: computed torque with the
nominal model, then with the candidate of the identify step (the same gains and envelope). Two
measures per joint:

- **torque prediction RMS**: each model's inverse dynamics plus friction (``Y(q, dq, ddq) theta +
  F(dq)``) along the nominal run's log, against the torque the drives produced (N·m, N), the log
  conditioned as ``identify dynamics`` conditions one (resampled at 1 kHz; q, dq, tau and ddq
  low-passed at 20 Hz, zero phase). Judged over each joint's samples where it moves,
  ``|dq| >= moving_speed``: at a velocity reversal a joint sticks for a moment, where no
  steady-state friction law (the nominal's, the identified one's, the truth's alike) gives the
  torque. On the simulated UR5 with the truth itself as the model, the RMS over *all* samples is
  0.15 to 1.1 N·m from these moments alone, as large as a wrist's whole model error; the all-samples
  RMS is kept in the result too;
- **tracking RMS**: ``q_ref - q`` of each run (rad, m), from the loop's summary.

**Adopted** when the identified model's run completed and the model is better on both overall
measures, the root mean square over joints of the per-joint RMS (a run that stops on a safety limit,
torque off, is a model not adopted; the nominal run stopping stops the step): then the candidate is written to ``DIR/<robot>_commissioned.toml``. Either
way the result gives every ratio (nominal / identified: above 1, the identified model is better).
"""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np

from mbctl.ctrl.trajectory import write_trajectory
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.dynamics.regressor import inertial_parameters
from mbctl.errors import MbctlError
from mbctl.fileio import atomic_output
from mbctl.hardware.session import run_session
from mbctl.identification.arm_fit import predict_torques
from mbctl.identification.arm_log import ConditionedLog, Conditioning, condition_log, read_arm_log
from mbctl.identification.commission.context import Commission, StepStopped
from mbctl.identification.commission.envelope import envelope_robot
from mbctl.identification.commission.excitation import design
from mbctl.identification.commission.runs import summary_json
from mbctl.identification.report import _rewrite_urdf

__all__ = ["verify", "torque_rms", "adopted_path"]


def adopted_path(c: Commission) -> Path:
    """Where an adopted robot is written: ``DIR/<robot>_commissioned.toml``."""
    return c.out / f"{c.robot.name}_commissioned.toml"


CONDITIONING = Conditioning(acceleration_cutoff_hz=20.0)  # q, dq, tau and ddq at 20 Hz, 1 kHz


def torque_rms(robot: RobotModel, log: ConditionedLog, moving_speed: float) -> tuple[np.ndarray, np.ndarray]:
    """RMS of ``robot``'s predicted minus the logged torque per joint of ``log`` (N·m, N): over the samples
    where the joint moves at ``moving_speed`` (rad/s, m/s) or faster, and over all samples."""
    friction = {j.name: j.friction.law if j.friction is not None else None for j in robot.joints}
    error = predict_torques(robot, inertial_parameters(robot), friction, log) - log.tau
    moving = np.abs(log.dq) >= moving_speed
    rms_moving = np.array([np.sqrt(np.mean(error[moving[:, k], k] ** 2)) if moving[:, k].any() else np.nan for k in range(error.shape[1])])
    return rms_moving, np.sqrt(np.mean(error**2, axis=0))


def _overall(x: np.ndarray) -> float:
    return float(np.sqrt(np.mean(np.square(x))))


def verify(c: Commission, results: dict[str, dict]) -> dict:
    """The ``verify`` step (module docstring); returns its JSON result."""
    folder = c.step_dir("verify")
    candidate_path = c.out / "identify" / results["identify"]["candidate"]
    try:
        identified = load_robot(candidate_path)
    except MbctlError as exc:
        raise StepStopped("verify", f"the identified robot does not load: {exc}") from None
    target = adopted_path(c)
    s = c.settings
    traj, info = design(c, "verify", s.seed + 1, 0.8 * s.period_s)
    write_trajectory(folder / "validation.csv", traj)
    c.check_keepout("verify", traj, "the validation")
    runs = {}
    options = dataclasses.replace(c.options, law="computed-torque")
    candidate = envelope_robot(identified, c.envelope, detect_collisions=s.detect_collisions)
    for label, robot in (("nominal", c.run_robot), ("identified", candidate)):
        # with the measured friction: the nominal model's computed torque may not break a joint loose
        # (on the UR5's wrist 3 it left 0.18 rad), and the move is no part of the comparison
        c.bring_to_start("verify", candidate)
        c.say(f"verify: {traj.duration:.1f} s closed loop, computed torque on the {label} model")
        summary = run_session(robot, traj, options, folder / f"{label}.npz", plant_robot=c.run_robot)  # the same arm for both models
        if label == "nominal":  # nothing to compare with
            c.check_run("verify", "the validation run with the nominal model", summary)
        runs[label] = summary
    stopped = None if runs["identified"].completed else runs["identified"].stop_reason  # torque is off: the loop's exit path
    log = condition_log(read_arm_log(folder / "nominal.npz", c.robot.joint_names, spec=c.robot.spec), CONDITIONING)
    names = list(log.joint_names)
    both = {"nominal": torque_rms(c.robot, log, s.moving_speed), "identified": torque_rms(identified, log, s.moving_speed)}
    torque = {k: v[0] for k, v in both.items()}
    tracking = {k: np.array([runs[k].tracking_rms.get(n, math.nan) for n in names]) for k in runs}
    table = {
        n: {
            "torque_rms_nominal": float(torque["nominal"][i]), "torque_rms_identified": float(torque["identified"][i]),
            "torque_ratio": _ratio(torque["nominal"][i], torque["identified"][i]),
            "torque_rms_all_samples_nominal": float(both["nominal"][1][i]), "torque_rms_all_samples_identified": float(both["identified"][1][i]),
            "tracking_rms_nominal": float(tracking["nominal"][i]), "tracking_rms_identified": float(tracking["identified"][i]),
            "tracking_ratio": _ratio(tracking["nominal"][i], tracking["identified"][i]),
        }
        for i, n in enumerate(names)
    }
    overall = {k: {"torque_rms": _overall(torque[k]), "tracking_rms": _overall(tracking[k])} for k in torque}
    better = stopped is None and overall["identified"]["torque_rms"] < overall["nominal"]["torque_rms"] and overall["identified"]["tracking_rms"] < overall["nominal"]["tracking_rms"]
    torque_gain = _ratio(overall["nominal"]["torque_rms"], overall["identified"]["torque_rms"])
    tracking_gain = _ratio(overall["nominal"]["tracking_rms"], overall["identified"]["tracking_rms"])
    verdict = (f"{'adopted' if better else 'NOT adopted'}: " + (f"the validation run with the identified model stopped ({stopped}); " if stopped else "") + f"torque prediction RMS {overall['nominal']['torque_rms']:.4g} -> {overall['identified']['torque_rms']:.4g} "
               f"({_times(torque_gain)}), tracking RMS {overall['nominal']['tracking_rms']:.4g} -> {overall['identified']['tracking_rms']:.4g} ({_times(tracking_gain)})")
    c.say(f"verify: {verdict}")
    if better:
        text = _rewrite_urdf(candidate_path.read_text(), candidate_path, target)
        with atomic_output(target) as tmp:
            tmp.write_text(text)
            load_robot(tmp)  # a copy that would not load is never renamed into place
        c.say(f"verify: wrote {target}")
    return {
        "validation": info, "moving_speed": s.moving_speed, "trajectory": "validation.csv", "logs": {k: f"{k}.npz" for k in runs},
        "runs": {k: summary_json(v) for k, v in runs.items()}, "joints": table, "overall": overall, "identified_stopped": stopped,
        "torque_gain": torque_gain, "tracking_gain": tracking_gain, "adopted": better, "verdict": verdict,
        "robot": target.name if better else None, "arm_time_s": sum(r.duration_s for r in runs.values()),
    }


def _ratio(nominal: float, identified: float) -> float:
    return float(nominal / identified) if identified > 0 else math.inf


def _times(gain: float) -> str:
    """A ratio nominal / identified in words."""
    if gain >= 1:
        return f"{gain:.3g} x better"
    return f"{1 / gain:.3g} x worse" if gain > 0 else "worse"
