"""Presliding and break-away tests -> LuGre ``sigma0``, ``sigma1`` and the break-away torque.

Below break-away the LuGre joint deflects elastically. With ``F = u - tau_g`` the
friction (``tau_g`` constant: the joint barely moves) and a slow torque, ``g(v) ~ fs``
and ``F ~ sigma0*z``, so along any monotonic branch (direction ``s``)::

    dF/dx = sigma0*(1 - s*F/fs)

``sigma0`` is the slope at ``F = 0``. The slow cycle ``0 -> +A -> -A -> 0`` is
fitted with this law (:func:`fit_cycle`): ``x`` predicted from the torque branch by
branch (the cycle's torque is taken as three straight branches between its extremes,
fitted to the measured one, so its noise stays out of the model), with ``sigma0``, the offset ``c``
(gravity and the friction left by the holding loop: ``F = u - c``) and ``x0`` free,
``fs`` fixed to the break-away torque (or fitted when none is known).

Torque steps (:func:`fit_steps`) excite the presliding mode
``J*x'' + (sigma1 + fv)*x' + k*x = dF``; every return to the holding torque is
fitted with a second-order step response (gain ``A``, ``omega_n``, ``zeta``, start
time, offset). There the bristles swing about ``F ~ 0`` and ``k = sigma0`` (from the
cycle; the step's secant ``dF/A`` without it), so ``J = k/omega_n**2`` and
``sigma1 = 2*zeta*k/omega_n - fv`` (the steps' weighted mean; its standard error
includes the steps' scatter about it). It is reported unidentifiable (with the reason)
when the step moves the joint by fewer than 10 encoder counts, the mode is sampled
with fewer than 6 samples per period, the fit fails, or its relative standard error
exceeds 50 %.

Ramps through break-away (:func:`breakaway`): each ramp run ends when the joint
slips (a run that moved the joint by fewer than 5 counts is left out); the torque
is a line ``u(t)`` fitted over the run, evaluated at its end. Every + ramp is paired with the - ramp of the nearest rate (within 30 %);
``(u_b+ - u_b-)/2`` of a pair cancels gravity and the holding torque; a line through these against the rate gives the
break-away torque at zero rate (the detection lag adds ``rate*lag``).

Standard errors from the fits' Jacobians are inflated by ``(1 + rho)/(1 - rho)``
(``rho`` the lag-1 autocorrelation of the residuals), since position residuals are
correlated (quantisation, unmodelled dynamics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares

from mbctl.errors import DataError
from mbctl.identification.logs import TEST_CYCLE, TEST_RAMP, TEST_STEP, PreslidingLog
from mbctl.identification.processing import encoder_resolution

__all__ = ["BreakAway", "CycleFit", "StepFit", "PreslidingFit", "breakaway", "fit_cycle", "fit_steps", "fit_presliding"]

MIN_COUNTS = 10
SMOOTH = 21


@dataclass(frozen=True)
class BreakAway:
    """Break-away torque from the ramps.

    Attributes:
        value: Break-away torque at zero rate (N·m, N).
        stderr: Its standard error (NaN with fewer than three rates).
        rates: Ramp rates with both directions (N·m/s, N/s).
        per_rate: ``(u_b+ - u_b-)/2`` at each rate.
        ramps: ``(rate, direction, u_b, slipped)`` of every ramp.
        notes: What was left out.
    """

    value: float
    stderr: float
    rates: np.ndarray
    per_rate: np.ndarray
    ramps: tuple[tuple[float, int, float, bool], ...]
    notes: tuple[str, ...] = ()


@dataclass(frozen=True)
class CycleFit:
    """The slow cycle fitted with the quasi-static LuGre branch law.

    Attributes:
        sigma0, sigma0_stderr: Bristle stiffness (N·m/rad, N/m) and its standard error.
        offset: ``c`` in ``F = u - c`` (N·m, N).
        fs: Level used (fixed or fitted).
        fs_fitted: Whether ``fs`` was fitted.
        x, F, x_model: Displacement (rad, m), friction ``u - c`` and the model's displacement, per sample.
        counts: Encoder counts the cycle spans.
        residual_rms: RMS of ``x - x_model``.
    """

    sigma0: float
    sigma0_stderr: float
    offset: float
    fs: float
    fs_fitted: bool
    x: np.ndarray
    F: np.ndarray
    x_model: np.ndarray
    counts: float
    residual_rms: float


@dataclass(frozen=True)
class StepFit:
    """One torque step: second-order response parameters.

    Attributes:
        dF: Torque step (N·m, N).
        gain: Final displacement ``A`` (rad, m).
        omega_n, zeta: Natural frequency (rad/s) and damping ratio.
        damping, damping_stderr: ``c = 2*zeta*k/omega_n`` (N·m·s/rad) and its standard error.
        inertia: ``J = k/omega_n**2`` (kg·m²).
        counts: Encoder counts the response spans.
        t, x, x_model: Time from the step (s), displacement and fitted response.
        ok: Whether this step determines the damping; ``reason`` if not.
    """

    dF: float
    gain: float
    omega_n: float
    zeta: float
    damping: float
    damping_stderr: float
    inertia: float
    counts: float
    t: np.ndarray
    x: np.ndarray
    x_model: np.ndarray
    ok: bool
    reason: str = ""


@dataclass(frozen=True)
class PreslidingFit:
    """Everything the presliding log gives.

    Attributes:
        sigma0, sigma0_stderr: From the cycle (NaN if not identifiable).
        sigma1, sigma1_stderr: From the steps; NaN if not identifiable.
        sigma1_identified: Whether ``sigma1`` was determined; ``sigma1_reason`` why not.
        inertia: Presliding-mode inertia from the steps (kg·m²), NaN if unknown.
        breakaway: The ramps' result, or None without ramps.
        cycle: The cycle fit, or None.
        steps: The step fits.
        notes: Identifiability statements.
    """

    sigma0: float
    sigma0_stderr: float
    sigma1: float
    sigma1_stderr: float
    sigma1_identified: bool
    sigma1_reason: str
    inertia: float
    breakaway: BreakAway | None
    cycle: CycleFit | None
    steps: tuple[StepFit, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)

    def summary(self) -> dict:
        """JSON-ready description."""
        out = {
            "sigma0": self.sigma0,
            "sigma0_stderr": self.sigma0_stderr,
            "sigma1": self.sigma1,
            "sigma1_stderr": self.sigma1_stderr,
            "sigma1_identified": self.sigma1_identified,
            "sigma1_reason": self.sigma1_reason,
            "inertia": self.inertia,
            "notes": list(self.notes),
        }
        if self.breakaway is not None:
            b = self.breakaway
            out["breakaway"] = {"value": b.value, "stderr": b.stderr, "rates": b.rates.tolist(), "per_rate": b.per_rate.tolist(), "notes": list(b.notes)}
        if self.cycle is not None:
            c = self.cycle
            out["cycle"] = {"offset": c.offset, "fs": c.fs, "fs_fitted": c.fs_fitted, "counts": c.counts, "residual_rms": c.residual_rms}
        out["steps"] = [
            {"dF": s.dF, "gain": s.gain, "omega_n": s.omega_n, "zeta": s.zeta, "damping": s.damping, "damping_stderr": s.damping_stderr, "inertia": s.inertia, "counts": s.counts, "ok": s.ok, "reason": s.reason}
            for s in self.steps
        ]
        return out


def _smooth(x: np.ndarray, n: int = SMOOTH) -> np.ndarray:
    if len(x) < n:
        return x.copy()
    k = np.ones(n) / n
    pad = n // 2
    return np.convolve(np.pad(x, pad, mode="edge"), k, mode="valid")


def _median3(x: np.ndarray) -> np.ndarray:
    """Running median of three (ends kept)."""
    if len(x) < 3:
        return x.copy()
    m = np.median(np.stack([x[:-2], x[1:-1], x[2:]]), axis=0)
    return np.concatenate([[x[0]], m, [x[-1]]])


def _debounce(mask: np.ndarray, n: int) -> np.ndarray:
    """``mask`` with every run shorter than ``n`` samples (noise crossing a threshold) flipped."""
    out = mask.copy()
    for _ in range(3):
        change = np.flatnonzero(np.diff(out.astype(int))) + 1
        bounds = np.concatenate([[0], change, [len(out)]])
        short = [(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b - a < n and 0 < a]
        if not short:
            break
        for a, b in short:
            out[a:b] = out[a - 1]
    return out


def _inflation(residuals: np.ndarray) -> float:
    """``(1 + rho)/(1 - rho)`` for the lag-1 autocorrelation ``rho`` of the residuals (>= 1)."""
    r = residuals - residuals.mean()
    denom = float((r**2).sum())
    if denom == 0 or len(r) < 3:
        return 1.0
    rho = min(max(float((r[1:] * r[:-1]).sum()) / denom, 0.0), 0.99)
    return (1 + rho) / (1 - rho)


def _covariance(sol, inflate: float) -> np.ndarray:
    J = sol.jac
    n, p = J.shape
    s2 = float((sol.fun**2).sum()) / max(n - p, 1)
    try:
        return inflate * s2 * np.linalg.inv(J.T @ J)
    except np.linalg.LinAlgError:
        return np.full((p, p), np.nan)


def breakaway(log: PreslidingLog, resolution: float | None = None) -> BreakAway | None:
    """Break-away torque from the ramp runs (``test == 3``); None without any."""
    runs = log.runs(TEST_RAMP)
    if not runs:
        return None
    res = encoder_resolution(log.q) if resolution is None else resolution
    ramps = []
    notes = []
    for a, b in runs:
        if b - a < 5:
            notes.append(f"ramp at t = {log.t[a]:.3f} s has fewer than 5 samples")
            continue
        t, u = log.t[a:b], log.tau[a:b]
        slope, icpt = np.polyfit(t - t[0], u, 1)
        u_end = icpt + slope * (t[-1] - t[0])
        direction = 1 if slope > 0 else -1
        x = direction * (log.q[a:b] - log.q[a])
        slipped = bool(x[-1] > 5 * res)
        ramps.append((abs(float(slope)), direction, float(u_end), bool(slipped)))
        if not slipped:
            notes.append(f"ramp at t = {log.t[a]:.3f} s ({'+' if direction > 0 else '-'}) ends before the joint moved 5 counts")
    # pair every + ramp with the - ramp of the nearest rate (within 30 %), closest pairs first
    ups = [(r, u) for r, d, u, ok in ramps if ok and d > 0]
    downs = [(r, u) for r, d, u, ok in ramps if ok and d < 0]
    candidates = sorted((abs(ru - rd) / max(ru, rd), i, j) for i, (ru, _) in enumerate(ups) for j, (rd, _) in enumerate(downs))
    pairs: list[tuple[float, float]] = []
    used_up: set[int] = set()
    used_down: set[int] = set()
    for gap, i, j in candidates:
        if gap > 0.3 or i in used_up or j in used_down:
            continue
        used_up.add(i)
        used_down.add(j)
        pairs.append((0.5 * (ups[i][0] + downs[j][0]), 0.5 * (ups[i][1] - downs[j][1])))
    if not pairs:
        notes.append("no ramp rate slipped in both directions: no break-away torque")
        return BreakAway(math.nan, math.nan, np.zeros(0), np.zeros(0), tuple(ramps), tuple(notes))
    pairs.sort()
    rates = np.array([p[0] for p in pairs])
    values = np.array([p[1] for p in pairs])
    if len(pairs) >= 3 and np.ptp(rates) > 0.2 * rates.max():
        A = np.column_stack([np.ones_like(rates), rates])
        coef, *_ = np.linalg.lstsq(A, values, rcond=None)
        resid = values - A @ coef
        s2 = float((resid**2).sum()) / (len(values) - 2)
        cov = s2 * np.linalg.inv(A.T @ A)
        value, se = float(coef[0]), float(math.sqrt(cov[0, 0]))
    elif len(pairs) == 2 and np.ptp(rates) > 0.2 * rates.max():
        slope = (values[1] - values[0]) / (rates[1] - rates[0])
        value, se = float(values[0] - slope * rates[0]), math.nan
    else:
        value, se = float(values[0]), math.nan
        notes.append("one ramp rate: break-away torque at that rate, not extrapolated to zero rate")
    return BreakAway(value, se, rates, values, tuple(ramps), tuple(notes))


def _piecewise_linear(t: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The cycle's torque as three straight branches between its extremes (least-squares
    lines; the measurement noise would otherwise enter the model's regressor), and the
    direction of each sample's branch."""
    us = _smooth(u, 4 * SMOOTH + 1)
    turns = sorted({int(np.argmax(us)), int(np.argmin(us))})
    bounds = [0, *[k for k in turns if 5 < k < len(u) - 5], len(u)]
    line = np.empty_like(u)
    direction = np.empty_like(u)
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        slope, icpt = np.polyfit(t[lo:hi] - t[lo], u[lo:hi], 1)
        line[lo:hi] = icpt + slope * (t[lo:hi] - t[lo])
        direction[lo:hi] = 1.0 if slope >= 0 else -1.0
    return line, direction


