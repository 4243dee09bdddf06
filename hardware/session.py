"""One closed-loop session: build the controller, open the backend, check the start, run, log.

Shared by ``mbctl run`` and ``mbctl demo``; tests call it directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.config.control import EndSpec
from mbctl.ctrl.controllers import build_controller
from mbctl.ctrl.optimal.controller import MpcController
from mbctl.ctrl.tracking import TrackingController
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError
from mbctl.hardware.cia402.bus import Cia402Bus
from mbctl.hardware.cia402.canbus import udp_multicast_channel
from mbctl.hardware.cia402.drive_plant import plant_contact
from mbctl.hardware.cia402.emulator import Cia402Emulator
from mbctl.hardware.cia402.units import bus_load, canopen_config
from mbctl.hardware.compiled_cycle import prepare as prepare_cycle
from mbctl.hardware.drive_config import bus_config
from mbctl.hardware.dynamixel import DynamixelBus
from mbctl.hardware.estimate import LoopEstimator
from mbctl.hardware.interface import CommandMode, HardwareError, JointInterface
from mbctl.hardware.loop import (
    Controller,
    Estimator,
    LoopConfig,
    Reference,
    RunSummary,
    SafetyLimits,
    log_columns,
    run_loop,
)
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.plant_process import PlantProcess
from mbctl.hardware.realtime import DEFAULT_PRIORITY
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.sim import SimPlant, TruthPlant, truth_model
from mbctl.processes import interrupt

__all__ = ["POSITION", "GoalPositions", "SessionOptions", "run_session", "open_backend", "enable_and_run", "check_udp_channel", "START_TOLERANCE"]

CANOPEN_WATCHDOG_FAILURES = 1  # failed CANopen exchanges that stop the loop
LOCKSTEP_LATENCY_S = 0.1  # s: the serial adapter latency assumed against a lock-step emulator (reply timeout 202 ms)
START_TOLERANCE = 0.05  # rad or m: the robot must start this close to the trajectory's first sample
MPC = "mpc"  # the model predictive controller of mbctl.ctrl.optimal
POSITION = "position"  # the law that sends the trajectory's positions as goals to position-mode drives


class GoalPositions:
    """Callable ``(t, state) -> q_d(t)``: the trajectory's positions of the actuated joints (rad, m),
    goals for drives that close their own position loop (no feedback here)."""

    def __init__(self, robot: RobotModel, trajectory: Trajectory):
        q, dq, ddq = trajectory.columns(robot.actuated_names)
        self.trajectory = Trajectory(t=trajectory.t, joint_names=robot.actuated_names, q=q, dq=dq, ddq=ddq)
        self.saturated_cycles = 0

    def reference(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Desired positions and velocities at ``t`` (s)."""
        q, dq, _ = self.trajectory.at(t)
        return q, dq

    def __call__(self, t: float, state: object) -> np.ndarray:
        return self.trajectory.at(t)[0].copy()


def check_position_mode(robot: RobotModel, options: SessionOptions) -> None:
    """The simulated plant takes goal positions only for servo joints: a one-line error otherwise."""
    if options.plant != "sim":
        return
    servos = {name for name, j in robot.spec.joints.items() if j.actuator is not None} if robot.spec is not None else set()
    missing = [n for n in robot.actuated_names if n not in servos]
    if missing:
        raise InputError(
            f"the position controller drives servos in position mode; joint {missing[0]} has no [joints.{missing[0]}.actuator] table",
            file=robot.source, field="--controller",
        )


