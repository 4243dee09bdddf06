"""What every commissioning step works with: the robot, the backend, the settings, the output folder."""

from __future__ import annotations

import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np

from mbctl.ctrl.keepout import KeepoutError, check_trajectory
from mbctl.ctrl.trajectory import Trajectory, quintic_rest_to_rest
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import DataError, InputError, MbctlError
from mbctl.fileio import atomic_output
from mbctl.hardware.loop import RunSummary
from mbctl.hardware.session import SessionOptions, open_backend, run_session
from mbctl.identification.commission.envelope import Envelope, Margins, envelope_robot, start_pose

__all__ = ["DAMPED_LOOP_PHASE", "MAX_LOOP_PHASE", "STEPS", "CommissionSettings", "Commission", "StepStopped", "max_bandwidth", "write_json", "read_json"]

STEPS = ("preflight", "friction", "excitation", "identify", "verify", "report")
FRICTION_LAWS = ("stribeck", "coulomb-viscous", "lugre")
START_SETTLED = 1e-3
"""How far (rad, m) from the start pose a joint may be before a step moves the arm back first."""
MAX_LOOP_PHASE = 0.4
"""Largest ``w T`` (the sweeps' loop bandwidth ``w`` in rad/s times the control period ``T`` in s).
A PD loop with a one-period delay (a command applied at the next SYNC or update, as on CiA 402 drives
and ros2_control) on an inertia is stable up to ``w T`` about 0.42 (critically damped gains), best
damped near 0.3: 63.7 Hz at 1 kHz, 15.9 Hz at 250 Hz."""


DAMPED_LOOP_PHASE = 0.15
"""Largest ``w T`` of a default sweep loop (neither ``--bandwidth`` nor the TOML asked for more). A drive
that keeps its own time samples at its update and applies a command from the next one, held over a
period: about two periods from a sample to the middle of its command's action, where the PD's
crossover (about ``2 w``) loses ``4 w T`` rad of its 76 degrees of phase margin: 41 degrees left at
0.15, 17 at 0.25 (the default 10 Hz at 250 Hz, whose sweep of the UR5's shoulder lift over CANopen,
paced, rang to 2.54 rad/s on a 1.5 rad/s plan and stopped on the velocity limit)."""


def max_bandwidth(rate_hz: float, phase: float = MAX_LOOP_PHASE) -> float:
    """The highest sweep loop bandwidth (Hz) a loop at ``rate_hz`` holds: ``phase`` rate / 2 pi
    (:data:`MAX_LOOP_PHASE`; :data:`DAMPED_LOOP_PHASE` for the defaults)."""
    return phase * rate_hz / (2 * math.pi)


class StepStopped(MbctlError):
    """A step could not finish (a safety stop, a drift, a failed fit); the steps before it are kept."""

    def __init__(self, step: str, reason: str):
        super().__init__(f"{step}: {reason}")
        self.step = step
        self.reason = reason


