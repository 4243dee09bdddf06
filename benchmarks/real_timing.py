"""The shipped observer and the tracking against plants that keep their own time: the simulated plant in
its own process and the emulated Dynamixel bus, paced (benchmarks/ros2_live.py and benchmarks/cia402.py
do the same for ROS 2 and CANopen), and the deterministic real-timing robot of hardware/real_timing.py.

Per backend and rate, ``--runs`` paced runs of a gentle move (the second half with a second process busy
on one core): false stops (any stop but the end), false detections (the observer passing its threshold:
the shipped reaction stops the run), the largest ``|tau_ext| / threshold`` of the runs (the observer's
margin, its adaptive threshold included: a detection at 1), and the tracking RMS per joint (median over
the runs); then a 20 N·m push on one joint for 50 ms mid-move (a ``[plant.contact]`` torque on the
link after that joint): the time from its start to the detection, from the stop reason.

- ``sim``: the UR5 as shipped (its observer stops the run), the simulated plant in its own process
  stepping on its own clock (a command acts from its next tick), 500 Hz and 1 kHz;
- ``dynamixel``: the SCARA over the emulated bus (``--emulate``: a pty, the host's read times), 100 Hz;
  the SCARA ships no ``[control.collision]``: its default thresholds with the reaction ``stop`` are added,
  the observer's velocity low-passed at 10 Hz;
- ``virtual``: the UR5 against :class:`~mbctl.hardware.real_timing.RealTimingRobot` at 500 Hz on a
  virtual clock (every phase of its updates, updates up to 1.5 ms late), against the same move in lock-step.

Run: python benchmarks/real_timing.py [--runs 20] [--backends sim,dynamixel,virtual]
The paced figures depend on the machine's load: the load average is printed before and after.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from mbctl.bundled import bundled_config
from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.session import SessionOptions, run_session

LENIENT = OverrunPolicy(window=100, max_fraction=1.0, max_consecutive=0)  # measure overruns, do not stop on them
# robot -> (start, goal, duration (s), the joint pushed and the link whose frame takes the torque (world axes))
MOVES = {
    "ur5": ([0.1, -1.3, 1.5, -1.7, -1.5, 0.2], [-0.3, -0.8, 1.0, -1.2, -1.1, 0.6], 2.0, ("shoulder_lift_joint", "upper_arm_link", (0.0, 20.0, 0.0))),
    "scara": ([0.0, 0.0, 0.0, 0.0], [0.6, 0.8, -0.4, 0.03], 2.0, ("j1", "link1", (0.0, 0.0, 20.0))),
}
PUSH_AT_S, PUSH_S = 1.0, 0.05


def busy_core() -> subprocess.Popen:
    """A second process spinning on CPU 1."""
    return subprocess.Popen([sys.executable, "-c", "import os\nos.sched_setaffinity(0, {1})\nwhile True: pass"])


def robot_file(folder: Path, name: str, push: bool) -> Path:
    """The bundled robot's TOML (the SCARA with the default collision detection, reaction stop), and a push."""
    text = bundled_config(name).read_text()
    if "[control.collision]" not in text:
        # the servos' 12-bit encoders (1.3e-4 rad at j1) give a velocity whose noise reaches the observer as
        # K M dv: low-passed first, as the Panda's observer does (without it the SCARA over the emulated bus
        # false-detects 0.13-0.23 s into the move, in lock-step as well as paced)
        text += '\n[control.collision]\nreaction = "stop"\nvelocity_cutoff_hz = 10.0\n'
    if push:
        _, frame, torque = MOVES[name][3]
        text += f"\n[plant.contact]\nframe = \"{frame}\"\ntorque = [{', '.join(map(str, torque))}]\nstart = {PUSH_AT_S}\nduration = {PUSH_S}\n"
    path = folder / f"{name}{'-push' if push else ''}.toml"
    path.write_text(text)
    for urdf in bundled_config(name).parent.glob(f"{name}*.urdf"):
        (folder / urdf.name).write_text(urdf.read_text())
    return path


