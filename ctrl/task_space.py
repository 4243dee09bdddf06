"""Kinematic redundancy: task-space computed torque with a dynamically consistent null-space objective.

An arm with more joints than task coordinates (the 7-DOF Panda holding a point: 3
task coordinates, a 4-DOF self-motion) is controlled in the task, and the joints'
remaining freedom serves a secondary objective without disturbing the task. The law
is a CasADi function with the signature of the joint-space laws
(:mod:`mbctl.ctrl.controllers`), so it runs in ``mbctl run`` unchanged::

    (q, dq, q_d, dq_d, ddq_d, z) -> (tau, tau_demand, saturated)

The task reference comes from the joint reference by forward kinematics:
``x_d = p(q_d)``, ``dx_d = J(q_d) dq_d``, ``ddx_d = J(q_d) ddq_d + dJ(q_d, dq_d) dq_d``, with
``p`` the world position (chosen axes) of the task frame's origin and ``J`` its linear
Jacobian. So any joint trajectory (a planner's, ``mbctl trajectory``) defines a task
path, and the arm is free to reach it in another posture.

**Law.** The *task chain* ``c`` holds the joints that move the task frame; other
actuated DOF ``o`` (the Panda's two finger joints, which do not move the hand frame)
follow their joint reference by computed torque (``[control.computed-torque]``
gains): ``ddq_o = ddq_d,o + Kd (dq_d,o - dq_o) + Kp (q_d,o - q_o)``. With
``e = x_d - x``, ``de = dx_d - J dq``::

    a_x    = ddx_d + kd de + kp e                              (task acceleration, m/s²)
    Jbar   = M_cc^-1 J_c^T (J_c M_cc^-1 J_c^T)^-1              (inertia-weighted inverse of J_c)
    a_0    = -kp0 W (q_c - q_0) - kd0 dq_c                    (secondary objective, rad/s²)
    ddq_c  = Jbar (a_x - dJ dq - J_o ddq_o) + (I - Jbar J_c) a_0
    tau    = ID(q, dq, ddq, z)                                 (= M ddq + h + friction)

``Jbar`` is the dynamically consistent generalized inverse (Khatib): the null-space
part ``M_cc (I - Jbar J_c) a_0 = (I - J_c^T Jbar^T) M_cc a_0`` is a torque that
produces no task acceleration, since ``J_c M_cc^-1 (I - J_c^T Jbar^T) = 0``. On an exact
model every task coordinate obeys ``e'' + kd e' + kp e = 0`` whatever the secondary
objective does, and the self-motion descends ``V(q) = 1/2 (q_c - q_0)^T W (q_c - q_0)``:

- ``objective = "posture"``: ``q_0`` = the ``posture`` table (unlisted joints: the middle
  of their range, 0 when unbounded), ``W = I``;
- ``objective = "joint-limits"``: ``q_0`` = the middle of each joint's range, ``W_ii =
  (rbar/r_i)^2`` with ``r_i`` its half range and ``rbar`` their mean (the classic
  joint-limit-avoidance criterion: joints with narrow ranges weigh more). Every
  chain joint then needs finite position limits.

Friction is compensated as in computed torque (``[control] friction_velocity``).
Saturation is explicit, as for every law.

The ``[control.task-space]`` table is described in :mod:`mbctl.config.control`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import casadi as ca
import numpy as np
import pinocchio as pin

from mbctl.ctrl.settings import ControlSettings, control_settings
from mbctl.ctrl.signature import INPUTS, OUTPUTS, saturate
from mbctl.dynamics.constraints.kinds import AXES, frame_id
from mbctl.dynamics.model.per_joint import check_joint_names
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import ConfigError

__all__ = ["TaskSpaceSettings", "TaskTracking", "task_space_settings", "build_task_space_function", "task_tracking"]


@dataclass(frozen=True, eq=False)
class TaskSpaceSettings:
    """The ``[control.task-space]`` table, checked against the robot.

    Attributes:
        frame: Task frame name.
        axes: World axes of its origin that form the task (indices 0..2).
        kp: Task stiffness (1/s²).
        kd: Task damping (1/s).
        chain: DOF indices of the task chain (joints that move the frame).
        objective: ``"joint-limits"`` or ``"posture"``.
        kp0: Secondary-objective stiffness (1/s²; 0 disables it).
        kd0: Self-motion damping (1/s).
        q0: Objective centre of every DOF (rad or m); only chain entries are used.
        weights: Objective weights ``W_ii`` of every DOF.
    """

    frame: str
    axes: tuple[int, ...]
    kp: float
    kd: float
    chain: tuple[int, ...]
    objective: str
    kp0: float
    kd0: float
    q0: np.ndarray
    weights: np.ndarray

    def objective_value(self, q: np.ndarray) -> np.ndarray:
        """``V(q) = 1/2 (q_c - q_0)^T W (q_c - q_0)`` per row of ``q`` (..., nv) (rad²)."""
        c = list(self.chain)
        e = np.asarray(q, dtype=float)[..., c] - self.q0[c]
        return 0.5 * np.sum(self.weights[c] * e**2, axis=-1)


def task_space_settings(robot: RobotModel) -> TaskSpaceSettings:
    """The robot's ``[control.task-space]`` spec checked against it.

    Raises:
        ConfigError: Naming the file and field, when the table is missing, names an
            unknown frame or joint; for ``joint-limits``, when a chain joint has no
            finite position limits.
    """
    control = robot.spec.control if robot.spec is not None else None
    if control is None or control.task_space is None:
        raise ConfigError("missing required table (the task-space law needs frame and gains)", file=robot.source, field="control.task-space")
    spec, file = control.task_space, control.file

    def error(key: str, reason: str) -> ConfigError:
        return ConfigError(reason, file=file, field=f"control.task-space.{key}")

    try:
        fid = frame_id(robot, spec.frame)
    except ConfigError as exc:
        raise error("frame", exc.reason) from None
    parent = int(robot.model.frames[fid].parentJoint)
    supports = {int(j) for j in robot.model.supports[parent]} if parent > 0 else set()
    chain = tuple(j.idx_v for j in robot.joints if j.id in supports)
    if len(chain) < len(spec.axes):
        raise error("frame", f"frame {spec.frame!r} is moved by {len(chain)} joints, fewer than the {len(spec.axes)} task axes")
    for k in chain:
        if not robot.joints[k].actuated:
            raise error("frame", f"joint {robot.joints[k].name!r} of the task chain is not actuated")
    nullspace = spec.nullspace
    q0 = np.zeros(robot.nv)
    weights = np.ones(robot.nv)
    for j in robot.joints:
        if math.isfinite(j.limits.lower) and math.isfinite(j.limits.upper):
            q0[j.idx_v] = 0.5 * (j.limits.lower + j.limits.upper)
    if nullspace.objective == "joint-limits":
        half = []
        for k in chain:
            j = robot.joints[k]
            if not (math.isfinite(j.limits.lower) and math.isfinite(j.limits.upper)):
                raise error("nullspace.objective", f"joint-limits needs position limits on every chain joint; {j.name} has none")
            half.append(0.5 * (j.limits.upper - j.limits.lower))
        weights[list(chain)] = (np.mean(half) / np.array(half)) ** 2
    else:
        check_joint_names(robot, nullspace.posture, file=file, field="control.task-space.nullspace.posture", allowed=tuple(robot.joints[k].name for k in chain))
        for name, value in nullspace.posture.items():
            q0[robot.joint(name).idx_v] = value
    return TaskSpaceSettings(
        frame=spec.frame,
        axes=tuple(AXES.index(a) for a in spec.axes),
        kp=spec.kp,
        kd=spec.kd,
        chain=chain,
        objective=nullspace.objective,
        kp0=nullspace.kp,
        kd0=nullspace.kd,
        q0=q0,
        weights=weights,
    )


def build_task_space_function(
    robot: RobotModel,
    *,
    settings: ControlSettings | None = None,
    task: TaskSpaceSettings | None = None,
    dynamics: SymbolicDynamics | None = None,
) -> tuple[ca.Function, ControlSettings, TaskSpaceSettings]:
    """The task-space law (module docstring) as a CasADi function of the joint-law signature.

    Raises:
        ConfigError: For a missing or bad ``[control.task-space]``, or missing
            ``[control.computed-torque]`` gains when DOF outside the chain need them.
    """
    settings = control_settings(robot) if settings is None else settings
    task = task_space_settings(robot) if task is None else task
    sd = SymbolicDynamics(robot) if dynamics is None else dynamics
    nv = robot.nv
    c = list(task.chain)
    o = [k for k in range(nv) if k not in task.chain]
    q, dq, q_d, dq_d, ddq_d, z = (ca.SX.sym(name, nv) for name in INPUTS)
    axes = list(task.axes)
    position = sd.frame_position(task.frame)
    jacobian = sd.frame_jacobian(task.frame)

    def kinematics(qq: ca.SX, vv: ca.SX) -> tuple[ca.SX, ca.SX, ca.SX]:
        J = jacobian(qq)[axes, :]
        v = J @ vv
        return position(qq)[axes], J, ca.jtimes(v, qq, vv)  # x, J, dJ/dt dq

    x, J, drift = kinematics(q, dq)
    x_d, J_d, drift_d = kinematics(q_d, dq_d)
    a_x = (J_d @ ddq_d + drift_d) + task.kd * (J_d @ dq_d - J @ dq) + task.kp * (x_d - x)
    ddq = ca.SX.zeros(nv, 1)
    if o:
        g = settings.require("computed-torque")
        for k in o:
            ddq[k] = ddq_d[k] + g.kd[k] * (dq_d[k] - dq[k]) + g.kp[k] * (q_d[k] - q[k])
    M = sd.mass_matrix(q)
    Mcc, Jc = M[c, c], J[:, c]
    Y = ca.solve(Mcc, Jc.T)  # M_cc^-1 J_c^T
    Jbar = ca.solve(Jc @ Y, Y.T).T  # Y (J_c Y)^-1, J_c Y symmetric
    a0 = -task.kp0 * ca.DM(task.weights[c]) * (q[c] - ca.DM(task.q0[c])) - task.kd0 * dq[c]
    rhs = a_x - drift - (J[:, o] @ ddq[o] if o else 0)
    ddq[c] = Jbar @ rhs + a0 - Jbar @ (Jc @ a0)
    if settings.friction_velocity == "measured":
        demand = sd.inverse_dynamics(q, dq, ddq, z)[0]
    else:
        _, rigid, _, _, load = sd.inverse_dynamics(q, dq, ddq, z)
        demand = rigid + sd.friction(dq_d, ddq_d, z, load)
    tau, flags = saturate(demand, settings.effort)
    function = ca.Function("task_space", [q, dq, q_d, dq_d, ddq_d, z], [tau, demand, flags], list(INPUTS), list(OUTPUTS))
    return function, settings, task


@dataclass(frozen=True)
class TaskTracking:
    """Task error and secondary objective along a run.

    Attributes:
        rms: RMS of the task error per axis (m).
        max_abs_error: Largest task error component (m).
        objective_start: ``V(q)`` at the first sample (rad²).
        objective_end: ``V(q)`` at the last sample.
    """

    rms: dict[str, float]
    max_abs_error: float
    objective_start: float
    objective_end: float


def task_tracking(robot: RobotModel, task: TaskSpaceSettings, q: np.ndarray, q_ref: np.ndarray) -> TaskTracking:
    """Task errors ``p(q_ref) - p(q)`` (pinocchio forward kinematics) and the objective along (N, nv) samples."""
    model, data = robot.model, robot.create_data()
    fid = model.getFrameId(task.frame)
    q, q_ref = np.atleast_2d(q), np.atleast_2d(q_ref)
    err = np.empty((len(q), len(task.axes)))
    for k in range(len(q)):
        pin.framesForwardKinematics(model, data, robot.configuration(q_ref[k]))
        target = data.oMf[fid].translation.copy()
        pin.framesForwardKinematics(model, data, robot.configuration(q[k]))
        err[k] = (target - data.oMf[fid].translation)[list(task.axes)]
    values = task.objective_value(q)
    return TaskTracking(
        rms={AXES[a]: float(np.sqrt(np.mean(err[:, i] ** 2))) for i, a in enumerate(task.axes)},
        max_abs_error=float(np.abs(err).max()),
        objective_start=float(values[0]),
        objective_end=float(values[-1]),
    )
