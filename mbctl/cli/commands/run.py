"""``mbctl run``: a closed-loop run at a fixed rate against the simulated plant, Dynamixel drives,
CiA 402 drives on CANopen (``--bus canopen``), an arm under ros2_control (``--bus ros2``) or a Franka
arm over FCI (``--bus franka``).

Exit codes: 0 for a clean run (completed, no overrun); 1 for a run that stopped
before its end (safety stop, overrun limit, fault, signal); 3 for a run that
completed degraded (some deadlines were missed, fewer than the overrun limit);
2 for bad input (nothing run).

Overrun limit (paced runs): the run stops with torque off when more than
``--max-overrun-fraction`` of the last ``--overrun-window`` cycles overran, or
after ``--max-consecutive-overruns`` overruns in a row (defaults 0.05, 100, 5).

Scheduling (paced runs): the loop asks for ``SCHED_FIFO`` priority 80 (the simulated
plant's process 79) and runs at normal priority where the OS refuses; the summary's
``scheduling`` says which. ``--no-realtime`` does not ask.
"""

from __future__ import annotations

import argparse
import json
import math
import os
from pathlib import Path

import numpy as np

from mbctl.budget import check_disk, check_memory, check_read, format_count
from mbctl.cli.arguments import add_xacro_option, budget, robot_config, xacro_args_of
from mbctl.cli.commands.animate import add_view_arguments, animate_log, check_log_animation
from mbctl.cli.console import warn
from mbctl.cli.publish import add_publish_options, close_publisher, open_publisher
from mbctl.cli.view import add_view_option, check_run_view, close_view, open_view
from mbctl.config.control import EndSpec
from mbctl.config.ros2 import check_topic
from mbctl.ctrl.keepout import check_trajectory
from mbctl.ctrl.task_space import (
    TaskSpaceSettings,
    TaskTracking,
    task_space_settings,
    task_tracking,
)
from mbctl.ctrl.trajectory import limit_violations, read_trajectory
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.errors import InputError
from mbctl.fileio import atomic_output, check_output
from mbctl.hardware.loop import PHASES, RunSummary, run_footprint
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.session import SessionOptions, run_session
from mbctl.viz.figures import FORMATS
from mbctl.viz.run import plot_run

CONTROLLERS = {
    "computed-torque": "computed-torque",
    "pd-ff": "pd-feedforward",
    "pd-gravity": "pd-gravity",
    "feedforward": "feedforward",
    "task-space": "task-space",
    "position": "position",
    "mpc": "mpc",
}


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name ([control] gains; [plant] or [drives])")
    add_xacro_option(p)
    p.add_argument("--trajectory", type=Path, required=True, help="trajectory CSV to follow")
    p.add_argument("--plant", choices=("sim", "dynamixel", "canopen", "ros2"), default="sim", help="the older spelling of --bus (as mbctl commission's): sim, the default, is no --bus")
    p.add_argument("--port", help="serial device of the Dynamixel bus (default: drives.port)")
    p.add_argument("--bus", choices=("dynamixel", "canopen", "ros2", "franka"), help="joint drives on this bus instead of the simulated plant (--bus dynamixel is --plant dynamixel); ros2: an arm under ros2_control ([ros2] topics); franka: a Franka arm over FCI, through libfranka ([franka] table)")
    p.add_argument("--robot-ip", help="franka: the robot's FCI address (default: [franka] address)")
    p.add_argument("--joint-states", help="ros2: the sensor_msgs/JointState topic (default: [ros2] joint_states, /joint_states)")
    p.add_argument("--command-topic", help="ros2: the forward command controller's Float64MultiArray topic (default: [ros2] command)")
    p.add_argument("--interface", help="canopen: python-can interface, e.g. socketcan, pcan, kvaser, virtual, udp_multicast (default: drives.interface)")
    p.add_argument("--channel", help="canopen: the interface's channel, e.g. can0 (default: drives.channel)")
    p.add_argument("--emulate", action="store_true", help="with --plant dynamixel: serve the bus from an emulator in its own process; with --bus canopen: in this process (virtual bus) or its own (--interface udp_multicast); with --bus ros2: mbctl emulate --bus ros2 in its own process; with --bus franka: franky-sim (an FR3 in MuJoCo) in its own process")
    p.add_argument("--rate", type=float, help="control rate in Hz (default 1000; --bus canopen: the highest of 1000, 500, 400, 250, 200, 125, 100 ... Hz whose frames fit the [drives] bit rate, 400 Hz for six drives at 1 Mbit/s)")
    p.add_argument("--controller", choices=tuple(CONTROLLERS), default="computed-torque", help="control law (default computed-torque)")
    p.add_argument("--duration", type=float, help="run length in s (default: the trajectory's)")
    p.add_argument("--lockstep", action="store_true", help="simulated plant, emulated bus (--emulate, or drives mbctl emulate --lockstep-period serves on a udp_multicast bus) or ROS 2 (a node stepping once per command): advance the plant one period per cycle, as fast as possible (deterministic)")
    p.add_argument("--python-cycle", action="store_true", help="run the cycle between read and write in Python, the reference implementation (default: a compiled law's cycle is one generated C call)")
    p.add_argument("--no-realtime", action="store_true", help="paced runs: do not ask for SCHED_FIFO priority (by default asked for, and reported)")
    defaults = OverrunPolicy()
    p.add_argument("--max-overrun-fraction", type=float, default=defaults.max_fraction, help=f"stop when more than this fraction of the last --overrun-window cycles overran (default {defaults.max_fraction:g})")
    p.add_argument("--overrun-window", type=int, default=defaults.window, help=f"cycles over which overruns are counted (default {defaults.window})")
    p.add_argument("--max-consecutive-overruns", type=int, default=defaults.max_consecutive, help=f"stop after this many overruns in a row; 0: no such limit (default {defaults.max_consecutive})")
    p.add_argument(
        "--log", type=Path, required=True,
        help="run log to write: .npz, or .mcap (ROS 2 messages for Foxglove, converted from the NPZ after the run)",
    )
    p.add_argument("--summary", type=Path, required=True, help="run summary to write (.json)")
    p.add_argument("--plot", type=Path, help="plot of tracking error, torques and loop timing")
    add_view_arguments(p, animate=True)
    add_view_option(p)
    add_publish_options(p)
    p.set_defaults(run=run)


