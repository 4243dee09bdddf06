"""The geometric path a robot's programmed constraints trace: the route of ``q(t)`` without its clock.

A config whose ``[[constraints]]`` fix every DOF as functions of time (the SCARA's tool circle,
the 3-RRR's spiral of P, closed loops included) prescribes a motion ``q(t)`` on ``[0, T0]``
(``simulation.duration``). Retiming it keeps the route and drops the clock. The path parameter
is the joint-space arc length, ``s = sigma(t) / L`` with ``sigma' = |dq|``: a motion that starts
from rest (the 3-RRR's, ``q ~ t^2``) would otherwise give a path with ``q'(0) = 0`` in ``s = t / T0``,
along which the path speed is unbounded at the start. At the samples of
:func:`~mbctl.ctrl.constrained_path.trajectory_from_constraints`, with ``v = |dq|`` and
``v' = dq . ddq / v``::

    q'(s) = L dq / v,      q''(s) = L^2 (ddq - q'(s) v' / L) / v^2

(at a start from rest ``q'(0) = L ddq / |ddq|``, the limit), interpolated by quintic Hermite
pieces: exact values and derivatives at every sample, so the path keeps on closed loops to the
interpolation error (sixth order in the sample spacing for ``q``, fourth for ``q''``).
``sigma(t)`` is integrated with the two-point Hermite rule (fourth order).
"""

from __future__ import annotations

import numpy as np
from scipy.interpolate import BPoly

from mbctl.ctrl.constrained_path import trajectory_from_constraints
from mbctl.ctrl.timing.path import GeometricPath
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.setup import build_dynamics, constraint_set, initial_state, simulation_setup
from mbctl.errors import InputError

__all__ = ["initial_guess", "path_from_constraints", "path_on_loops"]


def path_from_constraints(robot: RobotModel, duration: float | None = None, samples: int = 501) -> GeometricPath:
    """The route of the motion ``robot``'s constraints prescribe over ``[0, duration]`` s
    (default ``simulation.duration``), from ``samples`` samples.

    Raises:
        InputError: For a duration <= 0 or fewer than 2 samples.
        ConfigError: When the constraints do not fix every DOF.
    """
    setup = simulation_setup(robot)
    duration = setup.duration if duration is None else duration
    if not (duration > 0):
        raise InputError(f"must be > 0 s, got {duration}", field="duration")
    if samples < 2:
        raise InputError(f"must be >= 2, got {samples}", field="samples")
    dynamics = build_dynamics(robot, setup)
    q0, _ = initial_state(robot, setup, dynamics)
    t = np.linspace(0.0, duration, samples)
    traj = trajectory_from_constraints(dynamics, t, q0)
    dq, ddq = traj.dq, traj.ddq
    v = np.linalg.norm(dq, axis=1)
    rests = v <= 1e-9 * max(float(v.max()), 1e-300)
    if rests[1:].any():
        k = int(np.argmax(rests[1:])) + 1
        raise InputError(f"the programmed motion stops at t = {t[k]:.6g} s: a path with a rest inside cannot be retimed as one", field="constraints")
    dv = np.einsum("ij,ij->i", dq, ddq) / np.where(rests, 1.0, v)
    h = np.diff(t)
    sigma = np.concatenate([[0.0], np.cumsum(h / 2 * (v[:-1] + v[1:]) + h**2 / 12 * (dv[:-1] - dv[1:]))])
    L = sigma[-1]
    d1 = L * dq / np.where(rests, 1.0, v)[:, None]
    d2 = L**2 * (ddq - d1 * (dv / L)[:, None]) / np.where(rests, 1.0, v**2)[:, None]
    data = [[traj.q[k], d1[k], d2[k]] for k in range(len(t))]
    if rests[0]:  # from rest: the direction of the first acceleration; the curvature there is left free
        data[0] = [traj.q[0], L * ddq[0] / np.linalg.norm(ddq[0])]
    return GeometricPath(joint_names=robot.joint_names, spline=BPoly.from_derivatives(sigma / L, data))


def initial_guess(robot: RobotModel) -> np.ndarray:
    """``simulation.initial.q`` of the robot's config (zeros for the joints it leaves out, or without one): the
    guess that picks the assembly branch of a closed chain."""
    q = np.zeros(robot.nv)
    simulation = robot.spec.simulation if robot.spec is not None else None
    for name, value in ((simulation.q if simulation is not None else None) or {}).items():
        q[robot.joint(name).idx_v] = value
    return q


def path_on_loops(robot: RobotModel, path: GeometricPath, q_guess: np.ndarray, samples: int = 501) -> GeometricPath:
    """A closed chain's path from a path ``path`` of its independent coordinates (the joints it names, as many
    as the chain has DOF): the other coordinates are assembled on the loops at ``samples`` points of ``s``.

    At each point, Newton on ``Phi(q) = 0`` over the dependent coordinates (from the previous point, the first
    from ``q_guess``); then from ``Phi_q q' = 0`` and ``Phi_q q'' = gamma(q, q')`` the dependent derivatives,
    and quintic Hermite pieces through ``(q, q', q'')``.

    Raises:
        InputError: When the named joints are not a set of independent coordinates, or the loops cannot be
            closed at some point (the message gives ``s``).
    """
    loops = [c for c in constraint_set(robot) if isinstance(c, LoopClosure)]
    system = ConstrainedDynamics(robot, loops)
    ind = np.array([robot.joint(n).idx_v for n in path.joint_names], dtype=int)
    dep = np.setdiff1d(np.arange(robot.nv), ind)
    s = np.linspace(0.0, 1.0, samples)
    u, du, ddu, _ = path(s)
    q = np.asarray(q_guess, dtype=float).copy()
    data = []
    for k in range(samples):
        q[ind] = u[k]
        for _ in range(50):
            cv = system.constraints.evaluate(system.kinematics(q, np.zeros(robot.nv)), 0.0)
            jac = cv.jac
            if jac.shape[0] != len(dep) or np.linalg.matrix_rank(jac[:, dep]) < len(dep):
                raise InputError(
                    f"the joints {', '.join(path.joint_names)} are not independent coordinates of the loops at s = {s[k]:.4g} "
                    f"(the chain has {robot.nv - jac.shape[0]} DOF)", field="joints",
                )  # fmt: skip
            if np.abs(cv.phi).max() < 1e-12:
                break
            q[dep] -= np.linalg.solve(jac[:, dep], cv.phi)
        else:
            raise InputError(f"the loops cannot be closed at s = {s[k]:.4g} (|Phi| = {np.abs(cv.phi).max():.3g})", field="waypoints")
        d1 = np.empty(robot.nv)
        d1[ind] = du[k]
        d1[dep] = -np.linalg.solve(jac[:, dep], jac[:, ind] @ du[k])
        gamma = system.constraints.evaluate(system.kinematics(q, d1), 0.0).gamma
        d2 = np.empty(robot.nv)
        d2[ind] = ddu[k]
        d2[dep] = np.linalg.solve(jac[:, dep], gamma - jac[:, ind] @ ddu[k])
        data.append([q.copy(), d1, d2])
    return GeometricPath(joint_names=robot.joint_names, spline=BPoly.from_derivatives(s, data))
