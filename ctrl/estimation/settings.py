"""The estimation choices of a robot's ``[control]`` table, checked against it.

The TOML is described in :mod:`mbctl.config.control`: ``velocity`` and ``velocity_cutoff_hz``
choose the velocity the laws see; ``[control.collision]`` sets the momentum observer's gain,
its per-joint detection thresholds and the reaction to a detection. Without that table the
observer runs and its estimate is logged, but nothing is detected (thresholds are a property of
the arm and its model: set them where they are known).

Default threshold of a joint: its model's break-away friction (``fs``, else ``fc``) plus
:data:`DEFAULT_THRESHOLD_FRACTION` of its effort limit. The observer's friction is least certain
where the velocity reverses or leaves rest (presliding, stiction, a smoothed sign): there the
residual in free motion reaches the break-away level.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.config.control import CollisionSpec, ControlSpec
from mbctl.dynamics.model.per_joint import per_joint_values
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["DEFAULT_THRESHOLD_FRACTION", "EstimationSettings", "estimation_settings"]

DEFAULT_THRESHOLD_FRACTION = 0.01
"""Part of a joint's default detection threshold: this fraction of its effort limit (inf without one)."""


@dataclass(frozen=True, eq=False)
class EstimationSettings:
    """Velocity estimator and momentum observer settings, per DOF where per joint.

    Attributes:
        velocity: ``"measured"``, ``"first-order"``, ``"alpha-beta"`` or ``"model"``.
        cutoff_hz: The velocity estimate's bandwidth (Hz).
        gain: Observer gain K (1/s).
        threshold: Detection threshold on ``|tau_ext|`` per DOF (N·m, N; inf: none).
        reaction: ``"stop"``, ``"hold"`` or ``"none"``.
        file: The robot TOML, for errors.
        observer_cutoff_hz: Cutoff of the observer's own velocity low-pass (Hz; inf: none).
        torque: The torque the observer takes as acting: ``"measured"`` (the drives' where the backend
            measures one, else the commands) or ``"commanded"``.
    """

    velocity: str
    cutoff_hz: float
    gain: float
    threshold: np.ndarray
    reaction: str
    file: Path | None = None
    observer_cutoff_hz: float = math.inf
    torque: str = "measured"

    def describe(self) -> str:
        """One line for the run summary."""
        what = {
            "measured": "the backend's velocity as measured",
            "first-order": f"first-order filtered difference of positions, cutoff {self.cutoff_hz:g} Hz",
            "alpha-beta": f"alpha-beta tracking filter, bandwidth {self.cutoff_hz:g} Hz",
            "model": f"model-based observer (dynamics driven by the torque that acted), bandwidth {self.cutoff_hz:g} Hz",
        }[self.velocity]
        detect = f"reaction {self.reaction}" if np.isfinite(self.threshold).any() else "detection off (no [control.collision])"
        filtered = f", its velocity low-passed at {self.observer_cutoff_hz:g} Hz" if math.isfinite(self.observer_cutoff_hz) else ""
        return f"controller velocity: {what}; momentum observer K {self.gain:g} 1/s{filtered}, {detect}"


def estimation_settings(robot: RobotModel, *, threshold: float | dict[str, float] | None = None) -> EstimationSettings:
    """The robot's ``[control]`` estimation settings (defaults when it has none); ``threshold``
    (N·m, N; one number or by joint) replaces the file's.

    Raises:
        ConfigError: Naming the file and field, for a threshold of an unknown joint.
    """
    spec = robot.spec.control if robot.spec is not None and robot.spec.control is not None else ControlSpec()
    collision: CollisionSpec = spec.collision if spec.collision is not None else CollisionSpec(reaction="none")
    file = spec.file if spec.file is not None else robot.source
    limits = np.array([j.limits.effort if j.actuated else math.inf for j in robot.joints], dtype=float)
    default = DEFAULT_THRESHOLD_FRACTION * limits + np.array([_break_away(j) for j in robot.joints])
    given = threshold if threshold is not None else collision.threshold
    values = default if spec.collision is not None or threshold is not None else np.full(robot.nv, math.inf)
    if given is not None:
        values = per_joint_values(robot, given, default=math.nan, require_all=False, file=file if threshold is None else None, field="control.collision.threshold" if threshold is None else "--threshold")
        values = np.where(np.isnan(values), default, values)
    return EstimationSettings(
        velocity=spec.velocity, cutoff_hz=spec.velocity_cutoff_hz, gain=collision.gain, threshold=values, reaction=collision.reaction, file=file,
        observer_cutoff_hz=collision.velocity_cutoff_hz, torque=collision.torque,
    )


def _break_away(joint) -> float:
    """The joint's dry friction level at rest (N·m, N): ``fs`` of a Stribeck or LuGre law, ``fc``
    of Coulomb–viscous, 0 without friction."""
    if joint.friction is None:
        return 0.0
    law = joint.friction.law
    return float(getattr(law, "fs", getattr(law, "fc", 0.0)))
