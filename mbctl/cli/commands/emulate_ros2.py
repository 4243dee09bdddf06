"""``mbctl emulate ROBOT --bus ros2``: the simulated plant as a ros2_control arm on ROS 2 topics.

The first line printed ends in ``on ROS domain <id>``; a run connects with ``mbctl run ROBOT --bus
ros2`` on the same domain (``ROS_DOMAIN_ID``). At exit: what was served and the command latency.
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

__all__ = ["add_ros2_arguments", "run_ros2"]


def add_ros2_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``--bus ros2`` (``--drop``, ``--delay-ms``, ``--seed``, ``--q0`` and
    ``--lockstep-period`` are shared with the other buses)."""
    g = p.add_argument_group("ros2")
    g.add_argument("--period", type=float, default=1e-3, help="ros2: plant period and joint-state interval in s when paced (default 0.001)")
    g.add_argument("--joint-states", help="ros2: joint-states topic (default: [ros2] joint_states, /joint_states)")
    g.add_argument("--command-topic", help="ros2: a command topic served besides /forward_effort_controller/commands (default: [ros2] command)")
    g.add_argument("--stop-after", type=float, help="ros2: stop publishing joint states after this plant time, s (fault injection)")
    g.add_argument("--die-after", type=float, help="ros2: kill this process (SIGKILL) after this plant time, s (fault injection)")
    g.add_argument("--stats", type=Path, help="ros2: write what was served and the command latencies (.json) at exit")


def _positive(value: float | None, option: str) -> None:
    if value is not None and not (np.isfinite(value) and value > 0):
        raise InputError(f"must be a finite number > 0, got {value!r}", field=option)


def run_ros2(args: argparse.Namespace, robot: RobotModel, q0: np.ndarray, done: threading.Event) -> int:
    """Serve until ``done`` is set."""
    from mbctl.hardware.realtime import realtime_priority
    from mbctl.hardware.ros2.emulator import Ros2Emulator, Ros2Faults
    from mbctl.hardware.ros2.session import session_spec
    from mbctl.hardware.sim import truth_model

    for option, value in (("--period", args.period), ("--stop-after", args.stop_after), ("--die-after", args.die_after)):
        _positive(value, option)
    if not 0.0 <= args.drop <= 1.0:
        raise InputError("must be within [0, 1]", field="--drop")
    if args.stats is not None:
        check_output(args.stats, (".json",))
    spec = session_spec(robot, args.joint_states, args.command_topic)
    truth, config = truth_model(robot)
    faults = Ros2Faults(drop=args.drop, delay_s=args.delay_ms * 1e-3, stop_after_s=args.stop_after, die_after_s=args.die_after, seed=args.seed)
    lockstep = args.lockstep_period is not None
    period = args.lockstep_period if lockstep else args.period
    urdf = robot.spec.urdf.read_text() if robot.spec is not None else None
    # the threads started inside (stepping, executor, middleware) inherit the scheduling
    with realtime_priority(args.realtime_priority) as scheduling, Ros2Emulator(truth, config, spec, period_s=period, q0=q0, lockstep=lockstep, faults=faults, urdf=urdf) as emulator:
        # everything built so far (the plant, the middleware) out of the cyclic collector's reach before a client
        # connects: a full collection never walks it while serving
        gc.collect()
        gc.freeze()
        timing = f"lock-step, {period:g} s per command" if lockstep else f"paced, every {period:g} s; {scheduling}"
        topics = ", ".join(f"{t} ({i})" for t, i in emulator.topics.items())
        print(f"emulating {robot.name} as a ros2_control arm ({len(emulator.joint_names)} joints; {timing}): joint states on {spec.joint_states}, "
              f"commands on {topics} on ROS domain {emulator.domain_id}", flush=True)
        for note in emulator.notes:
            print(f"note: {note}", flush=True)
        print("stop with Ctrl-C", flush=True)
        done.wait()
    stats = emulator.stats
    latency = emulator.latency_percentiles_us()
    print(f"served {stats.published} joint states over {stats.steps} steps; commands {stats.commands} (bad {stats.bad_commands}, ignored {stats.ignored}); "
          f"dropped {stats.dropped}; overruns {stats.overruns} (latest {1e3 * stats.max_late_s:.1f} ms after its deadline), slipped {stats.slipped_s:.3f} s")
    if latency:
        print(f"command latency (sent -> taken): p50 {latency['p50']:.0f} us, p99 {latency['p99']:.0f} us, max {latency['max']:.0f} us")
    if args.stats is not None:
        report = {k: v for k, v in dataclasses.asdict(stats).items() if k != "latencies_s"}
        report["latency_us"] = latency
        report["latencies_us"] = [x * 1e6 for x in stats.latencies_s]
        with atomic_output(args.stats) as tmp:
            tmp.write_text(json.dumps(report) + "\n")
    return 0
