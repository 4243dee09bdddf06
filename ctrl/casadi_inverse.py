"""Inverse dynamics along a trajectory through the CasADi mirror (``--engine casadi``).

Same interface and result as :class:`mbctl.dynamics.inverse.InverseDynamics`, computed by
one CasADi function of :class:`~mbctl.dynamics.symbolic.SymbolicDynamics` mapped over the
samples: ``(q, dq, ddq, z) -> (tau_rigid, tau_friction[, wrench][, load])``. LuGre
bristle states come from the same integration as the pinocchio path
(:func:`mbctl.dynamics.inverse.lugre_states`) and enter the function as the input ``z``;
load-dependent friction is loaded by the reaction wrenches of the same symbolic
RNEA pass. Both engines agree to round-off (tests); the pinocchio one is faster.
"""

from __future__ import annotations

from typing import Literal

import casadi as ca
import numpy as np

from mbctl.ctrl.batch import map_rows
from mbctl.dynamics.inverse import (
    InverseDynamicsResult,
    Progress,
    check_samples,
    lugre_trajectory,
)
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics

__all__ = ["CasadiInverseDynamics"]


class CasadiInverseDynamics:
    """Inverse dynamics with friction from CasADi functions, built once.

    Args:
        robot: The robot model.
        reactions: Also return every joint's reaction wrench.
        lugre: ``"dynamic"`` integrates LuGre states along the trajectory (needs
            sample times); ``"steady"`` uses the steady-state curve.
        threads: Worker threads of the mapped function (1: serial; more gained
            little in measurements, the conversions to and from numpy dominate).
        chunk: Samples per mapped call; progress is reported after each.
    """

    def __init__(
        self,
        robot: RobotModel,
        *,
        reactions: bool = False,
        lugre: Literal["dynamic", "steady"] = "dynamic",
        threads: int = 1,
        chunk: int = 20_000,
    ):
        self.robot = robot
        self.reactions = reactions
        self.lugre = lugre
        self.chunk = chunk
        self.threads = threads
        self.dynamics = SymbolicDynamics(robot, lugre=lugre)
        self._loaded = any(j.friction is not None and j.friction.load is not None for j in robot.joints)
        # only the outputs this configuration returns: converting them back to numpy
        # costs more than evaluating them
        full = self.dynamics.inverse_dynamics
        ins = full.sx_in()
        _, rigid, friction, wrench, load = full.call(ins)
        outs = [rigid, friction] + ([wrench] if reactions else []) + ([load] if self._loaded else [])
        self._function = ca.Function("inverse_dynamics", ins, outs)

    def __call__(
        self,
        q: np.ndarray,
        dq: np.ndarray,
        ddq: np.ndarray,
        t: np.ndarray | None = None,
        *,
        progress: Progress | None = None,
    ) -> InverseDynamicsResult:
        """Evaluate along samples of shape (N, nv); see :meth:`mbctl.dynamics.inverse.InverseDynamics.__call__`.

        Raises:
            DataError: For wrongly shaped or non-finite inputs, or missing sample
                times when LuGre states are integrated.
        """
        q, dq, ddq = check_samples(self.robot.nv, q, dq, ddq)
        state = lugre_trajectory(self.robot, dq, t) if self.lugre == "dynamic" else None
        z = np.zeros_like(dq) if state is None else np.nan_to_num(state, nan=0.0)
        outs = map_rows(self._function, [q, dq, ddq, z], threads=self.threads, chunk=self.chunk, progress=progress)
        return InverseDynamicsResult.of(
            self.robot, outs[0], outs[1], joint_wrench=outs[2] if self.reactions else None, normal_load=outs[-1] if self._loaded else None, friction_state=state
        )
