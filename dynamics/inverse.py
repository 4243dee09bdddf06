"""Inverse dynamics along a trajectory: rigid torques, friction, joint reactions.

For every sample ``k`` of a trajectory ``(q, dq, ddq)``:

```
tau_rigid  = RNEA(q, dq, ddq)                       (pinocchio, batched)
w_j        = reaction wrench of joint j, joint frame (when asked or needed)
N_j        = load_model_j(w_j)                      (load-dependent friction only)
tau_fric_j = law_j(dq_j, direction_j, N_j)          (see mbctl.dynamics.friction.laws)
tau        = tau_rigid + tau_fric
```
The friction torque about a joint's axis does not change the normal components of
that joint's own reaction, so with the motion prescribed the load is explicit and
no iteration is needed.

LuGre joints integrate their bristle state along the trajectory by default
(``lugre="dynamic"``; relaxed bristles ``z = 0`` at the first sample; exact step
for the mid-interval velocity), or use the steady-state curve
(``lugre="steady"``), which is the Stribeck law with ``delta = 2``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np
import pinocchio as pin

from mbctl.dynamics.friction.laws import LuGre, motion_direction
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.model.wrenches import WrenchModel, rnea_batch
from mbctl.errors import DataError

__all__ = ["InverseDynamics", "InverseDynamicsResult", "check_samples", "inverse_dynamics", "lugre_states", "lugre_trajectory"]

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class InverseDynamicsResult:
    """Torques along a trajectory; arrays have one row per sample, one column per DOF.

    Attributes:
        joint_names: DOF names, column order of every array.
        tau: Total generalized force ``tau_rigid + tau_friction`` (N·m or N).
        tau_rigid: Rigid-body part from RNEA, gravity included.
        tau_friction: Joint friction part (zero for frictionless joints).
        joint_wrench: (N, nv, 6) reaction wrench each joint transmits, in the joint
            frame: force (N) then moment (N·m); None unless reactions were asked.
        normal_load: Equivalent normal load of load-dependent joints (N·m for
            revolute, N for prismatic); NaN for other joints; None if no joint has
            a load model.
        friction_state: LuGre bristle deflection ``z`` (rad or m); NaN for other
            joints; None unless LuGre states were integrated.
    """

    joint_names: tuple[str, ...]
    tau: np.ndarray
    tau_rigid: np.ndarray
    tau_friction: np.ndarray
    joint_wrench: np.ndarray | None = None
    normal_load: np.ndarray | None = None
    friction_state: np.ndarray | None = None

    @classmethod
    def of(cls, robot: RobotModel, tau_rigid: np.ndarray, tau_friction: np.ndarray, **optional: np.ndarray | None) -> InverseDynamicsResult:
        """The result of ``robot``'s rigid and friction parts (``tau`` their sum); ``optional``: the
        other fields."""
        return cls(joint_names=robot.joint_names, tau=tau_rigid + tau_friction, tau_rigid=tau_rigid, tau_friction=tau_friction, **optional)


class InverseDynamics:
    """Inverse dynamics of a robot, built once and evaluated on many trajectories.

    Args:
        robot: The robot model.
        reactions: Also return every joint's reaction wrench.
        lugre: ``"dynamic"`` integrates LuGre states along the trajectory (needs
            sample times); ``"steady"`` uses the steady-state curve.
        threads: Worker threads of pinocchio's batched RNEA (default: up to 4, the
            CPU count); 0 runs a plain Python loop instead.
        chunk: Samples per batch; progress is reported after each batch.
    """

    def __init__(
        self,
        robot: RobotModel,
        *,
        reactions: bool = False,
        lugre: Literal["dynamic", "steady"] = "dynamic",
        threads: int | None = None,
        chunk: int = 50_000,
    ):
        if lugre not in ("dynamic", "steady"):
            raise ValueError(f"lugre must be 'dynamic' or 'steady', got {lugre!r}")
        self.robot = robot
        self.lugre = lugre
        self.chunk = chunk
        loaded = [j for j in robot.joints if j.friction is not None and j.friction.load is not None]
        self._wrench_joints = list(robot.joints) if reactions else loaded
        self.reactions = reactions
        if self._wrench_joints:
            self._wrench = WrenchModel(robot.model, [j.id for j in self._wrench_joints])
            engine = self._wrench.model
        else:
            self._wrench = None
            engine = robot.model
        self._engine = engine
        if threads is None:
            threads = min(4, os.cpu_count() or 1)
        self._pool = pin.ModelPool(engine, threads) if threads > 0 and hasattr(pin, "rneaInParallel") else None

    def __call__(
        self,
        q: np.ndarray,
        dq: np.ndarray,
        ddq: np.ndarray,
        t: np.ndarray | None = None,
        *,
        progress: Progress | None = None,
    ) -> InverseDynamicsResult:
        """Evaluate along samples ``q, dq, ddq`` of shape (N, nv) (rad, rad/s, rad/s² or m ...).

        Args:
            t: Sample times (s), strictly increasing; needed for dynamic LuGre states.
            progress: Called with ``(samples_done, samples_total)`` after each batch.

        Raises:
            DataError: For wrongly shaped or non-finite inputs.
        """
        robot = self.robot
        q, dq, ddq = check_samples(robot.nv, q, dq, ddq)
        n = q.shape[0]

        tau_rigid = np.empty((n, robot.nv))
        wrench = np.empty((n, len(self._wrench_joints), 6)) if self._wrench is not None else None
        for start in range(0, n, self.chunk):
            sl = slice(start, min(start + self.chunk, n))
            qp = robot.configuration(q[sl])
            if self._wrench is None:
                tau_rigid[sl] = rnea_batch(self._engine, self._pool, qp, dq[sl], ddq[sl])
            else:
                tau_aug = rnea_batch(self._engine, self._pool, *self._wrench.expand(qp, dq[sl], ddq[sl]))
                tau_rigid[sl] = tau_aug[:, self._wrench.v_index]
                wrench[sl] = tau_aug[:, self._wrench.wrench_index]
            if progress is not None:
                progress(sl.stop, n)

        wrench_of = {j.name: i for i, j in enumerate(self._wrench_joints)}
        tau_friction = np.zeros((n, robot.nv))
        normal_load = np.full((n, robot.nv), np.nan) if any(j.friction and j.friction.load for j in robot.joints) else None
        state = lugre_trajectory(robot, dq, t) if self.lugre == "dynamic" else None
        for j in robot.joints:
            if j.friction is None:
                continue
            v = dq[:, j.idx_v]
            load: np.ndarray | float = 1.0
            if j.friction.load is not None:
                load = j.friction.load.normal_load(wrench[:, wrench_of[j.name]], j.axis, j.kind)
                normal_load[:, j.idx_v] = load
            law = j.friction.law
            if isinstance(law, LuGre) and state is not None:
                tau_friction[:, j.idx_v] = law.torque(v, state[:, j.idx_v], load)
            else:
                tau_friction[:, j.idx_v] = law.steady(v, motion_direction(v, ddq[:, j.idx_v]), load)

        return InverseDynamicsResult.of(
            robot, tau_rigid, tau_friction, joint_wrench=wrench if self.reactions else None, normal_load=normal_load, friction_state=state
        )


def check_samples(nv: int, *arrays: np.ndarray, names: tuple[str, ...] = ("q", "dq", "ddq")) -> tuple[np.ndarray, ...]:
    """The arrays as floats, each (N, nv) with the same N and finite.

    Raises:
        DataError: Naming the first wrongly shaped or non-finite array.
    """
    out = tuple(np.asarray(x, dtype=float) for x in arrays)
    n = out[0].shape[0] if out[0].ndim == 2 else -1
    for name, x in zip(names, out):
        if x.shape != (n, nv):
            raise DataError(f"must have shape (samples, {nv}), got {x.shape}", field=name)
        if not np.isfinite(x).all():
            raise DataError("holds non-finite values", field=name)
    return out


def lugre_trajectory(robot: RobotModel, dq: np.ndarray, t: np.ndarray | None) -> np.ndarray | None:
    """Bristle states (N, nv) of the robot's LuGre joints along the sampled velocities ``dq``
    (:func:`lugre_states`), NaN for the other joints; None without LuGre joints.

    Raises:
        DataError: Without sample times ``t`` (s) while there are LuGre joints.
    """
    joints = [j for j in robot.joints if j.friction is not None and j.friction.is_dynamic]
    if not joints:
        return None
    if t is None:
        raise DataError("sample times are needed to integrate LuGre states (or use lugre='steady')", field="t")
    state = np.full(dq.shape, np.nan)
    for j in joints:
        state[:, j.idx_v] = lugre_states(j.friction.law, dq[:, j.idx_v], np.asarray(t, dtype=float))
    return state


def lugre_states(law: LuGre, v: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Bristle states along sampled velocities, from ``z = 0`` at the first sample.

    Between samples the velocity is taken constant at the interval midpoint, for
    which :meth:`LuGre.z_step` is exact: ``z[k+1] = e[k]*z[k] + (1 - e[k])*z_ss[k]``.
    """
    if t.shape != v.shape or np.any(np.diff(t) <= 0):
        raise DataError("sample times must be strictly increasing, one per sample", field="t")
    v_mid = 0.5 * (v[1:] + v[:-1])
    decay = np.exp(-law.decay(v_mid) * np.diff(t))
    drive = ((1.0 - decay) * law.z_steady(v_mid)).tolist()
    z = [0.0] * len(v)
    zk = 0.0
    for k, e in enumerate(decay.tolist()):
        zk = e * zk + drive[k]
        z[k + 1] = zk
    return np.array(z)


def inverse_dynamics(
    robot: RobotModel,
    q: np.ndarray,
    dq: np.ndarray,
    ddq: np.ndarray,
    t: np.ndarray | None = None,
    *,
    reactions: bool = False,
    lugre: Literal["dynamic", "steady"] = "dynamic",
) -> InverseDynamicsResult:
    """One-shot :class:`InverseDynamics` (build, then evaluate once)."""
    return InverseDynamics(robot, reactions=reactions, lugre=lugre)(q, dq, ddq, t)
