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
from mbctl.dynamics.friction.laws import LuGre
from mbctl.dynamics.inverse import (
    InverseDynamicsResult,
    Progress,
    check_samples,
    lugre_states,
)
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import DataError

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
        self._lugre_joints = [
            j for j in robot.joints if lugre == "dynamic" and j.friction is not None and isinstance(j.friction.law, LuGre)
        ]

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
        robot = self.robot
        q, dq, ddq = check_samples(robot.nv, q, dq, ddq)
        n = q.shape[0]
        z = np.zeros((n, robot.nv))
        state = None
        if self._lugre_joints:
            if t is None:
                raise DataError("sample times are needed to integrate LuGre states (or use lugre='steady')", field="t")
            state = np.full((n, robot.nv), np.nan)
            for j in self._lugre_joints:
                z[:, j.idx_v] = state[:, j.idx_v] = lugre_states(j.friction.law, dq[:, j.idx_v], np.asarray(t, dtype=float))
        outs = map_rows(self._function, [q, dq, ddq, z], threads=self.threads, chunk=self.chunk, progress=progress)
        tau_rigid, tau_friction = outs[0], outs[1]
        return InverseDynamicsResult(
            joint_names=robot.joint_names,
            tau=tau_rigid + tau_friction,
            tau_rigid=tau_rigid,
            tau_friction=tau_friction,
            joint_wrench=outs[2] if self.reactions else None,
            normal_load=outs[-1] if self._loaded else None,
            friction_state=state,
        )
