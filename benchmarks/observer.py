"""Sensing, estimation and collision detection: chatter before/after, the Panda log, a push, the cost.

1. Chatter: default-settings lock-step runs of every bundled robot ``mbctl run`` drives with a
   torque law (computed torque), "before" with the settings of the tree before estimation
   (joint-side encoders of 4096 counts on the UR5, exact sensing on the Pandas, the plant's
   velocity used as is) and "after" with the defaults. Per joint: RMS torque step per cycle,
   largest step, saturated commands, tracking RMS; and the chatter warnings.
2. The real Panda log (``data/panda-excitation/train.csv``): the model identified on its first
   half (``mbctl identify dynamics panda_arm``), the observer on its second half at the
   thresholds of ``[control.collision]``: peaks against thresholds; then a 5 N·m bump added to
   each joint's measured torque for 0.1 s in turn: detection latency on that joint.
3. Closed loop: a 20 N push on the UR5's forearm for 0.2 s, in motion and at rest: detection time.
4. Cost: the compiled estimation step alone (p50/p99 per call, UR5 and Panda), and the loop's
   compute p99 with and without the estimate step, in the same run (lock-step, 3 s of UR5).

Targets (issue 39): RMS step <= 1 N·m per cycle (wrists 0.3), nothing saturated, tracking not
worse; no detection on the Panda's free motion, a bump found on its joint within 20 ms; the push
within 10 ms, the joint named; estimation + observer <= 20 us p99 per cycle.

Run: python benchmarks/observer.py [--skip chatter,panda,push,cost]
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import io
import json
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from mbctl.cli import main
from mbctl.ctrl.controllers import build_controller
from mbctl.ctrl.estimation.estimator import StateEstimator
from mbctl.ctrl.tracking import TrackingController
from mbctl.ctrl.trajectory import quintic_rest_to_rest, write_trajectory
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.estimate import LoopEstimator
from mbctl.hardware.interface import JointState
from mbctl.hardware.loop import LoopConfig, SafetyLimits, log_columns, run_loop
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.sim import SimPlant, truth_model

ROOT = Path(__file__).resolve().parent.parent
PANDA_LOG = ROOT / "data" / "panda-excitation" / "train.csv"
PANDA_Q = [0.0, -0.5, 0.0, -2.0, 0.0, 1.6, 0.8]
MOVES = {
    "ur5": ([[0, -1.2, 1.4, -1.6, -1.57, 0], [0.4, -0.9, 1.1, -1.3, -1.2, 0.3]], [1.2]),
    "scara": ([[0, 0, 0, 0], [0.8, 1.2, -0.6, 0.05], [-0.5, 0.9, 1.0, -0.05], [0, 0, 0, 0]], [1.5, 1.5, 1.5]),  # mbctl demo's
    "panda": ([PANDA_Q + [0.02, 0.02], [0.4, -0.2, 0.3, -1.7, 0.3, 1.9, 1.1, 0.02, 0.02]], [1.2]),  # fingers held
    "panda_arm": ([PANDA_Q, [0.4, -0.2, 0.3, -1.7, 0.3, 1.9, 1.1]], [1.2]),
    "panda_arm_identified": ([PANDA_Q, [0.4, -0.2, 0.3, -1.7, 0.3, 1.9, 1.1]], [1.2]),
}


def cli(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main([str(a) for a in args])
    return code, out.getvalue(), err.getvalue()


def before_settings(name: str, text: str) -> str:
    """The robot's TOML with the landed tree's sensing and the plant's velocity used as is (no detection)."""
    text = re.sub(r"\[control\.collision\][^\[]*", "", text)
    if "velocity = \"model\"" in text:
        text = text.replace('velocity = "model"', 'velocity = "measured"', 1)
    elif "\n[control]\n" not in text:
        text = re.sub(r"^\[control\.", '[control]\nvelocity = "measured"\n[control.', text, count=1, flags=re.M)
    if name.startswith("panda"):
        text = re.sub(r"encoder_counts = 524288.*", "encoder_counts = 0", text).replace('velocity = "difference"', 'velocity = "exact"')
    if name == "ur5":
        text += "\n[plant]\nencoder_counts = 4096\n"
    return text