@dataclass(frozen=True)
class CommissionSettings:
    """Choices of a commissioning (SI units).

    Attributes:
        margins: The envelope's margins (:mod:`mbctl.identification.commission.envelope`).
        start: Start pose by joint name (rad, m); the rest as :func:`start_pose` says.
        hold_s: Length of the pre-flight hold test (s).
        hold_drift: Largest drift from the start pose the hold test accepts (rad, m): the loop stops,
            torque off, beyond it.
        friction_law: Law fitted to each joint's constant-speed sweep: ``stribeck`` (delta = 2),
            ``coulomb-viscous`` or ``lugre`` (needs ``presliding``).
        friction_joints: Joints whose friction is measured (None: every actuated joint); the others
            keep the nominal friction.
        presliding: Also run the presliding / break-away test on each of them.
        speeds: Speeds of each sweep (log-spaced around the Stribeck velocity, as ``identify run``).
        max_leg_s: Longest constant-speed leg (s): bounds the arm time of the slow speeds.
        sweep: Half the range each sweep travels (rad, m), centred on the start pose where the
            envelope allows.
        settle_s: Hold at each leg's ends and transient dropped when processing (s).
            These four: None takes the robot's ``[identification]`` value, else
            :data:`~mbctl.identification.commission.friction.SWEEP_DEFAULTS`.
        stribeck_velocity: Stribeck velocity for the speed grid where the joint's friction law has none (rad/s, m/s).
        bandwidth_hz: Bandwidth of the sweeps' position loops by tested joint (Hz; gains ``kp = J w²``
            with the joint's own inertia ``J``, :class:`~mbctl.identification.plan.ControlGains`); a
            joint not named keeps the ``[identification]`` value, else 10 Hz. A light joint with much
            friction (a wrist without its rotor inertia) sticks and slips at the slow speeds unless its
            loop is stiffer; a heavy one goes unstable if it is too stiff.
        harmonics, period_s, seed: The excitation's Fourier series (``L``, ``T`` in s) and random start;
            the validation trajectory has ``seed + 1`` and period ``0.8 T``.
        moving_speed: The verification judges torque prediction where a joint moves at least this fast
            (rad/s, m/s; :mod:`~mbctl.identification.commission.verify`).
        regularisation: Pull of the arm fit toward the nominal inertials (``lambda``).
        detect_collisions: Keep the ``[control.collision]`` reaction in the closed-loop steps
            (:func:`~mbctl.identification.commission.envelope.envelope_robot`).
    """

    margins: Margins = Margins()
    start: Mapping[str, float] = field(default_factory=dict)
    hold_s: float = 1.0
    hold_drift: float = 0.02
    friction_law: str = "stribeck"
    friction_joints: tuple[str, ...] | None = None
    presliding: bool = False
    speeds: int | None = None
    max_leg_s: float | None = None
    sweep: float | None = None
    settle_s: float | None = None
    stribeck_velocity: float = 0.05
    bandwidth_hz: Mapping[str, float] = field(default_factory=dict)
    harmonics: int = 4
    period_s: float = 10.0
    seed: int = 0
    regularisation: float = 1e-2
    moving_speed: float = 0.1
    detect_collisions: bool = False

    def __post_init__(self) -> None:
        positive = {"hold_s": "--hold-time", "hold_drift": "--hold-drift", "max_leg_s": "--max-leg", "sweep": "--sweep",
                    "settle_s": "--settle", "stribeck_velocity": "--stribeck-velocity", "period_s": "--period", "regularisation": "--regularisation", "moving_speed": "--moving-speed"}
        for name, option in positive.items():
            value = getattr(self, name)
            if value is None and name in ("max_leg_s", "sweep", "settle_s"):
                continue
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
                raise InputError(f"must be a finite number > 0, got {value!r}", field=option)
        for joint, value in self.bandwidth_hz.items():
            if not (math.isfinite(value) and value > 0):
                raise InputError(f"{joint}: must be a finite number > 0, got {value!r}", field="--bandwidth")
        if self.friction_law not in FRICTION_LAWS:
            raise InputError(f"must be one of {', '.join(FRICTION_LAWS)}, got {self.friction_law!r}", field="--friction-law")
        if self.friction_law == "lugre" and not self.presliding:
            raise InputError("the lugre law needs the presliding test: add --presliding", field="--friction-law")
        if self.speeds is not None and self.speeds < 6:
            raise InputError(f"must be >= 6 (a Stribeck fit needs six speeds), got {self.speeds}", field="--speeds")
        if self.harmonics < 2:
            raise InputError(f"must be >= 2, got {self.harmonics}", field="--harmonics")


