"""The FR3 over FCI at 1 kHz against franky-sim (an FR3 in MuJoCo behind libfranka's protocol, in its own
process), quiet and with one core busy, beside the same moves on mbctl's own simulated FR3; then the
simulator killed mid-run.

1. Gentle quintic moves (``MOVES``, 2 s each, rest to rest) under computed torque with the bundled FR3's
   collision observer on, ``--repeat`` times each, with the machine as it is ("quiet": no load of ours)
   and with one core busy (a second process spinning). Per condition: libfranka's command success rate
   (franky-sim reports 1 always) and the backend's own count of states the loop never answered (missed
   states, per state sent), reflexes, collisions detected, the largest |tau_ext| over its threshold, the
   longest wait for a state (franky-sim's stalls), tracking RMS per joint (the mean over the runs).
2. The same moves on mbctl's own simulated FR3 (``--plant sim``: the nominal model as the truth, in its
   own process, paced at 1 kHz): tracking RMS per joint, and the ratio franky-sim / mbctl's per joint.
3. franky-sim killed (SIGKILL) 0.5 s into a run of ``mbctl run fr3 --bus franka`` (a process of its own):
   the exit code, the stop reason, the time from the kill to the run's stop (its "stop reason" line: the
   run has ended and written its log and summary) and to the process's exit, at a state timeout of 50 ms
   (the [franka] default) and of the bundled FR3's.

The load average is printed beside each block: other sessions on the machine change the figures.

Run: python benchmarks/franka.py [--repeat 3] [--skip-kill]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.franka.simulator import franky_sim_available, franky_sim_process, kill_when_logged
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.session import SessionOptions, run_session

START = np.array([0.0, -0.4, 0.0, -2.0, 0.0, 1.6, 0.8])
MOVES = {  # rad, from START
    "A": np.array([0.3, 0.2, -0.3, 0.3, 0.3, 0.3, 0.4]),
    "B": np.array([-0.4, 0.3, 0.2, -0.4, -0.3, -0.2, -0.5]),
    "C": np.array([0.5, -0.2, 0.4, 0.5, 0.5, 0.4, 0.8]),
}
DURATION_S = 2.0
NO_OVERRUN_LIMIT = OverrunPolicy(max_fraction=1.0, max_consecutive=0)  # only the robot or libfranka stops a run


def load() -> str:
    return "load %.2f %.2f %.2f" % os.getloadavg()


def spinner() -> subprocess.Popen:
    """One core busy: a process spinning until killed, at normal priority (it must not inherit a real-time one)."""
    return subprocess.Popen([sys.executable, "-c", "import os; os.sched_setscheduler(0, os.SCHED_OTHER, os.sched_param(0))\nwhile True: pass"])


def one_run(robot, move: str, plant: str, out: Path) -> dict:
    goal = START + MOVES[move]
    traj = quintic_rest_to_rest(np.array([START, goal]), [DURATION_S], 1000.0, robot.joint_names)
    options = SessionOptions(plant=plant, emulate=plant == "franka", overrun=NO_OVERRUN_LIMIT)
    summary = run_session(robot, traj, options, out)
    log = np.load(out)
    given = robot.spec.control.collision.threshold  # the FR3's are given per joint
    thresholds = np.array([given[n] for n in robot.actuated_names]) if isinstance(given, dict) else np.full(7, given)
    over = float(np.max(np.abs(np.nan_to_num(log["tau_ext"][50:])) / thresholds))  # past the observer's first 50 ms
    report = summary.plant_timing
    return {
        "stop": summary.stop_reason,
        "rms": np.array([summary.tracking_rms[n] for n in robot.actuated_names]),
        "collision": bool(summary.collision),
        "reflex": "reflex" in summary.stop_reason.lower() or "ControlException" in summary.stop_reason,
        "over": over,
        "missed": report.get("missed_samples", 0.0),
        "states": report.get("samples", 0.0) + report.get("missed_samples", 0.0),
        "rate_min": report.get("control_command_success_rate_min", float("nan")),
        "read_max_ms": summary.phases_us["read"]["max"] / 1e3,
    }


def moves(robot, plant: str, repeat: int, tmp: Path) -> list[dict]:
    return [one_run(robot, move, plant, tmp / f"{plant}-{move}-{k}.npz") for move in MOVES for k in range(repeat)]


def print_block(title: str, runs: list[dict], names) -> np.ndarray:
    rms = np.mean([r["rms"] for r in runs], axis=0)
    states = sum(r["states"] for r in runs)
    missed = sum(r["missed"] for r in runs)
    print(f"\n{title} ({len(runs)} runs; {load()})")
    print(f"  completed {sum(r['stop'].startswith('completed') for r in runs)}/{len(runs)}; reflexes {sum(r['reflex'] for r in runs)}; "
          f"collisions detected {sum(r['collision'] for r in runs)}; largest |tau_ext|/threshold {max(r['over'] for r in runs):.2f}")
    if states:
        print(f"  libfranka's success rate (lowest) {min(r['rate_min'] for r in runs):.4f}; states missed {missed:.0f} of {states:.0f} "
              f"({100 * missed / states:.3f} %); longest wait for a state {max(r['read_max_ms'] for r in runs):.1f} ms")
    for r in runs:
        if not r["stop"].startswith("completed") or r["collision"]:
            print(f"  stop: {r['stop']}")
    print("  tracking rms (rad): " + ", ".join(f"{n.split('_')[-1]} {v:.2e}" for n, v in zip(names, rms)))
    return rms


def killed(robot, timeout_ms: float | None, tmp: Path) -> dict:
    """mbctl run against franky-sim, which is killed after 500 logged cycles: exit code, reason, kill-to-exit time."""
    traj = quintic_rest_to_rest(np.array([START, START + MOVES["A"]]), [4.0], 1000.0, robot.joint_names)
    write_trajectory(tmp / "kill.csv", traj)
    text = Path(robot.source).read_text().replace('urdf = "fr3/fr3.urdf"', f'urdf = "{Path(robot.source).parent / "fr3" / "fr3.urdf"}"')
    if timeout_ms is not None:
        lines = [line for line in text.splitlines() if not line.startswith("state_timeout_ms")]
        at = lines.index("[franka]") + 1  # in its table, wherever the file's last table is
        text = "\n".join([*lines[:at], f"state_timeout_ms = {timeout_ms:g}", *lines[at:]]) + "\n"
    toml = tmp / "fr3-kill.toml"
    toml.write_text(text)
    log, summary_path = tmp / "kill.npz", tmp / "kill.json"
    with franky_sim_process(START) as sim:
        killer = kill_when_logged(log, 500, sim.process.pid)
        cmd = [sys.executable, "-m", "mbctl.cli", "run", str(toml), "--bus", "franka", "--robot-ip", sim.address, "--trajectory", str(tmp / "kill.csv"),
               "--log", str(log), "--summary", str(summary_path), "--max-overrun-fraction", "1", "--max-consecutive-overruns", "0"]  # fmt: skip
        run = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        said = None
        for line in run.stdout:  # "stop reason: ..." comes once the run has stopped and its summary is written
            said = said or (time.monotonic() if line.startswith("stop reason:") else None)
        code = run.wait(timeout=120)
        exited = time.monotonic()
        if killer.poll() is None:  # the run ended before its 500th cycle: no kill
            killer.kill()
            raise SystemExit(f"the run ended before the kill (exit {code})")
        kill_at = float(killer.communicate(timeout=10)[0])
    summary = json.loads(summary_path.read_text())
    return {"code": code, "stop": summary["stop_reason"], "kill_to_stop_s": said - kill_at, "kill_to_exit_s": exited - kill_at}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=2, help="runs of each move per condition (default 2)")
    parser.add_argument("--skip-kill", action="store_true", help="leave out the killed simulator")
    args = parser.parse_args()
    reason = franky_sim_available()
    if reason:
        sys.exit(reason)
    robot = load_robot("fr3")
    names = robot.actuated_names
    print(f"FR3, {len(MOVES)} quintic moves of {DURATION_S:g} s, computed torque at 1 kHz, collision observer on ({robot.spec.control.collision.reaction}); "
          f"{os.cpu_count()} cores")  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        franky_quiet = print_block("franky-sim, quiet", moves(robot, "franka", args.repeat, tmp), names)
        busy = spinner()
        try:
            franky_busy = print_block("franky-sim, one core busy", moves(robot, "franka", args.repeat, tmp), names)
        finally:
            busy.kill()
            busy.wait()
        own = print_block("mbctl's simulated FR3 (--plant sim, paced at 1 kHz)", moves(robot, "sim", args.repeat, tmp), names)
        print("\ntracking rms ratio, franky-sim / mbctl's simulated FR3, per joint:")
        for title, rms in (("quiet", franky_quiet), ("one core busy", franky_busy)):
            print(f"  {title:14s} " + "  ".join(f"{r:6.1f}" for r in rms / own))
        if not args.skip_kill:
            print(f"\nfranky-sim killed (SIGKILL) after 500 cycles ({load()}):")
            print(f"  {'state timeout':>16s}  {'exit':>4s}  {'kill to stop':>12s}  {'kill to exit':>12s}  stop reason")
            bundled = robot.spec.franka.state_timeout_s * 1e3
            for timeout_ms in dict.fromkeys((50.0, bundled)):
                r = killed(robot, timeout_ms, tmp)
                print(f"  {timeout_ms:13.0f} ms  {r['code']:4d}  {r['kill_to_stop_s']:10.3f} s  {r['kill_to_exit_s']:10.3f} s  {r['stop']}")


if __name__ == "__main__":
    main()
