"""Excitation trajectories for identifying an arm: periodic Fourier series, optimised for the
condition number of the identification regressor within the joint limits.

The pieces: the series (:mod:`mbctl.ctrl.fourier`, Swevers' form with the first harmonic
eliminated so that every joint starts and ends at rest), the objective ``log cond`` of the
column-normalised regressor and the limits it is optimised within
(:mod:`mbctl.ctrl.excitation_problem`, which states every formula), and here the design
loop that solves it and checks the result.

The variables start from random amplitudes (seeded; decaying as ``1/l``) at half the
tightest kinematic limit of each joint, around mid range, halved until the torque limits
hold; scipy's SLSQP then minimises ``log kappa`` within the limits tightened by
``margin``. With ``starts`` > 1 the lowest condition number of several seeded starts is kept.

Between grid samples a limit can be exceeded: the result is checked at every sample of
the written trajectory with the full model (dynamic LuGre states as ``mbctl
feedforward`` integrates them), and samples that leave the limits tightened by half
the margin are added to the constraint grid and the problem solved again (at most
``rounds`` times) until none does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import scipy.optimize
from threadpoolctl import threadpool_limits

from mbctl.dynamics.inverse import InverseDynamics
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import DataError, InputError

from .excitation_problem import DEFAULT_ACCELERATION as DEFAULT_ACCELERATION  # re-exported: design_excitation's default
from .excitation_problem import DEFAULT_SPEED, ExcitationLimits, _friction_envelope, _Problem, _Regressor, excitation_condition
from .excitation_problem import _log_condition as _log_condition  # re-exported: tests import it from here
from .fourier import amplitudes, fourier_basis, repeat_periods
from .trajectory import Trajectory

# ExcitationLimits, excitation_condition and fourier_basis live in excitation_problem and fourier
# and stay importable from here, as before the split
__all__ = ["Excitation", "ExcitationLimits", "design_excitation", "excitation_condition", "fourier_basis"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Excitation:
    """An optimised excitation and its diagnostics.

    Attributes:
        trajectory: Every joint of the robot over ``periods`` periods (held joints constant).
        joint_names: The excited joints.
        held: Position (rad or m) of every joint that is not excited.
        period: ``T`` (s); base frequency ``w = 2 pi / T``.
        q0: Offsets ``q0_j`` of the excited joints (rad or m), shape (n,).
        a, b: Swevers' coefficients (rad/s or m/s), shape (n, L), as in :mod:`mbctl.ctrl.fourier`.
        condition_initial: Condition number of the column-normalised regressor for the
            random start (what a random Fourier trajectory of this size gives).
        condition: The same for the result, on the same grid.
        iterations: SLSQP iterations over all rounds (of the start kept).
        rounds: Times the problem was solved (constraint samples added in between).
        converged: SLSQP's last solve reported success.
        message: SLSQP's last message.
        limits: The limits the trajectory keeps to (before the margin).
        starts: Random starts tried; the lowest condition number is kept.
        usage: Largest fraction of each limit used, per kind (``"position"`` is of the
            half range around the mid position), over the written samples.
    """

    trajectory: Trajectory
    joint_names: tuple[str, ...]
    held: dict[str, float]
    period: float
    q0: np.ndarray
    a: np.ndarray
    b: np.ndarray
    condition_initial: float
    condition: float
    iterations: int
    rounds: int
    converged: bool
    message: str
    limits: ExcitationLimits
    usage: dict[str, float] = field(default_factory=dict)
    starts: int = 1

    @property
    def harmonics(self) -> int:
        return int(self.a.shape[1])


def _violations(
    robot: RobotModel, limits: ExcitationLimits, traj: Trajectory, tau: np.ndarray
) -> tuple[np.ndarray, dict[str, float], str]:
    """Per sample, the largest fraction of any limit used (1 = at the limit); the largest per
    kind; and which limit is used most (``"torque of j2"``)."""
    q, dq, ddq = traj.columns(robot.joint_names)
    mid, half = 0.5 * (limits.upper + limits.lower), 0.5 * (limits.upper - limits.lower)
    with np.errstate(divide="ignore", invalid="ignore"):
        used = {
            "position": np.abs(q - mid) / half,
            "velocity": np.abs(dq) / limits.velocity,
            "acceleration": np.abs(ddq) / limits.acceleration,
            "torque": np.where(np.isfinite(limits.effort), np.abs(tau) / limits.effort, 0.0),
        }
    stack = np.stack(list(used.values()))  # (kind, sample, joint)
    kind, _, joint = np.unravel_index(int(np.argmax(stack)), stack.shape)
    most = f"{list(used)[kind]} of {robot.joint_names[joint]}"
    return stack.max(axis=(0, 2)), {kind: float(u.max()) for kind, u in used.items()}, most


def design_excitation(
    robot: RobotModel,
    *,
    harmonics: int,
    period: float,
    joints: Sequence[str] | None = None,
    rate_hz: float = 1000.0,
    periods: int = 1,
    grid: int | None = None,
    acceleration: float | Sequence[float] | None = None,
    speed: float = DEFAULT_SPEED,
    margin: float = 0.1,
    friction: bool = True,
    seed: int = 0,
    starts: int = 1,
    max_iterations: int = 200,
    rounds: int = 5,
    progress: Progress | None = None,
) -> Excitation:
    """Design a periodic, rest-to-rest Fourier excitation (see the module docstring).

    Args:
        robot: The robot (rigid; its URDF inertials and friction give the torques).
        harmonics: ``L`` >= 2, harmonics of the base frequency per joint.
        period: ``T`` (s), > 0.
        joints: Joints to excite (default: every actuated joint); the others are held at
            the middle of their position range (0 where unbounded).
        rate_hz: Sampling rate of the written trajectory (Hz).
        periods: Number of periods the written trajectory repeats (each starts and ends at rest).
        grid: Samples per period for the objective (default ``max(40, 12 L)``).
        acceleration: |ddq| limit, one value or one per robot joint (rad/s², m/s²);
            default :data:`DEFAULT_ACCELERATION`.
        speed: |dq| limit where a joint has none (rad/s or m/s).
        margin: Fraction of each limit left free, in [0, 0.5): headroom for tracking errors
            (`mbctl run` stops where a measured velocity or torque reaches its limit).
        friction: Include the friction columns ``[dq, sgn(dq), 1]`` of each excited joint.
        seed: Seed of the random starts (and of the states the base columns are found on).
        starts: Random starts to optimise from; the lowest condition number is kept.
        max_iterations: SLSQP iterations per round.
        rounds: Largest number of solves with samples added to the constraint grid.
        progress: Called with ``(iterations, max_iterations)`` every 10 iterations of a round.

    Raises:
        InputError: For bad options (naming the option).
        DataError: When no trajectory within the limits is found.
    """
    if not isinstance(harmonics, (int, np.integer)) or harmonics < 2:
        raise InputError(f"must be an integer >= 2 (one harmonic cannot start and end at rest), got {harmonics}", field="harmonics")
    if not (np.isfinite(period) and period > 0):
        raise InputError(f"must be > 0 s, got {period}", field="period")
    if not (np.isfinite(rate_hz) and rate_hz > 0):
        raise InputError(f"must be > 0 Hz, got {rate_hz}", field="rate")
    if not (isinstance(periods, (int, np.integer)) and periods >= 1):
        raise InputError(f"must be an integer >= 1, got {periods}", field="periods")
    if not 0 <= margin < 0.5:
        raise InputError(f"must be in [0, 0.5), got {margin}", field="margin")
    if robot.is_elastic:
        raise InputError(f"robot {robot.name} has elastic DOF ({', '.join(robot.elastic_names)}): excitation design needs a rigid model")
    names = list(robot.actuated_names) if joints is None else list(joints)
    for name in names:
        if name not in robot.joint_names:
            raise InputError(f"no joint {name!r} in robot {robot.name} (joints: {', '.join(robot.joint_names)})", field="joints")
    passive = [n for n in names if not robot.joint(n).actuated]
    if passive:
        raise InputError(f"joint {passive[0]!r} has no drive: only actuated joints can be excited", field="joints")
    if not names or len(set(names)) != len(names):
        raise InputError(f"need distinct joint names, got {names}", field="joints")
    m = max(40, 12 * harmonics) if grid is None else int(grid)
    if m < 4 * harmonics:
        raise InputError(f"needs at least 4 samples per period per harmonic ({4 * harmonics}), got {m}", field="grid")
    if rate_hz * period < 4 * harmonics:
        raise InputError(f"{rate_hz} Hz samples a {period} s period too coarsely for {harmonics} harmonics", field="rate")

    # one BLAS thread: on these small matrices more threads only wait on each other (10x slower on 2 busy cores)
    if not (isinstance(starts, (int, np.integer)) and starts >= 1):
        raise InputError(f"must be an integer >= 1, got {starts}", field="starts")
    best: Excitation | None = None
    failure: DataError | None = None
    with threadpool_limits(limits=1, user_api="blas"):
        for start in range(starts):
            try:
                result = _design(
                    robot, names, harmonics, period, rate_hz, periods, m, acceleration, speed, margin, friction,
                    (seed, start), max_iterations, rounds, progress,
                )
            except DataError as exc:  # this start found nothing within the limits; another may
                failure = exc
                continue
            if best is None or result.condition < best.condition:
                best = result
    if best is None:
        assert failure is not None
        raise failure
    return dataclasses.replace(best, starts=starts)


def _design(
    robot: RobotModel,
    names: list[str],
    harmonics: int,
    period: float,
    rate_hz: float,
    periods: int,
    m: int,
    acceleration: float | Sequence[float] | None,
    speed: float,
    margin: float,
    friction: bool,
    seed: tuple[int, int],
    max_iterations: int,
    rounds: int,
    progress: Progress | None,
) -> Excitation:
    limits = ExcitationLimits.of(robot, acceleration, speed)
    excited = np.array(sorted(robot.joint(n).idx_v for n in names))
    mid = np.where(np.isfinite([j.limits.lower + j.limits.upper for j in robot.joints]), 0.5 * (limits.lower + limits.upper), 0.0)
    reg = _Regressor(robot, excited, mid, friction, seed[0])
    envelope = _friction_envelope(robot)
    target = limits.tightened(margin)
    times_grid = np.arange(m) * (period / m)

    x = _random_start(np.random.default_rng(seed), target, excited, mid, period, harmonics, times_grid)
    extra = np.empty(0)
    problem = _Problem(reg, envelope, target, period, harmonics, times_grid, extra)
    x = _feasible_start(problem, x)
    f0 = problem.log_condition(x)
    done = 0
    t_out = np.linspace(0.0, period, int(np.ceil(period * rate_hz - 1e-9)) + 1)
    check = InverseDynamics(robot)
    slack = limits.tightened(0.5 * margin)
    res = None
    for round_ in range(1, rounds + 1):
        start = done

        def tick(_x: np.ndarray) -> None:
            nonlocal done
            done += 1
            if progress is not None and (done - start) % 10 == 0:
                progress(done - start, max_iterations)

        res = scipy.optimize.minimize(
            problem.objective,
            problem.start(x),
            jac=True,
            method="SLSQP",
            bounds=[(None, None)] * len(x) + [(0.0, None)],
            constraints=[{"type": "ineq", "fun": problem.constraints, "jac": problem.constraints_jac}],
            options={"maxiter": max_iterations, "ftol": 1e-7},
            callback=tick,
        )
        x = res.x[:-1]
        traj = _sample(robot, reg, x, period, harmonics, t_out, names)
        tau = check(traj.q, traj.dq, traj.ddq, traj.t).tau
        worst, _, _ = _violations(robot, slack, traj, tau)
        bad = np.flatnonzero(worst > 1.0)
        if bad.size == 0 or res.x[-1] > 1e-6:  # done, or infeasible even on the grid
            break
        # add the worst sample of each run of violating samples to the constraint grid
        starts = np.flatnonzero(np.diff(np.concatenate([[-2], bad])) > 1)
        runs = np.split(bad, starts[1:])
        extra = np.concatenate([extra, [t_out[r[np.argmax(worst[r])]] for r in runs]])
        problem = _Problem(reg, envelope, target, period, harmonics, times_grid, extra)
    assert res is not None
    worst_real, usage, most = _violations(robot, limits, traj, tau)
    if np.any(worst_real > 1.0):
        k = int(np.argmax(worst_real))
        raise DataError(
            f"no excitation within the limits found after {round_} rounds (at t = {t_out[k]:.4g} s the {most} "
            f"reaches {100 * worst_real[k]:.1f} % of its limit): lower the harmonics, lengthen the period or excite fewer joints",
            field="limits",
        )
    f1 = problem.log_condition(x)
    Z = x.reshape(len(excited), 2 * harmonics - 1)
    q0, alpha, beta = amplitudes(Z, harmonics)
    wl = (2 * np.pi / period) * np.arange(1, harmonics + 1)
    if periods > 1:
        traj = repeat_periods(traj, periods)
    return Excitation(
        trajectory=traj,
        joint_names=tuple(robot.joint_names[i] for i in excited),
        held={robot.joint_names[i]: float(mid[i]) for i in range(robot.nv) if i not in set(excited.tolist())},
        period=float(period),
        q0=q0,
        a=alpha * wl,
        b=beta * wl,
        condition_initial=float(np.exp(f0)),
        condition=float(np.exp(f1)),
        iterations=done,
        rounds=round_,
        converged=bool(res.success),
        message=str(res.message),
        limits=limits,
        usage=usage,
    )

def _random_start(
    rng: np.random.Generator, limits: ExcitationLimits, excited: np.ndarray, mid: np.ndarray, period: float, harmonics: int, grid: np.ndarray
) -> np.ndarray:
    """Random amplitudes (decaying as 1/l), each joint scaled to half its tightest limit, at mid range."""
    P, V, A = fourier_basis(grid, period, harmonics)
    ell = np.arange(2, harmonics + 1)
    k = 2 * harmonics - 1
    x = np.zeros((len(excited), k))
    for i, j in enumerate(excited):
        z = np.concatenate([[0.0], rng.standard_normal(harmonics - 1) / ell, rng.standard_normal(harmonics - 1) / ell**2])
        centre = 0.5 * (limits.lower[j] + limits.upper[j])
        half = 0.5 * (limits.upper[j] - limits.lower[j])
        scale = 0.5 * min(
            half / np.abs(P @ z).max(), limits.velocity[j] / np.abs(V @ z).max(), limits.acceleration[j] / np.abs(A @ z).max()
        )
        x[i] = scale * z
        x[i, 0] = centre
    return x.ravel()


def _feasible_start(problem: _Problem, x: np.ndarray, halvings: int = 8) -> np.ndarray:
    """The random start with its amplitudes halved until every constraint holds on the grid
    (the motion shrinks toward rest at ``q0``); unchanged if none does."""
    z = x.reshape(problem.n, problem.k)
    for h in range(halvings + 1):
        trial = z.copy()
        trial[:, 1:] *= 0.5**h
        if problem.constraints(np.append(trial.ravel(), 0.0)).min() >= 0:
            return trial.ravel()
    return x


def _sample(robot: RobotModel, reg: _Regressor, x: np.ndarray, period: float, harmonics: int, t: np.ndarray, names: Sequence[str]) -> Trajectory:
    P, V, A = fourier_basis(t, period, harmonics)
    Z = x.reshape(len(reg.excited), -1).T
    q, dq, ddq = reg.states(P @ Z, V @ Z, A @ Z)
    # the ends are exactly at rest (round-off of the eliminated harmonic aside)
    dq[[0, -1]] = 0.0
    ddq[[0, -1]] = 0.0
    q[-1] = q[0]
    return Trajectory(t=t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)
