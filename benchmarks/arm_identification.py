"""Whole-arm identification on the real Panda log: held-out accuracy per joint and wall time.

Fit on the first 70 % of ``data/panda-excitation/train.csv`` (12.6 s of a real Franka Emika
Panda excitation run, GPL-3.0 data), judge on the last 30 %: RMS of measured minus predicted
joint torque per joint (N·m), against the measured torques as logged (resampled to the
1 kHz grid, not filtered) and against the same torques low-passed at 20 Hz.

Rows, all fitted in this run on the same samples:

- ``URDF``: the example-robot-data model as it is (no friction);
- ``plain OLS``: ordinary least squares on pinocchio's joint-torque regressor plus
  Coulomb, viscous and offset columns per joint, not physically consistent (the usual
  40 lines of numpy);
- ``mbctl``: ``mbctl identify dynamics`` (weighted, parallel-filtered, physically
  consistent; Coulomb-viscous), then with ``--offsets separable|all`` (the torque
  sensors' bias, predicted as the sensor reads it) and with ``--friction stribeck``;
- ``FIGAROH``: its OLS and its physically consistent fit, where figaroh imports
  (``pip install figaroh``; benchmarks/figaroh_panda.py).

Time: the whole ``mbctl`` fit (read, condition, regressor over ~8.7k samples, both solves),
median of ``--repeat`` runs, beside the plain OLS measured in the same run.

Run: python benchmarks/arm_identification.py [--repeat R]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from mbctl.dynamics.friction.laws import motion_direction  # noqa: E402
from mbctl.dynamics.model.robot import load_robot  # noqa: E402
from mbctl.dynamics.regressor import inertial_parameters, joint_torque_regressor  # noqa: E402
from mbctl.identification.arm_fit import ArmFitSettings, fit_arm, predict_torques  # noqa: E402
from mbctl.identification.arm_log import Conditioning, condition_log, read_arm_log  # noqa: E402

LOG = ROOT / "data" / "panda-excitation" / "train.csv"


def mbctl_fit(robot, raw, **settings):  # noqa: ANN001, ANN201
    """What ``mbctl identify dynamics --holdout 0.3`` does, timed from the raw log on."""
    start = time.perf_counter()
    train = condition_log(raw, Conditioning(acceleration_cutoff_hz=20.0)).split(0.7)[0]
    fit = fit_arm(robot, [train], ArmFitSettings(**settings))
    return fit, time.perf_counter() - start


def plain_ols(robot, train, test):  # noqa: ANN001, ANN201
    """Unweighted least squares, regressor + (sgn dq, dq, 1) per joint; predictions on ``test``."""
    def columns(log):  # noqa: ANN001, ANN202
        n = robot.nv
        F = np.zeros((len(log), n, 3 * n))
        for c in range(n):
            F[:, c, 3 * c : 3 * c + 3] = np.column_stack([motion_direction(log.dq[:, c], log.ddq[:, c]), log.dq[:, c], np.ones(len(log))])
        return np.concatenate([joint_torque_regressor(robot, log.q, log.dq, log.ddq), F], axis=2)

    start = time.perf_counter()
    A = columns(train)
    x, *_ = np.linalg.lstsq(A.reshape(-1, A.shape[2]), train.tau.ravel(), rcond=None)
    seconds = time.perf_counter() - start
    return columns(test) @ x, seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    robot = load_robot("panda_arm")
    raw = read_arm_log(LOG, robot.joint_names)
    train, test = condition_log(raw).split(0.7)
    keep = np.r_[True, np.any(np.diff(np.column_stack([raw.q, raw.tau]), axis=0) != 0, axis=1)]
    measured = np.column_stack([np.interp(test.t, raw.t[keep], raw.tau[keep, c]) for c in range(robot.nv)])

    rows: dict[str, np.ndarray] = {"URDF (example-robot-data, as given)": predict_torques(robot, inertial_parameters(robot), {}, test)}
    predicted, ols_s = plain_ols(robot, train, test)
    rows["plain OLS + Coulomb, viscous, offset (not consistent)"] = predicted
    times = []
    for _ in range(args.repeat):
        fit, seconds = mbctl_fit(robot, raw)
        times.append(seconds)
    rows["mbctl identify dynamics (consistent)"] = predict_torques(robot, fit.theta, fit.friction, test, armature=fit.armature_by_joint)
    for which in ("separable", "all"):
        fit_o, _ = mbctl_fit(robot, raw, offsets=which)
        rows[f"mbctl --offsets {which}, as the sensor reads"] = predict_torques(robot, fit_o.theta, fit_o.friction, test, fit_o.offsets, armature=fit_o.armature_by_joint)
    fit_s, _ = mbctl_fit(robot, raw, friction="stribeck")
    rows["mbctl --friction stribeck"] = predict_torques(robot, fit_s.theta, fit_s.friction, test, armature=fit_s.armature_by_joint)
    figaroh = {}
    try:
        from figaroh_panda import figaroh_fit

        for consistent in (False, True):
            result = figaroh_fit(robot, train, test, consistent=consistent)
            figaroh[f"FIGAROH {'consistent (LMI)' if consistent else 'OLS'}: {result['seconds']:.2f} s"] = result["rms"]
    except ImportError as exc:
        print(f"FIGAROH row skipped: {exc}")

    rms = lambda e: np.sqrt(np.mean(e**2, axis=0))  # noqa: E731
    header = "".join(f"{'j' + str(c + 1):>7}" for c in range(robot.nv))
    for label, reference in (("measured torques as logged", measured), ("measured torques low-passed at 20 Hz", test.tau)):
        print(f"\nheld-out RMS error (N·m), last 30 % of {LOG.name}, against the {label}:")
        print(f"  {'model':<58}{header}")
        for name, tau in rows.items():
            print(f"  {name:<58}" + "".join(f"{x:>7.3f}" for x in rms(tau - reference)))
        if reference is test.tau:
            for name, values in figaroh.items():
                print(f"  {name:<58}" + "".join(f"{x:>7.3f}" for x in values))
    urdf, mine = rms(rows["URDF (example-robot-data, as given)"] - measured), rms(rows["mbctl identify dynamics (consistent)"] - measured)
    print("\nURDF / mbctl per joint: " + " ".join(f"{u / m:.1f}x" for u, m in zip(urdf, mine)))
    print(
        f"\nwall time of the whole mbctl fit (read, condition, {len(train)} samples, both solves): median {np.median(times):.2f} s "
        f"over {args.repeat}; the plain OLS alone in this run: {ols_s:.2f} s (ratio {np.median(times) / ols_s:.1f}x)"
    )
    print(f"consistent fit: {fit.solver_status}, {len(fit.base)} base parameters, condition number {fit.condition_number:.3g}")


if __name__ == "__main__":
    main()
