"""Fitting static friction laws to friction points ``(v_k, F_k +- se_k)``, with uncertainty.

Models (``v > 0``; the laws of :mod:`mbctl.dynamics.friction.laws`):

- ``coulomb-viscous``: ``F = fc + fv*v`` — linear least squares;
- ``stribeck``: ``F = fc + (fs - fc)*exp(-(v/vs)**delta) + fv*v``, ``delta`` fixed
  (default 2) or free;
- ``lugre``: the static part of LuGre, i.e. ``stribeck`` with ``delta = 2``; the
  dynamic parameters come from the presliding test (:mod:`mbctl.identification.presliding`).

Every fit minimises the whitened residuals ``r_k = (F_k - F(v_k))/se_k`` under the
bounds ``fc >= 0``, ``fs >= fc``, ``vs > 0``, ``fv >= 0``, ``0.25 <= delta <= 8``
(solved in ``fc, fs - fc, ln vs, fv, delta`` by scipy's bounded trust-region
least squares). It starts from the linear (Coulomb–viscous) fit of the faster half
of the points unless given a start, converges with the plain quadratic loss, and
then refits with the Huber loss at ``1.345*s`` (``s`` the MAD scale of the
residuals), so a few bad points cannot drag the fit.

Uncertainty: the M-estimator covariance (Huber 1981, sec. 7.6)
``Cov = K**2*sum(psi(r)**2)/(n - p)/m**2*(J^T J)^-1`` with ``J`` the Jacobian of the
whitened model in the physical parameters, ``psi`` the Huber function,
``m = mean psi'(r)`` and ``K = 1 + p/n*var(psi')/m**2``. Without down-weighted
points it is ``chi2_red*(J^T J)^-1``: scaled by the reduced chi-square, so it holds
even when the per-point errors are off by a common factor. Confidence intervals
``theta +- t_{(1+c)/2, n-p}*se``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import least_squares, nnls
from scipy.special import stdtrit

from mbctl.dynamics.friction.laws import CoulombViscous, Stribeck
from mbctl.errors import DataError
from mbctl.identification.processing import FrictionPoints

__all__ = ["FrictionFit", "fit_friction", "STATIC_LAWS", "min_points", "stribeck_jacobian"]

STATIC_LAWS = ("coulomb-viscous", "stribeck", "lugre")
DELTA_BOUNDS = (0.25, 8.0)


def min_points(law: str, delta_free: bool = False) -> int:
    """Fewest speeds a fit needs: parameters + 2 (so the residual scale has 2 degrees of freedom)."""
    p = 2 if law == "coulomb-viscous" else 4 + int(delta_free)
    return p + 2


@dataclass(frozen=True)
class FrictionFit:
    """A static friction law fitted to friction points, with diagnostics.

    Attributes:
        law: The fitted law (``CoulombViscous`` or ``Stribeck``).
        names: Fitted parameters, in covariance order (fixed ones are not listed).
        values: Their values.
        stderr: Their standard errors.
        ci: Their confidence intervals ``(low, high)`` at level ``confidence``.
        covariance: Covariance of ``names``.
        confidence: Level of ``ci`` (0.95).
        residuals: ``F_k - F(v_k)`` (N·m, N).
        weights: Final robust (Huber) weight of every point, in [0, 1].
        residual_rms: RMS of ``residuals``.
        chi2_red: ``sum(r**2)/(n - p)`` of the whitened residuals (~1 when the
            per-point errors are right).
        dof: ``n - p``.
        found: The solver converged.
        at_bound: Parameters that ended on a bound (their uncertainty is not reliable).
        message: The solver's message.
        nfev: Model evaluations.
        points: The data fitted.
        fixed: Parameters held fixed (``delta``).
    """

    law: CoulombViscous | Stribeck
    names: tuple[str, ...]
    values: dict[str, float]
    stderr: dict[str, float]
    ci: dict[str, tuple[float, float]]
    covariance: np.ndarray
    confidence: float
    residuals: np.ndarray
    weights: np.ndarray
    residual_rms: float
    chi2_red: float
    dof: int
    found: bool
    at_bound: tuple[str, ...]
    message: str
    nfev: int
    points: FrictionPoints
    fixed: dict[str, float] = field(default_factory=dict)

    def predict(self, v: np.ndarray) -> np.ndarray:
        """Fitted ``F(v)`` for ``v > 0``."""
        return np.asarray(self.law.steady(np.asarray(v, dtype=float)), dtype=float)

    def band(self, v: np.ndarray) -> np.ndarray:
        """Half-width of the pointwise confidence band of ``F(v)`` (delta method)."""
        G = _jacobian(self.law, np.asarray(v, dtype=float), self.names)
        var = np.einsum("ij,jk,ik->i", G, self.covariance, G)
        return _t_quantile(self.confidence, self.dof) * np.sqrt(np.maximum(var, 0.0))

    def summary(self) -> dict:
        """JSON-ready description."""
        return {
            "law": self.law.name,
            "parameters": self.law.parameters(),
            "fitted": list(self.names),
            "fixed": self.fixed,
            "stderr": self.stderr,
            "ci": {k: list(v) for k, v in self.ci.items()},
            "confidence": self.confidence,
            "residual_rms": self.residual_rms,
            "chi2_red": self.chi2_red,
            "dof": self.dof,
            "found": self.found,
            "at_bound": list(self.at_bound),
            "downweighted_points": int((self.weights < 1).sum()),
            "nfev": self.nfev,
            "message": self.message,
        }


def _t_quantile(confidence: float, dof: int) -> float:
    return float(stdtrit(max(dof, 1), 0.5 + 0.5 * confidence))  # Student's t quantile


def stribeck_jacobian(law: Stribeck, v: np.ndarray) -> dict[str, np.ndarray]:
    """Partial derivatives of ``F(v) = fc + (fs - fc)*E + fv*v``, ``E = exp(-(v/vs)**delta)``, v > 0."""
    x = v / law.vs
    p = x**law.delta
    E = np.exp(-p)
    bump = law.fs - law.fc
    with np.errstate(divide="ignore", invalid="ignore"):
        dlog = np.where(x > 0, np.log(np.where(x > 0, x, 1.0)), 0.0)
    return {
        "fc": 1.0 - E,
        "fs": E,
        "vs": bump * E * law.delta * p / law.vs,
        "fv": v,
        "delta": -bump * E * p * dlog,
    }


def _jacobian(law: CoulombViscous | Stribeck, v: np.ndarray, names: tuple[str, ...]) -> np.ndarray:
    if isinstance(law, CoulombViscous):
        d = {"fc": np.ones_like(v), "fv": v}
    else:
        d = stribeck_jacobian(law, v)
    return np.column_stack([d[n] for n in names])


def _projected_start(
    v: np.ndarray, F: np.ndarray, se: np.ndarray, x0: np.ndarray, lb: np.ndarray, ub: np.ndarray, delta: float | None, delta_free: bool
) -> tuple[np.ndarray, int]:
    """Minimise over ``y = (ln vs[, delta])`` with ``(fc, fs - fc, fv)`` eliminated by NNLS."""
    b = F / se

    def linear(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        d = y[1] if delta_free else delta
        E = np.exp(-((v / math.exp(y[0])) ** d))
        A = np.column_stack([np.ones_like(v), E, v]) / se[:, None]
        c, _ = nnls(A, b)
        return c, b - A @ c

    iy = [2, 4] if delta_free else [2]
    sol = least_squares(lambda y: linear(y)[1], x0[iy], bounds=(lb[iy], ub[iy]), method="trf", diff_step=1e-7, xtol=1e-12, ftol=1e-12, max_nfev=500)
    c, _ = linear(sol.x)
    x = x0.copy()
    x[[0, 1, 3]] = c
    x[iy] = sol.x
    return np.clip(x, lb, ub), int(sol.nfev)


def _make_law(law: str, theta: np.ndarray, delta_fixed: float | None) -> CoulombViscous | Stribeck:
    if law == "coulomb-viscous":
        return CoulombViscous(fc=theta[0], fv=theta[1])
    fc, bump, lvs, fv = theta[:4]
    delta = theta[4] if delta_fixed is None else delta_fixed
    return Stribeck(fc=fc, fs=fc + bump, vs=math.exp(lvs), fv=fv, delta=delta)


def _initial_guess(v: np.ndarray, F: np.ndarray, se: np.ndarray) -> dict[str, float]:
    """Linear Coulomb–viscous fit of the faster half, then the bump at the slow end."""
    fast = v >= np.median(v)
    A = np.column_stack([np.ones(fast.sum()), v[fast]]) / se[fast, None]
    fc, fv = np.linalg.lstsq(A, F[fast] / se[fast], rcond=None)[0]
    fv = max(fv, 0.0)
    fc = max(fc, 1e-3 * float(np.abs(F).max()), 1e-12)
    excess = F - fc - fv * v
    slow = ~fast
    bump = max(float(excess[slow].max()) if slow.any() else 0.0, 0.05 * fc)
    below = np.flatnonzero(excess < bump * math.exp(-1))
    vs = float(v[below[0]]) if below.size else float(np.sqrt(v.min() * v.max()))
    return {"fc": fc, "fs": fc + bump, "vs": vs, "fv": fv, "delta": 2.0}


def fit_friction(
    points: FrictionPoints,
    law: str = "stribeck",
    *,
    delta: float | None = 2.0,
    start: Mapping[str, float] | None = None,
    robust: bool = True,
    confidence: float = 0.95,
) -> FrictionFit:
    """Fit a static law to friction points (see module docstring).

    Args:
        points: Friction against speed, with standard errors.
        law: ``"coulomb-viscous"``, ``"stribeck"`` or ``"lugre"`` (static part: Stribeck, delta = 2).
        delta: Stribeck exponent held fixed, or None to fit it.
        start: Starting values (``fc, fs, vs, fv, delta``); default from the linear fit.
        robust: Refit with the Huber loss.
        confidence: Level of the confidence intervals.

    Raises:
        DataError: If there are too few speeds for the law.
    """
    if law not in STATIC_LAWS:
        raise ValueError(f"unknown law {law!r}")
    if law == "lugre":
        law, delta = "stribeck", 2.0
    delta_free = law == "stribeck" and delta is None
    need = min_points(law, delta_free)
    if len(points) < need:
        raise DataError(f"only {len(points)} speeds with forward and reverse runs; a {law}{' (delta free)' if delta_free else ''} fit needs at least {need}")
    v, F = points.speed, points.friction
    # a floor keeps noise-free points (se ~ 0) usable; it is far below any measured spread
    floor = max(1e-9 * float(np.abs(F).max()), 1e-300)
    se = np.where(np.isfinite(points.stderr), np.maximum(points.stderr, floor), floor)

    guess = _initial_guess(v, F, se)
    if start:
        guess.update({k: float(x) for k, x in start.items()})
    if law == "coulomb-viscous":
        names = ("fc", "fv")
        x0 = np.array([guess["fc"], guess["fv"]])
        lb, ub = np.zeros(2), np.full(2, np.inf)
    else:
        names = ("fc", "fs", "vs", "fv") + (("delta",) if delta_free else ())
        lvs_lo, lvs_hi = math.log(v.min() / 100), math.log(v.max() * 100)
        x0 = [max(guess["fc"], 0.0), max(guess["fs"] - guess["fc"], 0.0), math.log(guess["vs"]), max(guess["fv"], 0.0)]
        lb = [0.0, 0.0, lvs_lo, 0.0]
        ub = [np.inf, np.inf, lvs_hi, np.inf]
        if delta_free:
            x0.append(guess["delta"])
            lb.append(DELTA_BOUNDS[0])
            ub.append(DELTA_BOUNDS[1])
        x0, lb, ub = np.array(x0), np.array(lb), np.array(ub)
    x0 = np.clip(x0, lb, ub)

    def residual(x: np.ndarray) -> np.ndarray:
        return (F - _make_law(law, x, delta).steady(v)) / se

    def jac(x: np.ndarray) -> np.ndarray:
        m = _make_law(law, x, delta)
        if law == "coulomb-viscous":
            return -np.column_stack([np.ones_like(v), v]) / se[:, None]
        d = stribeck_jacobian(m, v)  # type: ignore[arg-type]
        cols = [d["fc"] + d["fs"], d["fs"], d["vs"] * m.vs, d["fv"]] + ([d["delta"]] if delta_free else [])
        return -np.column_stack(cols) / se[:, None]

    opts = dict(jac=jac, bounds=(lb, ub), x_scale="jac", xtol=1e-12, ftol=1e-12, gtol=1e-12, max_nfev=2000)
    nfev = 0
    if law != "coulomb-viscous":
        # variable projection: fc, fs - fc and fv enter linearly, so for given (vs, delta)
        # they are a non-negative least-squares solve and only ln(vs) (and delta) are searched
        x0, nfev = _projected_start(v, F, se, x0, lb, ub, delta, delta_free)
    sol = least_squares(residual, x0, **opts)
    nfev += sol.nfev
    fscale = None
    if robust:
        s = 1.4826 * float(np.median(np.abs(sol.fun - np.median(sol.fun))))
        if s > 0:
            fscale = 1.345 * s
            sol = least_squares(residual, sol.x, loss="huber", f_scale=fscale, **opts)
            nfev += sol.nfev
    x = sol.x
    model = _make_law(law, x, delta)
    r = residual(x)
    n, p = len(v), len(names)
    w = np.minimum(1.0, fscale / np.maximum(np.abs(r), 1e-300)) if fscale else np.ones(n)
    dof = n - p
    # M-estimator covariance (Huber 1981, sec. 7.6): K^2 * sum(psi^2)/(n - p) / m^2 * (J^T J)^-1,
    # m = mean psi', K = 1 + p/n * var(psi')/m^2; the classic s^2 (J^T J)^-1 without down-weighted points
    psi = np.clip(r, -fscale, fscale) if fscale else r
    dpsi = (np.abs(r) <= fscale).astype(float) if fscale else np.ones(n)
    m = max(float(dpsi.mean()), 1.0 / n)
    K = 1.0 + p / n * float(dpsi.var()) / m**2
    s2 = K**2 * float((psi**2).sum()) / dof / m**2
    J = _jacobian(model, v, names) / se[:, None]
    try:
        cov = s2 * np.linalg.inv(J.T @ J)
    except np.linalg.LinAlgError:
        cov = np.full((p, p), np.nan)
    values = {k: float(getattr(model, k)) for k in names}
    err = {k: float(math.sqrt(cov[i, i])) if cov[i, i] >= 0 else math.nan for i, k in enumerate(names)}
    tq = _t_quantile(confidence, dof)
    ci = {k: (values[k] - tq * err[k], values[k] + tq * err[k]) for k in names}
    bound_names = ("fc", "fs", "vs", "fv", "delta") if law != "coulomb-viscous" else ("fc", "fv")
    on_bound = tuple(bound_names[i] for i in np.flatnonzero(sol.active_mask)) if sol.active_mask.size else ()
    return FrictionFit(
        law=model,
        names=names,
        values=values,
        stderr=err,
        ci=ci,
        covariance=cov,
        confidence=confidence,
        residuals=F - np.asarray(model.steady(v)),
        weights=w,
        residual_rms=float(np.sqrt(np.mean((F - np.asarray(model.steady(v))) ** 2))),
        chi2_red=float((r**2).sum()) / dof,
        dof=dof,
        found=bool(sol.success),
        at_bound=on_bound,
        message=str(sol.message),
        nfev=int(nfev),
        points=points,
        fixed={"delta": delta} if law == "stribeck" and delta is not None else {},
    )