@dataclass(frozen=True)
class SessionOptions:
    """What to run against and how.

    Attributes:
        plant: ``"sim"`` (the robot's ``[plant]`` truth model), ``"dynamixel"``, ``"canopen"``, ``"ros2"`` or
            ``"franka"`` (a Franka arm over FCI; with ``emulate``, franky-sim in its own process).
        law: Control law (:data:`mbctl.ctrl.controllers.LAWS`), :data:`MPC` (model predictive control,
            :class:`mbctl.ctrl.optimal.controller.MpcController`), or :data:`POSITION`: the
            trajectory's positions sent as goals to drives in position mode (servos with
            their own position loop; on the simulated plant every actuated joint needs a
            ``[joints.<name>.actuator]`` table).
        rate_hz: Control rate (Hz).
        duration_s: Run length (s); None: the trajectory's.
        lockstep: Simulated plant or emulated bus only: one plant period per cycle, as
            fast as possible (deterministic).
        port: Serial device of the Dynamixel bus (default: ``drives.port``).
        interface, channel: python-can interface and channel of the CANopen bus (default:
            ``drives.interface``, ``drives.channel``).
        emulate: Serve the Dynamixel bus from an emulator of the truth model, run as a
            separate process (``mbctl emulate``) so it does not share the loop's CPU time
            and interpreter lock. CANopen: an emulator in this process on the ``virtual``
            interface, or in its own process with ``interface="udp_multicast"`` (loopback).
        overrun: How many overruns stop a paced run.
        realtime_priority: ``SCHED_FIFO`` priority of a paced loop (the simulated plant's
            process gets one less), if the OS grants it; None: normal scheduling.
        compiled: Compile the control law and, lock-step, the simulated plant's steps to C
            (False: CasADi's and numpy's interpreters, the same arithmetic, slower per
            cycle but without a compile for a model seen once, as in a parameter study).
        joint_states, command_topic: ROS 2 topics replacing the robot's ``[ros2]`` ones (``plant="ros2"``).
        mpc_fail: With ``law = "mpc"``: ``mpc_fail(cycle) -> bool`` forces failed updates (tests of
            the fallback); None: none forced.
        compiled_cycle: A compiled law's cycle runs as one generated call (``LoopConfig.compiled_cycle``).
        robot_address: A Franka's FCI address replacing the robot's ``[franka] address`` (``plant="franka"``).
    """

    plant: str = "sim"
    law: str = "computed-torque"
    rate_hz: float = 1000.0
    duration_s: float | None = None
    lockstep: bool = False
    port: str | None = None
    interface: str | None = None
    channel: str | None = None
    emulate: bool = False
    overrun: OverrunPolicy = OverrunPolicy()
    realtime_priority: int | None = DEFAULT_PRIORITY
    compiled: bool = True
    mpc_fail: Callable[[int], bool] | None = None
    joint_states: str | None = None
    command_topic: str | None = None
    compiled_cycle: bool = True
    robot_address: str | None = None


@contextlib.contextmanager
def open_backend(robot: RobotModel, options: SessionOptions, q0: np.ndarray) -> Iterator[JointInterface]:
    """The opened joint interface the options ask for (torque still off).

    Args:
        q0: Initial DOF positions (rad, m) of a simulated or emulated plant; real
            drives are wherever they are.
    """
    truth, plant_config = truth_model(robot)
    if options.plant == "sim":
        # paced: the plant steps on its own clock in its own process, as a robot would
        period_s = 1.0 / options.rate_hz
        priority = None if options.realtime_priority is None else options.realtime_priority - 1
        plant = SimPlant(truth, period_s, plant_config, q0=q0, compiled=options.compiled) if options.lockstep else PlantProcess(truth, period_s, plant_config, q0=q0, realtime_priority=priority)
        with plant:
            yield plant
        return
    if options.plant == "canopen":
        with _canopen_backend(robot, options, q0) as drives:
            yield drives
        return
    if options.plant == "ros2":
        from mbctl.hardware.ros2.session import ros2_backend

        with ros2_backend(robot, options, q0, _drive_mode(options)) as arm:
            yield arm
        return
    if options.plant == "franka":
        from mbctl.hardware.franka.session import franka_backend

        with franka_backend(robot, options, q0) as arm:
            yield arm
        return
    bus = bus_config(robot)
    if not options.emulate:
        with DynamixelBus(robot.actuated_names, bus, port=options.port, mode=_drive_mode(options)) as drives:
            yield drives
        return
    actuated_q0 = [q0[robot.joint(n).idx_v] for n in robot.actuated_names]
    if options.lockstep:  # the emulator takes what time it needs: the reply timeout changes no result
        bus = dataclasses.replace(bus, latency_s=LOCKSTEP_LATENCY_S)
    with emulator_process(robot, actuated_q0, 1.0 / options.rate_hz if options.lockstep else None, _priority_below(options)) as port:
        with DynamixelBus(robot.actuated_names, bus, port=port, mode=_drive_mode(options)) as drives:
            yield drives