EXIT_STOPPED = 1
EXIT_DEGRADED = 3


def exit_code(summary: RunSummary) -> int:
    """0 for a clean run, :data:`EXIT_STOPPED` for a stopped one, :data:`EXIT_DEGRADED` for a degraded one."""
    if summary.clean:
        return 0
    return EXIT_DEGRADED if summary.completed else EXIT_STOPPED


def overrun_policy(args: argparse.Namespace) -> OverrunPolicy:
    """The overrun policy of the command-line options (bad values: an :class:`InputError` naming the option)."""
    if not 0.0 <= args.max_overrun_fraction <= 1.0:
        raise InputError("must be within [0, 1]", field="--max-overrun-fraction")
    if args.overrun_window < 1:
        raise InputError("must be >= 1", field="--overrun-window")
    if args.max_consecutive_overruns < 0:
        raise InputError("must be >= 0", field="--max-consecutive-overruns")
    return OverrunPolicy(window=args.overrun_window, max_fraction=args.max_overrun_fraction, max_consecutive=args.max_consecutive_overruns)


def check_run_size(args: argparse.Namespace, duration_s: float, joints: int, end: EndSpec | None = None, source: Path | None = None) -> None:
    """Refuse, before the loop starts, a run whose log would not fit the memory budget or the disk: the
    trajectory's ``duration_s`` and the end hold (``end.hold_s`` of ``[control.end]`` in ``source``, logged like it)."""
    if not duration_s > 0:
        return  # not a size: the session says what is wrong
    hold_s = 0.0 if end is None else end.hold_s
    cycles, memory, disk = run_footprint(duration_s + hold_s, args.rate, joints, estimation=args.controller != "position")
    where = {"field": "--duration" if args.duration is not None else "--trajectory"}
    if hold_s > duration_s:  # the hold makes the size
        where = {"file": source, "field": "control.end.hold_s"}
    # both knobs named: the time (the field above) and the rate, which may be what was mistyped
    what = f"the run ({format_count(cycles)} cycles at --rate {args.rate:g} Hz{', the end hold included' if hold_s else ''})"
    check_memory(memory, budget(args), what=what, **where)
    check_disk(disk, args.log, what=what, **where)


def default_rate(plant: str, robot: RobotModel) -> float:
    """The rate (Hz) of a run without ``--rate``: 1000; over CANopen, the highest common rate whose
    frames fit the bus (:func:`~mbctl.hardware.cia402.units.bus_rate`), emulated buses alike."""
    if plant != "canopen":
        return 1000.0
    from mbctl.hardware.cia402.units import bus_rate, canopen_config

    config = canopen_config(robot)
    return bus_rate(len(robot.actuated_names), config.mode, config.bitrate)


