"""A set of constraints stacked row-wise, with the loop-closure forces for the reactions."""

from __future__ import annotations

import difflib
from collections.abc import Sequence

import numpy as np
import pinocchio as pin

from mbctl.dynamics.constraints.kinds import Constraint, ConstraintValues, FrameVelocity
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.model.frames import KinematicState
from mbctl.errors import ConfigError

__all__ = ["ConstraintSet"]


class ConstraintSet:
    """Any set of constraints, stacked row-wise in declaration order.

    Raises:
        ConfigError: For duplicate constraint names.
    """

    def __init__(self, constraints: Sequence[Constraint], nv: int):
        names = [c.name for c in constraints]
        for name in names:
            if names.count(name) > 1:
                raise ConfigError(f"constraint name {name!r} is used twice", field="constraints")
        self.constraints = tuple(constraints)
        self.nv = nv
        self.rows = tuple(r for c in self.constraints for r in c.rows)
        self.m = len(self.rows)
        self.level = np.concatenate([[c.level] * c.size for c in self.constraints]).astype(int) if self.m else np.zeros(0, int)
        self.programmed = np.concatenate([[c.programmed] * c.size for c in self.constraints]).astype(bool) if self.m else np.zeros(0, bool)
        self.slices: dict[str, slice] = {}
        start = 0
        for c in self.constraints:
            self.slices[c.name] = slice(start, start + c.size)
            start += c.size

    def __len__(self) -> int:
        return len(self.constraints)

    def __iter__(self):
        return iter(self.constraints)

    def row_index(self, row: str) -> int:
        """Index of the row called ``row`` (``<constraint>.<label>``).

        Raises:
            ConfigError: If there is no such row.
        """
        if row not in self.rows:
            close = difflib.get_close_matches(row, self.rows, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"no constraint row {row!r} (rows: {', '.join(self.rows)}){hint}")
        return self.rows.index(row)

    def evaluate(self, ks: KinematicState, t: float) -> ConstraintValues:
        """All rows stacked (see :class:`ConstraintValues`)."""
        m, nv = self.m, self.nv
        phi, phi_t, gamma, target = np.empty(m), np.empty(m), np.empty(m), np.empty(m)
        jac = np.empty((m, nv))
        start = 0
        for c in self.constraints:
            v = c.evaluate(ks, t)
            k = len(v.phi)
            sl = slice(start, start + k)
            phi[sl], jac[sl], phi_t[sl], gamma[sl], target[sl] = v.phi, v.jac, v.phi_t, v.gamma, v.target
            start += k
        return ConstraintValues(phi=phi, jac=jac, phi_t=phi_t, gamma=gamma, target=target)

    def loop_forces(self, ks: KinematicState, lam: np.ndarray) -> tuple[list[pin.Force], list[np.ndarray]]:
        """External forces of the loop-closure rows (and material velocity-level rows) for RNEA, from their multipliers.

        A loop row's multiplier ``lambda`` puts ``-lambda*g_A`` on frame A's body and
        ``-lambda*g_B`` on B's (:meth:`LoopClosure.wrench_maps`). Returns the force on every
        joint's body (joint frame, as ``pinocchio.rnea``'s ``fext`` wants it) and each
        loop's wrench on B's body (at B's origin, B's axes). A material :class:`FrameVelocity`
        row (a knife edge) puts :meth:`FrameVelocity.wrench_world` on its frame's body.
        """
        model, data = ks.model, ks.data
        fext = [pin.Force.Zero() for _ in range(model.njoints)]
        on_b = []
        for c in self.constraints:
            if isinstance(c, FrameVelocity) and not c.programmed:  # a knife edge or wheel contact
                w = c.wrench_world(ks, lam[self.slices[c.name]])
                frame = ks.frame(c.fid)
                f_world = pin.SE3(np.eye(3), frame.p).act(pin.Force(w[:3], w[3:]))
                parent = model.frames[c.fid].parentJoint
                fext[parent] = fext[parent] + data.oMi[parent].actInv(f_world)
                continue
            if not isinstance(c, LoopClosure):
                continue
            gA, gB = c.wrench_maps(ks)
            lam_c = lam[self.slices[c.name]]
            for fid, g in ((c.fid_a, gA), (c.fid_b, gB)):
                w = -(g.T @ lam_c)  # world axes, at the frame origin
                frame = ks.frame(fid)
                f_world = pin.SE3(np.eye(3), frame.p).act(pin.Force(w[:3], w[3:]))
                parent = model.frames[fid].parentJoint
                fext[parent] = fext[parent] + data.oMi[parent].actInv(f_world)
                if fid == c.fid_b:
                    on_b.append(np.concatenate([frame.R.T @ w[:3], frame.R.T @ w[3:]]))
        return fext, on_b

    def joint_wrenches(
        self,
        model: pin.Model,
        data: pin.Data,
        ks: KinematicState,
        qp: np.ndarray,
        dq: np.ndarray,
        ddq: np.ndarray,
        lam: np.ndarray | None,
        joints: Sequence[int],
    ) -> tuple[np.ndarray, list[np.ndarray]]:
        """Wrenches ((len(joints), 6), N then N·m) the tree joints ``joints`` (pinocchio ids) transmit, parent
        on child in the joint frame: RNEA of ``model`` (e.g. a gravity-free copy for the part linear in
        ``(ddq, lam)``) at the pinocchio configuration ``qp`` and ``(dq, ddq)``, with the
        :meth:`loop_forces` of the multipliers ``lam`` (none if None) as external forces; and the loops'
        wrenches on B's bodies."""
        if lam is None:
            pin.rnea(model, data, qp, dq, ddq)
            on_b = []
        else:
            fext, on_b = self.loop_forces(ks, lam)
            pin.rnea(model, data, qp, dq, ddq, pin.StdVec_Force(fext))
        return np.array([data.f[j].vector for j in joints]).reshape(-1, 6), on_b
