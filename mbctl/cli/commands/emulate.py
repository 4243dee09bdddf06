"""``mbctl emulate``: serve a robot's Dynamixel bus on a pseudo-terminal, its CANopen drives
(``--bus canopen``) on a python-can bus, or the robot as a ros2_control arm on ROS 2 topics
(``--bus ros2``), backed by its simulated plant.

Prints the device path to give to ``mbctl run --plant dynamixel --port PATH`` (or to
any Dynamixel SDK client), or the CAN channel for ``mbctl run --bus canopen --interface
udp_multicast --channel GROUP:PORT``, and serves it until interrupted.
"""

from __future__ import annotations

import argparse
import signal
import threading

import numpy as np

from mbctl.cli.arguments import add_xacro_option, robot_config, xacro_args_of
from mbctl.cli.commands.emulate_ros2 import add_ros2_arguments, run_ros2
from mbctl.cli.commands.trajectory import parse_numbers
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.errors import InputError
from mbctl.hardware.drive_config import bus_config
from mbctl.hardware.emulator import DriveEmulator, Faults
from mbctl.hardware.sim import TruthPlant, truth_model


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name with [drives] (and optionally [plant])")
    add_xacro_option(p)
    p.add_argument("--bus", choices=("dynamixel", "canopen", "ros2"), default="dynamixel", help="the drives emulated (default dynamixel), or ros2: the plant as a ros2_control robot on ROS 2 topics")
    p.add_argument("--interface", choices=("udp_multicast", "virtual"), default="udp_multicast", help="canopen: python-can interface (default udp_multicast, on loopback)")
    p.add_argument("--channel", help="canopen: GROUP:PORT of udp_multicast (default 239.74.163.2:43113), or the virtual channel")
    p.add_argument("--realtime-priority", type=int, help="canopen, ros2: serve under SCHED_FIFO at this priority (1-99), if the OS allows it")
    p.add_argument("--timing", action="store_true", help="delay replies like a real bus (baud rate, Return Delay Time)")
    p.add_argument("--drop", type=float, default=0.0, help="probability of dropping a reply (canopen: a TPDO; ros2: a joint state)")
    p.add_argument("--corrupt", type=float, default=0.0, help="probability of a reply with a wrong CRC (canopen: a TPDO one byte short)")
    p.add_argument("--garbage", type=float, default=0.0, help="probability of garbage bytes before a reply")
    p.add_argument("--delay-ms", type=float, default=0.0, help="extra delay before every reply, ms (ros2: before each joint state)")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault injection")
    p.add_argument("--ripple-permille", type=float, default=0.0, help="canopen: the drives' current loop ripple, standard deviation in per mille of each drive's rated torque, in the torque applied and reported (0x6077) (default 0)")
    p.add_argument("--reply-delay-us", type=float, default=250.0, help="canopen, paced: the drives send their TPDOs this many µs after the SYNC (default 250)")
    p.add_argument("--lockstep-period", type=float, help="lock-step: advance the plant by this many seconds on each sync read (canopen: each SYNC after new set-points; ros2: each command), and only then (default: follow the clock)")
    p.add_argument("--q0", help="initial joint positions of the plant, rad or m, one per actuated joint (default zeros)")
    add_ros2_arguments(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    if args.bus == "canopen":
        return run_canopen(args, robot)
    if args.bus == "ros2":
        return run_ros2(args, robot, initial_positions(robot, args), stop_event())
    from mbctl.hardware.loop_support import no_gc_pauses
    from mbctl.hardware.realtime import realtime_priority

    bus = bus_config(robot)
    truth, _ = truth_model(robot)
    q0 = initial_positions(robot, args)
    faults = Faults(drop_reply=args.drop, corrupt_crc=args.corrupt, garbage=args.garbage, delay_s=args.delay_ms * 1e-3, seed=args.seed)
    done = stop_event()
    # as for CANopen below: a paced host gets its replies in time on a busy machine
    with realtime_priority(args.realtime_priority), no_gc_pauses(), DriveEmulator(bus, TruthPlant(truth, q0=q0), faults=faults, timing=args.timing, lockstep_s=args.lockstep_period) as emulator:
        ids = ", ".join(f"{name}: ID {i}" for name, i in zip(robot.actuated_names, bus.units.ids))
        print(f"emulating {len(bus.units.ids)} servos ({ids}) on {emulator.port_name}", flush=True)
        print("stop with Ctrl-C", flush=True)
        done.wait()
        stats = emulator.stats
    print(f"served {stats.replies} replies; dropped {stats.dropped}, corrupted {stats.corrupted}, garbage {stats.garbage_sent}; "
          f"bus watchdog fired {stats.watchdog_fired}; bad frames received {emulator.decoder.stats.bad_frames}")
    return 0


def initial_positions(robot: RobotModel, args: argparse.Namespace) -> np.ndarray:
    """DOF positions (rad, m) of the plant: ``--q0`` for the actuated joints, zeros elsewhere.

    Raises:
        InputError: Naming ``--q0``: the wrong count, or a position outside its joint's range.
    """
    q0 = np.zeros(robot.nv)
    if args.q0 is not None:
        values = np.atleast_1d(parse_numbers(args.q0, "--q0"))
        if values.shape != (len(robot.actuated_names),):
            raise InputError(f"needs {len(robot.actuated_names)} values ({', '.join(robot.actuated_names)})", field="--q0")
        for name, value in zip(robot.actuated_names, values):
            limits = robot.joint(name).limits
            if not limits.lower <= value <= limits.upper:
                raise InputError(f"{value:g} is outside joint {name}'s range [{limits.lower:g}, {limits.upper:g}]", field="--q0")
        q0[[robot.joint(n).idx_v for n in robot.actuated_names]] = values
    if args.lockstep_period is not None and not args.lockstep_period > 0:
        raise InputError("must be > 0", field="--lockstep-period")
    return q0


def stop_event() -> threading.Event:
    """Set by SIGINT or SIGTERM."""
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    return done


def run_canopen(args: argparse.Namespace, robot: RobotModel) -> int:
    """CiA 402 drives on udp_multicast (loopback) or a virtual channel, until interrupted."""
    from mbctl.hardware.cia402.canbus import UDP_DEFAULT_CHANNEL
    from mbctl.hardware.cia402.drive_plant import plant_contact
    from mbctl.hardware.cia402.emulator import Cia402Emulator, Cia402Faults
    from mbctl.hardware.cia402.units import canopen_config
    from mbctl.hardware.loop_support import no_gc_pauses
    from mbctl.hardware.realtime import realtime_priority
    from mbctl.hardware.session import check_udp_channel

    config = canopen_config(robot)
    q0 = initial_positions(robot, args)
    channel = args.channel or (UDP_DEFAULT_CHANNEL if args.interface == "udp_multicast" else "mbctl")
    if args.interface == "udp_multicast":
        check_udp_channel(channel)
    faults = Cia402Faults(drop_tpdo=args.drop, corrupt_tpdo=args.corrupt, seed=args.seed)
    for option, value in (("--ripple-permille", args.ripple_permille), ("--reply-delay-us", args.reply_delay_us)):
        if not value >= 0:
            raise InputError(f"must be >= 0, got {value:g}", field=option)
    done = stop_event()
    truth, plant_config = truth_model(robot)
    plant = TruthPlant(truth, q0=q0, period_s=args.lockstep_period)
    timing = dict(reply_delay_s=args.reply_delay_us * 1e-6, effort_noise_permille=args.ripple_permille, seed=args.seed)
    # the serving thread inherits the scheduling policy: a paced host then gets its TPDOs in time on a busy
    # machine; no collector pauses of milliseconds between a SYNC and its TPDOs
    with realtime_priority(args.realtime_priority) as scheduling, no_gc_pauses(), Cia402Emulator(
        config, plant, interface=args.interface, channel=channel, faults=faults, lockstep_s=args.lockstep_period, contact=plant_contact(truth, plant_config), **timing
    ) as emulator:
        nodes = ", ".join(f"{name}: node {i}" for name, i in zip(robot.actuated_names, config.units.node_ids))
        print(f"emulating {len(robot.actuated_names)} CiA 402 drives ({nodes}) on {channel} ({args.interface}; {scheduling})", flush=True)
        print("stop with Ctrl-C", flush=True)
        done.wait()
        stats, slipped_s = emulator.stats, emulator.power.slipped_s
    print(f"served {stats.syncs} SYNCs, {stats.tpdos} TPDOs, {stats.heartbeats} heartbeats; dropped {stats.dropped}, corrupted {stats.corrupted}, unsent {stats.unsent}; "
          f"latest reply {stats.reply_lag_max_s * 1e3:.3g} ms after its time; {slipped_s * 1e3:.3g} ms of plant time skipped")
    return 0
