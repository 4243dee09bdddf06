"""Feed-forward torques of a closed chain with an ``[actuation]`` table: every distribution mode.

The tree's inverse dynamics (:func:`mbctl.ctrl.feedforward.feedforward`, friction included)
gives ``tau_tree`` on every coordinate; :class:`~mbctl.ctrl.redundancy.ActuationRedundancy`
shares it among the drives in the chosen mode and, for comparison, in every other
mode the table allows (``non-redundant`` needs ``non_redundant``). A mode whose torque
limits cannot realise the motion is reported, not fatal, unless it is the chosen one.

Torque CSV of a closed chain (SI units)::

    t, tau.<drive>...,                                   (chosen mode)
    internal_force, power_norm,                          (chosen mode: N, W)
    reaction.<passive>.fx, .fy, .fz...                   (chosen mode; passive joints, then cut joints)
    <mode>.tau.<drive>..., <mode>.internal_force, <mode>.power_norm   (every mode computed)

``internal_force`` is the Euclidean norm of all passive-joint reaction forces,
``power_norm`` that of the drive powers ``tau_i omega_i``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from mbctl.ctrl.actuation import MODES, ActuationSettings, actuation_settings
from mbctl.ctrl.constrained_path import compiled_constraint_rows
from mbctl.ctrl.feedforward import FeedforwardResult
from mbctl.ctrl.redundancy import ActuationLimitError, ActuationRedundancy, Distribution
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.setup import constraint_set
from mbctl.errors import DataError
from mbctl.fileio import write_csv

__all__ = ["ClosedChainTorques", "check_on_loops", "closed_chain_feedforward", "closed_chain_table", "write_closed_chain"]

AXES = ("fx", "fy", "fz")


@dataclass(frozen=True, eq=False)
class ClosedChainTorques:
    """Drive torques of a closed chain in the chosen mode and the others.

    Attributes:
        mode: The chosen mode.
        chosen: Its distribution.
        modes: Every mode computed (the chosen one included), in :data:`MODES` order.
        infeasible: Modes the torque limits rule out, with the reason.
        settings: The ``[actuation]`` settings used.
    """

    mode: str
    chosen: Distribution
    modes: dict[str, Distribution]
    infeasible: dict[str, str] = field(default_factory=dict)
    settings: ActuationSettings | None = None


def closed_chain_feedforward(
    ff: FeedforwardResult,
    mode: str | None = None,
    *,
    compare: bool = True,
    progress: Callable[[int, int], None] | None = None,
) -> ClosedChainTorques:
    """Distribute the tree torques of ``ff`` among the drives of its robot's ``[actuation]``.

    Args:
        ff: Feed-forward result of the spanning tree along a motion on the loops.
        mode: Distribution mode (default: ``actuation.mode``).
        compare: Also compute every other available mode.

    Raises:
        ActuationLimitError: If the limits make the motion infeasible in the chosen mode.
        ConfigError: For a bad ``[actuation]`` or loop set-up.
        DataError: If the motion does not keep the loops closed.
    """
    robot = ff.robot
    settings = actuation_settings(robot)
    mode = settings.mode if mode is None else mode
    traj = ff.trajectory
    constraints = constraint_set(robot)
    check_on_loops(robot, [c for c in constraints if isinstance(c, LoopClosure)], traj)
    redundancy = ActuationRedundancy(robot, settings, constraints=constraints, q_reference=traj.q[0])
    wanted = [m for m in MODES if m == mode or (compare and (m != "non-redundant" or settings.non_redundant))]
    modes: dict[str, Distribution] = {}
    infeasible: dict[str, str] = {}
    for m in wanted:
        try:
            modes[m] = redundancy.distribute(traj.t, traj.q, traj.dq, traj.ddq, ff.dynamics.tau, m, progress=progress)
        except ActuationLimitError as exc:
            if m == mode:
                raise
            infeasible[m] = exc.reason
    return ClosedChainTorques(mode=mode, chosen=modes[mode], modes=modes, infeasible=infeasible, settings=settings)


def check_on_loops(robot: RobotModel, loops: list[LoopClosure], traj: Trajectory, tol: float = 1e-6) -> None:
    """The motion must keep the loops closed, at position, velocity and acceleration level.

    Raises:
        DataError: Naming the first sample where ``|Phi|`` (m, rad), ``|Phi_q dq|`` or
            ``|Phi_q ddq - gamma|`` exceeds ``tol`` (the rates relative to the motion's scale).
    """
    if not loops:
        return
    system = ConstrainedDynamics(robot, loops)
    # the generated rows where the loop kinds allow it (the interpreted ones cost ~100 µs a sample)
    rows = compiled_constraint_rows(system)
    nv = robot.nv
    for k, t in enumerate(traj.t):
        if rows is None:
            cv = system.constraints.evaluate(system.kinematics(traj.q[k], traj.dq[k]), t)
            phi, jac, gamma = cv.phi, cv.jac, cv.gamma
        else:
            phi, jac, _, gamma = rows(t, traj.q[k], traj.dq[k])
            jac = jac.reshape(-1, nv, order="F") if jac.ndim == 1 else jac
            phi, gamma = phi.ravel(), gamma.ravel()
        errors = (
            ("|Phi|", np.abs(phi).max(), 1.0),
            ("|Phi_q dq|", np.abs(jac @ traj.dq[k]).max(), max(1.0, np.abs(traj.dq[k]).max())),
            ("|Phi_q ddq - gamma|", np.abs(jac @ traj.ddq[k] - gamma).max(), max(1.0, np.abs(traj.ddq[k]).max())),
        )
        for name, value, scale in errors:
            if not value <= tol * scale:
                raise DataError(
                    f"the motion leaves the closed loops at t = {t:.6g} s ({name} = {value:.3g}); sample it on the loops, "
                    "e.g. with mbctl trajectory constraints"
                )


def closed_chain_table(result: ClosedChainTorques) -> tuple[list[str], np.ndarray]:
    """Header and rows of the closed-chain torque CSV (see module docstring)."""
    d = result.chosen
    n = len(d.t)
    header = ["t", *(f"tau.{j}" for j in d.joints), "internal_force", "power_norm"]
    header += [f"reaction.{name}.{a}" for name in d.reaction_names for a in AXES]
    cols = [d.t[:, None], d.tau, d.internal_force[:, None], d.power_norm[:, None], d.reaction.reshape(n, -1)]
    for mode, other in result.modes.items():
        header += [*(f"{mode}.tau.{j}" for j in other.joints), f"{mode}.internal_force", f"{mode}.power_norm"]
        cols += [other.tau, other.internal_force[:, None], other.power_norm[:, None]]
    return header, np.column_stack(cols)


def write_closed_chain(path: str | Path, result: ClosedChainTorques) -> None:
    """Write the closed-chain torque CSV atomically."""
    header, data = closed_chain_table(result)
    write_csv(path, header, data)
