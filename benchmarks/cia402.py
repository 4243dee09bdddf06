"""Cost of the CANopen exchange for six CiA 402 drives, and paced runs against the emulator.

1. The loop's own cost of one cycle's exchange (``Cia402Bus.read`` + ``write``: one SYNC and
   six RPDOs packed and sent, twelve TPDOs received and decoded, statuswords and heartbeats
   checked, units converted), on an in-memory python-can bus that answers each SYNC with the
   twelve TPDOs at once: the emulator's time and the transport's latency are excluded, the
   python-can calls are not. Same-run reference: the bare python-can calls of a cycle (7 sends,
   12 receives) on the same bus, no packing or decoding. The cost of a send on python-can's
   ``virtual`` bus is printed too (a real interface's send is a system call instead).
   Target: p99 < 250 µs.
2. Paced runs of the UR5 (computed torque, six drives, the shipped collision observer on) against
   the drive emulator in this process (python-can's ``virtual`` bus) and in its own (``mbctl
   emulate --bus canopen`` over ``udp_multicast`` on loopback), at a few rates, a few times each:
   overruns, the largest observed |tau_ext| over its threshold (a false detection stops the run),
   stop reason. Reports the highest rate that completed below 0.5 % overruns with no detection.

Run: python benchmarks/cia402.py (not canopen.py: that name would shadow the canopen package) [--seconds 3] [--rates 250,500,1000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import collections
import os
import tempfile
import time
from pathlib import Path

import can
import numpy as np

from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.cia402.bus import Cia402Bus
from mbctl.hardware.cia402.objects import TPDO1, TPDO2
from mbctl.hardware.cia402.units import canopen_config
from mbctl.hardware.estimate import LoopEstimator
from mbctl.hardware.interface import HardwareError, JointCommand
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.session import SessionOptions, run_session


class AnsweringBus(can.BusABC):
    """In memory: every SYNC sent queues the drives' TPDOs (operation enabled, heartbeat each SYNC)."""

    def __init__(self, node_ids, **kwargs):
        super().__init__(channel="memory", **kwargs)
        self.queue: collections.deque[can.Message] = collections.deque()
        self.answer = []
        for i in node_ids:
            self.answer.append(can.Message(arbitration_id=0x700 + i, data=bytes([5]), is_extended_id=False))
            self.answer.append(can.Message(arbitration_id=0x180 + i, data=TPDO1.pack(0x0237, 123456, -12), is_extended_id=False))
            self.answer.append(can.Message(arbitration_id=0x280 + i, data=TPDO2.pack(-789), is_extended_id=False))

    def send(self, msg, timeout=None):
        if msg.arbitration_id == 0x80:
            self.queue.extend(self.answer)

    def _recv_internal(self, timeout):
        return (self.queue.popleft() if self.queue else None), False



def percentiles(samples_s) -> tuple[float, float]:
    us = np.array(samples_s) * 1e6
    return float(np.percentile(us, 50)), float(np.percentile(us, 99))


def exchange_cost(cycles: int) -> None:
    robot = load_robot("ur5")
    config = canopen_config(robot)
    ids = [int(i) for i in config.units.node_ids]
    bus = Cia402Bus(robot.actuated_names, config, cycle_s=1e-3, pdo_timeout_s=0.01, clock=time.monotonic)
    bus._bus = AnsweringBus(ids)  # the exchange only: no start-up, no emulator
    bus._operational = bus._enabled = True
    bus._controlword = 0x0F
    tau = np.array([10.0, -20.0, 5.0, 1.0, -1.0, 0.5])
    command = JointCommand.torque(tau)
    raw = AnsweringBus(ids)
    sync = can.Message(arbitration_id=0x80, data=b"", is_extended_id=False)
    rpdo = can.Message(arbitration_id=0x201, data=bytearray(4), is_extended_id=False)
    driver, reference = [], []
    for _ in range(cycles):
        t0 = time.perf_counter()
        bus.read()
        bus.write(command)
        t1 = time.perf_counter()
        raw.send(sync)
        while raw.recv(0.0) is not None:
            pass
        for _ in ids:
            raw.send(rpdo)
        t2 = time.perf_counter()
        driver.append(t1 - t0)
        reference.append(t2 - t1)
    virtual_a = can.Bus(interface="virtual", channel="bench-canopen")
    virtual_b = can.Bus(interface="virtual", channel="bench-canopen")
    sends = []
    for _ in range(cycles):
        t0 = time.perf_counter()
        virtual_a.send(rpdo)
        sends.append(time.perf_counter() - t0)
        virtual_b.recv(0.0)
    for b in (virtual_a, virtual_b, raw, bus._bus):
        b.shutdown()
    d50, d99 = percentiles(driver)
    r50, r99 = percentiles(reference)
    s50, s99 = percentiles(sends)
    print(f"1. one cycle's exchange with 6 drives ({cycles} cycles; 1 SYNC + 6 RPDOs out, 18 frames in)")
    print(f"   driver read + write           p50 {d50:6.1f} us   p99 {d99:6.1f} us   (target p99 < 250 us: {'met' if d99 < 250 else 'MISSED'})")
    print(f"   bare python-can calls (ref.)  p50 {r50:6.1f} us   p99 {r99:6.1f} us   driver / reference: {d50 / r50:.1f}x (p50)")
    print(f"   one send on the virtual bus   p50 {s50:6.1f} us   p99 {s99:6.1f} us   (7 per cycle on that bus: +{7 * s50:.0f} us p50)")


