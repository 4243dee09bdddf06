"""Optimal control from the robot's own model: trajectory optimisation offline (direct multiple
shooting over the inverse dynamics with friction, IPOPT) and its point-to-point use."""

from mbctl.ctrl.optimal.point_to_point import OBJECTIVES, PointToPoint, limit_ratios, robot_dynamics
from mbctl.ctrl.optimal.point_to_point import point_to_point as solve_point_to_point
from mbctl.ctrl.optimal.problem import Dynamics, OcpSolution, OptimalControlProblem, Stage

__all__ = [
    "Dynamics", "OcpSolution", "OptimalControlProblem", "Stage", "OBJECTIVES", "PointToPoint", "limit_ratios", "robot_dynamics",
    "solve_point_to_point",
]  # fmt: skip