@contextlib.contextmanager
def _canopen_backend(robot: RobotModel, options: SessionOptions, q0: np.ndarray) -> Iterator[Cia402Bus]:
    """CiA 402 drives, possibly emulated: in this process on a ``virtual`` bus of its own, or by
    ``mbctl emulate`` in a child process on ``udp_multicast`` (loopback, a random group and port)."""
    config = canopen_config(robot)
    period_s = 1.0 / options.rate_hz
    interface = options.interface or (config.interface if not options.emulate else "virtual")
    load = bus_load(len(robot.actuated_names), config.mode, config.bitrate, period_s)
    if interface not in ("virtual", "udp_multicast") and load > 1.0:  # a real bus: its frames must fit the period
        raise InputError(f"{len(robot.actuated_names)} drives need {100 * load:.0f} % of the {config.bitrate / 1e6:g} Mbit/s bus per cycle (SYNC and three PDOs each); "
                         f"lower the rate to {int(options.rate_hz / load)} Hz or less", field="--rate")
    channel = options.channel if options.channel is not None else config.channel
    if interface == "udp_multicast" and channel is not None and not (options.emulate and options.channel is None):  # an emulator gets a channel of its own below
        check_udp_channel(channel, given=options.channel is not None)
    # lock-step: the emulator takes what time it needs; the heartbeat clock counts SYNC periods
    # paced: the host's monotonic clock, the loop's (each SYNC's instant is then on it: the sample timing takes it as is)
    timing = {"pdo_timeout_s": 5.0, "clock": None} if options.lockstep else {"clock": time.perf_counter}
    bus = Cia402Bus(robot.actuated_names, config, interface=interface, channel=channel, mode=_drive_mode(options), cycle_s=period_s, **timing)
    if not options.emulate:
        with bus:
            yield bus
        return
    lockstep_s = period_s if options.lockstep else None
    actuated_q0 = [q0[robot.joint(n).idx_v] for n in robot.actuated_names]
    if interface == "virtual":
        bus.channel = channel = f"mbctl-emulated-{os.getpid()}-{id(bus)}"
        truth, plant_config = truth_model(robot)
        # paced, the serving thread gets the priority an emulator process would (one below the loop's)
        priority = None if options.lockstep or options.realtime_priority is None else options.realtime_priority - 1
        drives = Cia402Emulator(config, TruthPlant(truth, q0=q0, period_s=period_s), channel=channel, lockstep_s=lockstep_s, realtime_priority=priority,
                                contact=plant_contact(truth, plant_config))  # fmt: skip
        with drives, bus:
            yield bus
        return
    if interface != "udp_multicast":
        raise InputError("an emulated CANopen bus is virtual (in this process) or udp_multicast (its own process)", field="--interface")
    if options.channel is None:
        bus.channel = f"239.74.163.{random.randrange(1, 255)}:{random.randrange(43200, 43999)}"
    extra = ["--bus", "canopen", "--interface", "udp_multicast", "--channel", bus.channel, *_priority_below(options)]
    with emulator_process(robot, actuated_q0, lockstep_s, extra), bus:
        yield bus


def _priority_below(options: SessionOptions) -> list[str]:
    """``mbctl emulate``'s priority option for a paced run: one below the loop's, like the paced plant's process."""
    if options.lockstep or options.realtime_priority is None:
        return []
    return ["--realtime-priority", str(options.realtime_priority - 1)]


def check_udp_channel(channel: str, *, given: bool = True) -> None:
    """Refuse a udp_multicast channel that is not ``GROUP:PORT`` (``given``: from ``--channel``, else
    from the TOML's ``drives.channel``).

    Raises:
        InputError: Naming ``--channel``.
    """
    try:
        udp_multicast_channel(channel)
    except ValueError as exc:
        raise InputError(f"{exc}{'' if given else ' (drives.channel)'}", field="--channel") from None


