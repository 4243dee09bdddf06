"""Physics of mbctl: robot models, friction, inverse dynamics, constraints, flexibility,
the symbolic CasADi mirror and forward simulation.

Subpackages: :mod:`~mbctl.dynamics.model`, :mod:`~mbctl.dynamics.friction`,
:mod:`~mbctl.dynamics.constraints`, :mod:`~mbctl.dynamics.flexible`,
:mod:`~mbctl.dynamics.simulation`. This layer imports only the ground floor
(:mod:`mbctl.errors`, the specs of :mod:`mbctl.config`, ...). The names below load on first use.
"""

from __future__ import annotations

from mbctl.lazy import lazy_exports

_API = {
    "CoulombViscous": "mbctl.dynamics.friction.laws",
    "JointFriction": "mbctl.dynamics.friction.laws",
    "LuGre": "mbctl.dynamics.friction.laws",
    "Stribeck": "mbctl.dynamics.friction.laws",
    "motion_direction": "mbctl.dynamics.friction.laws",
    "Bearing3D": "mbctl.dynamics.friction.loads",
    "Journal2D": "mbctl.dynamics.friction.loads",
    "InverseDynamics": "mbctl.dynamics.inverse",
    "InverseDynamicsResult": "mbctl.dynamics.inverse",
    "inverse_dynamics": "mbctl.dynamics.inverse",
    "Joint": "mbctl.dynamics.model.robot",
    "JointLimits": "mbctl.dynamics.model.robot",
    "RobotModel": "mbctl.dynamics.model.robot",
    "load_robot": "mbctl.dynamics.model.robot",
    "SymbolicDynamics": "mbctl.dynamics.symbolic",
}

__all__ = sorted(_API)


__getattr__, __dir__ = lazy_exports(__name__, _API)
