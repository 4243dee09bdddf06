"""Position-controlled servos identified from logs of ordinary motions, by simulation error.

The bench and the logs are :mod:`mbctl.identification.servo_log`; the simulated servo
(the shared model of :mod:`mbctl.dynamics.actuator` driving the bench pendulum) is
:mod:`mbctl.identification.servo_model`. Both are re-exported here, the module the command
line and the documentation name.

The parameters are fitted to the measured positions of whole logs, each simulated open
loop from its first sample: least squares with the exact Jacobian of the simulation
(CasADi, generated C), bounded, from several starts. Standard errors come from the
Gauss–Newton covariance ``s^2 (J^T J)^-1``; consecutive residuals are correlated, so they
understate the real uncertainty (compare fits on separate logs).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from mbctl.dynamics.actuator import STALL_PARAMETERS
from mbctl.errors import DataError, InputError
from mbctl.identification.servo_datasheet import MotorDataSheet
from mbctl.identification.servo_log import ServoLog, ServoModel, bench_model, read_run_log, read_servo_log
from mbctl.identification.servo_model import LAWS, parameter_names, residual_function, simulate_actuator, simulate_servo, simulated_current

__all__ = [
    "LAWS",
    "PARAMETERS",
    "SATURATION_DUTY",
    "ServoFit",
    "default_stall",
    "duty_share",
    "stall_choice",
    "bench_model",
    "ServoLog",
    "ServoModel",
    "fit_servo",
    "read_run_log",
    "read_servo_log",
    "residual_function",
    "simulate_actuator",
    "simulate_servo",
    "simulated_current",
]

# name -> (lower bound, upper bound, first start, unit); kt, R, armature ranges as BAM searches them
PARAMETERS: dict[str, tuple[float, float, float, str]] = {
    "kt": (0.1, 3.0, 0.8, "N m/A"),
    "R": (2.0, 5.0, 3.5, "ohm"),
    "armature": (1e-4, 0.05, 0.005, "kg m^2"),
    "fc": (0.0, 1.0, 0.05, "N m"),
    "fv": (0.0, 1.0, 0.05, "N m s/rad"),
    "fs": (0.0, 1.5, 0.1, "N m"),
    "vs": (0.01, 3.0, 0.2, "rad/s"),
    "mu": (0.0, 1.0, 0.05, "1"),
    "sigma0": (1.0, 5000.0, 200.0, "N m/rad"),
    "sigma1": (0.0, 5.0, 0.2, "N m s/rad"),
    "current_limit": (0.3, 5.0, 1.0, "A"),
    "supply_resistance": (0.0, 2.0, 0.3, "ohm"),
    "torque_saturation": (0.2, 50.0, 2.5, "N m"),
    "offset": (-0.05, 0.05, 0.0, "rad"),
}
# the fraction of a fit's samples at its current limit below which the logs do not show the limit
LIMIT_SEEN = 0.01
# duty from which a motor's torque per ampere visibly bends: an XL330 at 7.4 V and half the duty
# draws about 1.1 A at stall, the data sheet's first stall point, above which its torque per
# ampere falls (9 % by 1.7 A); logs whose P loop asks for it in LIMIT_SEEN of their samples show
# the torque saturation
SATURATION_DUTY = 0.5


def duty_share(logs: Sequence[ServoLog], duty: float) -> float:
    """The share of the logs' torque-on samples whose P loop asks for a duty of at least ``duty``, from
    the measured error: ``|kp e_counts / divisor| / pwm_max``, clipped at ``pwm_limit / pwm_max``."""
    asked = []
    for log in logs:
        fw = log.model.firmware
        counts = np.abs(log.goal - log.position) * fw.counts / (2 * math.pi)
        on = np.ones(len(log.t), dtype=bool) if log.enabled is None else log.enabled
        asked.append(np.minimum(fw.kp * counts / fw.divisor / fw.pwm_max, fw.pwm_limit / fw.pwm_max)[on])
    values = np.concatenate(asked) if asked else np.zeros(0)
    return float((values >= duty).mean()) if len(values) else 0.0


def default_stall(logs: Sequence[ServoLog], datasheet: MotorDataSheet | None) -> tuple[tuple[str, ...], dict[str, tuple[float, float]], str]:
    """What bounds the torque at stall when the command line does not say (``--stall auto``):
    ``(stall, bounds, why)``. Logs whose P loop reaches :data:`SATURATION_DUTY` in
    :data:`LIMIT_SEEN` of their samples fit ``torque_saturation``; logs that do not, with a known
    data sheet, hold it at the data sheet's value (they cannot show it, and a servo driven
    harder later will reach it); else none."""
    share = duty_share(logs, SATURATION_DUTY)
    reached = f"{100 * share:.0f} % of the samples ask for duty >= {SATURATION_DUTY:g}"
    if share >= LIMIT_SEEN:
        return ("torque_saturation",), {}, f"torque_saturation fitted ({reached})"
    if datasheet is not None:
        tau_sat = datasheet.saturation()[1]
        return ("torque_saturation",), {"torque_saturation": (tau_sat, tau_sat)}, f"torque_saturation held at the {datasheet.name} data sheet's {tau_sat:.3g} N m ({reached})"
    return (), {}, f"no stall parameter ({reached}, no data sheet)"


def stall_choice(names: Sequence[str], logs: Sequence[ServoLog], datasheet: MotorDataSheet | None) -> tuple[tuple[str, ...], dict[str, tuple[float, float]], str]:
    """``--stall``: ``(stall, bounds, why)``; ``("auto",)`` as :func:`default_stall` decides, ``("none",)`` none,
    else the names as given.

    Raises:
        InputError: Naming ``--stall``, for auto or none beside other names.
    """
    if tuple(names) == ("auto",):
        return default_stall(logs, datasheet)
    if tuple(names) == ("none",):
        return (), {}, ""
    if "auto" in names or "none" in names:
        raise InputError("auto and none stand alone", field="--stall")
    return tuple(names), {}, ""
LUGRE_MIN_FC = 1e-4  # N m: LuGre's lower bound of fc (g(omega) > 0 at every speed)


@dataclass(frozen=True)
class ServoFit:
    """A fitted servo model.

    Attributes:
        law: Friction law; parameters, standard_errors: by name (units in :data:`PARAMETERS`).
        train_mae, validation_mae: Mean absolute position error per log (rad).
        starts: Starts tried; cost: final half sum of squared errors (rad^2);
        evaluations: simulations of all logs (with or without sensitivities); wall_s: fit time (s); substeps: integration
        steps per log sample of the simulations.
        limited: For a fitted ``current_limit``: per fitted log, the fraction of its samples
            with the simulated current at the limit (where the limit is identified).
        unidentified: Stall parameters the logs did not show, with what they tell of them: a
            ``current_limit`` reached in fewer than :data:`LIMIT_SEEN` of the samples is left
            out of ``parameters`` (the firmware's applies) and given here as the largest
            simulated current (A), a lower bound.
    """

    law: str
    parameters: dict[str, float]
    standard_errors: dict[str, float]
    train_mae: dict[str, float]
    validation_mae: dict[str, float] = field(default_factory=dict)
    starts: int = 1
    cost: float = math.nan
    evaluations: int = 0
    wall_s: float = 0.0
    substeps: int = 5
    limited: dict[str, float] = field(default_factory=dict)
    unidentified: dict[str, float] = field(default_factory=dict)

    def simulated(self, log: ServoLog) -> np.ndarray:
        """The log's positions as this model simulates them (rad)."""
        return simulate_servo(log, self.law, self.parameters, substeps=self.substeps)


def _standard_errors(J: np.ndarray, cost: float, rcond: float = 1e-9) -> list[float]:
    """Gauss–Newton standard errors ``sqrt(diag(s^2 (J^T J)^-1))``, ``s^2 = 2 cost/(n - p)``.

    Directions the logs do not determine (singular values of the column-scaled ``J``
    below ``rcond`` of the largest) make the parameters they involve infinitely
    uncertain: e.g. back-EMF ``kt^2/R`` and viscous ``fv`` both damp as ``omega``
    unless some log has the torque off.
    """
    scale = np.linalg.norm(J, axis=0)
    scale[scale == 0] = 1.0
    _, sv, Vt = np.linalg.svd(J / scale, full_matrices=False)
    s2 = 2 * cost / max(1, J.shape[0] - J.shape[1])
    kept = sv > rcond * sv[0]
    cov = (Vt[kept].T / sv[kept] ** 2) @ Vt[kept] * s2 / np.outer(scale, scale)
    lost = np.zeros(J.shape[1], dtype=bool)
    for v in Vt[~kept]:
        lost |= np.abs(v) > 0.1
    return [math.inf if lost[i] else float(math.sqrt(max(cov[i, i], 0.0))) for i in range(J.shape[1])]


@dataclass(frozen=True)
class _Solution:
    x: np.ndarray
    cost: float
    residual: np.ndarray
    jac: np.ndarray


def _levenberg_marquardt(error, with_jacobian, z0: np.ndarray, lower: np.ndarray, upper: np.ndarray, *, max_iterations: int, ftol: float = 1e-5) -> _Solution:
    """Bounded Levenberg–Marquardt on ``0.5 |r(z)|^2``: steps ``(J^T J + lam D) dz = -J^T r``
    (``D`` the diagonal of ``J^T J``) on the parameters not held at a bound by the gradient,
    projected onto the bounds; ``lam`` shrinks after a step that lowers the cost and grows
    until one does. Stops when a step lowers the cost by less than ``ftol`` of it.
    Works on the 8 x 8 normal equations: no factorisation of the long Jacobian."""
    z = np.clip(z0, lower, upper)
    r, J = (np.asarray(a) for a in with_jacobian(z))
    r = r.ravel()
    cost = 0.5 * float(r @ r)
    if not np.isfinite(cost) or not np.isfinite(J).all():
        raise np.linalg.LinAlgError("non-finite simulation at the start")
    lam = 1e-3
    for _ in range(max_iterations):
        with np.errstate(over="ignore", invalid="ignore"):  # a start that blows up: its cost is not finite, the step is refused
            g, H = J.T @ r, J.T @ J
        d = np.sqrt(np.diag(H))
        d[d == 0] = 1.0
        free = ~(((z <= lower) & (g > 0)) | ((z >= upper) & (g < 0)))
        improved = False
        while lam < 1e12:
            A = H[np.ix_(free, free)] / np.outer(d[free], d[free]) + lam * np.eye(int(free.sum()))
            step = np.zeros_like(z)
            step[free] = -np.linalg.solve(A, g[free] / d[free]) / d[free]
            trial = np.clip(z + step, lower, upper)
            r_trial = np.asarray(error(trial)[0]).ravel()
            cost_trial = 0.5 * float(r_trial @ r_trial)
            if np.isfinite(cost_trial) and cost_trial < cost:
                improved = True
                break
            lam *= 4.0
        if not improved:
            break
        # a cautious update: the simulation error is rough in (fs, vs), and bolder damping
        # updates (Nielsen's) were seen to end in a degenerate Stribeck basin (fs -> 0)
        decrease = cost - cost_trial
        z, lam = trial, max(lam / 3.0, 1e-12)
        r, J = (np.asarray(a) for a in with_jacobian(z))
        r = r.ravel()
        cost = 0.5 * float(r @ r)
        if decrease <= ftol * cost:
            break
    return _Solution(x=z, cost=cost, residual=r, jac=J)


def fit_servo(
    logs: Sequence[ServoLog],
    law: str = "stribeck-load",
    *,
    validate: Sequence[ServoLog] = (),
    starts: int = 3,
    fit_offset: bool = False,
    substeps: int = 5,
    seed: int = 0,
    stall: Sequence[str] = (),
    bounds: Mapping[str, tuple[float, float]] | None = None,
    datasheet: MotorDataSheet | None = None,
) -> ServoFit:
    """Fit the servo model of ``law`` to the measured positions of ``logs``.

    Starts: the first from the middle guesses of :data:`PARAMETERS` (for ``lugre``, before it,
    the parameters of a Stribeck fit of the same logs with the bristles' guesses), the others drawn
    log-uniformly (uniformly for the offset) within the bounds with ``seed``; each is solved
    by :func:`_levenberg_marquardt` and the best final cost is kept. (A cheaper first pass
    with one integration step per sample was tried: its minima lie in other basins.)

    ``stall`` names the stall parameters to fit as well (``current_limit``, A;
    ``supply_resistance``, ohm; ``torque_saturation``, N m; see :mod:`mbctl.dynamics.actuator`); the others are the logs'
    firmware values. A fitted limit the simulated currents reach in fewer than
    :data:`LIMIT_SEEN` of the samples is not shown by the logs: the fit is repeated without it
    and :attr:`ServoFit.unidentified` gives the largest current as its lower bound (a limit
    held by equal bounds is kept).
    ``bounds`` replaces the :data:`PARAMETERS` bounds of the named parameters; equal bounds
    hold one fixed (standard error 0). ``datasheet``: the motor's data sheet; ``R`` is then held
    at its stall resistance (unless ``bounds`` name ``R``), which the logs cannot tell from ``kt``
    (:mod:`mbctl.identification.servo_datasheet`).

    Raises:
        InputError: For an unknown law, stall parameter or bound, or no logs.
        DataError: If no start converges to finite values.
    """
    if law not in LAWS:
        raise InputError(f"unknown law {law!r} (expected one of: {', '.join(LAWS)})", field="--law")
    if not logs:
        raise InputError("no logs to fit", field="logs")
    stall = tuple(dict.fromkeys(stall))
    unknown = [n for n in stall if n not in STALL_PARAMETERS]
    if unknown:
        raise InputError(f"unknown stall parameter {unknown[0]!r} (expected: {', '.join(STALL_PARAMETERS)})", field="--stall")
    start_time = time.perf_counter()
    if datasheet is not None and "R" not in (bounds or {}):
        bounds = {**(bounds or {}), "R": (datasheet.resistance, datasheet.resistance)}
    names = parameter_names(law, stall) + (("offset",) if fit_offset else ())
    span = {n: PARAMETERS[n][:2] for n in names} | dict(bounds or {})
    if not set(span) <= set(names) or not all(lo <= hi for lo, hi in span.values()):
        bad = next(n for n, (lo, hi) in span.items() if n not in names or lo > hi)
        raise InputError(f"bounds of {bad!r}: not a fitted parameter, or lower above upper", field="bounds")
    lower = np.array([span[n][0] for n in names], dtype=float)
    upper = np.array([span[n][1] for n in names], dtype=float)
    if law == "lugre":  # its state equation divides by g(omega), which tends to fc at speed
        lower[list(names).index("fc")] = LUGRE_MIN_FC
    evaluations = [0]

    rng = np.random.default_rng(seed)
    guesses = [np.array([PARAMETERS[n][2] for n in names])]
    if law == "lugre":
        # LuGre's steady state is the Stribeck law: its fit (cheaper, smoother) is the first
        # start, with the bristles' first guesses; from the generic start alone the fit of
        # the real XL330 logs ended at the bounds (fc, fs at their largest, sigma0 at its least)
        stribeck = fit_servo(
            logs,
            "stribeck",
            starts=starts,
            fit_offset=fit_offset,
            substeps=substeps,
            seed=seed,
            stall=stall,
            bounds={n: b for n, b in (bounds or {}).items() if n in parameter_names("stribeck", stall) or n == "offset"},
        )  # R held by the bounds already
        evaluations[0] += stribeck.evaluations
        guesses.insert(0, np.array([stribeck.parameters.get(n, PARAMETERS[n][2]) for n in names]))
    for _ in range(starts - 1):
        positive = lower > 0
        g = rng.uniform(lower, upper)
        g[positive] = np.exp(rng.uniform(np.log(lower[positive]), np.log(upper[positive])))
        guesses.append(g)
    # a step rejected by the damping needs the residual only: two functions
    error = residual_function(law, logs, fit_offset=fit_offset, substeps=substeps, jacobian=False, stall=stall)
    with_jacobian = residual_function(law, logs, fit_offset=fit_offset, substeps=substeps, stall=stall)

    def counted_error(z):
        evaluations[0] += 1
        return error(z)

    def counted_jacobian(z):
        evaluations[0] += 1
        return with_jacobian(z)

    best = None
    for guess in guesses:
        try:
            res = _levenberg_marquardt(counted_error, counted_jacobian, guess, lower, upper, max_iterations=100)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.isfinite(res.cost) and (best is None or res.cost < best.cost):
            best = res
    if best is None:
        raise DataError("the servo model could not be fitted from any start (non-finite simulation)")
    parameters = {n: float(v) for n, v in zip(names, best.x)}
    free = lower < upper  # equal bounds hold a parameter fixed: it has no error of its own
    errors = dict.fromkeys(names, 0.0) | dict(zip([n for n, f in zip(names, free) if f], _standard_errors(best.jac[:, free], best.cost)))

    limited = {}
    if "current_limit" in stall:
        currents = [np.abs(simulated_current(log, law, parameters, substeps=substeps)) for log in logs]
        limit = parameters["current_limit"]
        limited = {log.name: float((c >= limit * (1 - 1e-6)).mean()) for log, c in zip(logs, currents)}
        held = span["current_limit"][0] == span["current_limit"][1]  # a given value, not fitted: kept whether reached or not
        if not held and np.mean(np.concatenate(currents) >= limit * (1 - 1e-6)) < LIMIT_SEEN:
            # logs that never reach the limit do not show it (no gradient: it stays where a
            # start put it, and a barely touched limit bends the other parameters): fitted
            # again without it, so the firmware's value applies; the largest current is a lower bound
            rest = fit_servo(
                logs,
                law,
                validate=validate,
                starts=starts,
                fit_offset=fit_offset,
                substeps=substeps,
                seed=seed,
                stall=[n for n in stall if n != "current_limit"],
                bounds={n: b for n, b in (bounds or {}).items() if n != "current_limit"},
            )
            return dataclasses.replace(
                rest,
                standard_errors={**rest.standard_errors, "current_limit": math.inf},
                limited=limited,
                unidentified={"current_limit": float(max(c.max() for c in currents))},
                evaluations=rest.evaluations + evaluations[0],
                wall_s=time.perf_counter() - start_time,
            )

    def mae(log: ServoLog) -> float:
        return float(np.abs(simulate_servo(log, law, parameters, substeps=substeps) - log.position).mean())

    return ServoFit(
        substeps=substeps,
        law=law,
        parameters=parameters,
        standard_errors=errors,
        train_mae={log.name: float(np.abs(part).mean()) for log, part in zip(logs, np.split(best.residual, np.cumsum([len(log.t) for log in logs])[:-1]))},
        validation_mae={log.name: mae(log) for log in validate},
        starts=len(guesses),
        cost=float(best.cost),
        evaluations=evaluations[0],
        wall_s=time.perf_counter() - start_time,
        limited=limited,
    )
