"""Computed torque and the MPC on the UR5 without and with its rotor inertia (armature), in one run.

The bundled UR5 (``configs/ur5.toml``) with its armature, and the same file with the armature lines
taken out (the URDF's inertias alone, the bundled UR5 before it had one); each is the simulated plant
and the controllers' model at once, in lock-step. Two references of ``benchmarks/mpc.py``:

1. gentle: 0.3 rad on every joint in a 1 s quintic, on the plant's own sensors (the encoders of
   ur5.toml's ``[drives]``, velocity their filtered difference);
2. saturating: every joint 0.14 rad out and back in 0.09 s, twice, with exact sensing (``[plant]
   encoder_counts = 0``, ``velocity = "exact"``): the laws alone.

Per joint, for computed torque and the MPC: tracking RMS and max |error| (mrad), and the MPC's RMS
over computed torque's. The momentum observer's collision reaction is off (a saturating run looks
like a collision to it). Lock-step: the figures do not depend on the machine's load.

Run: python benchmarks/armature.py
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
from mpc import _references

from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.session import SessionOptions, run_session

ROOT = Path(__file__).resolve().parent.parent
EXACT = '\n[plant]\nencoder_counts = 0\nvelocity = "exact"\n'


def robot_file(folder: Path, name: str, armature: bool, exact: bool) -> Path:
    """ur5.toml with or without its armature lines, collision reaction off, exact sensing or the plant's own."""
    lines = (ROOT / "configs" / "ur5.toml").read_text().replace('reaction = "stop"', 'reaction = "none"').splitlines(keepends=True)
    text = "".join(line for line in lines if armature or not line.lstrip().startswith("armature ="))
    path = folder / f"{name}.toml"
    path.write_text(text + (EXACT if exact else ""))
    return path


def run(config: Path, traj, law: str, folder: Path) -> dict[str, np.ndarray]:  # noqa: ANN001
    """Tracking RMS and max |q_ref - q| per joint (rad) of one lock-step run, and its stop reason."""
    robot = load_robot(config)
    log = folder / f"{config.stem}-{law}.npz"
    summary = run_session(robot, traj, SessionOptions(law=law, lockstep=True), log)
    with np.load(log) as z:
        error = np.abs(z["q_ref"] - z["q"])
    return {"rms": np.array([summary.tracking_rms[j] for j in robot.joint_names]), "max": error.max(axis=0), "stop": summary.stop_reason}


def main() -> int:
    print(f"load {os.getloadavg()[0]:.2f} {os.getloadavg()[1]:.2f} (1, 5 min) on {os.cpu_count()} cores (lock-step: the figures do not depend on it)")
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        robot = load_robot(robot_file(folder, "probe", True, False))
        references = _references(robot)
        names = " ".join(f"{j.replace('_joint', ''):>11}" for j in robot.joint_names)
        print(f"tracking in mrad, per joint: {names}")
        for title, reference, exact in (("gentle (0.3 rad in 1 s), the plant's sensors", "feasible", False),
                                        ("saturating (every joint 0.14 rad out and back in 0.09 s, twice), exact sensing", "all joints", True)):
            print(f"\n{title}")
            traj = references[reference]
            for armature in (False, True):
                config = robot_file(folder, f"{reference.replace(' ', '_')}-{'armature' if armature else 'urdf'}", armature, exact)
                results = {law: run(config, traj, law, folder) for law in ("computed-torque", "mpc")}
                label = "with armature" if armature else "URDF only   "
                for law, r in results.items():
                    for what in ("rms", "max"):
                        print(f"  {label} {law:15s} {what} " + " ".join(f"{1e3 * v:11.2f}" for v in r[what]) + f"   ({r['stop']})" * (what == "max"))
                ratio = results["mpc"]["rms"] / results["computed-torque"]["rms"]
                print(f"  {label} {'MPC / CT':15s} rms " + " ".join(f"{v:11.2f}" for v in ratio))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
