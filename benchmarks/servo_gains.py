"""Servo models across firmware gains: fit on one gain of the bundled XL330 logs, validate on the other.

The eight real logs are four motions at kp 100 and the same four at kp 400. A model fitted on
one gain is simulated open loop (6 s, from the first sample) on the logs of the other, both
ways, and fitted on all eight, with and without the stall parameters (the supply's internal
resistance and the firmware's current limit, :mod:`mbctl.dynamics.actuator`). Printed: the
mean absolute position error of every log (mrad), fitted or held out, and the stall angle of
each ``up_and_down`` log (the highest angle the servo lifts the pendulum to while its goal
goes on to 1.57 rad), measured and simulated.

Targets (issue 32): kp 100 -> kp 400 mean below 45 mrad (the model without stall: 53.4) with the
simulated kp 400 ``up_and_down`` stall within 0.02 rad of the measured one; all eight fitted
no worse than 29.6 mrad.

Run: python benchmarks/servo_gains.py
"""

from __future__ import annotations

import gzip
import json
import os

import numpy as np

from mbctl.bundled import bundled_servo_logs
from mbctl.identification.servo import PARAMETERS, fit_servo, read_servo_log

LAW = "stribeck-load"
# stall parameters fitted: none (the model before issue 32), the supply's resistance Rs, and Rs with the current limit
VARIANTS = {"none": (), "Rs": ("supply_resistance",), "Rs+Imax": ("supply_resistance", "current_limit")}
TRAININGS = {"kp100": "fit 100", "kp400": "fit 400", "all": "fit all"}


