"""UR5 computed torque over ROS 2, paced, against robots that keep their own time: the real-timing
``mbctl emulate ur5 --bus ros2 --rate R`` at 100, 250 and 500 Hz and the independent node of
tests/ros2_realtime_robot.py at 500 Hz (its own integrator, clock and controller manager), each in a
process of its own; mbctl's loop at the robot's rate.

Per robot and rate, ``--runs`` paced runs of a gentle 2 s quintic move (out and back), the second half of
them with a second process busy on one core; the shipped ur5.toml plus a ``[ros2]`` table with the
robot's holding controller (every run starts with the switch to the effort controller and ends with the
hand-over), its collision observer's reaction set to "none" so that every run goes to its end and is
measured whole:

- false detections (runs whose observer passed its threshold: the shipped reaction "stop" would have
  stopped them), false stops (those and the runs that stopped for another reason: a stale joint state,
  a limit), the largest ``|tau_ext| / threshold`` of the move (the observer's margin; over 1 is a
  detection);
- tracking RMS per joint (median over the runs that went to their end) and its ratio to the same move on the simulated plant
  paced at the same rate (its own process, measured in this run);
- the command latency: sent by mbctl -> received by the emulator, and -> applied at its next update
  (host CLOCK_MONOTONIC on both sides; the independent node does not time commands);
- a push of 20 N·m on the shoulder lift for 50 ms, 1 s into the robot's motion: the delay from its
  start to the first cycle whose ``|tau_ext|`` passes the threshold on that joint (from the log; a
  false detection before the push is reported as such);
- the robot killed 1 s into the move: the time from the kill to the exit of ``mbctl run`` (a process of
  its own), and the stop reason.

Run: python benchmarks/ros2_live.py [--runs 4] [--rates 100,250,500] [--no-node]
The figures depend on the machine's load: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")

from mbctl.ctrl.trajectory import read_trajectory  # noqa: E402
from mbctl.dynamics.model.robot import load_robot  # noqa: E402
from mbctl.hardware.overrun import OverrunPolicy  # noqa: E402
from mbctl.hardware.ros2.session import emulated_domain  # noqa: E402
from mbctl.hardware.session import SessionOptions, run_session  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
START = "0.1,-1.3,1.5,-1.7,-1.5,0.2"
WAYPOINTS = f"{START}; -0.3,-0.8,1.0,-1.2,-1.1,0.6; {START}"
LENIENT = OverrunPolicy(window=100, max_fraction=1.0, max_consecutive=0)  # measure overruns, do not stop on them
PUSH = "shoulder_lift_joint:20:1.0:0.05"


def robot_command(kind: str, rate: float, folder: Path, extra: list[str]) -> tuple[list[str], str]:
    """The robot's command line and the word of its first line that says it serves."""
    if kind == "node":
        return [sys.executable, str(ROOT / "tests" / "ros2_realtime_robot.py"), "--rate", f"{rate:g}", "--q0", START, "--priority", "79", *extra], "robot ready"
    return [sys.executable, "-m", "mbctl.cli", "emulate", str(folder / "emu.toml"), "--bus", "ros2", "--rate", f"{rate:g}", "--q0", START,
            "--realtime-priority", "79", *extra], "on ROS domain"


class Robot:
    """A robot process on a domain of its own (a context manager); ``extra``: more options."""

    def __init__(self, kind: str, rate: float, folder: Path, extra: list[str] = ()):
        self.cmd, self.ready = robot_command(kind, rate, folder, list(extra))

    def __enter__(self) -> Robot:
        self._domain = emulated_domain()
        os.environ["ROS_DOMAIN_ID"] = str(self._domain.__enter__())
        self.proc = subprocess.Popen(self.cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = self.proc.stdout.readline()
        assert self.ready in line, line
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(2)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._domain.__exit__(None, None, None)


def busy_core() -> subprocess.Popen:
    """A second process spinning on CPU 1."""
    return subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {1})\nwhile True: pass"])


def one_run(robot, traj, folder: Path, plant: str, rate: float, k: int) -> dict:
    """One run; its margin is the summary's largest |tau_ext| / threshold (the adaptive threshold's, the one detections use)."""
    options = SessionOptions(plant=plant, rate_hz=rate, overrun=LENIENT)
    log = folder / f"{plant}-{rate:g}-{k}.npz"
    s = run_session(robot, traj, options, log)
    return {"summary": s, "margin": s.tau_ext_ratio_max, "log": log}


def series(kind: str, rate: float, robot, traj, folder: Path, runs: int) -> list[dict]:
    out = []
    for k in range(runs):
        busy = busy_core() if k >= runs // 2 else None
        stats = folder / f"stats-{kind}-{rate:g}-{k}.json"
        try:
            with Robot(kind, rate, folder, ["--stats", str(stats)]):
                r = one_run(robot, traj, folder, "ros2", rate, k)
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        r["busy"] = busy is not None
        if stats.exists():
            report = json.loads(stats.read_text())
            r["received_us"], r["applied_us"] = report.get("latencies_us", []), report.get("apply_delays_us", [])
            r["robot"] = f"late max {1e3 * report.get('max_late_s', report.get('late_max_s', 0.0)):.1f} ms, slips {report.get('slips', 0)}"
        out.append(r)
        s = r["summary"]
        print(f"  {kind} {rate:g} Hz run {k}{' (busy core)' if r['busy'] else ''}: {s.stop_reason[:90]}; margin {r['margin']:.2f}; {r.get('robot', '')}", flush=True)
    return out