def _drive_mode(options: SessionOptions) -> CommandMode:
    """The drives' operating mode: position for the position law, current (torque) otherwise."""
    return CommandMode.POSITION if options.law == POSITION else CommandMode.TORQUE


def _full_q0(robot: RobotModel, q_actuated: np.ndarray) -> np.ndarray:
    """DOF positions (rad, m) with the actuated joints at ``q_actuated``, the others at 0."""
    q0 = np.zeros(robot.nv)
    for name, value in zip(robot.actuated_names, q_actuated):
        q0[robot.joint(name).idx_v] = value
    return q0


def emulate_command(robot: RobotModel, q0: Sequence[float]) -> list[str]:
    """The command line of ``mbctl emulate`` for the robot from the actuated positions ``q0`` (rad, m),
    with the xacro arguments its description was expanded with."""
    if robot.source is None:
        raise InputError("the emulator needs the robot's TOML file")
    cmd = [sys.executable, "-m", "mbctl.cli", "emulate", str(robot.source), "--q0", ",".join(f"{x:.17g}" for x in q0)]
    for name, value in (robot.spec.xacro_args if robot.spec is not None else {}).items():
        cmd += ["--xacro-arg", f"{name}:={value}"]
    return cmd


@contextlib.contextmanager
def child_process(cmd: Sequence[str], ready: str, what: str, env: dict[str, str] | None = None) -> Iterator[str]:
    """Run ``cmd`` as a child process; yields its first line of output, which must hold ``ready``; on exit
    SIGINT, then a kill after 10 s. Its stderr goes to a temporary file, not a pipe: a child that writes
    much must never block on it.

    Raises:
        HardwareError: ``what`` did not start (the child's last line of error output).
    """
    errors = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(list(cmd), stdout=subprocess.PIPE, stderr=errors, text=True, env=env)
    try:
        first = proc.stdout.readline() if proc.stdout else ""
        if ready not in first:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
            errors.seek(0)
            err = errors.read().strip().splitlines()
            raise HardwareError(f"{what} did not start: {err[-1] if err else 'no output'}")
        yield first
    finally:
        interrupt(proc)
        errors.close()


@contextlib.contextmanager
def emulator_process(robot: RobotModel, q0: list[float], lockstep_s: float | None = None, extra: Sequence[str] = ()) -> Iterator[str]:
    """Run ``mbctl emulate`` for the robot in a child process; yields the pty path (the word after " on ").

    Args:
        lockstep_s: Lock-step period (s): the emulated plant advances this much per sync read.
        extra: More arguments of ``mbctl emulate`` (the CANopen bus's).
    """
    cmd = emulate_command(robot, q0)
    if lockstep_s is not None:
        cmd += ["--lockstep-period", f"{lockstep_s:.17g}"]
    with child_process([*cmd, *extra], " on ", "the emulator") as first:
        yield first.split(" on ")[1].split()[0]


