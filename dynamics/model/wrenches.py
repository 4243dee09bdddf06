"""Joint reaction wrenches from a single batched RNEA call.

Pinocchio's RNEA leaves the wrench each joint transmits in ``data.f``, but reading
that list from Python costs several microseconds per sample. Instead we build an
augmented model in which every selected joint is followed by a free-flyer joint at
the identity, carrying the joint's body. At the identity configuration and zero
velocity and acceleration the free-flyer changes no kinematics, and its generalized
force ``S^T f`` with ``S = I`` *is* the 6-D wrench the joint transmits, expressed in
the joint frame (force first, as ``data.f``). One batched RNEA on the augmented model
then returns torques and wrenches for a whole trajectory as one array.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pinocchio as pin

__all__ = ["WrenchModel", "rnea_batch"]


class WrenchModel:
    """A pinocchio model augmented with wrench-sensing free-flyer joints.

    Attributes:
        model: The augmented model.
        q_index: For each original configuration entry, its index in the augmented one.
        v_index: For each original DOF, its index in the augmented velocity vector.
        wrench_index: Row ``i`` holds the 6 augmented velocity indices of the wrench
            of ``joint_ids[i]``.
    """

    def __init__(self, model: pin.Model, joint_ids: Sequence[int]):
        selected = set(joint_ids)
        aug = pin.Model()
        aug.name = f"{model.name}+wrenches"
        aug.gravity = model.gravity
        body_of = {0: 0}  # original joint id -> augmented joint that carries its body
        same_joint = {}
        sensor = {}
        for jid in range(1, model.njoints):
            new = aug.addJoint(body_of[model.parents[jid]], model.joints[jid], model.jointPlacements[jid], model.names[jid])
            same_joint[jid] = new
            body_of[jid] = new
            if jid in selected:
                body_of[jid] = sensor[jid] = aug.addJoint(
                    new, pin.JointModelFreeFlyer(), pin.SE3.Identity(), f"{model.names[jid]}__wrench"
                )
            aug.appendBodyToJoint(body_of[jid], model.inertias[jid], pin.SE3.Identity())
        self.model = aug
        self.q_index = np.concatenate(
            [aug.idx_qs[same_joint[j]] + np.arange(model.nqs[j]) for j in range(1, model.njoints)]
        ).astype(int)
        self.v_index = np.array([aug.idx_vs[same_joint[j]] for j in range(1, model.njoints)], dtype=int)
        self.wrench_index = np.array([aug.idx_vs[sensor[j]] + np.arange(6) for j in joint_ids], dtype=int).reshape(-1, 6)
        aug.armature[self.v_index] = model.armature
        self._q_neutral = pin.neutral(aug)

    def expand(self, q: np.ndarray, v: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Augmented batches (N, nq_aug), (N, nv_aug), (N, nv_aug) from original ones."""
        n = q.shape[0]
        qa = np.tile(self._q_neutral, (n, 1))
        qa[:, self.q_index] = q
        va = np.zeros((n, self.model.nv))
        va[:, self.v_index] = v
        aa = np.zeros((n, self.model.nv))
        aa[:, self.v_index] = a
        return qa, va, aa


def rnea_batch(model: pin.Model, pool: pin.ModelPool | None, q: np.ndarray, v: np.ndarray, a: np.ndarray) -> np.ndarray:
    """RNEA for a batch of states: (N, nq), (N, nv), (N, nv) -> tau (N, nv).

    Uses pinocchio's ``rneaInParallel`` with the threads of ``pool``, or a plain
    loop when ``pool`` is None (pinocchio builds without it).
    """
    n = q.shape[0]
    if pool is None:
        data = model.createData()
        return np.array([pin.rnea(model, data, q[k], v[k], a[k]) for k in range(n)]).reshape(n, model.nv)
    tau = np.empty((model.nv, n), order="F")
    # (N, n) C-ordered arrays transpose to the column-major (n, N) layout pinocchio expects
    pin.rneaInParallel(pool.size(), pool, q.T, v.T, a.T, tau)
    return tau.T
