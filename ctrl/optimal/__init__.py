"""Optimal control from the robot's own model: trajectory optimisation offline (direct multiple
shooting over the inverse dynamics with friction, IPOPT) and its point-to-point use."""

from mbctl.ctrl.optimal.problem import Dynamics, OcpSolution, OptimalControlProblem, Stage

__all__ = ["Dynamics", "OcpSolution", "OptimalControlProblem", "Stage"]
