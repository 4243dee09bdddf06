"""Servo identification from the eight real XL330 pendulum logs (bundled), in one run.

1. Held-out error: fit on the kp 100 logs, simulate the kp 400 logs open loop over their
   6 s (and the reverse), per friction law (LuGre included); the yardstick is the 51–66 mrad
   that BAM's published parameter sets reach on these logs. Before it, the PWM duties
   each gain's logs reach.
2. A full fit of all eight logs (Stribeck + load-dependent): wall time of the
   least-squares fit with the exact Jacobian, against derivative-free searches of the
   same objective with the same compiled simulation: CMA-ES as BAM uses it (``pip
   install cma``, part of the bench extra; skipped without it), restarted with growing
   populations until it matches the least-squares cost within 1 % (or 300 s pass), and a
   local Powell search.

Run: python benchmarks/servo.py
"""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import scipy.optimize

from mbctl.bundled import bundled_servo_logs
from mbctl.identification.servo import LAWS, PARAMETERS, fit_servo, read_servo_log, residual_function


def mean_mrad(errors: dict[str, float]) -> float:
    return 1e3 * float(np.mean(list(errors.values())))


def duty_ranges(logs) -> None:
    """The PWM duty the firmware's P loop asked for, from the measured error (what a fit on one
    gain can learn from: the kp 400 logs reach duties the kp 100 logs never do)."""
    for kp in (100.0, 400.0):
        d = np.concatenate([
            np.abs(np.clip(kp * (g.goal - g.position) * g.model.firmware.counts / (2 * np.pi) / g.model.firmware.divisor / g.model.firmware.pwm_max, -1, 1))[g.enabled]
            for g in logs if g.model.firmware.kp == kp
        ])
        print(f"kp {kp:.0f}: duty p95 {np.percentile(d, 95):.2f}, max {d.max():.2f}, above 0.5 in {100 * (d > 0.5).mean():.0f} % of samples")
    print()


def held_out(logs) -> None:
    print("1. mean absolute position error over full 6 s open-loop simulations (mrad); BAM's published sets: 51-66")
    print(f"{'law':<18}{'fit kp100':>11}{'held-out kp400':>16}{'fit kp400':>11}{'held-out kp100':>16}{'fit s':>8}")
    by_kp = {kp: [log for log in logs if log.model.firmware.kp == kp] for kp in (100.0, 400.0)}
    for law in LAWS:
        a = fit_servo(by_kp[100.0], law, validate=by_kp[400.0])
        b = fit_servo(by_kp[400.0], law, validate=by_kp[100.0])
        print(f"{law:<18}{mean_mrad(a.train_mae):>11.1f}{mean_mrad(a.validation_mae):>16.1f}{mean_mrad(b.train_mae):>11.1f}{mean_mrad(b.validation_mae):>16.1f}{a.wall_s + b.wall_s:>8.1f}")


def full_fit(logs, law: str = "stribeck-load", budget_s: float = 300.0) -> None:
    print(f"\n2. all {len(logs)} logs, {law}: gradient-based against derivative-free, same objective (sum of squared errors, rad^2)")
    # three times: on a loaded machine one fit's wall time varies by 2-3x; the median counts
    fits = [fit_servo(logs, law) for _ in range(3)]
    walls = sorted(f.wall_s for f in fits)
    fit = fits[0]
    print(f"least squares, exact Jacobian, {fit.starts} starts: {', '.join(f'{w:.1f}' for w in walls)} s (median {walls[1]:.1f} s), "
          f"cost {fit.cost:.4f}, mean error {mean_mrad(fit.train_mae):.1f} mrad, {fit.evaluations} simulations")
    fit = dataclasses.replace(fit, wall_s=walls[1])
    names = LAWS[law]
    lower = np.array([PARAMETERS[n][0] for n in names])
    upper = np.array([PARAMETERS[n][1] for n in names])
    error = residual_function(law, logs, jacobian=False)
    first = np.array([PARAMETERS[n][2] for n in names])

    def cost(z):
        r = error(np.clip(z, lower, upper))[0]
        return 0.5 * float(r @ r)

    try:
        import cma
    except ImportError:
        cma = None
    if cma is not None:
        # CMA-ES as BAM searches (normalised parameters in [0, 1]), restarted with a doubled
        # population each time it stops by itself (IPOP), until it matches the least-squares
        # cost within 1 % or the time budget runs out
        span = upper - lower
        start = time.perf_counter()
        reached, best, evaluations, runs, popsize = None, np.inf, 0, 0, None
        while reached is None and time.perf_counter() - start < budget_s:
            options = {"bounds": [0, 1], "seed": 1 + runs, "verbose": -9}
            if popsize is not None:
                options["popsize"] = popsize
            es = cma.CMAEvolutionStrategy(list((first - lower) / span), 0.3, options)
            runs += 1
            while not es.stop() and time.perf_counter() - start < budget_s:
                xs = es.ask()
                es.tell(xs, [cost(lower + span * np.asarray(x)) for x in xs])
                if es.result.fbest <= 1.01 * fit.cost:
                    reached = time.perf_counter() - start
                    break
            best, evaluations = min(best, es.result.fbest), evaluations + es.result.evaluations
            popsize = 2 * es.popsize
        wall = time.perf_counter() - start
        label = f"reached in {reached:.1f} s" if reached is not None else f"not reached in {wall:.0f} s"
        print(f"CMA-ES (derivative-free, {runs} runs with restarts), {evaluations} simulations: best cost {best:.4f}, {label}")
        if reached is not None:
            print(f"ratio: least squares {fit.wall_s:.1f} s / CMA-ES {reached:.1f} s = {fit.wall_s / reached:.3f}")
        else:
            print(f"ratio: least squares {fit.wall_s:.1f} s / CMA-ES > {wall:.0f} s: < {fit.wall_s / wall:.3f}")
    start = time.perf_counter()
    res = scipy.optimize.minimize(cost, first, method="Powell", bounds=list(zip(lower, upper)), options={"maxfev": 4000, "xtol": 1e-6, "ftol": 1e-10})
    print(f"Powell (derivative-free, local), one start: {time.perf_counter() - start:6.1f} s, cost {res.fun:.4f}, {res.nfev} simulations")


def main() -> None:
    print(f"servo identification; {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
    logs = [read_servo_log(p) for p in bundled_servo_logs("xl330-pendulum")]
    duty_ranges(logs)
    held_out(logs)
    full_fit(logs)


if __name__ == "__main__":
    main()