def run_session(robot: RobotModel, traj: Trajectory, options: SessionOptions, log_path: str | Path, *, plant_robot: RobotModel | None = None) -> RunSummary:
    """Follow ``traj`` with the chosen law; the log goes to ``log_path`` (.npz).

    Args:
        plant_robot: The robot whose backend serves the run (its ``[plant]`` truth on the simulated
            plant, its TOML for an emulator, its drive tables); default ``robot``. A controller built
            on another model of the same arm (an identified one) runs against the same arm this way:
            the simulated truth is built from the robot it is given, and must not change with the
            controller's model.

    Raises:
        InputError: If the robot is not at the trajectory's start (nothing is logged then).
    """
    # ROS 2: any node stepping once per command; CANopen on a bus only emulators serve (mbctl emulate
    # --lockstep-period in a process of its own): drives stepping once per SYNC. A real CAN bus never:
    # its drives expect SYNC at their configured period.
    emulator_bus = options.plant == "canopen" and options.interface in ("virtual", "udp_multicast")
    if options.plant == "franka":
        from mbctl.hardware.franka.session import check_options

        check_options(options)  # before the controller is built
    if options.lockstep and not (options.plant in ("sim", "ros2") or options.emulate or emulator_bus):
        raise InputError("lock-step needs the simulated plant, an emulated bus (--emulate, or CANopen drives that mbctl emulate --lockstep-period "
                         "serves on a virtual or udp_multicast interface) or ROS 2", field="--lockstep")
    estimator = None
    if options.law == POSITION:
        check_position_mode(robot, options)
        tracking: TrackingController | GoalPositions | MpcController = GoalPositions(robot, traj)
    elif options.law == MPC:
        tracking = MpcController(robot, traj, period=None if options.lockstep else 1.0 / options.rate_hz, compiled=options.compiled, fail=options.mpc_fail)
        estimator = LoopEstimator(robot, 1.0 / options.rate_hz, compiled=options.compiled)
    else:
        tracking = TrackingController(build_controller(robot, options.law), traj, compiled=options.compiled)
        estimator = LoopEstimator(robot, 1.0 / options.rate_hz, compiled=options.compiled)
    duration = options.duration_s if options.duration_s is not None else traj.duration
    command = _drive_mode(options)
    # CANopen: a missed or late PDO is a fault in itself (the cycle's data is gone), not a retry; ROS 2: a
    # stale joint state has already waited out its own timeout; a Franka: libfranka has waited out the state timeout
    watchdog = CANOPEN_WATCHDOG_FAILURES if options.plant in ("canopen", "ros2", "franka") else LoopConfig.watchdog_failures
    end = robot.spec.control.end if robot.spec is not None and robot.spec.control is not None else EndSpec()
    config = LoopConfig(rate_hz=options.rate_hz, duration_s=duration, paced=not options.lockstep, overrun=options.overrun, realtime_priority=options.realtime_priority,
                        command=command, watchdog_failures=watchdog, end_hold_s=end.hold_s, end=end.then, compiled_cycle=options.compiled_cycle)
    if options.compiled_cycle and command is CommandMode.TORQUE:
        prepare_cycle(tracking, estimator, log_estimates=estimator is not None)  # compiled now, not while the drives wait
    q0 = tracking.trajectory.q[0] if options.law != POSITION else _full_q0(robot, tracking.trajectory.q[0])
    with open_backend(robot if plant_robot is None else plant_robot, options, q0) as backend:
        start = backend.read()
        offset = np.abs(start.q - tracking.reference(0.0)[0])
        if offset.max() > START_TOLERANCE:
            worst = robot.actuated_names[int(offset.argmax())]
            raise InputError(f"the robot is {offset.max():.3g} away from the trajectory's start at joint {worst}; move it there first")
        columns = log_columns(backend.joint_names, estimation=estimator is not None)
        summary = enable_and_run(backend, tracking, robot, config, RunLog(log_path, columns), tracking.reference, estimator=estimator)
        summary.sensing = getattr(backend, "sensing", "")
    summary.estimation = estimator.describe() if estimator is not None else "none (position mode: the drives close the loop)"
    if callable(getattr(backend, "timing", None)):  # a plant in its own process, a Franka's own report
        summary.plant_timing = backend.timing()  # complete once the plant has stopped
    summary.saturated += tracking.saturated_cycles
    if options.law == MPC:
        summary.mpc = tracking.describe()
        if tracking.fallbacks and summary.stop_reason == "completed":
            summary.stop_reason = f"completed, degraded: {tracking.fallbacks} MPC fallbacks"
    return summary


def enable_and_run(
    backend: JointInterface,
    controller: Controller,
    robot: RobotModel,
    config: LoopConfig,
    log: RunLog,
    reference: Reference | None = None,
    estimator: Estimator | None = None,
) -> RunSummary:
    """:func:`~mbctl.hardware.loop.run_loop` (which turns torque on after its warm-up) with the
    run's limits (:meth:`SafetyLimits.of`) and the backend's own error and saturation counts in the
    summary. A failure before the loop began (nothing logged) leaves no ``.partial`` files behind."""
    try:
        return run_loop(
            backend,
            controller,
            SafetyLimits.of(robot),
            config,
            log,
            reference,
            comm_errors=lambda: dict(getattr(backend, "comm_errors", {})),
            saturation_count=lambda: int(getattr(backend, "saturated", 0)),
            estimator=estimator,
        )
    except BaseException:
        log.discard()  # nothing once the loop has closed the log
        raise
