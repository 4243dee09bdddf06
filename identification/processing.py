"""Constant-speed logs -> friction points ``F(v_k)`` with standard errors, and the gravity profile.

At constant speed the inertial and velocity-product terms vanish, so at one
position ``phi`` the torques of the forward (``+v``) and reverse (``-v``) runs are
``u_f = tau_g(phi) + F(v)`` and ``u_r = tau_g(phi) - F(v)`` (symmetric friction)::

    F(v)       = (u_f - u_r)/2       gravity cancels
    tau_g(phi) = (u_f + u_r)/2       the gravity profile, a by-product

Steps (:func:`process_constant_speed`):

1. **Segments.** With ``dq_ref`` logged, every run of constant non-zero ``dq_ref`` is
   a constant-speed segment at that speed (at the measured speed, the slope of a
   line fitted to ``q(t)``, if the two differ by more than 1 % plus one count over
   the segment). Without it, the speed is estimated from
   positions over windows long enough to span 20 encoder counts, and each motion
   between two stops contributes its longest plateau (speed within 10 % of the
   motion's median speed), at the slope of a line fitted to ``q(t)``; this needs an
   encoder that resolves every speed to 20 counts within a second or so (log
   ``dq_ref`` for slow speeds on coarse encoders).
2. **Transients.** The first ``settle_s`` of every segment is dropped.
3. **Stick-slip.** A segment whose speed, over windows spanning 10 counts, varies by
   more than ``stick_slip_limit`` (relative standard deviation) is dropped with
   that reason.
4. **Pairing.** Segments are grouped by speed (within 2 %); a speed needs forward
   and reverse segments. Positions are binned, about 30 bins over the range both
   directions cover, each at least two encoder counts and eight samples wide (on a segment where the
   joint moved uniformly, within one count RMS of a straight line, positions come
   from that line, which removes the encoder quantisation). The mean torques of
   the two directions are paired per bin, after moving both to the pair's mean
   position along the local slope of the gravity profile (the directions sample a
   bin at slightly different mean positions); bins with fewer than 80 % of the
   median sample count in either direction (the partly covered ends) are left out.
5. **Robust average.** Per speed, ``F`` is the Huber M-estimate (k = 1.345, MAD
   scale) of the per-bin values ``(u_f - u_r)/2``; ``spread`` is the robust standard
   deviation of the per-bin values. Its standard error pools the sandwich estimate
   ``s*sqrt(sum psi**2)/sum psi'`` from the bins' scatter with a white-noise model
   (the torque noise pooled over every bin of every speed, scattered about a
   straight line in position within each bin), so that speeds with few bins still
   get a sound error (see :func:`_points`). Speeds with fewer than 5 bins are dropped.

The asymmetric option fits each direction on its own, which needs a gravity
reference (``tau_g`` column): ``F+(v) = u_f - tau_g``, ``F-(v) = tau_g - u_r`` (both > 0).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbctl.errors import DataError
from mbctl.identification.logs import ConstantSpeedLog

__all__ = [
    "Segment",
    "DroppedSegment",
    "FrictionPoints",
    "GravityProfile",
    "ProcessedLog",
    "process_constant_speed",
    "find_segments",
    "huber_location",
    "encoder_resolution",
]

HUBER_K = 1.345
BINS_PER_SPEED = 30
SPEED_TOLERANCE = 0.02
COUNT_WINDOW = 20  # counts a speed-estimation window must span
STICK_SLIP_COUNTS = 10
MIN_BINS = 5
PRIOR_DOF = 20
HUBER_EFFICIENCY = 1.0 / 0.95  # variance of the Huber mean (k = 1.345) relative to the plain mean, Gaussian data
REFERENCE_SPEED_TOLERANCE = 0.01


@dataclass(frozen=True)
class Segment:
    """Samples ``start:stop`` of the log (transient dropped) at constant ``speed`` (signed, rad/s, m/s)."""

    start: int
    stop: int
    speed: float
    t0: float
    t1: float


@dataclass(frozen=True)
class DroppedSegment:
    """A segment (or speed) left out, and why."""

    t0: float
    t1: float
    speed: float
    reason: str


@dataclass(frozen=True)
class FrictionPoints:
    """Friction against speed, one point per tested speed.

    Attributes:
        speed: Speed ``v_k`` (rad/s, m/s), > 0, increasing.
        friction: ``F(v_k)`` (N·m, N).
        stderr: Standard error of each ``F(v_k)``.
        spread: Robust standard deviation of the per-bin values behind each point.
        bins: Number of position bins behind each point.
        direction: ``"both"`` (paired), ``"forward"`` or ``"reverse"``.
    """

    speed: np.ndarray
    friction: np.ndarray
    stderr: np.ndarray
    spread: np.ndarray
    bins: np.ndarray
    direction: str = "both"

    def __len__(self) -> int:
        return len(self.speed)


@dataclass(frozen=True)
class GravityProfile:
    """``tau_g(q) = (u_f + u_r)/2`` (N·m, N) at positions ``q`` (rad, m): the per-speed bin
    values pooled into 60 bins (mean value at mean position), with their standard deviation."""

    q: np.ndarray
    tau: np.ndarray
    spread: np.ndarray

    def at(self, q: float) -> float:
        """Interpolated gravity torque at ``q``; NaN outside the profile."""
        if len(self.q) == 0 or q < self.q[0] or q > self.q[-1]:
            return math.nan
        return float(np.interp(q, self.q, self.tau))


@dataclass(frozen=True)
class ProcessedLog:
    """Everything processing found in a constant-speed log.

    Attributes:
        points: Paired friction points (symmetric friction).
        gravity: The gravity profile.
        segments: Constant-speed segments used.
        dropped: Segments and speeds left out, with reasons.
        resolution: Estimated encoder resolution (rad, m).
        forward, reverse: Per-direction points (asymmetric option), else None.
        torque_noise: Per-sample torque noise pooled over all bins (N·m, N): the scatter
            about a straight line in position within every bin.
    """

    points: FrictionPoints
    gravity: GravityProfile
    segments: tuple[Segment, ...]
    dropped: tuple[DroppedSegment, ...]
    resolution: float
    forward: FrictionPoints | None = None
    reverse: FrictionPoints | None = None
    torque_noise: float = math.nan


def huber_location(x: np.ndarray, k: float = HUBER_K) -> tuple[float, float, float]:
    """Huber M-estimate of location: ``(estimate, standard error, robust scale)``.

    Scale ``s = 1.4826*MAD``; the estimate solves ``sum psi((x - m)/s) = 0`` with
    ``psi(r) = clip(r, -k, k)`` (iterated); standard error
    ``s*sqrt(sum psi**2)/sum psi'`` (the M-estimator sandwich).
    """
    x = np.asarray(x, dtype=float)
    n = len(x)
    m = float(np.median(x))
    s = 1.4826 * float(np.median(np.abs(x - m)))
    if n < 2:
        return m, math.nan, math.nan
    if s == 0:
        s = float(np.std(x, ddof=1))
        if s == 0:
            return m, 0.0, 0.0
    for _ in range(50):
        r = np.clip((x - m) / s, -k, k)
        step = s * r.mean()
        m += step
        if abs(step) < 1e-12 * s:
            break
    r = (x - m) / s
    psi = np.clip(r, -k, k)
    dpsi = (np.abs(r) <= k).sum()
    se = s * math.sqrt(float((psi**2).sum()) * n / max(n - 1, 1)) / max(dpsi, 1)
    return m, se, s


def encoder_resolution(q: np.ndarray) -> float:
    """Smallest position step in the log (rad, m): the encoder resolution when quantised."""
    steps = np.abs(np.diff(q))
    steps = steps[steps > 1e-12 * max(1.0, float(np.abs(q).max()))]
    return float(steps.min()) if steps.size else 0.0


def _speed_over(t: np.ndarray, q: np.ndarray, window_s: float) -> np.ndarray:
    """Centred speed ``(q(t + W/2) - q(t - W/2))/W`` by interpolation (ends: one-sided)."""
    lo = np.clip(t - 0.5 * window_s, t[0], t[-1])
    hi = np.clip(t + 0.5 * window_s, t[0], t[-1])
    span = np.maximum(hi - lo, 1e-12)
    return (np.interp(hi, t, q) - np.interp(lo, t, q)) / span


def _multiscale_speed(t: np.ndarray, q: np.ndarray, resolution: float) -> np.ndarray:
    """Speed over the shortest window (20 ms ... 5 s) whose position change spans 20 counts."""
    windows = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)
    v = _speed_over(t, q, windows[-1])
    done = np.zeros(len(t), dtype=bool)
    for w in windows:
        vw = _speed_over(t, q, w)
        ok = ~done & (np.abs(vw) * w >= COUNT_WINDOW * resolution)
        v[ok] = vw[ok]
        done |= ok
    return v


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    m = np.concatenate([[False], mask, [False]]).astype(int)
    edges = np.flatnonzero(np.diff(m))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def _segments_from_reference(log: ConstantSpeedLog) -> list[tuple[int, int, float]]:
    scale = max(float(np.abs(log.dq_ref).max()), 1e-300)
    ref = np.where(np.abs(log.dq_ref) > 1e-9 * scale, log.dq_ref, 0.0)  # round-off at the ends of ramps is rest
    change = np.concatenate([[True], np.abs(np.diff(ref)) > 1e-9 * scale])
    starts = np.flatnonzero(change)
    stops = np.concatenate([starts[1:], [len(ref)]])
    return [(int(a), int(b), float(ref[a])) for a, b in zip(starts, stops) if ref[a] != 0 and b - a >= 10]


def _segments_from_plateaus(log: ConstantSpeedLog, resolution: float) -> list[tuple[int, int, float]]:
    t, q = log.t, log.q
    res = resolution if resolution > 0 else 1e-9
    v = _multiscale_speed(t, q, res)
    floor = COUNT_WINDOW * res / 5.0
    out = []
    for sign in (1.0, -1.0):
        for a, b in _runs(sign * v > floor):
            if b - a < 10:
                continue
            mid = v[a + (b - a) // 4 : b - (b - a) // 4 + 1]
            vc = float(np.median(mid))
            flat = _runs(np.abs(v[a:b] - vc) <= 0.1 * abs(vc))
            if not flat:
                continue
            i0, i1 = max(flat, key=lambda r: r[1] - r[0])
            i0, i1 = a + i0, a + i1
            if i1 - i0 < 10:
                continue
            slope = float(np.polyfit(t[i0:i1] - t[i0], q[i0:i1], 1)[0])
            out.append((i0, i1, slope))
    return sorted(out)


def find_segments(log: ConstantSpeedLog, settle_s: float, stick_slip_limit: float = 0.3) -> tuple[list[Segment], list[DroppedSegment], float]:
    """Constant-speed segments with transients dropped; the dropped ones with reasons; the resolution."""
    resolution = encoder_resolution(log.q)
    raw = _segments_from_reference(log) if log.dq_ref is not None else _segments_from_plateaus(log, resolution)
    t = log.t
    kept: list[Segment] = []
    dropped: list[DroppedSegment] = []
    for a, b, speed in raw:
        a2 = int(np.searchsorted(t, t[a] + settle_s, side="left"))
        if b - a2 < 10:
            dropped.append(DroppedSegment(float(t[a]), float(t[b - 1]), speed, f"shorter than the settle time {settle_s:g} s plus 10 samples"))
            continue
        if log.dq_ref is not None:
            # the commanded speed is exact when the joint tracks it; a drive that does
            # not (a velocity loop without integral action) gets its measured speed
            measured = float(np.polyfit(t[a2:b] - t[a2], log.q[a2:b], 1)[0])
            if abs(measured - speed) > REFERENCE_SPEED_TOLERANCE * abs(speed) + resolution / (t[b - 1] - t[a2]):
                speed = measured
        seg = Segment(a2, b, speed, float(t[a2]), float(t[b - 1]))
        variation = _speed_variation(log, seg, resolution)
        if variation > stick_slip_limit:
            dropped.append(DroppedSegment(seg.t0, seg.t1, speed, f"stick-slip: speed varies by {100 * variation:.0f} % (limit {100 * stick_slip_limit:.0f} %)"))
            continue
        kept.append(seg)
    return kept, dropped, resolution


def _speed_variation(log: ConstantSpeedLog, seg: Segment, resolution: float) -> float:
    """Relative standard deviation of the speed over windows spanning 10 counts (at least 20 ms)."""
    t, q = log.t[seg.start : seg.stop], log.q[seg.start : seg.stop]
    duration = t[-1] - t[0]
    v = abs(seg.speed)
    window = max(0.02, STICK_SLIP_COUNTS * resolution / v)
    if window > duration / 3:
        return 0.0  # too few counts to tell; the encoder is too coarse for this speed
    vw = _speed_over(t, q, window)
    inner = (t >= t[0] + window / 2) & (t <= t[-1] - window / 2)
    return float(np.std(vw[inner]) / v)


def _bin_means(q: np.ndarray, u: np.ndarray, edges0: float, width: float, nbins: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.floor((q - edges0) / width).astype(int)
    ok = (idx >= 0) & (idx < nbins)
    counts = np.bincount(idx[ok], minlength=nbins).astype(float)
    sums = np.bincount(idx[ok], weights=u[ok], minlength=nbins)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(counts > 0, sums / np.maximum(counts, 1), np.nan), counts


def _group_by_speed(segments: list[Segment]) -> list[list[Segment]]:
    order = sorted(segments, key=lambda s: abs(s.speed))
    groups: list[list[Segment]] = []
    for s in order:
        if groups and abs(s.speed) <= abs(groups[-1][0].speed) * (1 + SPEED_TOLERANCE):
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def process_constant_speed(
    log: ConstantSpeedLog,
    *,
    settle_s: float = 0.2,
    asymmetric: bool = False,
    stick_slip_limit: float = 0.3,
    bins: int = BINS_PER_SPEED,
) -> ProcessedLog:
    """Friction points and gravity profile of a constant-speed log (see module docstring).

    Raises:
        DataError: If no constant-speed segment is found, if no speed has runs in
            both directions, or, with ``asymmetric``, if the log has no ``tau_g``.
    """
    if asymmetric and log.tau_g is None:
        raise DataError("the asymmetric fit needs a gravity reference: add a tau_g column (zeros for a joint whose axis is vertical)", file=log.source)
    segments, dropped, resolution = find_segments(log, settle_s, stick_slip_limit)
    if not segments:
        how = "runs of constant non-zero dq_ref" if log.dq_ref is not None else "velocity plateaus"
        extra = f" ({len(dropped)} dropped: {dropped[0].reason})" if dropped else ""
        raise DataError(f"no constant-speed segments found ({how}){extra}", file=log.source)
    rows, fwd_rows, rev_rows = [], [], []
    noise_rss, noise_dof = 0.0, 0
    used: list[Segment] = []
    gq, gt = [], []
    for group in _group_by_speed(segments):
        fw = [s for s in group if s.speed > 0]
        rv = [s for s in group if s.speed < 0]
        v = float(np.mean([abs(s.speed) for s in group]))
        if not fw or not rv:
            missing = "reverse" if not rv else "forward"
            dropped.append(DroppedSegment(group[0].t0, group[-1].t1, v, f"no {missing} run at this speed"))
            continue
        idx_f = np.concatenate([np.arange(s.start, s.stop) for s in fw])
        idx_r = np.concatenate([np.arange(s.start, s.stop) for s in rv])
        qpos = _segment_positions(log, fw + rv, resolution)
        lo = max(qpos[idx_f].min(), qpos[idx_r].min())
        hi = min(qpos[idx_f].max(), qpos[idx_r].max())
        # at least two counts and about eight samples per bin and direction
        dt = float(np.median(np.diff(log.t[idx_f[: min(len(idx_f), 1000)]])))
        width = max((hi - lo) / bins, 2 * resolution, 8 * v * dt)
        nb = int(math.floor((hi - lo) / width)) if hi > lo else 0
        if nb < MIN_BINS:
            dropped.append(DroppedSegment(group[0].t0, group[-1].t1, v, f"forward and reverse runs share fewer than {MIN_BINS} position bins"))
            continue
        uf, nf = _bin_means(qpos[idx_f], log.tau[idx_f], lo, width, nb)
        ur, nr = _bin_means(qpos[idx_r], log.tau[idx_r], lo, width, nb)
        qf, _ = _bin_means(qpos[idx_f], qpos[idx_f], lo, width, nb)
        qr, _ = _bin_means(qpos[idx_r], qpos[idx_r], lo, width, nb)
        good = (nf >= 0.8 * np.median(nf[nf > 0])) & (nr >= 0.8 * np.median(nr[nr > 0]))
        if good.sum() < MIN_BINS:
            dropped.append(DroppedSegment(group[0].t0, group[-1].t1, v, f"fewer than {MIN_BINS} position bins hold both directions"))
            continue
        for idx in (idx_f, idx_r):
            rss, dof = _within_bin_rss(qpos[idx], log.tau[idx], lo, width, nb, good)
            noise_rss += rss
            noise_dof += dof
        # variance of mean_b((u_f - u_r)/2) per unit sample variance
        factor = float((1.0 / nf[good] + 1.0 / nr[good]).sum()) / (4.0 * good.sum() ** 2)
        # the two directions sample a bin at slightly different mean positions (sampling
        # phase, partial counts); move both to a common position along the local gravity
        # slope, estimated from the bins' gravity profile
        qm = 0.5 * (qf[good] + qr[good])
        slope = np.gradient(0.5 * (uf[good] + ur[good]), qm) if good.sum() >= 2 else np.zeros(good.sum())
        d = 0.5 * (uf[good] - ur[good]) - 0.5 * slope * (qf[good] - qr[good])
        F, se, spread = huber_location(d)
        rows.append((v, F, se, spread, int(good.sum()), factor))
        centres = lo + (np.flatnonzero(good) + 0.5) * width
        gq.append(centres)
        gt.append(0.5 * (uf[good] + ur[good]))
        used += group
        if asymmetric:
            gf, _ = _bin_means(qpos[idx_f], log.tau[idx_f] - log.tau_g[idx_f], lo, width, nb)
            gr, _ = _bin_means(qpos[idx_r], log.tau_g[idx_r] - log.tau[idx_r], lo, width, nb)
            fwd_rows.append((v, *huber_location(gf[good]), int(good.sum()), float((1.0 / nf[good]).sum()) / good.sum() ** 2))
            rev_rows.append((v, *huber_location(gr[good]), int(good.sum()), float((1.0 / nr[good]).sum()) / good.sum() ** 2))
    if not rows:
        if any(s.speed > 0 for s in segments) != any(s.speed < 0 for s in segments):
            missing = "reverse" if any(s.speed > 0 for s in segments) else "forward"
            raise DataError(f"no {missing} runs: every constant-speed segment goes the same way", file=log.source)
        raise DataError(f"no speed has usable forward and reverse runs ({dropped[-1].reason})", file=log.source)
    noise = math.sqrt(noise_rss / noise_dof) if noise_dof > 0 else math.nan
    return ProcessedLog(
        points=_points(rows, "both", noise),
        gravity=_gravity_profile(np.concatenate(gq), np.concatenate(gt), resolution),
        segments=tuple(sorted(used, key=lambda s: s.start)),
        dropped=tuple(dropped),
        resolution=resolution,
        forward=_points(fwd_rows, "forward", noise) if asymmetric else None,
        reverse=_points(rev_rows, "reverse", noise) if asymmetric else None,
        torque_noise=noise,
    )


def _segment_positions(log: ConstantSpeedLog, segments: list[Segment], resolution: float) -> np.ndarray:
    """Positions for binning: on a segment where the joint moved uniformly (a line
    fitted to ``q(t)`` leaves residuals within one encoder count RMS), the line;
    else the measured positions. The line undoes the quantisation, whose error
    would otherwise alias with the sampling at some speeds and differ between the
    two directions."""
    q = log.q.copy()
    for s in segments:
        t = log.t[s.start : s.stop] - log.t[s.start]
        qs = log.q[s.start : s.stop]
        if log.dq_ref is not None:  # the commanded speed is exact; fit the offset only
            line = s.speed * t + float(np.mean(qs - s.speed * t))
        else:
            line = np.polyval(np.polyfit(t, qs, 1), t)
        if np.sqrt(np.mean((qs - line) ** 2)) <= max(resolution, 1e-12):
            q[s.start : s.stop] = line
    return q


def _within_bin_rss(q: np.ndarray, u: np.ndarray, lo: float, width: float, nbins: int, use: np.ndarray) -> tuple[float, int]:
    """Residual sum of squares of ``u`` about a straight line in ``q`` within every used bin,
    and its degrees of freedom (n - 2 per bin): the torque noise, gravity's slope removed."""
    idx = np.floor((q - lo) / width).astype(int)
    ok = (idx >= 0) & (idx < nbins)
    idx, q, u = idx[ok], q[ok], u[ok]
    ok = use[idx]
    idx, q, u = idx[ok], q[ok], u[ok]
    n = np.bincount(idx, minlength=nbins).astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        qc = q - (np.bincount(idx, q, nbins) / np.maximum(n, 1))[idx]
        uc = u - (np.bincount(idx, u, nbins) / np.maximum(n, 1))[idx]
        sxx, sxy, syy = (np.bincount(idx, w, nbins) for w in (qc * qc, qc * uc, uc * uc))
        rss = np.where(sxx > 0, syy - np.where(sxx > 0, sxy**2 / np.where(sxx > 0, sxx, 1.0), 0.0), syy)
    keep = n >= 3
    return float(np.maximum(rss[keep], 0.0).sum()), int((n[keep] - 2).sum())