@dataclass
class Commission:
    """One commissioning: the nominal robot, the backend's options, the settings, the folder ``out``.

    Attributes:
        robot: The nominal robot as loaded (its TOML is ``robot.source``).
        options: The backend and rate every run uses (the law is set per run).
        settings: The choices.
        out: The output folder: one subfolder per step.
        progress: Called with a line for stderr.
        rate_source: Where ``options.rate_hz`` came from, in words (the pre-flight says it).
    """

    robot: RobotModel
    options: SessionOptions
    settings: CommissionSettings
    out: Path
    progress: Callable[[str], None] = lambda line: None
    lines: list[str] = field(default_factory=list)
    rate_source: str = "given"

    def __post_init__(self) -> None:
        if self.robot.source is None:
            raise InputError("commissioning needs the robot's TOML file (the identified copy is written from it)")
        joints = self.settings.friction_joints
        for i, name in enumerate(joints or ()):
            if name not in self.robot.actuated_names:
                raise InputError(f"no actuated joint {name!r} (joints: {', '.join(self.robot.actuated_names)})", field="--joints")
            if name in joints[:i]:
                raise InputError(f"{name} is given twice", field="--joints")
        top = max_bandwidth(self.options.rate_hz)
        for name, hz in self.settings.bandwidth_hz.items():
            if name not in self.robot.actuated_names:
                raise InputError(f"no actuated joint {name!r} (joints: {', '.join(self.robot.actuated_names)})", field="--bandwidth")
            if joints is not None and name not in joints:
                raise InputError(f"{name} is not swept (--joints {','.join(joints)})", field="--bandwidth")
            if hz > top:
                raise InputError(f"{name}: {hz:g} Hz is more than a loop at {self.options.rate_hz:g} Hz holds (at most {top:.3g} Hz: "
                                 f"2 pi f / rate <= {MAX_LOOP_PHASE:g})", field="--bandwidth")

    @cached_property
    def envelope(self) -> Envelope:
        return Envelope.of(self.robot, self.settings.margins)

    @cached_property
    def q0(self) -> np.ndarray:
        """The start pose of every DOF (rad, m)."""
        return start_pose(self.robot, self.envelope, self.settings.start)

    @cached_property
    def run_robot(self) -> RobotModel:
        """The nominal robot inside the envelope: what every run controls with."""
        return envelope_robot(self.robot, self.envelope, detect_collisions=self.settings.detect_collisions)

    @property
    def paced(self) -> bool:
        return not self.options.lockstep

    def step_dir(self, step: str) -> Path:
        path = self.out / step
        path.mkdir(parents=True, exist_ok=True)
        return path

    def say(self, line: str) -> None:
        """A progress line: to the step's log and to ``progress``."""
        self.lines.append(line)
        self.progress(line)

    def bring_to_start(self, step: str, model: RobotModel | None = None) -> None:
        """Move the arm back to the start pose if a run left it elsewhere: a short run of computed torque
        (``model``, default the nominal one) along a quintic from where the drives report it, at most
        half its joints' speed limits, then the end hold. Drives stay where the last run left them
        (under their brakes after the hand-over) and a run starts only within 0.05 rad of its
        trajectory's start; the simulated plant and an emulator started per run begin at the
        trajectory's start anyway."""
        if self.options.plant == "sim" or self.options.emulate:
            return
        robot = model or self.run_robot
        with open_backend(robot, self.options, self.q0) as backend:
            here = self.q0.copy()
            here[[robot.joint(n).idx_v for n in robot.actuated_names]] = backend.read().q
        gap = np.abs(here - self.q0)
        if gap.max() <= START_SETTLED:
            return
        speed = np.array([j.limits.velocity if np.isfinite(j.limits.velocity) else 1.0 for j in robot.joints])
        duration = max(1.0, float(np.max(1.875 * gap / (0.5 * speed))))  # quintic peak speed 1.875 d / T
        worst = robot.joint_names[int(gap.argmax())]
        traj = quintic_rest_to_rest(np.vstack([here, self.q0]), [duration], self.options.rate_hz, robot.joint_names)
        self.check_keepout(step, traj, "the move back to the start pose")
        self.say(f"{step}: back to the start pose ({worst} {gap.max():.3g} away), {duration:.1f} s")
        summary = run_session(robot, traj, dataclasses.replace(self.options, law="computed-torque"), self.step_dir(step) / "to_start.npz")
        self.check_run(step, "the move back to the start pose", summary)

    def check_keepout(self, step: str, trajectory: Trajectory, motion: str) -> None:
        """Stop ``step`` (:class:`StepStopped`, nothing has moved) if ``trajectory`` enters the robot's
        keep-out (:mod:`mbctl.ctrl.keepout`)."""
        try:
            check_trajectory(self.robot, trajectory, motion)
        except KeepoutError as exc:
            raise StepStopped(step, f"{exc}") from None

    def check_run(self, step: str, what: str, summary: RunSummary) -> None:
        """Raise :class:`StepStopped` unless the run completed; ``KeyboardInterrupt`` if a signal stopped
        it (the loop handles SIGINT and SIGTERM itself: torque off, the log kept, the summary says so)."""
        if summary.stop_reason.startswith("signal"):
            raise KeyboardInterrupt(f"{what}: {summary.stop_reason}")
        if not summary.completed:
            raise StepStopped(step, f"{what} stopped ({summary.stop_reason}); torque is off")


def write_json(path: Path, data: object) -> None:
    """``data`` as indented JSON, atomically (NaN and inf as null)."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(_finite(data), indent=2) + "\n")


def read_json(path: Path) -> dict:
    """A step's JSON result.

    Raises:
        DataError: Naming the file, if it is unreadable.
    """
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"cannot read: {exc}", file=path) from None


def _finite(x: object) -> object:
    if isinstance(x, (float, np.floating)):
        return float(x) if math.isfinite(x) else None
    if isinstance(x, np.ndarray):
        return _finite(x.tolist())
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, dict):
        return {str(k): _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x
