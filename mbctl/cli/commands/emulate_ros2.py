"""``mbctl emulate ROBOT --bus ros2``: the simulated plant as a ros2_control arm on ROS 2 topics.

The first line printed ends in ``on ROS domain <id>``; a run connects with ``mbctl run ROBOT --bus
ros2`` on the same domain (``ROS_DOMAIN_ID``). Paced, the arm runs in real time on its own clock at
``--rate`` (:mod:`mbctl.hardware.ros2.realtime`). At exit: what was served and the command latency.
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import threading
from pathlib import Path

import numpy as np

from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError
from mbctl.fileio import atomic_output, check_output
from mbctl.hardware.ros2.realtime import ARM_EFFORTS, Push, RealtimeOptions

__all__ = ["add_ros2_arguments", "run_ros2"]


def add_ros2_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``--bus ros2`` (``--drop``, ``--delay-ms``, ``--seed``, ``--q0`` and
    ``--lockstep-period`` are shared with the other buses)."""
    g = p.add_argument_group("ros2")
    g.add_argument("--rate", type=float, help="ros2: the robot's update rate in Hz, on its own clock (default 1000): joint states at this rate, the newest command applied at each update")
    g.add_argument("--period", type=float, help="ros2: the update period in s (1 / --rate)")
    g.add_argument("--effort", choices=ARM_EFFORTS, default="drive", help="ros2: what the joint states' effort is: drive (the torque applied, default) or joint-torque-sensor (link side, after friction, as Franka's tau_J)")
    g.add_argument("--effort-noise", type=float, help="ros2: standard deviation of the published effort, N·m (default: [plant] effort_noise)")
    g.add_argument("--gravity-compensated", action="store_true", help="ros2: the robot adds its own (the truth's) gravity to every effort command, as UR and Franka arms do; effort is the total")
    g.add_argument("--push", help="ros2: JOINT:TORQUE:START:DURATION, an external torque (N·m) on JOINT from START s after the first command for DURATION s")
    g.add_argument("--joint-states", help="ros2: joint-states topic (default: [ros2] joint_states, /joint_states)")
    g.add_argument("--command-topic", help="ros2: a command topic served besides /forward_effort_controller/commands (default: [ros2] command)")
    g.add_argument("--stop-after", type=float, help="ros2: stop publishing joint states after this time of motion (s since the first command; lock-step: plant time) (fault injection)")
    g.add_argument("--die-after", type=float, help="ros2: kill this process (SIGKILL) after this time of motion (s since the first command; lock-step: plant time) (fault injection)")
    g.add_argument("--stats", type=Path, help="ros2: write what was served and the command latencies (.json) at exit")


def _positive(value: float | None, option: str) -> None:
    if value is not None and not (np.isfinite(value) and value > 0):
        raise InputError(f"must be a finite number > 0, got {value!r}", field=option)


def _push(text: str | None, robot: RobotModel) -> Push | None:
    if text is None:
        return None
    parts = text.split(":")
    try:
        joint, (torque, start, duration) = parts[0], (float(x) for x in parts[1:])
    except ValueError:
        raise InputError(f"must be JOINT:TORQUE:START:DURATION (N·m, s, s), got {text!r}", field="--push") from None
    if joint not in robot.actuated_names:
        raise InputError(f"joint {joint} is not an actuated joint of {robot.name} ({', '.join(robot.actuated_names)})", field="--push")
    if not (np.isfinite([torque, start, duration]).all() and start >= 0 and duration > 0):
        raise InputError(f"needs a finite torque, START >= 0 and DURATION > 0, got {text!r}", field="--push")
    return Push(joint, torque, start, duration)