def trajectory(path) -> str:
    """The motion's name the log file records (``trajectory``)."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)["trajectory"]


def logged_supply_resistance(paths, kt: float, R: float) -> tuple[float, float]:
    """The supply's resistance (ohm) and its standard error from the servo's own voltmeter: the
    logged ``input_volts`` regressed on the bridge's current ``d i``, ``i = (d vin - kt omega)/R``
    from the logged duty (``d = kp e / (256 * 885)``) and speed (``V = V0 - Rs d i``)."""
    x, y = [], []
    for path in paths:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
        e = doc["entries"]
        on = np.array([s.get("torque_enable", True) for s in e], dtype=float)
        error = np.array([s["goal_position"] - s["position"] for s in e])
        d = on * np.clip(doc["kp"] * error * 4096 / (2 * np.pi) / 256 / 885, -1, 1)
        i = (d * doc["vin"] - kt * np.array([s["speed"] for s in e])) / R
        x.append(d * i)
        y.append([s["input_volts"] for s in e])
    A = np.column_stack([np.ones(sum(map(len, x))), np.concatenate(x)])
    coef, *_ = np.linalg.lstsq(A, np.concatenate(y), rcond=None)
    resid = np.concatenate(y) - A @ coef
    return float(-coef[1]), float(np.sqrt(np.linalg.inv(A.T @ A)[1, 1] * resid.var()))


def main() -> None:
    print(f"servo fits across gains ({LAW}); {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}\n")
    paths = bundled_servo_logs("xl330-pendulum")
    logs = [read_servo_log(p) for p in paths]
    motion = {log.name: trajectory(p) for log, p in zip(logs, paths)}
    by_kp = {kp: [log for log in logs if log.model.firmware.kp == kp] for kp in (100.0, 400.0)}
    fits = {}
    for variant, stall in VARIANTS.items():
        fits[variant, "kp100"] = fit_servo(by_kp[100.0], LAW, validate=by_kp[400.0], stall=stall)
        fits[variant, "kp400"] = fit_servo(by_kp[400.0], LAW, validate=by_kp[100.0], stall=stall)
        fits[variant, "all"] = fit_servo(logs, LAW, stall=stall)

    columns = list(fits)
    print("mean absolute position error (mrad); * held out; columns: stall parameters fitted / logs fitted")
    print(f"{'log':<34}" + "".join(f"{f'{v}/{TRAININGS[t]}':>16}" for v, t in columns))
    for log in logs:
        cells = []
        for key in columns:
            fit = fits[key]
            held = log.name in fit.validation_mae
            cells.append(f"{1e3 * (fit.validation_mae if held else fit.train_mae)[log.name]:>15.1f}{'*' if held else ' '}")
        print(f"{f'kp {log.model.firmware.kp:.0f} {motion[log.name]} ({log.name[-8:]})':<34}" + "".join(cells))
    for label, which in (("mean fitted", "train_mae"), ("mean held out", "validation_mae")):
        cells = [f"{1e3 * np.mean(list(getattr(fits[k], which).values())):>15.1f} " if getattr(fits[k], which) else f"{'':>16}" for k in columns]
        print(f"{label:<34}" + "".join(cells))

    print("\nstall angle of up_and_down (rad): highest angle reached, measured and simulated (columns as above)")
    for log in logs:
        if motion[log.name] != "up_and_down":
            continue
        simulated = "".join(f"{fits[key].simulated(log).max():>15.3f} " for key in columns)
        print(f"{f'kp {log.model.firmware.kp:.0f}: measured {log.position.max():.3f}':<34}{simulated}")

    print("\nfitted stall parameters (+- standard error; inf: the logs do not determine it)")
    for key in columns:
        fit = fits[key]
        parts = [
            f"{n} {fit.parameters[n]:.3g} +- {fit.standard_errors[n]:.2g}{' (at its bound)' if fit.parameters[n] in PARAMETERS[n][:2] else ''}"
            for n in ("supply_resistance", "current_limit") if n in fit.parameters
        ]
        parts += [f"current_limit not reached (> {v:.2f} A)" for n, v in fit.unidentified.items()]
        print(f"{key[0]}/{TRAININGS[key[1]]}: kt {fit.parameters['kt']:.3f}, R {fit.parameters['R']:.3f} (bounds {PARAMETERS['R'][0]:g}-{PARAMETERS['R'][1]:g}), mu {fit.parameters['mu']:.3f}; {', '.join(parts) or 'none fitted'}; {fit.wall_s:.1f} s")

    up400 = next(log for log in by_kp[400.0] if motion[log.name] == "up_and_down")
    print("\nkp 100 -> kp 400 (Rs fitted) against the bound of Rs: the kp 100 logs (duty <= 0.38) leave it at its bound")
    base = fits["none", "kp100"].parameters
    rs, rs_error = logged_supply_resistance([p for p, log in zip(paths, logs) if log.model.firmware.kp == 100], base["kt"], base["R"])
    for label, span in [*((f"Rs <= {b:g} ohm", (0.0, b)) for b in (0.5, 1.0, 2.0, 5.0)),
                        (f"Rs = {rs:.3f} +- {rs_error:.3f} ohm (kp 100 logs' input_volts)", (rs, rs))]:
        fit = fit_servo(by_kp[100.0], LAW, validate=by_kp[400.0], stall=("supply_resistance",), bounds={"supply_resistance": span})
        print(f"  {label:<52} Rs {fit.parameters['supply_resistance']:.3f}: held out {1e3 * np.mean(list(fit.validation_mae.values())):.1f} mrad, "
              f"kp 400 stall {fit.simulated(up400).max():.3f} (measured {up400.position.max():.3f})")
    print("\ntargets")
    for variant in VARIANTS:
        a, full = fits[variant, "kp100"], fits[variant, "all"]
        held = 1e3 * np.mean(list(a.validation_mae.values()))
        gap = abs(a.simulated(up400).max() - up400.position.max())
        train = 1e3 * np.mean(list(full.train_mae.values()))
        print(f"{variant}: kp100 -> kp400 {held:.1f} mrad (< 45: {'met' if held < 45 else 'missed'}), "
              f"kp 400 stall off by {gap:.3f} rad (<= 0.02: {'met' if gap <= 0.02 else 'missed'}), "
              f"all eight {train:.1f} mrad (<= 29.6: {'met' if train <= 29.6 else 'missed'})")


if __name__ == "__main__":
    main()