def trajectory(robot, name: str):
    start, goal, duration, _ = MOVES[name]
    return quintic_rest_to_rest(np.array([start, goal]), [duration], 1000.0, robot.joint_names)


def paced(backend: str, name: str, rate: float, runs: int, folder: Path) -> None:
    robot = load_robot(robot_file(folder, name, False))
    traj = trajectory(robot, name)
    options = SessionOptions(plant=backend, emulate=backend == "dynamixel", rate_hz=rate, overrun=LENIENT)
    results = []
    for k in range(runs):
        busy = busy_core() if k >= runs // 2 else None
        try:
            s = run_session(robot, traj, options, folder / f"{backend}-{k}.npz")
        finally:
            if busy is not None:
                busy.kill()
                busy.wait()
        results.append(s)
        print(f"  {backend} {rate:g} Hz run {k}{' (busy core)' if busy else ''}: {s.stop_reason[:100]}; margin {s.tau_ext_ratio_max:.2f}", flush=True)
    stops = sum(not s.stop_reason.startswith("completed") for s in results)
    detections = sum(bool(s.collision) for s in results)
    margin = max(s.tau_ext_ratio_max for s in results)
    done = [s.tracking_rms for s in results if s.tracking_rms and s.stop_reason.startswith("completed")]
    rms = {j: float(np.median([d[j] for d in done])) for j in robot.actuated_names} if done else {}
    pushed = load_robot(robot_file(folder, name, True))
    s = run_session(pushed, traj, options, folder / f"{backend}-push.npz")
    joint = MOVES[name][3][0]
    found = re.search(rf"tau_ext\.{joint} = \S+ beyond the threshold \S+ at t = (\S+) s", s.stop_reason)
    delay = f"{1e3 * (float(found.group(1)) - PUSH_AT_S):.0f} ms" if found else f"not detected on {joint} ({s.stop_reason[:60]})"
    print(f"{backend} {name} {rate:g} Hz: false stops {stops}/{runs}, false detections {detections}/{runs}, largest |tau_ext|/threshold {margin:.2f}, "
          f"push on {joint} detected after {delay}")
    print("  tracking RMS (mrad, median): " + ", ".join(f"{j} {1e3 * v:.3f}" for j, v in rms.items()), flush=True)


def virtual(folder: Path) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    import test_real_timing as t  # the tests' runs of the real-timing robot

    robot = load_robot("ur5")
    ur5 = (robot, quintic_rest_to_rest(np.array([t.START, t.GOAL]), [t.MOVE_S], 1000.0, robot.joint_names))
    from mbctl.hardware.sim import SimPlant, truth_model

    truth, config = truth_model(robot)
    lockstep, _ = t._run(ur5, folder, SimPlant(truth, 2e-3, config, q0=np.array(t.START)))
    print("virtual: lock-step 500 Hz tracking RMS (mrad): " + ", ".join(f"{j} {1e3 * v:.3f}" for j, v in lockstep.tracking_rms.items()))
    for effort in (True, False):
        for phase in (0.2e-3, 1.1e-3, 1.9e-3):
            for late in (0.0, 1.5e-3):
                s, _ = t._robot_run(ur5, folder, phase_s=phase, effort=effort, late_s=late)
                ratio = max(s.tracking_rms[j] / lockstep.tracking_rms[j] for j in t.BIG)
                print(f"  {'measured torque' if effort else 'commands       '} phase {1e3 * phase:.1f} ms, late up to {1e3 * late:.1f} ms: {s.stop_reason[:40]}, "
                      f"margin {s.tau_ext_ratio_max:.2f}, worst tracking ratio to lock-step {ratio:.2f}, age p50 {s.sample_timing['age_p50_us']:.0f} us")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--backends", default="sim,dynamixel,virtual")
    args = parser.parse_args()
    backends = args.backends.split(",")
    print(f"{os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        if "virtual" in backends:
            virtual(folder)
        if "sim" in backends:
            for rate in (500.0, 1000.0):
                paced("sim", "ur5", rate, args.runs, folder)
        if "dynamixel" in backends:
            paced("dynamixel", "scara", 100.0, args.runs, folder)
    print(f"load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