def _points(rows: list[tuple], direction: str, noise: float) -> FrictionPoints:
    """Points with standard errors that pool two estimates: the bins' scatter (``se_b``,
    ``n_b - 1`` degrees of freedom) and the white-noise model ``noise**2*factor`` with the
    noise pooled over every bin of every speed, weighted as if it had ``PRIOR_DOF``
    degrees of freedom: ``se**2 = ((n_b - 1)*se_b**2 + PRIOR_DOF*se_m**2)/(n_b - 1 + PRIOR_DOF)``.
    With ~30 bins a point's own scatter dominates; with few bins the model keeps its
    error from being a guess."""
    a = np.array(rows, dtype=float)
    se_b, nb = a[:, 2], a[:, 4]
    se = se_b
    if math.isfinite(noise) and noise > 0:
        se_m2 = noise**2 * a[:, 5] * HUBER_EFFICIENCY
        w = np.maximum(nb - 1, 0)
        se = np.sqrt((w * np.nan_to_num(se_b) ** 2 + PRIOR_DOF * se_m2) / (w + PRIOR_DOF))
    return FrictionPoints(speed=a[:, 0], friction=a[:, 1], stderr=se, spread=a[:, 3], bins=nb.astype(int), direction=direction)


def _gravity_profile(q: np.ndarray, tau: np.ndarray, resolution: float, nbins: int = 60) -> GravityProfile:
    lo, hi = float(q.min()), float(q.max())
    width = max((hi - lo) / nbins, 2 * resolution, 1e-12)
    idx = np.minimum(((q - lo) / width).astype(int), max(int((hi - lo) / width) - 1, 0))
    centres, mean, spread = [], [], []
    for i in np.unique(idx):
        vals = tau[idx == i]
        # the mean value at the mean position is right to first order in the slope
        centres.append(float(q[idx == i].mean()))
        mean.append(float(vals.mean()))
        spread.append(float(vals.std(ddof=1)) if len(vals) > 1 else math.nan)
    return GravityProfile(q=np.array(centres), tau=np.array(mean), spread=np.array(spread))
