"""Limits of a path timing: joint velocity, acceleration, jerk and drive torque, per joint.

Defaults are the limits ``mbctl run`` holds the robot to (:func:`mbctl.ctrl.limits.run_limits`): the
URDF/TOML velocity limits and the torques the control laws saturate at (``[control] effort``, else the
joint's effort limit), so a timing never asks for a torque the run would clip; acceleration and jerk
have no URDF field and are unlimited unless given. The torque limits are scaled by ``torque_margin`` (e.g.
0.9 leaves 10 % of every drive's torque for feedback), the velocity limits by
``velocity_margin`` (e.g. 0.95: a closed loop that tracks the timing overshoots it a little,
and ``mbctl run`` stops at the robot's velocity limit itself). Overrides name joints; every value
is in SI units (rad/s, rad/s², rad/s³, N·m; m/s, m/s², m/s³, N for prismatic joints).

``friction`` says which part of the robot's friction model the timing respects:
``"full"`` (the configured laws: Coulomb, Stribeck, viscous, LuGre steady state,
load-dependent), ``"coulomb"`` (each law's Coulomb level ``fc`` only, the model toppra
can express; a joint's load model is kept, ``fc`` being a coefficient then), or ``"none"``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np

from mbctl.ctrl.limits import run_limits
from mbctl.dynamics.friction.laws import CoulombViscous, JointFriction
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError

__all__ = ["FRICTION_MODES", "TimingLimits", "timing_limits", "timing_robot"]

FRICTION_MODES = ("full", "coulomb", "none")

FrictionMode = Literal["full", "coulomb", "none"]


@dataclass(frozen=True)
class TimingLimits:
    """Per-joint limits (arrays of shape (nv,), robot DOF order; inf where unlimited).

    Attributes:
        velocity: |dq| limit (rad/s or m/s).
        acceleration: |ddq| limit (rad/s² or m/s²).
        jerk: |dddq| limit (rad/s³ or m/s³); None for a timing without jerk limits.
        torque: |tau| limit (N·m or N) of actuated joints, already scaled by ``torque_margin``.
        torque_margin: The factor applied to the drive limits, in (0, 1].
        velocity_margin: The factor applied to the velocity limits, in (0, 1].
        friction: The part of the friction model respected (see module docstring).
    """

    velocity: np.ndarray
    acceleration: np.ndarray
    jerk: np.ndarray | None
    torque: np.ndarray
    torque_margin: float = 1.0
    friction: FrictionMode = "full"
    velocity_margin: float = 1.0


def _per_joint(robot: RobotModel, base: np.ndarray, overrides: Mapping[str, float] | None, field: str) -> np.ndarray:
    out = base.astype(float).copy()
    for name, value in (overrides or {}).items():
        if name not in robot.joint_names:
            raise InputError(f"no joint {name!r} in robot {robot.name} (joints: {', '.join(robot.joint_names)})", field=field)
        if not (value > 0):
            raise InputError(f"{name}: must be > 0, got {value}", field=field)
        out[robot.joint(name).idx_v] = value
    return out


def timing_limits(
    robot: RobotModel,
    *,
    torque_margin: float = 1.0,
    velocity_margin: float = 1.0,
    velocity: Mapping[str, float] | None = None,
    acceleration: Mapping[str, float] | None = None,
    jerk: Mapping[str, float] | None = None,
    torque: Mapping[str, float] | None = None,
    friction: FrictionMode = "full",
) -> TimingLimits:
    """The robot's limits with per-joint overrides (joint name -> value, SI units).

    ``torque`` and ``velocity`` overrides replace the run's limit before ``torque_margin``
    and ``velocity_margin`` scale it. A
    ``jerk`` mapping limits only the joints it names; None means no jerk limit.

    Raises:
        InputError: For an unknown joint, a value <= 0, a margin outside (0, 1] or an
            unknown friction mode (the field names the argument).
        ConfigError: For a bad ``[control] effort``.
    """
    if not (0 < torque_margin <= 1):
        raise InputError(f"must be in (0, 1], got {torque_margin}", field="torque_margin")
    if not (0 < velocity_margin <= 1):
        raise InputError(f"must be in (0, 1], got {velocity_margin}", field="velocity_margin")
    if friction not in FRICTION_MODES:
        raise InputError(f"must be one of {', '.join(FRICTION_MODES)}, got {friction!r}", field="friction")
    nv = robot.nv
    run = run_limits(robot)
    vel = _per_joint(robot, run.velocity, velocity, "velocity") * velocity_margin
    acc = _per_joint(robot, np.full(nv, math.inf), acceleration, "acceleration")
    jrk = None if jerk is None else _per_joint(robot, np.full(nv, math.inf), jerk, "jerk")
    eff = _per_joint(robot, run.effort, torque, "torque") * torque_margin
    return TimingLimits(
        velocity=vel, acceleration=acc, jerk=jrk, torque=eff, torque_margin=torque_margin, friction=friction, velocity_margin=velocity_margin
    )


def timing_robot(robot: RobotModel, friction: FrictionMode) -> RobotModel:
    """The robot with its friction reduced to what ``friction`` respects (``"full"``: unchanged)."""
    if friction == "full":
        return robot

    def reduced(f: JointFriction | None) -> JointFriction | None:
        if f is None or friction == "none":
            return None
        return JointFriction(law=CoulombViscous(fc=f.law.fc, fv=0.0), load=f.load)

    return robot.with_friction({j.name: reduced(j.friction) for j in robot.joints})
