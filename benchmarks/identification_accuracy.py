"""Accuracy of friction identification against a known truth: the README's acceptance tables.

    python benchmarks/identification_accuracy.py              # 200 seeds, 8 end-to-end runs (~10 min on 2 cores)
    python benchmarks/identification_accuracy.py --seeds 100 --e2e 4

1. Noise-free synthetic logs: largest relative parameter error.
2. Monte Carlo on synthetic logs (Stribeck truth of configs/friction_rig.toml's plant:
   fc 0.8, fs 1.1 N·m, vs 0.05 rad/s, fv 0.12 N·m·s/rad, delta 2), 25 speeds from
   0.1*vs to 40*vs, 2 % torque noise (of fc) per sample at 1 kHz, gravity up to 10*fc,
   4096-count encoder: 95th-percentile errors, CI coverage, gravity leak, convergence
   from starts up to 5x off.
3. Presliding test on the simulated LuGre joint of configs/friction_rig.toml.
2b. The same with far sparser data (100 Hz, legs <= 1 s, 10 % noise).
4. End to end through the simulated plant against fits of clean steady-state points
   at the same per-point noise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mbctl.dynamics.friction.laws import Stribeck  # noqa: E402
from mbctl.dynamics.model.robot import load_robot  # noqa: E402
from mbctl.hardware.sim import SimPlant, truth_model  # noqa: E402
from mbctl.identification.accuracy import (  # noqa: E402
    PARAMS,
    clean_fit_errors,
    monte_carlo,
    simulated_constant_speed,
)
from mbctl.identification.config import identification_settings  # noqa: E402
from mbctl.identification.experiments import (  # noqa: E402
    ExperimentController,
    presliding_timeline,
    run_experiment,
)
from mbctl.identification.fitting import fit_friction  # noqa: E402
from mbctl.identification.plan import ConstantSpeedPlan, speed_grid  # noqa: E402
from mbctl.identification.presliding import fit_presliding  # noqa: E402
from mbctl.identification.processing import process_constant_speed  # noqa: E402
from mbctl.identification.synthetic import SyntheticRig, synthetic_log  # noqa: E402

TRUTH = Stribeck(fc=0.8, fs=1.1, vs=0.05, fv=0.12, delta=2.0)
RIG = ROOT / "configs" / "friction_rig.toml"


def acceptance_plan() -> ConstantSpeedPlan:
    """25 speeds 0.1*vs .. 40*vs over -0.6 .. 0.6 rad, legs up to 10 s."""
    speeds = speed_grid(0.1 * TRUTH.vs, 40 * TRUTH.vs, 25, TRUTH.vs)
    return ConstantSpeedPlan("j1", tuple(speeds), (-0.6, 0.6), settle_s=0.2, acceleration=20.0, max_leg_s=10.0, transit_speed=1.0)


def noise_free() -> None:
    plan = acceptance_plan()
    print("1. noise-free constant-speed logs (gravity 10*fc): largest |relative error| over fc, fs, vs, fv (, delta)")
    for enc in (0, 4096):
        rig = SyntheticRig(TRUTH, gravity=10 * TRUTH.fc, gravity_phase=0.7, encoder_counts=enc)
        pts = process_constant_speed(synthetic_log(rig, plan, np.random.default_rng(0))).points
        for delta, label in ((2.0, "delta fixed"), (None, "delta free")):
            fit = fit_friction(pts, "stribeck", delta=delta)
            names = PARAMS + (("delta",) if delta is None else ())
            worst = max(abs(fit.values[k] / getattr(TRUTH, k) - 1) for k in names)
            print(f"   encoder {'exact' if enc == 0 else enc:>5}, {label:11s}: {100 * worst:.2e} %")


def monte_carlo_tables(seeds: int, sparse: bool = False) -> None:
    plan = acceptance_plan()
    rig = SyntheticRig(TRUTH, torque_noise=0.02 * TRUTH.fc, encoder_counts=4096, rate_hz=1000.0)
    label = "2. Monte Carlo"
    if sparse:  # far fewer samples per speed: 100 Hz, legs of at most 1 s, 10 % noise
        plan = replace(plan, max_leg_s=1.0)
        rig = replace(rig, torque_noise=0.1 * TRUTH.fc, rate_hz=100.0, velocity_cutoff_hz=20.0)
        label = "2b. Monte Carlo, sparse data (100 Hz, legs <= 1 s, 10 % noise)"
    t0 = time.perf_counter()
    r = monte_carlo(TRUTH, plan, rig, range(seeds), starts_per_seed=2, settle_s=0.2)
    print(f"{label}, {seeds} seeds ({time.perf_counter() - t0:.0f} s)")
    fixed, free, cov = r.p95("fixed"), r.p95("free"), r.coverage()
    print("   | parameter | 95th pct |error|, delta fixed | 95th pct, delta free | 95 % CI coverage |")
    for k in PARAMS:
        print(f"   | {k} | {100 * fixed[k]:.3f} % | {100 * free[k]:.3f} % | {100 * cov[k]:.1f} % |")
    print(f"   | delta | - | {100 * free['delta']:.3f} % | - |")
    print(f"   gravity leak: 95th pct of max_k |F_k(g) - F_k(0)|/fc {100 * np.percentile(r.leak_points, 95):.3f} % "
          f"(max {100 * r.leak_points.max():.3f} %); of |fc(g) - fc(0)|/fc {100 * np.percentile(r.leak_fc, 95):.4f} %")
    print(f"   convergence from starts up to 5x off: {r.converged}/{r.starts} ({100 * r.converged / r.starts:.1f} %), on a bound: {r.stuck}")
    for f in r.failures[:5]:
        print("     ", f)


def presliding(seeds: int) -> None:
    robot = load_robot(RIG)
    settings = identification_settings(robot, "j1")
    truth, plant_config = truth_model(robot)
    law = truth.joint("j1").friction.law
    print(f"3. presliding on the simulated LuGre joint (truth sigma0 {law.sigma0:g}, sigma1 {law.sigma1:g}, fs {law.fs:g}), {seeds} seeds")
    print("   | seed | sigma0 (+- se) | sigma0 error | break-away (+- se) | break-away error | sigma1 (+- se) | sigma1 error |")
    for seed in range(seeds):
        controller = ExperimentController(robot, "j1", presliding_timeline(settings.presliding), settings.gains, settings.presliding)
        with tempfile.TemporaryDirectory() as tmp:
            with SimPlant(truth, 1.0 / settings.rate_hz, replace(plant_config, seed=seed), q0=settings.start) as plant:
                run = run_experiment(plant, robot, controller, rate_hz=settings.rate_hz, paced=False, npz_path=Path(tmp) / "p.npz", kind="presliding")
        f = fit_presliding(run.presliding, fv=law.fv)
        s1 = f"{f.sigma1:.2f} +- {f.sigma1_stderr:.2f}" if f.sigma1_identified else f"not identified ({f.sigma1_reason})"
        s1e = f"{100 * (f.sigma1 / law.sigma1 - 1):+.1f} %" if f.sigma1_identified else "-"
        b = f.breakaway
        print(f"   | {seed} | {f.sigma0:.0f} +- {f.sigma0_stderr:.0f} | {100 * (f.sigma0 / law.sigma0 - 1):+.2f} % | "
              f"{b.value:.4f} +- {b.stderr:.4f} | {100 * (b.value / law.fs - 1):+.2f} % | {s1} | {s1e} |")


def end_to_end(runs: int, clean_seeds: int = 200) -> None:
    robot = load_robot(RIG)
    law = truth_model(robot)[0].joint("j1").friction.law
    truth = Stribeck(fc=law.fc, fs=law.fs, vs=law.vs, fv=law.fv, delta=2.0)
    overrides = {"max_leg_s": 2.0}
    e2e = {k: [] for k in PARAMS}
    clean = {k: [] for k in PARAMS}
    t0 = time.perf_counter()
    for seed in range(runs):
        log = simulated_constant_speed(robot, "j1", seed, overrides)
        pts = process_constant_speed(log).points
        fit = fit_friction(pts, "stribeck")
        for k in PARAMS:
            e2e[k].append(fit.values[k] / getattr(truth, k) - 1)
        ref = clean_fit_errors(truth, pts, range(1000 * seed, 1000 * seed + clean_seeds))
        for k in PARAMS:
            clean[k].extend(ref[k])
    rms = lambda x: float(np.sqrt(np.mean(np.square(x))))  # noqa: E731
    print(f"4. end to end through the simulated plant (configs/friction_rig.toml, max_leg_s 2): {runs} runs ({time.perf_counter() - t0:.0f} s)")
    print("   | parameter | RMS error, identify run + fit | RMS error, clean steady-state points | ratio |")
    for k in PARAMS:
        a, b = rms(e2e[k]), rms(clean[k])
        print(f"   | {k} | {100 * a:.3f} % | {100 * b:.3f} % | {a / b:.2f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, default=200, help="Monte-Carlo seeds (default 200)")
    p.add_argument("--e2e", type=int, default=8, help="end-to-end runs through the simulated plant (default 8)")
    p.add_argument("--presliding", type=int, default=3, help="presliding runs (default 3)")
    p.add_argument("--only", choices=("noise-free", "monte-carlo", "sparse", "presliding", "e2e"), help="one section only")
    args = p.parse_args()
    sections = {
        "noise-free": noise_free,
        "monte-carlo": lambda: monte_carlo_tables(args.seeds),
        "sparse": lambda: monte_carlo_tables(args.seeds, sparse=True),
        "presliding": lambda: presliding(args.presliding),
        "e2e": lambda: end_to_end(args.e2e),
    }
    for name, fn in sections.items():
        if args.only in (None, name):
            fn()
            sys.stdout.flush()


if __name__ == "__main__":
    main()
