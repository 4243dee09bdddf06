"""The commissioning envelope: the robot's limits with margins, and the robot every step runs with.

Every closed-loop step of ``mbctl commission`` runs a copy of the nominal robot whose joint limits
*are* the envelope, so the loop's own safety checks (:class:`mbctl.hardware.loop.SafetyLimits`:
measured position, velocity and torque per joint) stop the arm, torque off, as soon as it leaves the
envelope; planners (the excitation design, the friction sweeps) plan inside the same limits.

Per actuated joint, with ``[lo, hi]`` the TOML/URDF position range, ``v`` its speed limit and ``u``
its saturation level (``[control] effort``, else the effort limit)::

    lo_e = lo + m_q (hi - lo) / 2        hi_e = hi - m_q (hi - lo) / 2
    v_e  = (1 - m_v) v                   u_e  = (1 - m_u) u

(positions in rad or m, speeds in rad/s or m/s, torques in N·m or N; a joint without a limit keeps
none). ``m_q``, ``m_v``, ``m_u`` are the command line's margins, fractions in [0, 1).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from mbctl.config.control import ControlSpec, GainsSpec
from mbctl.ctrl.limits import effort_levels
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError

__all__ = ["DEFAULT_GAINS", "Envelope", "Margins", "envelope_robot", "start_origin", "start_pose", "toml_start", "within_envelope"]

DEFAULT_GAINS = GainsSpec(kp=400.0, kd=40.0)
"""Computed-torque gains where the robot's TOML gives none: ``e'' + 40 e' + 400 e = 0`` (1/s², 1/s),
critically damped at 20 rad/s, as the bundled arms'."""


@dataclass(frozen=True)
class Margins:
    """Fractions of each limit kept free: ``position`` of the half range at each end, ``velocity`` and
    ``torque`` of the limit (dimensionless, each in [0, 1))."""

    position: float = 0.1
    velocity: float = 0.2
    torque: float = 0.2

    def __post_init__(self) -> None:
        for name in ("position", "velocity", "torque"):
            value = getattr(self, name)
            if not (math.isfinite(value) and 0 <= value < 1):
                raise InputError(f"must be a fraction in [0, 1), got {value!r}", field=f"--{name}-margin")


@dataclass(frozen=True)
class Envelope:
    """Per actuated joint (``joint_names`` order): position range (rad, m), speed (rad/s, m/s) and torque
    (N·m, N) limits the commissioning keeps to; inf where the robot has no limit."""

    joint_names: tuple[str, ...]
    lower: np.ndarray
    upper: np.ndarray
    velocity: np.ndarray
    torque: np.ndarray
    margins: Margins

    @classmethod
    def of(cls, robot: RobotModel, margins: Margins) -> Envelope:
        """The robot's limits tightened by ``margins`` (module docstring)."""
        names = robot.actuated_names
        levels = effort_levels(robot)
        lo, hi, v, u = (np.empty(len(names)) for _ in range(4))
        for i, name in enumerate(names):
            j = robot.joint(name)
            half = 0.5 * (j.limits.upper - j.limits.lower)
            shrink = margins.position * half if math.isfinite(half) else 0.0
            lo[i], hi[i] = j.limits.lower + shrink, j.limits.upper - shrink
            v[i] = (1 - margins.velocity) * j.limits.velocity
            u[i] = (1 - margins.torque) * levels[j.idx_v]
        return cls(names, lo, hi, v, u, margins)

    def to_json(self) -> dict:
        """Plain JSON (null for an unlimited value)."""
        clean = lambda x: [float(a) if math.isfinite(a) else None for a in x]  # noqa: E731
        return {
            "joints": list(self.joint_names), "lower": clean(self.lower), "upper": clean(self.upper),
            "velocity": clean(self.velocity), "torque": clean(self.torque), "margins": dataclasses.asdict(self.margins),
        }


