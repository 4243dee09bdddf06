"""The one interface every joint-drive backend implements (simulated plant, serial drives, mocks).

A backend serves the actuated joints of a robot, in the robot's order, in SI units:
positions in rad (m for prismatic joints), velocities in rad/s (m/s), efforts in N·m
(N). Conversions to encoder counts or current units happen inside the backend.

Usage::

    with backend:                 # open(); close() on exit, torque off first
        backend.enable()          # torque on (bumpless: holds the present position)
        state = backend.read()
        backend.write(JointCommand.torque(tau))
"""

from __future__ import annotations

import abc
import enum
import math
from dataclasses import dataclass, field
from types import TracebackType

import numpy as np

from mbctl.errors import MbctlError

__all__ = [
    "CommandMode",
    "JointCommand",
    "JointState",
    "JointInterface",
    "HardwareError",
    "CommunicationError",
    "DriveTimeout",
    "DriveFault",
]


class HardwareError(MbctlError):
    """A drive or bus problem; the loop stops safely on it."""


class CommunicationError(HardwareError):
    """A failed exchange on the bus (corrupt packet, no reply, port gone).

    Attributes:
        kind: ``"timeout"``, ``"crc"``, ``"status"``, ``"alert"``, ``"no_reply"``,
            ``"stale"`` (no new sample for too long), ``"port"`` or ``"tx"``.
    """

    def __init__(self, kind: str, message: str):
        self.kind = kind
        super().__init__(f"{kind}: {message}")


class DriveTimeout(CommunicationError, TimeoutError):
    """A reply did not arrive in time."""

    def __init__(self, message: str):
        super().__init__("timeout", message)


class DriveFault(HardwareError):
    """A drive reports a hardware error (overload, overheating, ...).

    Attributes:
        joint: Name of the joint whose drive reports it.
        status: Raw hardware error status.
    """

    def __init__(self, joint: str, status: int, description: str):
        self.joint = joint
        self.status = status
        super().__init__(f"drive of joint {joint}: hardware error 0x{status:02x} ({description})")


class CommandMode(enum.Enum):
    """What a :class:`JointCommand` sets: joint torque (N·m or N), velocity or position."""

    TORQUE = "torque"
    VELOCITY = "velocity"
    POSITION = "position"


@dataclass(frozen=True)
class JointCommand:
    """Set-points for every actuated joint, in one mode.

    Attributes:
        mode: Torque (N·m / N), velocity (rad/s / m/s) or position (rad / m).
        value: One set-point per actuated joint.
    """

    mode: CommandMode
    value: np.ndarray

    @classmethod
    def torque(cls, tau: np.ndarray) -> JointCommand:
        return cls(CommandMode.TORQUE, np.asarray(tau, dtype=float))

    @classmethod
    def velocity(cls, dq: np.ndarray) -> JointCommand:
        return cls(CommandMode.VELOCITY, np.asarray(dq, dtype=float))

    @classmethod
    def position(cls, q: np.ndarray) -> JointCommand:
        return cls(CommandMode.POSITION, np.asarray(q, dtype=float))


@dataclass(frozen=True)
class JointState:
    """A measurement of every actuated joint.

    Attributes:
        t: Time of the measurement (s): the instant the drives sampled, on the backend's sample
            clock where it has one (:attr:`JointInterface.sample_clock`), else the host's time of
            the read. A sample read again keeps its time.
        q: Positions (rad or m).
        dq: Velocities (rad/s or m/s).
        effort: Measured or current-derived effort (N·m or N).
        t_host: The same instant on the host's monotonic clock (``time.perf_counter``, s) where the
            backend knows it (stamps on a clock the host shares or maps: ROS time on this machine, a
            plant process's ticks); NaN where it does not (the loop then estimates the clocks' offset).
    """

    t: float
    q: np.ndarray
    dq: np.ndarray
    effort: np.ndarray = field(default_factory=lambda: np.zeros(0))
    t_host: float = math.nan


class JointInterface(abc.ABC):
    """Base of every backend: a context manager that ends with :meth:`disable` (torque off, or, after a
    hand-over, the drives left as it left them).

    Ending a run: a stop (fault, limit, signal) calls :meth:`disable` at once; a clean finish
    calls :meth:`hand_over` after the loop's hold, and :meth:`disable` after it must leave the
    drives as the hand-over left them.

    Attributes:
        joint_names: Actuated joints served, in the order of every array.
        sample_clock: True when :attr:`JointState.t` is the instant the drives sampled, on one
            clock from sample to sample (a simulated plant's time, the SYNC instants of CANopen
            drives, the header stamps of ROS 2 joint states): the loop's estimate step steps by
            these times. False when it is only the host's time of the read (it jitters with the
            loop and, emulated in lock-step, is not the plant's time): the loop's own time is used.
    """

    joint_names: tuple[str, ...]
    sample_clock: bool = False
    disable_action: str = "torque off"
    """What :meth:`disable` does to the drives, in words, for the run summary."""
    command_delay_cycles: int = 0
    """Whole periods between a write and the drives applying it, beyond the next sample: 0 when a
    command acts from the write to the next sample; 1 for CANopen's synchronous RPDOs on a clock
    (latched until the SYNC after the write, so they act between the next sample and the one after)."""
    hand_over_possible: bool = True
    """False when :meth:`hand_over` has no safe state to give the arm to (the loop then holds
    until the user stops the run)."""
    sample_period_s: float | None = None
    """The robot's own update period (s) where it keeps its own time and applies the latest command at
    each update (a ros2_control arm's update rate, Franka's 1 ms); None: the loop's period (drives that
    sample at the loop's SYNC, or the loop's own steps)."""
    command_latency_s: float = 0.0
    """Time a written command takes to reach the robot (s), on top of the update it then waits for."""
    effort_source: str = ""
    """Where :attr:`JointState.effort` is a torque the drives measured or applied at the sample's
    instant, what it is, in words (``"torque actual value 0x6077"``, ``"tau_J, the joint torque
    sensors"``): the momentum observer then takes it as the torque acting on the arm, which no delay
    between a write and its effect can shift. ``""``: the effort is no such measurement (absent,
    zeros, or the command echoed), and the observer takes the commands written."""
    effort_after_friction: bool = False
    """The measured effort is the link side's, after the joint's own friction (a joint torque sensor
    behind the gearbox, as Franka's ``tau_J``): the observer's model then leaves joint friction out.
    False: a drive torque (motor current times the torque constant), which friction still opposes."""

    @abc.abstractmethod
    def open(self) -> None:
        """Connect (open the port, start the plant). Torque stays off."""

    @abc.abstractmethod
    def close(self) -> None:
        """Disconnect. Called after :meth:`disable`."""

    @abc.abstractmethod
    def enable(self) -> None:
        """Torque on, starting bumpless (position goals set to the present position)."""

    @abc.abstractmethod
    def disable(self) -> None:
        """Torque off. Must be safe to call at any time, also after a failure."""

    def hand_over(self) -> str:
        """End of a clean run, after the loop's hold: give the arm to the drives' own safe state
        (their brakes, a holding controller) and say what was done, for the run summary. Not
        called when :attr:`hand_over_possible` is False.

        The base class has no safe state of its own: torque off. Never raises.
        """
        self.disable()
        return "torque off"

    @abc.abstractmethod
    def read(self) -> JointState:
        """Measure every actuated joint (a sample not renewed since the last read is returned
        again with its own time)."""

    @abc.abstractmethod
    def write(self, command: JointCommand) -> None:
        """Send set-points to every actuated joint."""

    def __enter__(self) -> JointInterface:
        self.open()
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        try:
            self.disable()
        finally:
            self.close()
