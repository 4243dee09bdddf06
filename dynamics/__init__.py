"""Physics of mbctl: robot models, friction, inverse dynamics, the symbolic CasADi
mirror (and later flexibility, constraints and simulation).

This package imports none of ``ctrl``, ``hardware`` or ``identification``.
"""

from dynamics.friction import (
    CoulombViscous,
    JointFriction,
    LuGre,
    Stribeck,
    motion_direction,
)
from dynamics.inverse import InverseDynamics, InverseDynamicsResult, inverse_dynamics
from dynamics.joint_load import Bearing3D, Journal2D
from dynamics.model import Joint, JointLimits, RobotModel, load_robot
from dynamics.symbolic import SymbolicDynamics

__all__ = [
    "Bearing3D",
    "CoulombViscous",
    "InverseDynamics",
    "InverseDynamicsResult",
    "Joint",
    "JointFriction",
    "JointLimits",
    "Journal2D",
    "LuGre",
    "RobotModel",
    "Stribeck",
    "SymbolicDynamics",
    "inverse_dynamics",
    "load_robot",
    "motion_direction",
]