def pushed(kind: str, rate: float, robot, traj, folder: Path) -> str:
    with Robot(kind, rate, folder, ["--push", PUSH]):
        r = one_run(robot, traj, folder, "ros2", rate, 99)
    joint = PUSH.split(":")[0]
    found = re.search(r"tau_ext\.(\S+) = \S+ beyond the threshold \S+ at t = (\S+) s", r["summary"].collision)
    if not found:
        return f"not detected ({r['summary'].stop_reason[:50]})"
    at = float(found.group(2))
    if at < 1.0 or found.group(1) != joint:
        return f"a false detection first ({r['summary'].collision[:60]})"
    return f"{1e3 * (at - 1.0):.0f} ms"


def killed(kind: str, rate: float, folder: Path) -> str:
    """The robot killed 1 s into the move; mbctl run in a process of its own."""
    config = folder / ("quiet-node.toml" if kind == "node" else "quiet-emu.toml")
    with Robot(kind, rate, folder, ["--die-after", "1.0"]) as r:
        run = subprocess.Popen([sys.executable, "-m", "mbctl.cli", "run", str(config), "--trajectory", str(folder / "t.csv"), "--bus", "ros2",
                                "--rate", f"{rate:g}", "--log", str(folder / "k.npz"), "--summary", str(folder / "k.json")], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
        while r.proc.poll() is None and run.poll() is None:
            time.sleep(0.0005)
        gone = time.monotonic()
        out = run.communicate()[0]
        exit_s = time.monotonic() - gone
        if r.proc.poll() is None:
            return f"the run ended before the kill ({next((ln for ln in out.splitlines() if ln.startswith('stop reason')), '?')[:70]})"
    reason = next((line for line in out.splitlines() if line.startswith("stop reason")), "?")
    age = re.search(r"no new JointState for (\d+) ms \(timeout (\d+) ms\)", reason)
    return f"{1e3 * exit_s:.0f} ms (stale after {age.group(1)} ms, timeout {age.group(2)} ms)" if age else f"{1e3 * exit_s:.0f} ms ({reason[:70]})"


def rms_by_joint(results: list[dict], names: tuple[str, ...]) -> np.ndarray:
    """The median over the runs that went to their end of each joint's tracking RMS (rad)."""
    done = [r["summary"].tracking_rms for r in results if r["summary"].tracking_rms and r["summary"].stop_reason.startswith("completed")]
    return np.array([np.median([d[n] for d in done]) for n in names]) if done else np.full(len(names), np.nan)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4)
    parser.add_argument("--rates", default="100,250,500")
    parser.add_argument("--no-node", action="store_true", help="skip the independent node")
    args = parser.parse_args()
    rates = [float(x) for x in args.rates.split(",")]
    sys.path.insert(0, str(ROOT / "tests"))
    from ros2_realtime_robot import TOML

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        shipped = load_robot("ur5").source.read_text()
        (folder / "emu.toml").write_text(shipped + '\n[ros2]\nholding_controller = "joint_trajectory_controller"\n')
        (folder / "ur5.toml").write_text(shipped + "\n" + TOML + "\n")
        for name in ("emu", "ur5"):
            quiet = (folder / f"{name}.toml").read_text().replace('reaction = "stop"', 'reaction = "none"')
            (folder / f"quiet-{'node' if name == 'ur5' else 'emu'}.toml").write_text(quiet)
        emu_robot, node_robot = load_robot(folder / "quiet-emu.toml"), load_robot(folder / "quiet-node.toml")
        from mbctl.cli import main as cli

        cli(["trajectory", "quintic", "ur5", "--waypoints", WAYPOINTS, "--durations", "1,1", "--out", str(folder / "t.csv")])
        traj = read_trajectory(folder / "t.csv", emu_robot.joint_names)
        names = emu_robot.actuated_names
        print(f"UR5 computed torque, {traj.duration:g} s paced; {args.runs} runs per robot (half with a busy core); load {os.getloadavg()[0]:.2f}", flush=True)
        table = []
        for kind, rate in [("emulator", r) for r in rates] + ([] if args.no_node else [("node", 500.0)]):
            robot = node_robot if kind == "node" else emu_robot
            sims = [one_run(emu_robot, traj, folder, "sim", rate, k) for k in range(2)]
            results = series(kind, rate, robot, traj, folder, args.runs)
            ratio = rms_by_joint(results, names) / rms_by_joint(sims, names)
            detections = sum("collision" in r["summary"].stop_reason for r in results)
            stops = sum("collision" in r["summary"].stop_reason or not r["summary"].stop_reason.startswith("completed") for r in results)
            received = np.concatenate([r.get("received_us", []) for r in results] + [[]])
            applied = np.concatenate([r.get("applied_us", []) for r in results] + [[]])
            latency = (f"p50 {np.percentile(received, 50):.0f} / p99 {np.percentile(received, 99):.0f} us received; "
                       f"p50 {np.percentile(applied, 50):.0f} / p99 {np.percentile(applied, 99):.0f} us applied") if received.size and applied.size else "-"
            push, kill = pushed(kind, rate, robot, traj, folder), killed(kind, rate, folder)
            table.append((kind, rate, stops, detections, max(r["margin"] for r in results), rms_by_joint(results, names), ratio, latency, push, kill, os.getloadavg()[0]))
        print()
        print("| robot | rate | false stops | false detections | max abs(tau_ext)/threshold | tracking RMS per joint, mrad (x the simulated plant's) | command latency | push detected after | killed: exit after the kill | load |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for kind, rate, stops, detections, worst, rms, ratio, latency, push, kill, load in table:
            joints = ", ".join(f"{1e3 * v:.2f} ({x:.1f}x)" for v, x in zip(rms, ratio))
            print(f"| {kind} | {rate:g} Hz | {stops} of {args.runs} | {detections} of {args.runs} | {worst:.2f} | {joints} | {latency} | {push} | {kill} | {load:.1f} |")
        print(f"joints: {', '.join(names)}; load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
