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
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
from mbctl.errors import InputError

__all__ = ["path_from_constraints"]


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
