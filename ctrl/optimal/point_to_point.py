"""Point-to-point motions of a robot, optimal under its full model and every limit, checked by feed-forward.

:func:`robot_dynamics` gives the transcription of :mod:`mbctl.ctrl.optimal.problem` the robot's
inverse dynamics from :class:`~mbctl.dynamics.symbolic.SymbolicDynamics` (rigid body, rotor
inertias, every joint's friction law with its load model; LuGre at its steady state) and the
limits of its URDF/TOML. :func:`point_to_point` solves rest-to-rest from ``q0`` to ``q1``,
minimum time or minimum effort ``∫ Σ tau² dt`` over a given duration, samples the result at
the output rate and checks it with the feed-forward of the full model
(:func:`~mbctl.ctrl.feedforward.feedforward`: pinocchio, LuGre bristles integrated): where a sample between the knots
exceeds a torque limit by more than the tolerance (the knots hold it by construction), that
joint's limit in the problem is tightened by the excess and the problem solved again from the
previous solution.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import casadi as ca
import numpy as np

from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.limits import RunLimits, check_positions, run_limits
from mbctl.ctrl.optimal.problem import Dynamics, OcpSolution, OptimalControlProblem
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import InputError

__all__ = ["OBJECTIVES", "SMOOTHING", "PointToPoint", "robot_dynamics", "point_to_point", "smooth_direction", "limit_ratios"]

OBJECTIVES = ("time", "energy")
SMOOTHING = 1e-2  # rad/s (m/s): the width of the smoothed friction sign (Stribeck speeds are ~0.05 rad/s)


def smooth_direction(v: ca.SX, a: ca.SX, speed: float) -> ca.SX:
    """A smooth ``sgn`` of the motion for the optimiser: ``tanh(v/s) + (1 - tanh²(v/s)) tanh(a/(s/1 s))``,
    ``sgn(v)`` beyond a few ``s`` (rad/s or m/s), ``sgn(a)`` at rest like the model's own rule
    (:func:`~mbctl.dynamics.friction.laws.motion_direction`). The exact rule has no derivative where a joint
    reverses, and an interior-point method stalls on it."""
    tv = ca.tanh(v / speed)
    return tv + (1.0 - tv**2) * ca.tanh(a / speed)


def robot_dynamics(robot: RobotModel, smoothing: float = SMOOTHING, *, torque_margin: float = 1.0, velocity_margin: float = 1.0) -> Dynamics:
    """The robot's inverse dynamics with friction as a CasADi function, and the run's limits
    (:func:`~mbctl.ctrl.limits.run_limits`) with the torque limits times ``torque_margin`` and the speed
    limits times ``velocity_margin``; the sign of each dry friction term is :func:`smooth_direction`
    at ``smoothing`` (rad/s or m/s).

    Raises:
        InputError: For a robot with unactuated DOF (closed chains need their loop constraints), or a
            margin outside (0, 1] (field ``torque_margin`` or ``velocity_margin``).
    """
    for name, margin in (("torque_margin", torque_margin), ("velocity_margin", velocity_margin)):
        if not (0 < margin <= 1):
            raise InputError(f"must be in (0, 1], got {margin}", field=name)
    if not all(j.actuated for j in robot.joints):
        raise InputError(f"robot {robot.name} has unactuated DOF; optimal control needs a serial, fully actuated arm", field="robot")
    sd = SymbolicDynamics(robot, lugre="steady")
    _, tau, _, _, load = sd.inverse_dynamics_of(sd.q, sd.dq, sd.ddq, ca.SX.zeros(robot.nv))
    friction = [0.0] * robot.nv
    for j in robot.joints:
        if j.friction is not None:
            k = j.idx_v
            direction = smooth_direction(sd.dq[k], sd.ddq[k], smoothing)
            friction[k] = j.friction.law.steady(sd.dq[k], direction, load[k] if j.friction.load is not None else 1.0)
    tau = tau + ca.vertcat(*friction)
    inverse = ca.Function("inverse", [sd.q, sd.dq, sd.ddq], [tau], ["q", "dq", "ddq"], ["tau"])
    run = run_limits(robot)
    return Dynamics(
        inverse=inverse, lower=run.lower, upper=run.upper, velocity=run.velocity * velocity_margin, effort=run.effort * torque_margin,
        names=robot.joint_names,
    )  # fmt: skip


def limit_ratios(robot: RobotModel, traj: Trajectory, limits: Dynamics | RunLimits | None = None) -> dict[str, np.ndarray]:
    """Worst ``|x| / limit`` per DOF at the samples of ``traj``: ``velocity``, ``torque`` (the torques of
    :func:`~mbctl.ctrl.feedforward.feedforward`, the full model with LuGre bristles integrated along the
    samples) and ``position`` (distance outside ``[lower, upper]`` over the range, 0 inside); against
    the limits of ``limits`` (default: the run's, :func:`~mbctl.ctrl.limits.run_limits`)."""
    q, dq, _ = traj.columns(robot.joint_names)
    tau = feedforward(robot, traj).dynamics.tau
    lim = run_limits(robot) if limits is None else limits
    span = np.where(np.isfinite(lim.upper - lim.lower), lim.upper - lim.lower, 1.0)
    outside = np.maximum(np.maximum(lim.lower - q, q - lim.upper), 0.0).max(axis=0) / span
    return {"velocity": (np.abs(dq) / lim.velocity).max(axis=0), "torque": (np.abs(tau) / lim.effort).max(axis=0), "position": outside}


@dataclass(frozen=True)
class PointToPoint:
    """A solved point-to-point motion.

    Attributes:
        trajectory: The motion sampled at the output rate (rest at both ends).
        solution: The last solve (knots, torques, solver statistics); when a tightened re-solve did not
            converge, the converged one before it (its limits exceeded between the knots: not held).
        ratios: Worst ``|x| / limit`` per kind and DOF at the output rate (:func:`limit_ratios`), against
            the limits planned to (the run's, times the margins).
        held: True when every ratio is within ``1 + tolerance`` and the solve converged. A solution that did not
            converge is no motion (it need not reach ``q1``, its speeds need not match its positions).
        rounds: Solves made (1 + tightenings).
        solve_time: Wall time of all solves (s).
        tolerance: Allowed relative excess of a limit at the output rate.
    """

    trajectory: Trajectory
    solution: OcpSolution
    ratios: dict[str, np.ndarray]
    held: bool
    rounds: int
    solve_time: float
    tolerance: float

    @property
    def worst(self) -> dict[str, float]:
        """Worst ratio per kind over the DOF."""
        return {k: float(np.max(v)) for k, v in self.ratios.items()}


def _first_guess(dyn: Dynamics, q0: np.ndarray, q1: np.ndarray, mass_diagonal: np.ndarray) -> float:
    """A duration to start from (s): the slower of a quintic at the speed limits and one at the
    accelerations a torque limit gives the joint's own inertia."""
    d = np.abs(q1 - q0)
    by_speed = np.where(np.isfinite(dyn.velocity), 1.875 * d / dyn.velocity, 0.0)
    accel = np.where(np.isfinite(dyn.effort), dyn.effort / np.maximum(mass_diagonal, 1e-9), np.inf)
    by_accel = np.sqrt(5.78 * d / accel)
    return float(max(0.05, by_speed.max(), by_accel.max()))


def point_to_point(
    robot: RobotModel,
    q0: np.ndarray,
    q1: np.ndarray,
    *,
    objective: str = "time",
    duration: float | None = None,
    knots: int = 40,
    rate_hz: float = 1000.0,
    tolerance: float = 1e-3,
    max_rounds: int = 6,
    torque_margin: float = 1.0,
    velocity_margin: float = 1.0,
    problem: Callable[[OptimalControlProblem], None] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> PointToPoint:
    """Rest-to-rest from ``q0`` to ``q1`` (rad or m, DOF order), optimal for ``objective``, within the
    run's limits (:func:`robot_dynamics`).

    Args:
        objective: ``"time"`` (the final time is a variable) or ``"energy"`` (``∫ Σ tau² dt`` over
            ``duration``).
        duration: Final time (s); required for ``"energy"``, refused for ``"time"``.
        knots: Shooting intervals.
        rate_hz: Output sampling rate (Hz).
        tolerance: Allowed relative excess of a limit at the output rate.
        max_rounds: Solves at most (the first plus tightenings).
        torque_margin: Fraction of every torque limit the motion may use, in (0, 1].
        velocity_margin: Fraction of every speed limit the motion may use, in (0, 1].
        problem: Called with the problem before it is built, to add costs or constraints.
        progress: ``progress(round, max_rounds)`` after each solve.

    Raises:
        InputError: For a bad objective, duration, rate, knots, margin or boundary positions, or a
            time-optimal move of zero length (field ``to``).
        OutsideLimits: For a start or end pose outside a joint's position range (field ``from`` or ``to``).
    """
    if objective not in OBJECTIVES:
        raise InputError(f"must be one of {', '.join(OBJECTIVES)}, got {objective!r}", field="objective")
    if objective == "time" and duration is not None:
        raise InputError("a time-optimal motion finds its own duration; give --duration only with --objective energy", field="duration")
    if objective == "energy" and duration is None:
        raise InputError("the energy-optimal motion needs a duration", field="duration")
    if not (np.isfinite(rate_hz) and rate_hz > 0):
        raise InputError(f"must be a finite number > 0 Hz, got {rate_hz!r}", field="rate")
    if int(knots) != knots or not 2 <= knots <= 2000:
        raise InputError(f"must be an integer in [2, 2000], got {knots!r}", field="knots")
    q0, q1 = (np.asarray(x, dtype=float) for x in (q0, q1))
    for name, x, pose in (("from", q0, "in the start pose"), ("to", q1, "in the end pose")):
        if x.shape != (robot.nv,) or not np.isfinite(x).all():
            raise InputError(f"needs {robot.nv} finite values ({', '.join(robot.joint_names)})", field=name)
        check_positions(robot, x, pose=pose, field=name)
    if objective == "time" and np.array_equal(q0, q1):
        raise InputError("is the start pose: a move of zero length has no minimum time", field="to")
    dyn = robot_dynamics(robot, torque_margin=torque_margin, velocity_margin=velocity_margin)
    ocp = OptimalControlProblem(dyn, knots, duration)
    ocp.start_at(q0).end_at(q1)
    if objective == "time":
        ocp.minimize_time()
    else:
        ocp.add_effort()
    if problem is not None:
        problem(ocp)
    mass = np.diag(np.asarray(SymbolicDynamics(robot).mass_matrix(0.5 * (q0 + q1))))
    T0 = duration if duration is not None else _first_guess(dyn, q0, q1, mass)
    guess = ocp.initial_guess(*_scaled_line(ocp, T0), T0)
    total = 0.0
    converged = None  # the last solve that converged: a tightened re-solve that fails falls back to it
    for rounds in range(1, max_rounds + 1):
        sol = ocp.solve(guess)
        total += sol.solve_time
        if progress is not None:
            progress(rounds, max_rounds)
        if not sol.success and converged is not None:
            sol, traj, ratios = converged
            break
        traj = _sampled(sol, rate_hz, robot.joint_names)
        ratios = limit_ratios(robot, traj, dyn)
        over = ratios["torque"] > 1.0 + tolerance
        if not over.any() or not sol.success:
            break
        converged = (sol, traj, ratios)
        # the knots hold the limit; samples between them exceed it by ratio: ask that much less
        ocp.effort_limit[over] = ocp.effort_limit[over] / (ratios["torque"][over] * (1.0 + 0.25 * tolerance))
        ocp.build()
        guess = ocp.initial_guess(sol.q, sol.dq, sol.ddq, sol.duration)
    held = sol.success and all(float(np.max(v)) <= 1.0 + tolerance for v in ratios.values())
    return PointToPoint(traj, sol, ratios, held, rounds, total, tolerance)


def _scaled_line(ocp: OptimalControlProblem, T: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The problem's quintic line guess retimed from the unit duration to ``T``."""
    q, dq, ddq = ocp._line_guess()
    unit = ocp.duration or 1.0
    return q, dq * unit / T, ddq * (unit / T) ** 2


def _sampled(sol: OcpSolution, rate_hz: float, names: tuple[str, ...]) -> Trajectory:
    """The solution at ``rate_hz``, the final time included."""
    n = max(1, int(np.ceil(sol.duration * rate_hz - 1e-9)))
    t = np.append(np.arange(n) / rate_hz, sol.duration)
    t = t[np.append(np.diff(t) > 1e-12, True)]
    q, dq, ddq = sol.sample(t)
    return Trajectory(t=t, joint_names=names, q=q, dq=dq, ddq=ddq)