def paced_runs(seconds: float, rates: list[float], repeat: int) -> None:
    """Paced runs with the shipped collision observer on, against the emulator in this process (virtual
    bus) and in its own (udp_multicast): completion, overruns, and the largest |tau_ext| against the
    threshold (a false detection stops the run)."""
    robot = load_robot("ur5")
    q = np.array([[0.0, -1.2, 1.4, -1.6, -1.57, 0.0], [0.4, -0.9, 1.1, -1.3, -1.2, 0.3], [0.0, -1.2, 1.4, -1.6, -1.57, 0.0]])
    threshold = LoopEstimator(robot, 1e-3).estimator.settings.threshold
    print(f"\n2. paced runs, UR5 computed torque, shipped observer (thresholds {', '.join(f'{x:.3g}' for x in threshold)} N·m), {seconds:g} s each, {repeat} of each")
    best = {}
    with tempfile.TemporaryDirectory() as tmp:
        for interface in ("virtual", "udp_multicast"):
            for rate in rates:
                for k in range(repeat):
                    traj = quintic_rest_to_rest(q, [seconds / 2] * 2, rate, robot.joint_names)
                    options = SessionOptions(plant="canopen", rate_hz=rate, duration_s=None, emulate=True, interface=interface,
                                             overrun=OverrunPolicy(window=100, max_fraction=1.0, max_consecutive=0), compiled=True)
                    log = Path(tmp) / f"run{rate:g}.npz"
                    try:
                        s = run_session(robot, traj, options, log)
                    except HardwareError as exc:  # the start check's read, before the loop
                        print(f"   {interface:13s} {rate:6.0f} Hz: did not start: {exc}")
                        continue
                    peak = float(np.nanmax(np.abs(np.load(log)["tau_ext"]) / threshold))
                    fraction = s.overrun_fraction
                    if s.completed and fraction < 0.005 and not s.collision:
                        best[interface] = max(best.get(interface, 0.0), rate)
                    print(f"   {interface:13s} {rate:6.0f} Hz: {s.cycles:5d} cycles, overruns {s.overruns} ({100 * fraction:.2f} %), read p50/p99 "
                          f"{s.phases_us['read']['p50']:.0f}/{s.phases_us['read']['p99']:.0f} us, max |tau_ext|/threshold {peak:.2f}; stop: {s.stop_reason}")
    for interface in ("virtual", "udp_multicast"):
        print(f"   {interface}: highest rate completed below 0.5 % overruns, no detection: {f'{best[interface]:g} Hz' if interface in best else 'none of those tried'}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rates", default="250,500,750,1000")
    parser.add_argument("--cycles", type=int, default=5000)
    parser.add_argument("--repeat", type=int, default=3, help="paced runs per interface and rate")
    args = parser.parse_args()
    print(f"CANopen exchange; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} (1 min), {os.getloadavg()[1]:.2f} (5 min)\n")
    exchange_cost(args.cycles)
    paced_runs(args.seconds, [float(r) for r in args.rates.split(",")], args.repeat)
    print(f"\nload average at the end {os.getloadavg()[0]:.2f} (1 min)")


if __name__ == "__main__":
    main()
