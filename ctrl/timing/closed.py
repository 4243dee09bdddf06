"""Timing of closed chains with redundant drives: the drive torques are decision variables.

A closed chain (spanning tree ``q``, nv coordinates, loop rows ``A(q) dq = 0``, d DOF) with
``na >= d`` drives (``[actuation]``, :mod:`mbctl.ctrl.redundancy`) moves along a path ``q(s)`` on
its loops when the drives and the loop reactions supply the tree's generalized force. On the
independent coordinates (``dq = V u``) the reactions drop out::

    W^T tau = V^T tau_tree,      tau_tree = tau_a a + tau_b b + tau_0 (+ friction)

so at every grid point the drive torques ``tau`` (na) enter the timing problem as unknowns next
to ``(a, b)``, with ``|tau_k| <= effort_k``: the equations are linear in ``(a, b, tau)``, and the
whole problem is one sparse LP (:func:`mbctl.ctrl.timing.lp.lp_profile` with
:class:`~mbctl.ctrl.timing.lp.DriveRows`), solved by HiGHS. The torques are distributed at the
same time as the path is timed: the fastest timing any distribution within the limits allows,
not the one a fixed distribution rule (pseudo-inverse, minimum internal force) would allow.

Between grid points the check asks, at every output sample, for the smallest ``r`` such that
some distribution has ``|tau_k| <= r effort_k`` (the ratio the torque limits are used to): in
closed form without or with one degree of redundancy, by an LP otherwise. Closed chains
without redundancy (``na = d``, e.g. the three-loop mechanism's single crank) take the same route,
their drive torques then being unique.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np
from scipy.optimize import linprog

from mbctl.ctrl.actuation import actuation_settings
from mbctl.ctrl.closed_chain import check_on_loops
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.redundancy import ActuationRedundancy
from mbctl.ctrl.timing.dynamics import PathDynamics
from mbctl.ctrl.timing.limits import TimingLimits
from mbctl.ctrl.timing.lp import DriveRows, lp_profile
from mbctl.ctrl.timing.stages import GridLimits, stage_constraints
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.setup import constraint_set

__all__ = ["RedundantDrives"]


class RedundantDrives:
    """The drives of a closed chain along a path: reduced maps per grid point and the sample check.

    Args:
        robot: The spanning-tree model with loops and an ``[actuation]`` table.
        q_reference: A configuration on the loops (where the independent coordinates are chosen).
        torque_margin: Fraction of ``actuation.effort`` the timing may use.
    """

    def __init__(self, robot: RobotModel, q_reference: np.ndarray, torque_margin: float = 1.0):
        settings = actuation_settings(robot)
        self.redundancy = ActuationRedundancy(robot, settings, constraints=constraint_set(robot), q_reference=q_reference)
        self.joints = self.redundancy.joints
        self.index = np.array([robot.joint(n).idx_v for n in self.joints], dtype=int)
        self.effort = torque_margin * np.asarray(settings.effort, dtype=float) * np.ones(len(self.joints))
        self.nv = robot.nv

    def maps(self, q: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``W^T = V^T B`` (n, d, na) and ``V^T`` (n, d, nv) at configurations ``q`` (n, nv)."""
        n, nv = q.shape
        data = self.redundancy.data.map(n)
        zero = np.zeros((nv, n))
        Vt = np.empty((n, self.redundancy.d, nv))
        for j in range(nv):  # f = V^T tau_tree is linear in tau_tree: its columns are V^T's
            unit = np.zeros((nv, n))
            unit[j] = 1.0
            Vt[:, :, j] = np.asarray(data(q.T, zero, zero, unit)[1]).T
        return Vt[:, :, self.index], Vt

    def limits(self, limits: TimingLimits) -> TimingLimits:
        """``limits`` with torque limits on the drives only: the smaller of ``actuation.effort`` and the joint's own
        limit (URDF or override), both times the margin."""
        torque = np.full(self.nv, np.inf)
        torque[self.index] = np.minimum(self.effort, limits.torque[self.index])
        return replace(limits, torque=torque)

    def linear(self, pd: PathDynamics, lim: GridLimits) -> Callable[..., np.ndarray]:
        """The linear solve of the SCP: the LP with the drive torques as unknowns, bounded by ``lim.torque``'s
        drive columns (read at every call: the refinements tighten them in place)."""
        Wt, Vt = self.maps(pd.q)
        rows_only = GridLimits(lim.velocity, lim.acceleration, np.full_like(lim.torque, np.inf), None)

        def solve(f0: np.ndarray, fa: np.ndarray, fb: np.ndarray, a0: np.ndarray, b0: np.ndarray) -> np.ndarray:
            con = stage_constraints(pd, rows_only, f0, fa, fb, a0, b0)
            return lp_profile(con, self.rows(pd, Wt, Vt, lim.torque[:, self.index], f0, fa, fb, a0, b0))[0]

        return solve

    def torques(self, robot: RobotModel, traj: Trajectory, limits: TimingLimits) -> np.ndarray:
        """Drive torques (samples, nv; NaN off the drives) of the distribution that uses the limits least, for the
        tree torques of the feed-forward along ``traj``.

        Raises:
            DataError: When ``traj`` leaves the loops (a path not sampled on them, e.g. a spline through waypoints).
        """
        check_on_loops(robot, list(self.redundancy.loops), traj)
        return self.distributed(traj.q, feedforward(robot, traj).dynamics.tau, limits.torque)

    def distributed(self, q: np.ndarray, tau_tree: np.ndarray, torque: np.ndarray) -> np.ndarray:
        """Drive torques (n, nv; NaN off the drives) that use the torque limits ``torque`` ((nv,) or (n, nv)) least,
        for tree torques ``tau_tree`` at ``q``."""
        _, tau = self.ratio(q, tau_tree, torque[..., self.index])
        out = np.full(tau_tree.shape, np.nan)
        out[:, self.index] = tau
        return out

    def rows(self, pd: PathDynamics, Wt: np.ndarray, Vt: np.ndarray, effort: np.ndarray, f0, fa, fb, a0, b0) -> DriveRows:  # noqa: ANN001
        """The LP's drive rows with the friction linearised at ``(a0, b0)``; ``effort`` (N+1, na)."""
        red = lambda x: np.einsum("ndv,nv->nd", Vt, x)[:-1]  # noqa: E731
        rest = pd.tau_0 + f0 - fa * a0[:, None] - fb * b0[:, None]
        return DriveRows(Wt=Wt[:-1], Fa=red(pd.tau_a + fa), Fb=red(pd.tau_b + fb), F0=red(rest), lower=-effort[:-1], upper=effort[:-1])

    def ratio(self, q: np.ndarray, tau_tree: np.ndarray, effort: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Per sample the least ``r`` with ``|tau_k| <= r effort_k`` over all distributions, and those torques (n, na);
        ``effort`` (na,) or (n, na)."""
        Wt, Vt = self.maps(q)
        f = np.einsum("ndv,nv->nd", Vt, tau_tree)
        n, d, na = Wt.shape
        effort = np.broadcast_to(effort, (n, na))
        if na == d:  # no redundancy: the drive torques are unique
            tau = np.linalg.solve(Wt, f[:, :, None])[:, :, 0]
            return np.max(np.abs(tau) / effort, axis=1), tau
        if na - d == 1:
            return _one_redundant(Wt, f, effort)
        out, tau = np.empty(n), np.empty((n, na))
        for k in range(n):  # an LP per sample: minimise r s.t. Wt tau = f, -r e <= tau <= r e
            A_ub = np.block([[np.eye(na), -effort[k][:, None]], [-np.eye(na), -effort[k][:, None]]])
            res = linprog(np.r_[np.zeros(na), 1.0], A_ub=A_ub, b_ub=np.zeros(2 * na), A_eq=np.c_[Wt[k], np.zeros(d)], b_eq=f[k],
                          bounds=[(None, None)] * na + [(0, None)], method="highs")  # fmt: skip
            out[k], tau[k] = (res.x[-1], res.x[:na]) if res.status == 0 else (np.inf, np.nan)
        return out, tau


def _one_redundant(Wt: np.ndarray, f: np.ndarray, effort: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Min over ``z`` of ``max_k |p_k + n_k z| / e_k`` with ``tau = p + n z`` (p least norm, n the null
    vector of ``Wt``): the optimum lies where two terms cross or one vanishes; every candidate is tried."""
    _, _, vh = np.linalg.svd(Wt)
    null = vh[:, -1, :]  # (n, na)
    p = np.einsum("nij,nj->ni", np.linalg.pinv(Wt), f)
    P, Nn = p / effort, null / effort
    cands = []
    na = P.shape[1]
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(na):
            cands.append(-P[:, k] / Nn[:, k])
            for m in range(k + 1, na):
                for sign in (1.0, -1.0):
                    cands.append((sign * P[:, m] - P[:, k]) / (Nn[:, k] - sign * Nn[:, m]))
    z = np.stack(cands, axis=1)  # (n, candidates)
    z = np.where(np.isfinite(z), z, 0.0)
    values = np.max(np.abs(P[:, None, :] + Nn[:, None, :] * z[:, :, None]), axis=2)
    best = np.argmin(values, axis=1)
    zb = z[np.arange(len(z)), best]
    return values[np.arange(len(z)), best], p + null * zb[:, None]