def chatter(tmp: Path) -> None:
    print("1. chatter: RMS torque step per cycle (N·m, N), largest step, saturated, tracking RMS (mrad, mm)")
    (tmp / "scara.urdf").write_text((ROOT / "configs" / "scara.urdf").read_text())
    for name, (waypoints, durations) in MOVES.items():
        robot = load_robot(name)
        traj = tmp / f"{name}.csv"
        write_trajectory(traj, quintic_rest_to_rest(np.array(waypoints, dtype=float), durations, 1000.0, robot.joint_names))
        text = robot.source.read_text()
        for label, body in (("before", before_settings(name, text)), ("after", text)):
            config = tmp / f"{name}_{label}.toml"
            config.write_text(body)
            for stale in (tmp / "run.npz", tmp / "run.json"):
                stale.unlink(missing_ok=True)
            code, out, err = cli("run", config, "--trajectory", traj, "--lockstep", "--log", tmp / "run.npz", "--summary", tmp / "run.json")
            if code == 2:
                print(f"  {name:22s} {label:6s} refused: {err.strip()}")
                continue
            s = json.loads((tmp / "run.json").read_text())
            log = np.load(tmp / "run.npz")
            steps = np.abs(np.diff(log["tau"][1:], axis=0)).max(axis=0)
            rms = ", ".join(f"{v:.3g}" for v in s["torque_step_rms"].values())
            tracking = ", ".join(f"{1e3 * v:.3g}" for v in s["tracking_rms"].values())
            print(f"  {name:22s} {label:6s} step rms [{rms}]  max [{', '.join(f'{v:.3g}' for v in steps)}]  saturated {s['saturated']}  "
                  f"tracking [{tracking}]  warnings {len(s['chatter'])}  ({s['stop_reason'][:60]})")
    print("  xl330-pendulum: position mode only (the servo closes the loop; no torque command to chatter)")


def panda(tmp: Path) -> None:
    print("2. the real Panda log: model identified on the first half, observer on the second")
    rows = list(csv.reader(PANDA_LOG.open()))
    header, body = rows[0], rows[1:]
    t = np.array([float(r[0]) for r in body])
    half = t[-1] / 2
    parts = {"first": [r for r, ti in zip(body, t) if ti < half], "second": [r for r, ti in zip(body, t) if ti >= half]}
    for part, data in parts.items():
        with (tmp / f"{part}.csv").open("w", newline="") as f:
            csv.writer(f).writerows([header, *data])
    start = time.perf_counter()
    code, _, err = cli("identify", "dynamics", "panda_arm", tmp / "first.csv", "--write-back", tmp / "half.toml")
    assert code == 0, err
    print(f"  identified in {time.perf_counter() - start:.1f} s")
    code, out, _ = cli("observe", tmp / "half.toml", tmp / "second.csv", "--out", tmp / "free.csv")
    table = np.loadtxt(tmp / "free.csv", delimiter=",", skiprows=1)
    robot = load_robot(tmp / "half.toml")
    peaks = np.abs(table[table[:, 0] > table[0, 0] + 0.2, 1:8]).max(axis=0)
    thresholds = out.splitlines()[0].split("thresholds ")[1]
    print(f"  free motion (second half): {'no detection' if 'no detection' in out else 'DETECTIONS'}; peak |tau_ext| "
          + ", ".join(f"{v:.2f}" for v in peaks) + f" N·m; thresholds {thresholds}")
    t0, bump = 9.0, 5.0
    for k, joint in enumerate(robot.joint_names):
        column = header.index(f"tau.{joint}")
        bumped = [list(r) for r in parts["second"]]
        for r in bumped:
            if t0 <= float(r[0]) < t0 + 0.1:
                r[column] = repr(float(r[column]) + bump)
        with (tmp / "bump.csv").open("w", newline="") as f:
            csv.writer(f).writerows([header, *bumped])
        _, out, _ = cli("observe", tmp / "half.toml", tmp / "bump.csv", "--out", tmp / "bump_obs.csv")
        hits = [line for line in out.splitlines() if line.startswith("detected at")]
        first = [h for h in hits if f" on {joint}:" in h]
        when = f"{1e3 * (float(first[0].split('t = ')[1].split(' s')[0]) - t0):.1f} ms" if first else "not detected"
        others = [h.split(" on ")[1].split(":")[0] for h in hits if f" on {joint}:" not in h]
        print(f"  {bump:g} N·m bump on {joint}: {when}" + (f"; also on {', '.join(others)}" if others else ""))


