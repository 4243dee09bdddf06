"""``mbctl emulate``: serve a robot's Dynamixel bus on a pseudo-terminal, backed by its simulated plant.

Prints the device path to give to ``mbctl run --plant dynamixel --port PATH`` (or to
any Dynamixel SDK client) and serves it until interrupted.
"""

from __future__ import annotations

import argparse
import signal
import threading

import numpy as np

from mbctl.cli.arguments import robot_config
from mbctl.cli.commands.trajectory import parse_numbers
from mbctl.dynamics.model.robot import load_robot
from mbctl.errors import InputError
from mbctl.hardware.drive_config import bus_config
from mbctl.hardware.emulator import DriveEmulator, Faults
from mbctl.hardware.sim import TruthPlant, truth_model


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name with [drives] (and optionally [plant])")
    p.add_argument("--timing", action="store_true", help="delay replies like a real bus (baud rate, Return Delay Time)")
    p.add_argument("--drop", type=float, default=0.0, help="probability of dropping a reply")
    p.add_argument("--corrupt", type=float, default=0.0, help="probability of a reply with a wrong CRC")
    p.add_argument("--garbage", type=float, default=0.0, help="probability of garbage bytes before a reply")
    p.add_argument("--delay-ms", type=float, default=0.0, help="extra delay before every reply, ms")
    p.add_argument("--seed", type=int, default=0, help="seed of the fault injection")
    p.add_argument("--lockstep-period", type=float, help="lock-step: advance the plant by this many seconds on each sync read, and only then (default: follow the clock)")
    p.add_argument("--q0", help="initial joint positions of the plant, rad or m, one per actuated joint (default zeros)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    robot = load_robot(args.config)
    bus = bus_config(robot)
    truth, _ = truth_model(robot)
    q0 = np.zeros(robot.nv)
    if args.q0 is not None:
        values = np.atleast_1d(parse_numbers(args.q0, "--q0"))
        if values.shape != (len(robot.actuated_names),):
            raise InputError(f"needs {len(robot.actuated_names)} values ({', '.join(robot.actuated_names)})", field="--q0")
        q0[[robot.joint(n).idx_v for n in robot.actuated_names]] = values
    if args.lockstep_period is not None and not args.lockstep_period > 0:
        raise InputError("must be > 0", field="--lockstep-period")
    faults = Faults(drop_reply=args.drop, corrupt_crc=args.corrupt, garbage=args.garbage, delay_s=args.delay_ms * 1e-3, seed=args.seed)
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with DriveEmulator(bus, TruthPlant(truth, q0=q0), faults=faults, timing=args.timing, lockstep_s=args.lockstep_period) as emulator:
        ids = ", ".join(f"{name}: ID {i}" for name, i in zip(robot.actuated_names, bus.units.ids))
        print(f"emulating {len(bus.units.ids)} servos ({ids}) on {emulator.port_name}", flush=True)
        print("stop with Ctrl-C", flush=True)
        done.wait()
        stats = emulator.stats
    print(f"served {stats.replies} replies; dropped {stats.dropped}, corrupted {stats.corrupted}, garbage {stats.garbage_sent}; "
          f"bus watchdog fired {stats.watchdog_fired}; bad frames received {emulator.decoder.stats.bad_frames}")
    return 0