def envelope_robot(robot: RobotModel, envelope: Envelope, *, detect_collisions: bool = False) -> RobotModel:
    """A copy of ``robot`` whose actuated joints' limits are the envelope's, so that the loop's safety
    checks and the planners keep to it. ``[control] effort`` is dropped: the envelope's torque already
    holds it.

    Args:
        detect_collisions: Keep the ``[control.collision]`` reaction. False (default): the momentum
            observer only logs. It observes with the *nominal* model, whose errors are what
            commissioning is about: a payload or friction the model lacks reads as an external torque,
            and would stop the runs that measure it.
    """
    joints = []
    for j in robot.joints:
        if j.name in envelope.joint_names:
            i = envelope.joint_names.index(j.name)
            limits = dataclasses.replace(j.limits, lower=float(envelope.lower[i]), upper=float(envelope.upper[i]),
                                         velocity=float(envelope.velocity[i]), effort=float(envelope.torque[i]))
            j = dataclasses.replace(j, limits=limits)
        joints.append(j)
    spec = robot.spec
    if spec is not None:
        control = dataclasses.replace(spec.control or ControlSpec(), effort=None)
        if control.computed_torque is None:
            control = dataclasses.replace(control, computed_torque=DEFAULT_GAINS)
        if not detect_collisions and control.collision is not None:
            control = dataclasses.replace(control, collision=dataclasses.replace(control.collision, reaction="none"))
        spec = dataclasses.replace(spec, control=control)
    return dataclasses.replace(robot, joints=tuple(joints), spec=spec)


def within_envelope(envelope: Envelope, q: np.ndarray) -> list[str]:
    """The actuated joints whose position ``q`` (rad, m; ``joint_names`` order) is outside the envelope."""
    return [n for n, x, lo, hi in zip(envelope.joint_names, q, envelope.lower, envelope.upper) if not lo <= x <= hi]


def start_pose(robot: RobotModel, envelope: Envelope, given: Mapping[str, float] | None = None) -> np.ndarray:
    """The start pose ``q0`` of every DOF (rad, m): the given values by joint name, else the robot's
    ``[identification] start``, else 0 moved into the envelope (its middle where 0 is outside).

    There is no silent default: a pose of zeros can put a table-mounted arm's tool below its mounting
    plane, so either ``given`` or the TOML names at least one joint.

    Raises:
        InputError: Without a start (naming ``--start``), for an unknown joint, or a given position
            outside the envelope.
    """
    q0 = np.zeros(robot.nv)
    stored = toml_start(robot)
    if not given and not stored:
        raise InputError("no start pose: give --start JOINT=Q,... (the pose every step starts from and returns to; joints not named 0) "
                         "or [identification] start in the robot's TOML", field="--start")
    for name, value in stored.items():
        q0[robot.joint(name).idx_v] = float(value)
    for i, name in enumerate(envelope.joint_names):
        k = robot.joint(name).idx_v
        if not envelope.lower[i] <= q0[k] <= envelope.upper[i]:
            q0[k] = 0.5 * (envelope.lower[i] + envelope.upper[i]) if math.isfinite(envelope.upper[i] - envelope.lower[i]) else 0.0
    for name, value in (given or {}).items():
        if name not in robot.joint_names:
            raise InputError(f"no joint {name!r} (joints: {', '.join(robot.joint_names)})", field="--start")
        q0[robot.joint(name).idx_v] = value
    actuated = np.array([q0[robot.joint(n).idx_v] for n in envelope.joint_names])
    outside = within_envelope(envelope, actuated)
    if outside:
        i = envelope.joint_names.index(outside[0])
        raise InputError(f"joint {outside[0]} at {actuated[i]:.4g} is outside the envelope {envelope.lower[i]:.4g} .. {envelope.upper[i]:.4g}", field="--start")
    return q0


def toml_start(robot: RobotModel) -> dict[str, float]:
    """The robot's ``[identification] start`` by joint (rad, m), or {} (the first joint's view: a
    per-joint table may override it)."""
    ident = robot.spec.identification if robot.spec is not None else None
    if ident is not None:
        for joint in robot.joint_names:
            fields = ident.fields(joint)
            if "start" in fields:
                return {name: float(value) for name, value in fields["start"][0].items()}
    return {}


def start_origin(robot: RobotModel, given: Mapping[str, float] | None) -> str:
    """Where the start pose's values come from, in words."""
    parts = []
    if given:
        parts.append(f"--start ({', '.join(given)})")
    stored = [n for n in toml_start(robot) if n not in (given or {})]
    if stored:
        parts.append(f"[identification] start ({', '.join(stored)})")
    rest = [n for n in robot.joint_names if n not in (given or {}) and n not in stored]
    if rest:
        parts.append(f"0 or the envelope's middle ({', '.join(rest)})")
    return "; ".join(parts)