def _branch_model(F: np.ndarray, direction: np.ndarray, sigma0: float, fs: float) -> np.ndarray:
    """Displacement from ``dF/dx = sigma0*(1 - s*F/fs)`` integrated along the samples (from 0)."""
    Fm = 0.5 * (F[1:] + F[:-1])
    stiff = sigma0 * np.maximum(1.0 - direction[1:] * Fm / fs, 1e-3)
    return np.concatenate([[0.0], np.cumsum(np.diff(F) / stiff)])


def fit_cycle(log: PreslidingLog, fs: float | None, resolution: float | None = None) -> CycleFit | str:
    """Fit the slow cycle (``test == 1``); a string saying why not, if it cannot be used."""
    runs = log.runs(TEST_CYCLE)
    if not runs:
        return "no slow torque cycle (test = 1) in the log"
    a, b = max(runs, key=lambda r: r[1] - r[0])
    if b - a < 50:
        return "the slow torque cycle has fewer than 50 samples"
    res = encoder_resolution(log.q) if resolution is None else resolution
    x = log.q[a:b] - log.q[a]
    counts = float(np.ptp(x) / res) if res > 0 else math.inf
    if counts < MIN_COUNTS:
        return f"the cycle moves the joint by {counts:.0f} encoder counts (needs >= {MIN_COUNTS}): sigma0 is not identifiable with this encoder"
    u, direction = _piecewise_linear(log.t[a:b], log.tau[a:b])
    amp = float(np.ptp(u))
    # initial slope from the first quarter (the virgin branch)
    q1 = max(len(u) // 8, 5)
    slope0 = np.polyfit(x[:q1], u[:q1], 1)[0] if np.ptp(x[:q1]) > 0 else amp / max(float(np.ptp(x)), 1e-12)
    s0 = max(abs(slope0), 1e-9)
    fs_fixed = fs is not None and math.isfinite(fs) and fs > 0
    fs0 = fs if fs_fixed else 2.0 * max(abs(u - u[0]).max(), 1e-12)
    c0 = float(u[0])

    def unpack(p: np.ndarray) -> tuple[float, float, float, float]:
        return math.exp(p[0]), p[1], p[2], (fs if fs_fixed else math.exp(p[3]))

    def residual(p: np.ndarray) -> np.ndarray:
        sigma0, c, x0, level = unpack(p)
        return (x - x0 - _branch_model(u - c, direction, sigma0, level)) / max(res, 1e-12)

    p0 = [math.log(s0), c0, 0.0] + ([] if fs_fixed else [math.log(fs0)])
    lb = [-np.inf, -np.inf, -np.inf] + ([] if fs_fixed else [math.log(1.01 * float(np.abs(u - c0).max()))])
    ub = [np.inf] * len(p0)
    p0 = np.clip(p0, lb, ub)
    sol = least_squares(residual, p0, bounds=(lb, ub), x_scale="jac")
    sigma0, c, x0, level = unpack(sol.x)
    cov = _covariance(sol, _inflation(sol.fun))
    se = sigma0 * math.sqrt(cov[0, 0]) if np.isfinite(cov[0, 0]) and cov[0, 0] >= 0 else math.nan
    model = x0 + _branch_model(u - c, direction, sigma0, level)
    return CycleFit(
        sigma0=sigma0,
        sigma0_stderr=se,
        offset=c,
        fs=level,
        fs_fitted=not fs_fixed,
        x=x,
        F=u - c,
        x_model=model,
        counts=counts,
        residual_rms=float(np.sqrt(np.mean((x - model) ** 2))),
    )


def _step_response(t: np.ndarray, A: float, wn: float, zeta: float) -> np.ndarray:
    """``A*(1 + (r2*exp(r1 t) - r1*exp(r2 t))/(r1 - r2))`` for ``t >= 0``, 0 before."""
    z = zeta if abs(zeta - 1.0) > 1e-6 else 1.0 + 1e-6
    root = np.sqrt(complex(z * z - 1.0))
    r1, r2 = wn * (-z + root), wn * (-z - root)
    tt = np.maximum(t, 0.0)
    y = 1.0 + (r2 * np.exp(r1 * tt) - r1 * np.exp(r2 * tt)) / (r1 - r2)
    return np.where(t >= 0, A * y.real, 0.0)


def fit_steps(log: PreslidingLog, sigma0: float | None = None, fv: float = 0.0, resolution: float | None = None) -> list[StepFit]:
    """Fit the returns to the holding torque inside the step runs (``test == 2``).

    A step run holds the torque at the holding level ``u_h`` (the mean before the run)
    or a step away from it; only the edges back to ``u_h`` are fitted: there the
    bristles oscillate about ``F ~ 0``, where the LuGre presliding spring and damper
    are the same in both directions (``sigma0``, ``sigma1 + fv``), so the mode is
    linear. With ``sigma0`` known (from the cycle) the stiffness is ``sigma0``,
    else the step's secant ``dF/A``.
    """
    res = encoder_resolution(log.q) if resolution is None else resolution
    dt = float(np.median(np.diff(log.t)))
    out = []
    for a, b in log.runs(TEST_STEP):
        if b - a < 20 or a < 5:
            continue
        hold = float(np.mean(log.tau[max(a - 50, 0) : a]))
        u = _median3(log.tau[a:b])
        dev = np.abs(u - hold)
        size = float(np.percentile(dev, 90))
        away = _debounce(dev > 0.5 * size, 10)
        edges = np.flatnonzero(np.diff(away.astype(int))) + 1
        for i, e in enumerate(edges):
            if away[e]:
                continue  # an edge away from the hold level
            stop = edges[i + 1] if i + 1 < len(edges) else len(u)
            before = float(np.median(u[max(e - (e - (edges[i - 1] if i else 0)) // 2, 0) : e]))
            out.append(_fit_edge(log, a + int(e), a + int(stop), hold - before, sigma0, fv, res, dt))
    return out


def _fit_edge(log: PreslidingLog, e: int, stop: int, dF: float, sigma0: float | None, fv: float, res: float, dt: float) -> StepFit:
    start = max(e - 5, 0)
    t = log.t[start:stop] - log.t[e]
    x = log.q[start:stop] - log.q[start]
    counts = float(np.ptp(x) / res) if res > 0 else math.inf
    nan = math.nan
    if counts < MIN_COUNTS:
        return StepFit(dF, nan, nan, nan, nan, nan, nan, counts, t, x, np.zeros_like(x), False, f"the step moves the joint by {counts:.0f} encoder counts (needs >= {MIN_COUNTS})")
    A0 = float(np.median(x[-max(len(x) // 5, 3) :]))
    # frequency guess from the first peak (or the rise time)
    k = int(np.argmax(np.sign(A0) * x)) if A0 != 0 else len(x) // 4
    tp = max(float(t[k]), 3 * dt)
    wn0 = math.pi / tp

    def residual(p: np.ndarray) -> np.ndarray:
        A, lwn, zeta, t0, x0 = p
        return (x - x0 - _step_response(t - t0, A, math.exp(lwn), zeta)) / max(res, 1e-12)

    best = None
    for zeta0 in (0.2, 0.7, 1.5):
        p0 = [A0, math.log(wn0), zeta0, 0.0, 0.0]
        lb = [-np.inf, math.log(1e-2), 1e-3, -2 * dt, -np.inf]
        ub = [np.inf, math.log(math.pi / dt), 20.0, 2 * dt, np.inf]
        sol = least_squares(residual, np.clip(p0, lb, ub), bounds=(lb, ub), x_scale="jac")
        if best is None or sol.cost < best.cost:
            best = sol
    A, lwn, zeta, t0, x0 = best.x
    wn = math.exp(lwn)
    model = x0 + _step_response(t - t0, A, wn, zeta)
    cov = _covariance(best, _inflation(best.fun))
    secant = sigma0 is None or not math.isfinite(sigma0)
    k_eff = dF / A if secant else sigma0
    damping = 2 * zeta * k_eff / wn
    # c = 2*zeta*k/wn: gradient in (A, ln wn, zeta, t0, x0) (delta method); k = dF/A depends on A
    g = np.array([-damping / A if secant else 0.0, -damping, damping / zeta, 0.0, 0.0])
    var = float(g @ cov @ g) if np.all(np.isfinite(cov)) else nan
    se = math.sqrt(var) if var >= 0 else nan
    reason = ""
    if not best.success:
        reason = f"the step response fit failed ({best.message})"
    elif wn * dt > 2 * math.pi / 6:
        reason = f"the presliding mode ({wn / 2 / math.pi:.1f} Hz) has fewer than 6 samples per period"
    elif not (se < 0.5 * abs(damping - fv)):
        reason = f"damping {damping:.4g} +- {se:.2g} is not determined to 50 % (zeta = {zeta:.2f})"
    return StepFit(dF, A, wn, zeta, damping, se, k_eff / wn**2, counts, t, x, model, not reason, reason)


def fit_presliding(log: PreslidingLog, *, fs: float | None = None, fv: float = 0.0) -> PreslidingFit:
    """Break-away, sigma0 and sigma1 from a presliding log (see module docstring).

    Args:
        log: The presliding log.
        fs: Static friction level for the cycle's curvature when the log has no
            usable ramps (e.g. from the constant-speed fit); the break-away torque
            of the ramps is preferred.
        fv: Viscous coefficient, subtracted from the presliding damping.

    Raises:
        DataError: If the log holds no test at all.
    """
    if not (log.test != 0).any():
        raise DataError("no presliding test in the log (every 'test' value is 0)", file=log.source)
    res = encoder_resolution(log.q)
    notes = []
    ba = breakaway(log, res)
    level = fs
    if ba is not None and math.isfinite(ba.value):
        level = ba.value
    cycle = fit_cycle(log, level, res)
    if isinstance(cycle, str):
        notes.append(cycle)
        cycle = None
    steps = fit_steps(log, cycle.sigma0 if cycle else None, fv, res)
    good = [s for s in steps if s.ok]
    if good:
        w = np.array([1.0 / s.damping_stderr**2 for s in good])
        values = np.array([s.damping for s in good])
        c = float((w * values).sum() / w.sum())
        c_se = float(1.0 / math.sqrt(w.sum()))
        if len(good) > 1:  # the steps disagree by more than their fits say: model error, count it
            c_se = math.sqrt(c_se**2 + float(np.var(values, ddof=1)) / len(good))
        sigma1, sigma1_se, reason = c - fv, c_se, ""
        inertia = float(np.mean([s.inertia for s in good]))
    else:
        sigma1 = sigma1_se = math.nan
        reason = steps[0].reason if steps else "no torque steps (test = 2) in the log"
        if len(steps) > 1:
            reason = "; ".join(dict.fromkeys(s.reason for s in steps))
        inertia = float(np.mean([s.inertia for s in steps if math.isfinite(s.inertia)])) if any(math.isfinite(s.inertia) for s in steps) else math.nan
        notes.append(f"sigma1 not identifiable: {reason}")
    return PreslidingFit(
        sigma0=cycle.sigma0 if cycle else math.nan,
        sigma0_stderr=cycle.sigma0_stderr if cycle else math.nan,
        sigma1=sigma1,
        sigma1_stderr=sigma1_se,
        sigma1_identified=bool(good),
        sigma1_reason=reason,
        inertia=inertia,
        breakaway=ba,
        cycle=cycle,
        steps=tuple(steps),
        notes=tuple(notes),
    )