def run(args: argparse.Namespace) -> int:
    check_output(args.log, (".npz", ".mcap"))
    check_output(args.summary, (".json",))
    if args.plot:
        check_output(args.plot, FORMATS)
    for option, value in (("--rate", args.rate), ("--duration", args.duration)):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"must be a finite number > 0, got {value!r}", field=option)
    policy = overrun_policy(args)
    plant = args.bus or args.plant
    if args.bus and args.plant not in ("sim", args.bus):
        raise InputError(f"--plant {args.plant} and --bus {args.bus} contradict each other", field="--bus")
    if plant != "canopen" and (args.interface or args.channel):
        raise InputError("only for --bus canopen", field="--interface" if args.interface else "--channel")
    if plant != "ros2" and (args.joint_states is not None or args.command_topic is not None):
        raise InputError("only for --bus ros2", field="--joint-states" if args.joint_states is not None else "--command-topic")
    for option, topic, example in (("--joint-states", args.joint_states, "/joint_states"), ("--command-topic", args.command_topic, "/forward_effort_controller/commands")):
        reason = check_topic(topic, example) if topic is not None else ""
        if reason:
            raise InputError(reason, field=option)
    if plant != "franka" and args.robot_ip:
        raise InputError("only for --bus franka", field="--robot-ip")
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    check_log_animation(robot, args.animate)
    check_run_view(robot, args)
    check_read(args.trajectory, budget(args), field="--trajectory")
    traj = read_trajectory(args.trajectory, robot.joint_names)
    args.rate = args.rate if args.rate is not None else default_rate(plant, robot)
    end = robot.spec.control.end if robot.spec is not None and robot.spec.control is not None else None
    check_run_size(args, traj.duration if args.duration is None else args.duration, len(robot.actuated_names), end, robot.spec.source if robot.spec else None)
    for message in limit_violations(robot, traj):
        warn(f"{args.trajectory}: {message}")
    check_trajectory(robot, traj, f"the trajectory {args.trajectory}")
    options = SessionOptions(
        plant=plant,
        law=CONTROLLERS[args.controller],
        rate_hz=args.rate,
        duration_s=args.duration,
        lockstep=args.lockstep,
        port=args.port,
        interface=args.interface,
        channel=args.channel,
        emulate=args.emulate,
        joint_states=args.joint_states,
        command_topic=args.command_topic,
        robot_address=args.robot_ip,
        overrun=policy,
        realtime_priority=None if args.no_realtime else SessionOptions.realtime_priority,
        compiled_cycle=not args.python_cycle,
    )
    task = task_space_settings(robot) if args.controller == "task-space" else None  # bad table: before any work
    mcap, npz = (args.log, args.log.with_name(f".{args.log.name}.{os.getpid()}.npz")) if args.log.suffix == ".mcap" else (None, args.log)
    view = open_view(robot, args, log=npz)
    publisher = open_publisher(robot, args, log=npz)
    try:
        summary = run_session(robot, traj, options, npz)
    finally:
        close_publisher(publisher)  # the rows it has not published yet, before anything is printed
    try:
        extra = {}
        if task is not None and summary.cycles:
            tracking = run_task_tracking(robot, task, npz)
            extra = {
                "task_rms_m": tracking.rms,
                "task_max_abs_error_m": tracking.max_abs_error,
                "objective": task.objective,
                "objective_start": tracking.objective_start,
                "objective_end": tracking.objective_end,
            }
        write_summary(args.summary, summary, controller=args.controller, plant=plant, **extra)
        if args.plot:
            plot_run(npz, args.plot, summary=summary, title=f"{robot.name}: {args.controller} on {plant}")
        if args.animate and summary.cycles:
            animate_log(robot, npz, args)
        print(format_run(summary))
        for message in summary.chatter:
            warn(message)
        if extra:
            rms = ", ".join(f"{axis} {v:.3g}" for axis, v in extra["task_rms_m"].items())
            print(
                f"task ({task.frame}) error rms: {rms} m; max |error| {extra['task_max_abs_error_m']:.3g} m; "
                f"{task.objective} objective {extra['objective_start']:.4g} -> {extra['objective_end']:.4g} rad²"
            )
        if mcap is not None:
            from mbctl.cli.commands.convert import write_log_mcap

            write_log_mcap(npz, mcap, robot)  # after the loop: the cycle never writes MCAP
            npz.unlink()
        print(f"wrote {', '.join(str(p) for p in (args.log, args.summary, args.plot, args.animate) if p)}")
    finally:
        if mcap is not None and npz.exists():
            warn(f"the run's log stays in {npz} (no MCAP written)")
    close_view(view)
    return exit_code(summary)


