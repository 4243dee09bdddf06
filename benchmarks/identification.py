"""Cost of friction identification: fits of 30 speeds, and processing a constant-speed log.

The reference, measured in the same process, is one plain ``scipy.optimize.curve_fit``
of the Stribeck law (delta = 2) to the same 30 points, started at the truth. Timed:

- ``fit_friction`` (variable projection start, bounded least squares, Huber refit,
  covariance) for Coulomb–viscous, Stribeck with delta fixed and free;
- ``process_constant_speed`` of a synthetic 1 kHz log with those 30 speeds (segments,
  stick-slip check, pairing, robust averages, gravity profile), 0.1 .. 40 vs, legs
  up to 10 s (~0.4 M samples).

Figures are medians over ``--repeat`` runs.

Run: python benchmarks/identification.py [--repeat R]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from scipy.optimize import curve_fit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from timing import median_seconds  # noqa: E402  (benchmarks/timing.py)

from mbctl.dynamics.friction.laws import Stribeck  # noqa: E402
from mbctl.identification.fitting import fit_friction  # noqa: E402
from mbctl.identification.plan import ConstantSpeedPlan, speed_grid  # noqa: E402
from mbctl.identification.processing import process_constant_speed  # noqa: E402
from mbctl.identification.synthetic import SyntheticRig, synthetic_log  # noqa: E402

TRUTH = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)



def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()

    speeds = speed_grid(0.1 * TRUTH.vs, 40 * TRUTH.vs, 30, TRUTH.vs)
    plan = ConstantSpeedPlan("j1", tuple(speeds), (-0.6, 0.6), settle_s=0.2, acceleration=20.0, max_leg_s=10.0, transit_speed=1.0)
    rig = SyntheticRig(TRUTH, gravity=8.0, torque_noise=0.016, encoder_counts=4096)
    log = synthetic_log(rig, plan, np.random.default_rng(0))
    points = process_constant_speed(log).points
    v, F, se = points.speed, points.friction, points.stderr

    def stribeck(x, fc, fs, vs, fv):
        return fc + (fs - fc) * np.exp(-((x / vs) ** 2)) + fv * x

    reference = median_seconds(lambda: curve_fit(stribeck, v, F, p0=[0.8, 1.1, 0.05, 0.12], sigma=se), args.repeat)
    print(f"30 speeds, median of {args.repeat} runs; reference scipy curve_fit (Stribeck from the truth): {reference * 1e3:.2f} ms")
    print(f"{'step':<52}{'ms':>9}{'x ref':>8}")
    rows = [
        ("fit coulomb-viscous", lambda: fit_friction(points, "coulomb-viscous")),
        ("fit stribeck, delta fixed", lambda: fit_friction(points, "stribeck")),
        ("fit stribeck, delta free", lambda: fit_friction(points, "stribeck", delta=None)),
        ("fit stribeck from a start 5x off", lambda: fit_friction(points, "stribeck", start={"fc": 4.0, "fs": 0.22, "vs": 0.25, "fv": 0.024})),
        (f"process the log ({len(log.t) / 1e6:.2f} M samples)", lambda: process_constant_speed(log)),
    ]
    for label, fn in rows:
        s = median_seconds(fn, args.repeat)
        print(f"{label:<52}{s * 1e3:>9.2f}{s / reference:>8.1f}")


if __name__ == "__main__":
    main()