def push(tmp: Path) -> None:
    print("3. a 20 N push on the UR5's forearm (wrist_1_link origin, -z) for 0.2 s, reaction stop")
    robot = load_robot("ur5")
    q0 = np.array(MOVES["ur5"][0][0])
    for label, end, start_s in (("in motion", np.array(MOVES["ur5"][0][1]), 0.5), ("at rest", q0, 0.3)):
        write_trajectory(tmp / "push.csv", quintic_rest_to_rest(np.array([q0, end]), [1.2], 1000.0, robot.joint_names))
        text = robot.source.read_text() + f'\n[plant.contact]\nframe = "wrist_1_link"\nforce = [0.0, 0.0, -20.0]\nstart = {start_s}\nduration = 0.2\n'
        (tmp / "push.toml").write_text(text)
        cli("run", tmp / "push.toml", "--trajectory", tmp / "push.csv", "--lockstep", "--log", tmp / "push.npz", "--summary", tmp / "push.json")
        reason = json.loads((tmp / "push.json").read_text())["stop_reason"]
        at = float(reason.split("at t = ")[1].split(" s")[0]) if "at t = " in reason else float("nan")
        print(f"  {label}: detected {1e3 * (at - start_s):.0f} ms after the push began: {reason}")


def cost(tmp: Path) -> None:
    print("4. cost of the estimation step (velocity observer + momentum observer, compiled)")
    for name in ("ur5", "panda_arm"):
        robot = load_robot(name)
        est = StateEstimator(robot, 1e-3)
        q = np.array(MOVES[name][0][0], dtype=float)
        est.reset(0.0, q, np.zeros(robot.nv))
        times = np.empty(20000)
        tau = np.zeros(robot.nv)
        for k in range(len(times)):
            a = time.perf_counter()
            est.update((k + 1) * 1e-3, q, np.zeros(robot.nv), tau)
            times[k] = time.perf_counter() - a
        us = times[1000:] * 1e6
        loop_step = LoopEstimator(robot, 1e-3)
        state = JointState(t=0.0, q=q, dq=np.zeros(robot.nv), effort=np.zeros(robot.nv))
        loop_step.reset(0.0, state)
        for k in range(len(times)):
            a = time.perf_counter()
            loop_step((k + 1) * 1e-3, state, tau)
            loop_step.detection((k + 1) * 1e-3)
            times[k] = time.perf_counter() - a
        loop_us = times[1000:] * 1e6
        print(f"  {name}: StateEstimator.update p50 {np.percentile(us, 50):.1f} us, p99 {np.percentile(us, 99):.1f} us; "
              f"the loop's estimate step (with the detection check) p50 {np.percentile(loop_us, 50):.1f} us, p99 {np.percentile(loop_us, 99):.1f} us")
    robot = load_robot("ur5")
    q0, end = (np.array(w, dtype=float) for w in MOVES["ur5"][0])
    traj = quintic_rest_to_rest(np.array([q0, end, q0]), [1.5, 1.5], 1000.0, robot.joint_names)
    law = build_controller(robot, "computed-torque")
    truth, plant = truth_model(robot)
    results = {}
    for repeat in range(3):
        for label in ("without", "with"):
            estimator = LoopEstimator(robot, 1e-3) if label == "with" else None
            tracking = TrackingController(law, traj)
            backend = SimPlant(truth, 1e-3, plant, q0=q0)
            log = RunLog(tmp / "cost.npz", log_columns(backend.joint_names, estimation=estimator is not None))
            with backend:
                s = run_loop(backend, tracking, SafetyLimits.of(robot), LoopConfig(duration_s=3.0, paced=False), log, tracking.reference, estimator=estimator)
            results.setdefault(label, []).append(s.phases_us["control"])
    for label, spreads in results.items():
        print(f"  loop control phase {label} the estimate step: " + "; ".join(f"p50 {p['p50']:.1f} us, p99 {p['p99']:.1f} us" for p in spreads))
    added = [w["p99"] - wo["p99"] for w, wo in zip(results["with"], results["without"])]
    added50 = [w["p50"] - wo["p50"] for w, wo in zip(results["with"], results["without"])]
    print(f"  added by estimation (pairs run one after the other): p50 {', '.join(f'{a:.1f}' for a in added50)} us, "
          f"p99 {', '.join(f'{a:.1f}' for a in added)} us; median p99 {np.median(added):.1f} us (target p99 <= 20 us)")


def run() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip", default="", help="comma-separated parts to skip: chatter, panda, push, cost")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, part in (("chatter", chatter), ("panda", panda), ("push", push), ("cost", cost)):
            if name not in skip:
                part(tmp)


if __name__ == "__main__":
    run()