def run_task_tracking(robot: RobotModel, task: TaskSpaceSettings, log_path: Path) -> TaskTracking:
    """Task error and objective of a logged run (every DOF is logged: the law needs them all)."""
    log = np.load(log_path)
    names = [str(c).split(".", 1)[1] for c in log["columns"] if str(c).startswith("q.")]
    order = [names.index(n) for n in robot.joint_names]
    q, q_ref = (np.atleast_2d(log[k].T).T[:, order] for k in ("q", "q_ref"))
    good = np.isfinite(q).all(axis=1)
    return task_tracking(robot, task, q[good], q_ref[good])


def write_summary(path: Path, summary: RunSummary, **extra: object) -> None:
    """The JSON summary: every :class:`RunSummary` field plus ``extra``."""
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps({**summary.to_json(), **extra}, indent=2) + "\n")


def format_run(s: RunSummary) -> str:
    """The lines ``mbctl run`` prints."""
    lines = [
        f"stop reason: {s.stop_reason}",
        f"cycles {s.cycles} at {s.rate_hz:g} Hz ({s.duration_s:.3f} s), overruns {s.overruns}, failed reads {s.failed_reads}"
        + (f"; scheduling {s.scheduling}" if s.scheduling else ""),
        f"period p50 {s.period_p50_us:.1f} us, p99 {s.period_p99_us:.1f} us; |error| p99 {s.period_error_p99_us:.1f} us, "
        f"max {s.period_error_max_us:.1f} us; jitter (std) {s.period_jitter_us:.1f} us",
        f"compute p50 {s.compute_p50_us:.1f} us, p99 {s.compute_p99_us:.1f} us; "
        + "; ".join(f"{p} {s.phases_us[p]['p50']:.1f}/{s.phases_us[p]['p99']:.1f}/{s.phases_us[p]['max']:.1f}" for p in PHASES if p in s.phases_us)
        + " us (p50/p99/max)",
    ]
    if s.plant_timing:
        lines.append(format_plant(s.plant_timing))
    if s.sensing:
        lines.append(f"sensing: {s.sensing}")
    if s.estimation:
        lines.append(f"estimation: {s.estimation}")
    if s.end:
        lines.append(f"end: {s.end}")
    if s.torque_step_rms:
        lines.append("torque step rms: " + ", ".join(f"{j} {v:.3g}" for j, v in s.torque_step_rms.items()) + " per cycle")
    if s.tracking_rms:
        rms = ", ".join(f"{j} {v:.3g}" for j, v in s.tracking_rms.items())
        lines.append(f"tracking rms: {rms}; max |error| {s.max_abs_error:.3g}")
    if s.comm_errors:
        lines.append("communication errors: " + ", ".join(f"{k} {v}" for k, v in sorted(s.comm_errors.items())))
    if s.saturated:
        lines.append(f"saturated commands: {s.saturated}")
    if s.mpc:
        c = s.mpc
        lines.append(
            f"mpc: {c['solver']}; {c['updates']} updates of {c['iterations_per_update']} iteration(s), solve p50 {c['solve_us_p50']:.1f} us, "
            f"p99 {c['solve_us_p99']:.1f} us, max {c['solve_us_max']:.1f} us; fallbacks {c['fallbacks']}; "
            f"subproblem: active set {c['active_set']}, interior point {c['interior_point']}, clamped {c['clamped']}"
        )
    return "\n".join(lines)


def format_plant(plant: dict[str, float]) -> str:
    """The line on a plant that steps on its own clock: its real-time factor and overruns (a Franka: its
    command success rate and the states the loop missed)."""
    if "control_command_success_rate" in plant:
        return (f"robot: command success rate {100 * plant['control_command_success_rate']:.1f} % (lowest {100 * plant['control_command_success_rate_min']:.1f} %), "
                f"{plant['missed_samples']:.0f} of {plant['samples'] + plant['missed_samples']:.0f} states missed")
    return (
        f"plant (own process{', SCHED_FIFO' if plant.get('realtime') else ''}): real-time factor {plant['real_time_factor']:.2f}, {plant['steps']:.0f} steps, "
        f"step p50 {plant['step_p50_us']:.1f} us, p99 {plant['step_p99_us']:.1f} us, overruns {plant['overruns']:.0f}"
    )
