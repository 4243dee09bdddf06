"""Time-optimal timing of geometric paths: ``q(s)`` to a trajectory ``q(t)`` as fast as the
robot's limits allow (torques with the full friction model, velocity, acceleration, jerk).

:mod:`~mbctl.ctrl.timing.path` (paths), :mod:`~mbctl.ctrl.timing.limits` (limit spec),
:mod:`~mbctl.ctrl.timing.dynamics` (torques along the path), :mod:`~mbctl.ctrl.timing.reachability`
and :mod:`~mbctl.ctrl.timing.lp` (the linear problem), :mod:`~mbctl.ctrl.timing.solve` (the
whole method), :mod:`~mbctl.ctrl.timing.sampling` (output at a rate).
"""

from mbctl.ctrl.timing.limits import FRICTION_MODES, TimingLimits, timing_limits
from mbctl.ctrl.timing.path import GeometricPath, read_path, spline_path
from mbctl.ctrl.timing.reachability import Infeasible
from mbctl.ctrl.timing.solve import TimingResult, optimal_timing

__all__ = [
    "FRICTION_MODES", "GeometricPath", "Infeasible", "TimingLimits", "TimingResult", "optimal_timing", "read_path", "spline_path",
    "timing_limits",
]  # fmt: skip