def run_ros2(args: argparse.Namespace, robot: RobotModel, q0: np.ndarray, done: threading.Event) -> int:
    """Serve until ``done`` is set."""
    from mbctl.hardware.realtime import realtime_priority
    from mbctl.hardware.ros2.emulator import Ros2Emulator, Ros2Faults
    from mbctl.hardware.ros2.runtime import domain_id_from_env
    from mbctl.hardware.ros2.session import session_spec
    from mbctl.hardware.sim import truth_model

    for option, value in (("--rate", args.rate), ("--period", args.period), ("--stop-after", args.stop_after), ("--die-after", args.die_after)):
        _positive(value, option)
    if args.rate is not None and args.period is not None:
        raise InputError("give --rate or --period, not both", field="--period")
    if args.effort_noise is not None and not (np.isfinite(args.effort_noise) and args.effort_noise >= 0):
        raise InputError(f"must be a finite number >= 0, got {args.effort_noise!r}", field="--effort-noise")
    if not 0.0 <= args.drop <= 1.0:
        raise InputError("must be within [0, 1]", field="--drop")
    if args.stats is not None:
        check_output(args.stats, (".json",))
    spec = session_spec(robot, args.joint_states, args.command_topic)
    domain_id_from_env()
    truth, config = truth_model(robot)
    faults = Ros2Faults(drop=args.drop, delay_s=args.delay_ms * 1e-3, stop_after_s=args.stop_after, die_after_s=args.die_after, seed=args.seed)
    lockstep = args.lockstep_period is not None
    rate = args.rate if args.rate is not None else 1.0 / args.period if args.period is not None else 1000.0
    arm = RealtimeOptions(rate_hz=rate, effort=args.effort, effort_noise=args.effort_noise, gravity_compensated=args.gravity_compensated, push=_push(args.push, robot))
    urdf = robot.spec.urdf.read_text() if robot.spec is not None else None
    # the threads started inside (stepping, executor, middleware) inherit the scheduling
    with realtime_priority(args.realtime_priority) as scheduling, Ros2Emulator(truth, config, spec, period_s=args.lockstep_period, q0=q0, lockstep=lockstep,
                                                                                faults=faults, urdf=urdf, arm=arm) as emulator:
        # everything built so far (the plant, the middleware) out of the cyclic collector's reach before a client
        # connects: a full collection never walks it while serving
        gc.collect()
        gc.freeze()
        extras = "".join((", gravity compensated" if arm.gravity_compensated else "", f", effort {arm.effort}"))
        timing = f"lock-step, {args.lockstep_period:g} s per command" if lockstep else f"real time at {rate:g} Hz{extras}; {scheduling}"
        topics = ", ".join(f"{t} ({i})" for t, i in emulator.topics.items())
        print(f"emulating {robot.name} as a ros2_control arm ({len(emulator.joint_names)} joints; {timing}): joint states on {spec.joint_states}, "
              f"commands on {topics} on ROS domain {emulator.domain_id}", flush=True)
        for note in emulator.notes:
            print(f"note: {note}", flush=True)
        print("stop with Ctrl-C", flush=True)
        done.wait()
    stats = emulator.stats
    latency = emulator.latency_percentiles_us()
    applied = emulator.latency_percentiles_us("apply_delays_s")
    print(f"served {stats.published} joint states over {stats.steps} updates; commands {stats.commands} (bad {stats.bad_commands}, ignored {stats.ignored}); "
          f"dropped {stats.dropped}; overruns {stats.overruns} (latest {1e3 * stats.max_late_s:.1f} ms after its deadline), slips {stats.slips} ({stats.slipped_s:.3f} s)")
    if latency:
        print(f"command latency (sent -> received): p50 {latency['p50']:.0f} us, p99 {latency['p99']:.0f} us, max {latency['max']:.0f} us")
    if applied:
        print(f"command latency (sent -> applied): p50 {applied['p50']:.0f} us, p99 {applied['p99']:.0f} us, max {applied['max']:.0f} us")
    if args.stats is not None:
        report = {k: v for k, v in dataclasses.asdict(stats).items() if k not in ("latencies_s", "apply_delays_s")}
        report["latency_us"] = latency
        report["latencies_us"] = [x * 1e6 for x in stats.latencies_s]
        report["apply_delays_us"] = [x * 1e6 for x in stats.apply_delays_s]
        with atomic_output(args.stats) as tmp:
            tmp.write_text(json.dumps(report) + "\n")
    return 0
