"""``mbctl commission`` on a UR5 whose truth differs from its model: the issue's targets (issue 47).

The arm: ``configs/ur5.toml`` carrying a 3 kg tool its model lacks (a point mass 5 cm out on
``tool0``) with every joint's friction 1.5 to 2 times the model's (the ``[plant]`` table below).
The command is given the nominal UR5 and the start pose with the upper arm upright, and sweeps with
its defaults at every rate (the UR5's rotor inertias hold wrist 3 under the default 10 Hz loop; the
URDF's 0.017 kg m² alone stuck and slipped there and needed 30 Hz; at 250 Hz 15.9 Hz, the most a
4 ms loop holds, and 16 speeds).

Backends:

- ``lockstep`` (default): the simulated plant in lock-step; the robot file holds the ``[plant]``
  (the simulated plant is built from the file the command reads, but nothing else of the command
  reads ``[plant]``);
- ``canopen-lockstep``: the CiA 402 drives' protocol through the real driver, against the emulator
  of the arm file in this process (a virtual bus), in lock-step;
- ``ros2-lockstep``: ``mbctl emulate --bus ros2`` in its own process (JointState and forward command
  topics, ``/clock``), stepping once per command (needs ``pip install -e ".[ros2]"``);
- ``canopen``: ``mbctl emulate ARM.toml --bus canopen --interface udp_multicast`` in its own process,
  serving the arm file, and the command on the *nominal* ``configs/ur5.toml`` over the bus, paced
  (``--bus canopen --interface udp_multicast``, 250 Hz by default; the emulator serves under
  ``SCHED_FIFO`` 79, one below the loop, where the OS grants it): nothing but the bus reaches the
  command;
- ``canopen-process-lockstep``: the same, in lock-step (the emulator steps its plant once per SYNC,
  ``--lockstep-period``);
- ``sim``: the simulated plant paced, in its own process on its own clock (a command acts from its next tick);
- ``ros2``: ``mbctl emulate ARM.toml --bus ros2 --rate R`` in its own process, a robot that keeps its own
  time (its own rate, stamps at measurement, the latest command at its update, the torque it applied as
  ``effort``), and the command on the nominal UR5 (plus a ``[ros2]`` table naming the emulator's holding
  controller) over ROS 2, paced at the robot's rate: every run starts with the switch to the effort
  controller and ends with the hand-over.

Printed: per joint the torque prediction RMS on the validation run (nominal, identified, ratio), the
computed-torque tracking RMS (nominal, identified, ratio), the friction fitted against the truth, the
wall time and the arm time (what a user waits for on hardware). Targets: torque prediction at most a
tenth of the nominal's and tracking at least 3 times better, every joint.

Run: python benchmarks/commission.py [--backend lockstep|canopen-lockstep|ros2-lockstep|canopen|canopen-process-lockstep|sim|ros2] [--rate HZ] [--out DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mbctl.bundled import bundled_config
from mbctl.cli import main

SCALE = {"shoulder_pan_joint": 1.5, "shoulder_lift_joint": 1.8, "elbow_joint": 2.0, "wrist_1_joint": 1.6, "wrist_2_joint": 1.7, "wrist_3_joint": 1.9}
OPTIONS = ["--start", "shoulder_lift_joint=-1.5708"]


def arm_file(folder: Path) -> Path:
    """The UR5 with the [plant] truth: a 3 kg tool and scaled friction."""
    import tomllib

    text = bundled_config("ur5").read_text()
    joints = tomllib.loads(text)["joints"]
    lines = ["", "# the arm: a 3 kg tool the model lacks; friction 1.5 to 2 times the model's", "[plant]",
             'payload = { frame = "tool0", mass = 3.0, com = [0.0, 0.0, 0.05] }']
    for name, k in SCALE.items():
        f = dict(joints[name]["friction"])
        for key in ("fc", "fs", "fv"):
            f[key] = round(f[key] * k, 6)
        lines += [f"[plant.joints.{name}]", "friction = { " + ", ".join(f'{a} = "{b}"' if isinstance(b, str) else f"{a} = {b}" for a, b in f.items()) + " }"]
    path = folder / "ur5_arm.toml"
    path.write_text(text + "\n".join(lines) + "\n")
    return path


def table(out: Path, truth: dict[str, dict], wall: float) -> None:
    report = json.loads((out / "report.json").read_text())
    verify = report["steps"]["verify"]
    print(f"{'joint':<20}{'torque rms nominal':>20}{'identified':>12}{'ratio':>8}{'tracking rms nominal':>22}{'identified':>12}{'ratio':>8}")
    for name, r in verify["joints"].items():
        print(f"{name:<20}{r['torque_rms_nominal']:>17.4g} N·m{r['torque_rms_identified']:>12.4g}{r['torque_ratio']:>8.1f}"
              f"{r['tracking_rms_nominal']:>18.4g} rad{r['tracking_rms_identified']:>12.4g}{r['tracking_ratio']:>8.1f}")
    print(verify["verdict"])
    print("friction fitted (truth):")
    for name, j in report["steps"]["friction"]["joints"].items():
        p, t = j["parameters"], truth[name]
        print(f"  {name:<20}" + ", ".join(f"{k} {p[k]:.4g} ({t[k]:.4g})" for k in ("fc", "fs", "vs", "fv")))
    worst_torque = max(1 / r["torque_ratio"] for r in verify["joints"].values())
    worst_tracking = min(r["tracking_ratio"] for r in verify["joints"].values())
    print(f"targets: torque prediction <= 0.1 of nominal on every joint: {'met' if worst_torque <= 0.1 else 'NOT met'} (worst {worst_torque:.3f}); "
          f"tracking >= 3x better on every joint: {'met' if worst_tracking >= 3 else 'NOT met'} (worst {worst_tracking:.1f}x)")
    steps = ", ".join(f"{k} {v:.1f}" for k, v in report["wall_s"].items())
    print(f"wall time {wall:.1f} s ({steps} s); arm time {report['arm_time_s']:.1f} s; load average at the end {os.getloadavg()[0]:.2f}")


def ros2_paced(folder: Path, arm: Path, out: Path, rate: float, opts: list[str]) -> int:
    """The arm served by ``mbctl emulate --bus ros2 --rate`` in its own process; the command on the nominal UR5 over ROS 2."""
    os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # traffic stays on this machine
    os.environ["ROS_DOMAIN_ID"] = str(random.randrange(100, 200))
    nominal = folder / "ur5.toml"
    nominal.write_text(bundled_config("ur5").read_text() + '\n[ros2]\nholding_controller = "joint_trajectory_controller"\n')
    emulator = subprocess.Popen([sys.executable, "-m", "mbctl.cli", "emulate", str(arm), "--bus", "ros2", "--rate", f"{rate:g}", "--q0", "0,-1.5708,0,0,0,0",
                                 "--realtime-priority", "79"], stdout=subprocess.PIPE, text=True)  # fmt: skip
    try:
        print(emulator.stdout.readline().strip())
        return main(["commission", str(nominal), "--out", str(out), "--bus", "ros2", *opts])
    finally:
        emulator.terminate()
        emulator.wait(timeout=20)


def main_() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=("lockstep", "canopen-lockstep", "ros2-lockstep", "canopen", "canopen-process-lockstep", "sim", "ros2"), default="lockstep")
    ap.add_argument("--rate", type=float, help="control rate, Hz (default: 250 for canopen and canopen-process-lockstep, where a loaded 2-core machine misses 1 ms SYNC replies; else 1000)")
    ap.add_argument("--out", type=Path, help="keep the commissioning folder here (default: a temporary one)")
    args = ap.parse_args()
    import tomllib

    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        arm = arm_file(folder)
        truth = {name: tomllib.loads(arm.read_text())["plant"]["joints"][name]["friction"] for name in SCALE}
        out = args.out or folder / "out"
        rate = args.rate if args.rate is not None else (250.0 if args.backend in ("canopen", "canopen-process-lockstep") else 1000.0)
        opts = ["--rate", f"{rate:g}", *OPTIONS]
        print(f"load average at the start {os.getloadavg()[0]:.2f}; backend {args.backend}; options {' '.join(opts)}")
        start = time.perf_counter()
        if args.backend == "lockstep":
            code = main(["commission", str(arm), "--out", str(out), "--lockstep", *opts])
        elif args.backend == "sim":
            code = main(["commission", str(arm), "--out", str(out), *opts])
        elif args.backend == "ros2":
            code = ros2_paced(folder, arm, out, rate, opts)
        elif args.backend == "ros2-lockstep":
            os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")  # traffic stays on this machine
            os.environ.setdefault("ROS_DOMAIN_ID", str(random.randrange(100, 200)))
            code = main(["commission", str(arm), "--out", str(out), "--bus", "ros2", "--emulate", "--lockstep", *opts])
        elif args.backend == "canopen-lockstep":
            code = main(["commission", str(arm), "--out", str(out), "--bus", "canopen", "--emulate", "--lockstep", *opts])
        else:
            channel = f"239.74.163.{random.randrange(1, 255)}:{random.randrange(43200, 43999)}"
            q0 = "0,-1.5708,0,0,0,0"
            lockstep = args.backend == "canopen-process-lockstep"
            timing = ["--lockstep-period", f"{1 / rate:g}"] if lockstep else ["--realtime-priority", "79"]
            emulator = subprocess.Popen([sys.executable, "-m", "mbctl.cli", "emulate", str(arm), "--bus", "canopen", "--interface", "udp_multicast",
                                         "--channel", channel, "--q0", q0, *timing], stdout=subprocess.PIPE, text=True)
            try:
                print(emulator.stdout.readline().strip())
                code = main(["commission", str(bundled_config("ur5")), "--out", str(out), "--bus", "canopen", "--interface", "udp_multicast",
                             "--channel", channel, *(["--lockstep"] if lockstep else []), *opts])
            finally:
                emulator.terminate()
                emulator.wait(timeout=20)
        wall = time.perf_counter() - start
        if code != 0:
            print(f"mbctl commission exited {code}")
            return code
        table(out, truth, wall)
    return 0


if __name__ == "__main__":
    sys.exit(main_())
