"""Time-optimal timing of geometric paths: ``q(s)`` to a trajectory ``q(t)`` as fast as the
robot's limits allow (torques with the full friction model, velocity, acceleration, jerk).

:mod:`~mbctl.ctrl.timing.path` (paths), :mod:`~mbctl.ctrl.timing.limits` (limit spec),
:mod:`~mbctl.ctrl.timing.dynamics` (torques along the path), :mod:`~mbctl.ctrl.timing.reachability`
and :mod:`~mbctl.ctrl.timing.lp` (the linear problem), :mod:`~mbctl.ctrl.timing.solve` (the
whole method), :mod:`~mbctl.ctrl.timing.sampling` (output at a rate), :mod:`~mbctl.ctrl.timing.jerk`
(jerk limits), :mod:`~mbctl.ctrl.timing.closed` (closed chains, redundant drives),
:mod:`~mbctl.ctrl.timing.programmed` (the route of programmed constraints).
"""

from mbctl.ctrl.timing.limits import FRICTION_MODES, TimingLimits, timing_limits
from mbctl.ctrl.timing.path import GeometricPath, read_path, spline_path
from mbctl.ctrl.timing.programmed import path_from_constraints
from mbctl.ctrl.timing.reachability import Infeasible
from mbctl.ctrl.timing.solve import TimingResult, optimal_timing

__all__ = [
    "FRICTION_MODES", "GeometricPath", "Infeasible", "TimingLimits", "TimingResult", "optimal_timing", "path_from_constraints",
    "read_path", "spline_path", "timing_limits",
]  # fmt: skip
