"""Feed-forward torques along a trajectory, their summary and their CSV format.

Torque CSV columns (SI units)::

    t, tau.<joint>..., tau_friction.<joint>...            (actuated joints)
    wrench.<joint>.{fx,fy,fz,tx,ty,tz}...                 (with reactions, every joint)
    load.<joint>...                                       (with reactions, load-dependent joints)

``tau`` is the total drive torque (N·m) or force (N), ``tau_friction`` its friction
part; wrenches are the reaction each joint transmits, in the joint frame (N, N·m);
``load`` is the equivalent normal load of the joint's bearing model (N·m for revolute
joints, N for prismatic ones).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np

from mbctl.ctrl.casadi_inverse import CasadiInverseDynamics
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.inverse import InverseDynamics, InverseDynamicsResult
from mbctl.dynamics.model.robot import RobotModel
from mbctl.fileio import write_csv

__all__ = ["FeedforwardResult", "JointTorqueStats", "feedforward", "torque_table", "write_torques", "ENGINES"]

ENGINES = ("pinocchio", "casadi")

WRENCH_AXES = ("fx", "fy", "fz", "tx", "ty", "tz")


@dataclass(frozen=True)
class JointTorqueStats:
    """Summary of one actuated joint's feed-forward torque (N·m, or N for prismatic joints)."""

    name: str
    unit: str
    peak: float
    rms: float
    peak_friction: float
    effort_limit: float

    @property
    def over_limit(self) -> bool:
        return self.peak > self.effort_limit


@dataclass(frozen=True, eq=False)
class FeedforwardResult:
    """Feed-forward torques of a robot along a trajectory.

    Attributes:
        robot: The robot.
        trajectory: The trajectory, columns in the robot's DOF order.
        dynamics: Torques, friction, reactions for every DOF.
    """

    robot: RobotModel
    trajectory: Trajectory
    dynamics: InverseDynamicsResult

    def stats(self) -> list[JointTorqueStats]:
        """Peak and RMS torque and peak friction of every actuated joint."""
        out = []
        for j in self.robot.joints:
            if not j.actuated:
                continue
            tau = self.dynamics.tau[:, j.idx_v]
            out.append(
                JointTorqueStats(
                    name=j.name,
                    unit="N·m" if j.kind == "revolute" else "N",
                    peak=float(np.abs(tau).max()),
                    rms=float(np.sqrt(np.mean(tau**2))),
                    peak_friction=float(np.abs(self.dynamics.tau_friction[:, j.idx_v]).max()),
                    effort_limit=j.limits.effort,
                )
            )
        return out

    def unactuated_demand(self) -> dict[str, float]:
        """Peak generalized force (N·m or N) the motion needs on unactuated DOF.

        A nonzero entry means no drive can realise the trajectory exactly.
        """
        return {
            j.name: float(np.abs(self.dynamics.tau[:, j.idx_v]).max()) for j in self.robot.joints if not j.actuated
        }


def feedforward(
    robot: RobotModel,
    trajectory: Trajectory,
    *,
    reactions: bool = False,
    lugre: Literal["dynamic", "steady"] = "dynamic",
    progress: Callable[[int, int], None] | None = None,
    engine: Literal["pinocchio", "casadi"] = "pinocchio",
) -> FeedforwardResult:
    """Inverse dynamics with friction along ``trajectory`` (which must cover every DOF).

    ``engine="pinocchio"`` runs :class:`~mbctl.dynamics.inverse.InverseDynamics` (batched
    pinocchio RNEA); ``"casadi"`` the same quantities from the CasADi mirror
    (:class:`~mbctl.ctrl.casadi_inverse.CasadiInverseDynamics`); they agree to round-off.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
    q, dq, ddq = trajectory.columns(robot.joint_names)
    ordered = Trajectory(t=trajectory.t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)
    engine_cls = InverseDynamics if engine == "pinocchio" else CasadiInverseDynamics
    result = engine_cls(robot, reactions=reactions, lugre=lugre)(q, dq, ddq, trajectory.t, progress=progress)
    return FeedforwardResult(robot=robot, trajectory=ordered, dynamics=result)


def torque_table(ff: FeedforwardResult) -> tuple[list[str], np.ndarray]:
    """Header and rows of the torque CSV (see module docstring)."""
    robot, res = ff.robot, ff.dynamics
    act = [j for j in robot.joints if j.actuated]
    header = ["t"] + [f"tau.{j.name}" for j in act] + [f"tau_friction.{j.name}" for j in act]
    cols = [ff.trajectory.t[:, None], res.tau[:, [j.idx_v for j in act]], res.tau_friction[:, [j.idx_v for j in act]]]
    if res.joint_wrench is not None:
        header += [f"wrench.{j.name}.{a}" for j in robot.joints for a in WRENCH_AXES]
        cols.append(res.joint_wrench.reshape(len(ff.trajectory), -1))
        if res.normal_load is not None:
            loaded = [j for j in robot.joints if j.friction is not None and j.friction.load is not None]
            header += [f"load.{j.name}" for j in loaded]
            cols.append(res.normal_load[:, [j.idx_v for j in loaded]])
    return header, np.column_stack(cols)


def write_torques(path: str | Path, ff: FeedforwardResult) -> None:
    """Write the torque CSV atomically."""
    header, data = torque_table(ff)
    write_csv(path, header, data)
