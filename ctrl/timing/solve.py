"""Time-optimal timing of a geometric path under torque, velocity, acceleration and jerk limits.

Problem (path ``q(s)``, ``s`` in [0, 1], at rest at both ends)::

    minimise T   s.t.   |dq_j| <= v_j,  |ddq_j| <= a_j,  |dddq_j| <= j_j,  |tau_j(q, dq, ddq)| <= T_j

with ``tau`` the robot's inverse dynamics including its friction model. In ``b = sdot^2`` and
``a = sddot`` the rigid torque and the accelerations are linear and the velocity limit is a
bound on ``b`` (:mod:`mbctl.ctrl.timing.dynamics`).

**Method.**

1. *Convex part, exactly.* With Coulomb friction only, friction along the path is
   ``fc sgn(q')``, constant in ``(a, b)``: every limit is linear in ``(a, b)`` at each grid point
   and the discretised problem is solved exactly by TOPP-RA's reachability passes
   (:mod:`mbctl.ctrl.timing.reachability`) or, as a cross-check, by one sparse LP in HiGHS
   (:mod:`mbctl.ctrl.timing.lp`).
2. *Full friction model: sequential convex programming.* Viscous (``fv q' sqrt(b)``),
   Stribeck and LuGre steady-state friction depend on ``sqrt(b)``; load-dependent friction on
   the norms of the reaction wrenches (linear in ``(a, b)``). None of them is linear, and the
   torque limit on the side where the friction adds to the demand is not convex (a concave
   term on the left of ``<=``). Each iteration linearises the friction at the previous profile
   by a forward secant of the project's own friction evaluation, solves the linear problem
   exactly (step 1), and stops when the profile no longer moves (relative 1e-6). For a concave
   term the secant lies above it except between the two points it joins, so each iterate is
   (almost) feasible on the side that matters (the convex-concave procedure); at the fixed
   point the linearisation is exact at every grid point, so the limits hold there exactly.
   On the other side of the limit the secant under-estimates a convex term, so the iterates are
   not monotone in general; convergence is not proven, the iterations are bounded
   (``max_iterations``) and a run that stops unconverged says so (``held`` is False). A fixed
   point is a point where the linearised problem reproduces itself, not a certified global
   optimum.
3. *Between grid points.* The profile is sampled at the output rate and checked with the full
   model (feed-forward torques, sampled velocities and accelerations). Wherever a limit is
   exceeded that limit is tightened at the neighbouring grid points by the measured ratio and
   the problem solved again, at most ``max_refinements`` times; the result counts as held when
   no limit is exceeded by more than ``tolerance`` (0.1 %).
4. *Jerk limits* (:mod:`mbctl.ctrl.timing.jerk`): a nonlinear program warm-started from the
   jerk-free optimum, output through a C2 ``s(t)``.
5. *Closed chains* (:mod:`mbctl.ctrl.timing.closed`): the drive torques are unknowns of the LP
   beside the path speed (redundant drives are distributed while the path is timed).

**Grid error.** The discretised optimum enforces the limits at the grid points only, with
``sddot`` constant on each interval; it converges to the continuous optimum as ``ds -> 0``
with an error of order ``ds`` in the profile (for a 1000-point grid on a smooth path, the
duration changes by well under 0.1 % between 500 and 1000 points). Step 3 makes the limits
hold between the grid points at the output rate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.limits import check_positions, position_excess
from mbctl.ctrl.timing.closed import RedundantDrives
from mbctl.ctrl.timing.diagnosis import explain
from mbctl.ctrl.timing.dynamics import PathDynamics, path_dynamics
from mbctl.ctrl.timing.jerk import jerk_profile
from mbctl.ctrl.timing.limits import TimingLimits, timing_limits, timing_robot
from mbctl.ctrl.timing.lp import lp_profile
from mbctl.ctrl.timing.path import GeometricPath, spline_path
from mbctl.ctrl.timing.reachability import Infeasible, StageConstraints, reachability_profile, speed_bound
from mbctl.ctrl.timing.sampling import profile_duration, sample_profile, smooth_duration
from mbctl.ctrl.timing.stages import GridLimits, interval_accel, stage_constraints
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError, OutsideLimits

__all__ = ["TimingResult", "optimal_timing", "check_path", "SOLVERS", "LIMIT_KINDS"]

SOLVERS = ("reachability", "highs")
LIMIT_KINDS = ("velocity", "acceleration", "jerk", "torque")

Progress = Callable[[int, int], None]


@dataclass(frozen=True, eq=False)
class TimingResult:
    """A time-optimal timing and its diagnostics.

    Attributes:
        trajectory: The timed path sampled at the output rate, at rest at both ends.
        duration: Its duration (s).
        s: The grid of path parameters (N+1,).
        b: Squared path speed ``sdot^2`` at the grid points (1/s²).
        a: Path acceleration ``sddot`` (1/s²): per interval (N,), per grid point (N+1,) with jerk limits.
        active: Per grid point, the limit closest to binding in the last solve (at its locally tightened value),
            ``"torque:<joint>"``, ``"velocity:<joint>"``, ... or ``""`` where none is within 0.1 %.
        iterations: Linear solves in all (SCP iterations over every refinement).
        refinements: Times the limits were tightened between grid points and the problem re-solved.
        solve_time: Wall time of the whole computation (s).
        ratios: Worst ``|x| / limit`` per limit kind at the output rate under the model the timing
            respects (``limits.friction``); 1 means at the limit.
        ratios_full: The same under the robot's full friction model.
        held: True when every entry of ``ratios`` is within ``1 + tolerance``.
        limits: The limits asked for.
        peak_jerk: Largest ``|dddq|`` per joint (rad/s³ or m/s³) at the output rate.
        boundaries: Per limit kind, the largest path speed ``sdot`` (1/s) each kind alone allows at the
            grid points (the maximum velocity curve; friction taken at the result), inf where unbounded; empty
            unverified.
        torque: Drive torques (N·m or N) of the trajectory under the full model, (samples, nv); None unverified.
        message: What went wrong when ``held`` is False.
    """

    trajectory: Trajectory
    duration: float
    s: np.ndarray
    b: np.ndarray
    a: np.ndarray
    active: tuple[str, ...]
    iterations: int
    refinements: int
    solve_time: float
    ratios: dict[str, float]
    ratios_full: dict[str, float]
    held: bool
    limits: TimingLimits
    peak_jerk: np.ndarray
    boundaries: dict[str, np.ndarray]
    torque: np.ndarray | None
    message: str = ""
    tolerance: float = field(default=1e-3)

    def active_fractions(self) -> dict[str, float]:
        """Fraction of the path (of grid intervals) on which each limit binds, largest first."""
        labels, counts = np.unique(np.array(self.active[:-1]), return_counts=True)
        out = {str(k) or "none": c / (len(self.active) - 1) for k, c in zip(labels, counts)}
        return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _solve_linear(con: StageConstraints, solver: str) -> np.ndarray:
    return reachability_profile(con) if solver == "reachability" else lp_profile(con)[0]


Linear = Callable[[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray], np.ndarray]


def _scp(pd: PathDynamics, linear: Linear, b_start: np.ndarray | None, max_iterations: int) -> tuple[np.ndarray, int, bool]:
    """Profile ``b`` under the friction linearised at the previous profile, iterated to a fixed point;
    ``linear(f0, fa, fb, a0, b0)`` solves the linear problem with ``f ~ f0 + fa (a - a0) + fb (b - b0)``.
    Returns ``(b, linear solves, converged)``."""
    n = len(pd.s)
    ds = float(pd.s[1] - pd.s[0])
    zero = np.zeros((n, pd.robot.nv))
    rest = np.zeros(n)
    if pd.friction_is_constant or b_start is None:
        # constant friction: one solve; else the start, under the friction at rest (the dry level, no viscous part)
        b_start = linear(pd.friction(np.ones(n), rest), zero, zero, rest, rest)
        if pd.friction_is_constant:
            return b_start, 1, True
    b = b_start
    for it in range(1, max_iterations + 1):
        a = interval_accel(b, ds)
        b_new = linear(*pd.linearised_friction(a, b), a, b)
        moved = float(np.max(np.abs(b_new - b)))
        b = b_new
        if moved <= 1e-6 * max(float(b.max()), 1e-12):
            return b, it, True
    return b, max_iterations, False


def _ratios(traj: Trajectory, limits: TimingLimits, jerk: np.ndarray | None, tau: np.ndarray) -> dict[str, np.ndarray]:
    """``|x| / limit`` per sample and DOF for velocity, acceleration, torque (drive torques ``tau``, NaN where
    there is no drive) and, with a jerk limit, the jerk ``jerk`` (rad/s³ or m/s³)."""
    out = {"velocity": np.abs(traj.dq) / limits.velocity, "acceleration": np.abs(traj.ddq) / limits.acceleration, "torque": np.abs(tau) / limits.torque}
    if limits.jerk is not None and jerk is not None:
        out["jerk"] = np.abs(jerk) / limits.jerk
    # kinds without any finite limit are not limits
    return {k: v for k, v in out.items() if np.isfinite(getattr(limits, k)).any()}


def _label(pd: PathDynamics, lim: GridLimits, b: np.ndarray, a: np.ndarray, smooth: bool, tau: np.ndarray | None = None) -> tuple[str, ...]:
    """The binding limit at each grid point (within 0.1 %), the closest one where several are; ``tau``: the drive
    torques (default: the path's torques)."""
    names = pd.robot.joint_names
    tau = pd.torque(a, b) if tau is None else tau
    x = np.sqrt(b)[:, None]
    ratio = {
        "velocity": pd.dq_ds * x / lim.velocity,
        "acceleration": (pd.dq_ds * a[:, None] + pd.ddq_ds * b[:, None]) / lim.acceleration,
        "torque": tau / lim.torque,
    }
    if smooth:  # jerk with sdddot = sdot da/ds on the interval ahead
        slope = np.append(np.diff(a), 0.0)[:, None] / (pd.s[1] - pd.s[0])
        ratio["jerk"] = (pd.dddq_ds * x**3 + 3 * pd.ddq_ds * x * a[:, None] + pd.dq_ds * x * slope) / lim.jerk
    stack = np.stack([np.nan_to_num(np.abs(ratio[k])) for k in ratio])  # (kinds, N+1, nv); NaN: no drive
    flat = stack.transpose(1, 0, 2).reshape(len(b), -1)
    best = np.argmax(flat, axis=1)
    kinds = list(ratio)
    return tuple(
        f"{kinds[k // len(names)]}:{names[k % len(names)]}" if flat[i, k] >= 0.999 else "" for i, k in enumerate(best)
    )


def _tighten(lim: GridLimits, ratios: dict[str, np.ndarray], s_samples: np.ndarray, grid: np.ndarray, tolerance: float) -> bool:
    """Scale each limit down by its worst ratio at the grid points around every violating sample;
    returns False when nothing was over."""
    any_over = False
    n = len(grid)
    ds = grid[1] - grid[0]
    for kind, r in ratios.items():
        # every excess is tightened (a sample at 1.0001 would still trip a safety check at the limit);
        # the result counts as held within 1 + tolerance
        over = np.nan_to_num(r, nan=0.0) > 1.0 + 1e-9
        if not over.any():
            continue
        any_over = True
        target = getattr(lim, kind)
        base = target.copy()
        for k, j in np.argwhere(over):
            i = int(s_samples[k] / ds)
            rows = slice(max(i - 1, 0), min(i + 3, n))
            target[rows, j] = np.minimum(target[rows, j], base[rows, j] / (r[k, j] * (1 + 0.25 * tolerance)))
    return any_over


def optimal_timing(
    robot: RobotModel,
    path: GeometricPath | np.ndarray,
    limits: TimingLimits | None = None,
    *,
    grid: int = 1000,
    rate_hz: float = 1000.0,
    tolerance: float = 1e-3,
    max_refinements: int = 10,
    max_iterations: int = 50,
    solver: str = "reachability",
    verify: bool = True,
    max_samples: float = 2e7,
    progress: Progress | None = None,
) -> TimingResult:
    """Time-optimal timing of ``path`` for ``robot`` (method in the module docstring).

    Args:
        robot: The robot (its friction model is reduced to ``limits.friction``).
        path: The geometric path, holding every DOF of the robot, or joint waypoints (K, nv) for
            :func:`~mbctl.ctrl.timing.path.spline_path`.
        limits: Limits (default: :func:`~mbctl.ctrl.timing.limits.timing_limits` of the robot).
        grid: Grid intervals N on [0, 1].
        rate_hz: Output sampling rate (Hz); the limits are checked at this rate.
        tolerance: Allowed relative excess of any limit at the output rate (1e-3 = 0.1 %).
        max_refinements: Local tightenings and re-solves at most.
        max_iterations: SCP iterations per solve at most.
        solver: ``"reachability"`` (TOPP-RA passes) or ``"highs"`` (one sparse LP per solve).
        verify: Check at the output rate and refine; False returns the grid optimum as it is.
        max_samples: Refuse (before sampling) a timing with more output samples than this.
        progress: Called with ``(round, max_refinements + 1)`` after each solve.

    Raises:
        InputError: For a bad grid, rate, tolerance or solver, or a robot with unactuated DOF; for a path
            of zero length or leaving a joint's position range (:func:`check_path`, field ``path``).
        Infeasible: When no timing meets the limits.
    """
    start = time.perf_counter()
    limits = timing_limits(robot) if limits is None else limits
    if not isinstance(path, GeometricPath):
        path = spline_path(np.asarray(path, dtype=float), robot.joint_names)
    check_path(robot, path)
    if not (isinstance(grid, int) and grid >= 2):
        raise InputError(f"must be an integer >= 2, got {grid!r}", field="grid")
    if not (np.isfinite(rate_hz) and rate_hz > 0):
        raise InputError(f"must be a finite number > 0, got {rate_hz!r}", field="rate")
    if not (0 < tolerance < 1):
        raise InputError(f"must be in (0, 1), got {tolerance!r}", field="tolerance")
    if solver not in SOLVERS:
        raise InputError(f"must be one of {', '.join(SOLVERS)}, got {solver!r}", field="solver")
    smooth = limits.jerk is not None and bool(np.isfinite(limits.jerk).any())
    model = timing_robot(robot, limits.friction)
    s = np.linspace(0.0, 1.0, grid + 1)
    pd = path_dynamics(model, path, s)
    lim = GridLimits.of(limits, grid + 1)
    drives = None
    if not all(j.actuated for j in robot.joints):
        if smooth:
            raise InputError("jerk limits are not supported for closed chains", field="jerk")
        drives = RedundantDrives(model, pd.q[0], limits.torque_margin)
        limits = drives.limits(limits)
        lim = GridLimits.of(limits, grid + 1)
        linear = drives.linear(pd, lim)
    if not any(np.isfinite(x).any() for x in (limits.velocity, limits.acceleration, limits.torque)):
        raise InputError("no limit bounds the path speed: give torque, velocity or acceleration limits", field="limits")
    if drives is None:
        linear = lambda *x: _solve_linear(stage_constraints(pd, lim, *x), solver)  # noqa: E731
    torques = (lambda rob, traj: drives.torques(rob, traj, limits)) if drives else (lambda rob, traj: feedforward(rob, traj).dynamics.tau)
    ordered = path.columns(robot.joint_names) if path.joint_names != robot.joint_names else path
    b, a, iterations, converged = _solve(pd, lim, linear, None, None, smooth, max_iterations, drives is None)
    length = smooth_duration(s, b, a) if smooth else profile_duration(s, b)
    if length * rate_hz > max_samples:
        raise InputError(f"the timing lasts {length:.4g} s: {length * rate_hz:.3g} samples at {rate_hz:g} Hz, more than {max_samples:g}", field="rate")
    refinements, message = 0, ""
    while True:
        traj, s_samples, jerk = sample_profile(ordered, s, b, a, rate_hz, smooth=smooth)
        if progress is not None:
            progress(refinements + 1, max_refinements + 1)
        message = "" if converged else f"the iterations did not converge in {max_iterations} solves"
        if not verify:
            break
        ratios = _ratios(traj, limits, jerk, torques(model, traj))
        if not _tighten(lim, ratios, s_samples, s, tolerance):
            break
        if refinements == max_refinements:
            if max(_finite_max(v) for v in ratios.values()) > 1.0 + tolerance:
                message = message or f"limits still exceeded after {max_refinements} refinements"
            break
        refinements += 1
        b, a, more, converged = _solve(pd, lim, linear, b, a, smooth, max_iterations, drives is None)
        iterations += more
    tau = None
    worst, full = {}, {}
    if verify:
        tau = torques(robot, traj)
        worst = {k: _finite_max(v) for k, v in ratios.items()}
        full = worst if model is robot else {k: _finite_max(v) for k, v in _ratios(traj, limits, jerk, tau).items()}
    peak_jerk = np.abs(jerk).max(axis=0) if jerk is not None else np.abs(np.diff(traj.ddq, axis=0) / np.diff(traj.t)[:, None]).max(axis=0)
    held = verify and not message and all(v <= 1.0 + tolerance for v in worst.values())
    a_grid = a if smooth else np.append(a, a[-1])
    asked = GridLimits.of(limits, grid + 1)
    return TimingResult(
        trajectory=traj, duration=smooth_duration(s, b, a) if smooth else profile_duration(s, b), s=s, b=b, a=a, active=_label(pd, lim, b, a_grid, smooth, drives.distributed(pd.q, pd.torque(a_grid, b), lim.torque) if drives else None),
        boundaries=_boundaries(pd, asked, a_grid, b, drives is None) if verify else {}, torque=tau,
        iterations=iterations, refinements=refinements, solve_time=time.perf_counter() - start, ratios=worst, ratios_full=full,
        held=held, limits=limits, peak_jerk=peak_jerk, message=message if verify else "not verified", tolerance=tolerance,
    )


def check_path(robot: RobotModel, path: GeometricPath) -> None:
    """Refuse a path that has no length (every point the same pose) or leaves a joint's position range
    (at one of its points, or where a joint turns between them: the spline's exact extremes).

    Raises:
        InputError: Field ``path``, for a path of zero length.
        OutsideLimits: Field ``path``, naming the joint, its value, the limit and where on the path.
    """
    points = path.points
    if not np.ptp(points, axis=0).max() > 0:
        raise InputError("has zero length: every point is the same pose, so there is no motion to time", field="path")
    check_positions(robot, points, path.joint_names, pose="at path point {}", field="path")
    s = path.turning_points()
    excess = position_excess(robot, path(s)[0], path.joint_names)
    if excess:
        e = excess[0]
        after = int(np.searchsorted(path.spline.x, s[e.index]))
        where = f"at s = {s[e.index]:.4g} (the spline turns there, between path points {after} and {after + 1})"
        raise OutsideLimits(f"q.{e.joint} = {e.describe(where)}", field="path", joint=e.joint, value=e.value, limit=e.limit)


def _solve(
    pd: PathDynamics, lim: GridLimits, linear: Linear, b: np.ndarray | None, a: np.ndarray | None, smooth: bool, max_iterations: int,
    serial: bool = True,
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """:func:`_solve_once`; an infeasible serial arm's error names the joint and limit that cannot be held
    (:func:`~mbctl.ctrl.timing.diagnosis.explain`; a closed chain's drive torques are not rows in ``(a, b)``)."""
    try:
        return _solve_once(pd, lim, linear, b, a, smooth, max_iterations)
    except Infeasible as exc:
        if not serial:
            raise
        raise explain(exc, pd, lim) from None


def _solve_once(
    pd: PathDynamics, lim: GridLimits, linear: Linear, b: np.ndarray | None, a: np.ndarray | None, smooth: bool, max_iterations: int
) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """One solve at the current limits: ``(b, a, linear or nonlinear solves, converged)``; ``a`` per
    interval, or per grid point for the jerk-limited (``smooth``) profile."""
    ds = float(pd.s[1] - pd.s[0])
    if not smooth or b is None:
        b, count, converged = _scp(pd, linear, b if not smooth else None, max_iterations)
        if not smooth:
            return b, np.diff(b) / (2.0 * ds), count, converged
        a = np.gradient(b, ds) / 2.0
        a[0] = a[-1] = 0.0
    else:
        count, converged = 0, True
    for it in range(1, 6):  # friction re-linearised at the last profile; a few rounds settle it
        con = stage_constraints(pd, lim, *pd.linearised_friction(a, b), a, b)
        b_new, a = jerk_profile(con, pd.dq_ds, pd.ddq_ds, pd.dddq_ds, lim.jerk, b, a)
        moved = float(np.max(np.abs(b_new - b)))
        b = b_new
        if not pd.has_friction or pd.friction_is_constant or moved <= 1e-6 * max(float(b.max()), 1e-12):
            return b, a, count + it, converged
    return b, a, count + 5, False


def _boundaries(pd: PathDynamics, lim: GridLimits, a: np.ndarray, b: np.ndarray, torque: bool = True) -> dict[str, np.ndarray]:
    """The maximum velocity curve ``sdot_max(s)`` of each limit kind alone (friction at the result); ``torque``:
    also of the torque limits of a serial arm (a closed chain's drive torques are not rows in ``(a, b)``)."""
    inf = np.full_like(lim.torque, np.inf)
    f = pd.friction(a, b)
    out = {}
    for kind, only in (
        ("velocity", GridLimits(lim.velocity, inf, inf, None)),
        ("acceleration", GridLimits(inf, lim.acceleration, inf, None)),
        ("torque", GridLimits(inf, inf, lim.torque if torque else inf, None)),
    ):
        bound = speed_bound(stage_constraints(pd, only, f, np.zeros_like(f), np.zeros_like(f), a, b))
        out[kind] = np.sqrt(np.maximum(bound, 0.0))
    return out


def _finite_max(v: np.ndarray) -> float:
    v = np.where(np.isfinite(v), v, np.nan)
    return float(np.nanmax(v)) if np.isfinite(v).any() else 0.0
