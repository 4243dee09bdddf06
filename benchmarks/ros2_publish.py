"""Overruns of the paced 1 kHz loop without and with ``--publish`` (live output on ROS 2), alternated.

Computed torque on the SCARA's simulated plant (its own process), quintic there-and-back motions,
paced at ``--rate`` for ``--seconds`` per run, ``--pairs`` pairs of runs in the order: no publish,
publish, no publish, publish, ... With ``publish`` a :class:`~mbctl.hardware.ros2.publish.LivePublisher`
follows the run's log (its own process) at ``--publish-rate``, and a listener process (an rclpy node
like PlotJuggler's: reliable subscriptions to /joint_states, /joint_commands and /diagnostics) takes
every message, so the messages really go out. DDS stays on this machine (localhost discovery, domain
``--domain``).

The overrun policy is relaxed (no stop) so every run counts its overruns to the end. Prints per run
the overruns, the period-error p99, the compute p99, the publisher's CPU time (share of one core)
and the messages the listener received; then the totals per mode (target: no more overruns with
``--publish``).

Run: python benchmarks/ros2_publish.py [--seconds 10] [--pairs 3] [--publish-rate 100] [--no-realtime]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

TOPICS = ("/joint_states", "/joint_commands", "/diagnostics")
MOTION = [[0.0, 0.0, 0.0, 0.0], [0.8, 1.2, -0.6, 0.05], [-0.5, 0.9, 1.0, -0.05]]  # rad, m; 1.5 s per segment


def listen() -> None:
    """The listener process: count the messages of :data:`TOPICS` until stdin closes, then print the counts (JSON)."""
    import threading

    import rclpy
    from diagnostic_msgs.msg import DiagnosticArray
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.qos import QoSProfile, ReliabilityPolicy
    from sensor_msgs.msg import JointState

    rclpy.init()
    node = rclpy.create_node("benchmark_listener")
    counts = dict.fromkeys(TOPICS, 0)

    def counter(topic: str):
        def take(_msg: object) -> None:
            counts[topic] += 1

        return take

    qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
    for topic in TOPICS:
        node.create_subscription(DiagnosticArray if topic == "/diagnostics" else JointState, topic, counter(topic), qos)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    threading.Thread(target=lambda: (sys.stdin.read(), executor.shutdown(timeout_sec=1.0)), daemon=True).start()
    print("ready", flush=True)
    with contextlib.suppress(Exception):
        executor.spin()
    print(json.dumps(counts), flush=True)


def cpu_s(pid: int) -> float:
    """CPU time (user + system, s) of process ``pid`` so far (Linux /proc)."""
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return 0.0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run (s)")
    parser.add_argument("--rate", type=float, default=1000.0, help="loop rate (Hz)")
    parser.add_argument("--pairs", type=int, default=3, help="pairs of runs (without, with --publish)")
    parser.add_argument("--publish-rate", type=float, default=100.0, help="messages per topic per second (Hz)")
    parser.add_argument("--domain", type=int, default=231, help="ROS 2 domain of the benchmark")
    parser.add_argument("--no-realtime", action="store_true", help="normal scheduling for the loop and the plant (no SCHED_FIFO)")
    parser.add_argument("--listen", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ["ROS_DOMAIN_ID"] = str(args.domain)
    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    if args.listen:
        listen()
        return

    from mbctl.ctrl.trajectory import quintic_rest_to_rest
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.hardware.overrun import OverrunPolicy
    from mbctl.hardware.ros2.publish import LivePublisher
    from mbctl.hardware.session import SessionOptions, run_session

    robot = load_robot("scara")
    motion = np.array(MOTION)
    repeats = int(np.ceil(args.seconds / (1.5 * len(motion))))
    waypoints = np.vstack([motion] * repeats + [motion[:1]])
    traj = quintic_rest_to_rest(waypoints, [1.5] * (len(waypoints) - 1), args.rate, robot.joint_names)
    options = SessionOptions(
        rate_hz=args.rate, duration_s=args.seconds, overrun=OverrunPolicy(max_fraction=1.0, max_consecutive=0),
        realtime_priority=None if args.no_realtime else SessionOptions.realtime_priority,
    )
    print(f"paced loop, scara, computed torque, {args.rate:g} Hz, {args.seconds:g} s per run, --publish at {args.publish_rate:g} Hz; "
          f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")  # fmt: skip
    print(f"{'pair':<6}{'mode':<12}{'overruns':>16}{'|err| p99 us':>14}{'compute p99 us':>16}{'pub CPU':>9}{'received':>26}  scheduling / stop")
    listener = subprocess.Popen([sys.executable, __file__, "--listen", "--domain", str(args.domain)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert listener.stdout.readline().strip() == "ready"
    totals = {"no publish": [0, 0], "publish": [0, 0]}  # overruns, cycles
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(1, args.pairs + 1):
            for mode in ("no publish", "publish"):
                log = Path(tmp) / f"{pair}-{mode.replace(' ', '')}.npz"
                publisher, cpu, received = None, "", ""
                if mode == "publish":
                    publisher = LivePublisher(robot, log=log, rate_hz=args.publish_rate, subscriptions=len(TOPICS))
                    pid = publisher.pid
                    before = cpu_s(pid)
                try:
                    start = time.monotonic()
                    s = run_session(robot, traj, options, log)
                    elapsed = time.monotonic() - start
                finally:
                    if publisher is not None:
                        used = cpu_s(pid) - before  # before close: the process is gone after it
                        published = publisher.close()
                        cpu = f"{100 * used / elapsed:.1f}%"
                        received = f"{sum(published.published.values())} sent" if published else "no summary"
                totals[mode][0] += s.overruns
                totals[mode][1] += s.cycles
                overruns = f"{s.overruns} ({100 * s.overrun_fraction:.2f}%)"
                print(f"{pair:<6}{mode:<12}{overruns:>16}{s.period_error_p99_us:>14.1f}{s.compute_p99_us:>16.1f}{cpu:>9}{received:>26}  "
                      f"{s.scheduling}; {s.stop_reason} ({s.cycles} cycles)", flush=True)  # fmt: skip
    listener.stdin.close()
    counts = json.loads(listener.stdout.readline() or "{}")
    listener.wait(30)
    print("listener received: " + ", ".join(f"{t} {n}" for t, n in counts.items()))
    print("total: " + "; ".join(f"{mode} {o} overruns in {c} cycles ({100 * o / max(c, 1):.3f}%)" for mode, (o, c) in totals.items()))
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
