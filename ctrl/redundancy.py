"""Actuation redundancy: sharing the generalized force of a closed chain among more drives than DOF.

A closed-chain mechanism is modelled as a spanning tree (coordinates ``q``, nv of them)
plus loop-closure rows ``A(q) dq = 0`` (``A = Phi_q``, m independent rows, see
:class:`~mbctl.dynamics.constraints.loops.LoopClosure`); it has ``d = nv - m`` DOF. Along a motion
``(q, dq, ddq)`` the tree needs the generalized force ``tau_tree = M ddq + h + friction``
(:mod:`mbctl.ctrl.feedforward`). The drives (``na`` of them, selection matrix ``B``) and the
loop reactions (multipliers ``lambda``, sign convention of :mod:`mbctl.dynamics.constraints.constrained`:
``Q_c = -A^T lambda``) must supply it::

    B tau - A^T lambda = tau_tree                                        (1)

With independent coordinates ``u`` (d of the coordinates, chosen once by QR with
column pivoting of ``A`` at a reference configuration) and ``dq = V u``,
``V = [I; -A_dep^-1 A_ind]`` (a basis of the null space of ``A``), multiplying (1) by
``V^T`` removes the reactions::

    W^T tau = f,    W = B^T V  (independent velocities -> drive rates),  f = V^T tau_tree   (2)

``f`` is the generalized force on the independent coordinates (N·m, N). With ``na > d``
(actuation redundancy) (2) has infinitely many solutions; each *distribution mode* picks
one as the quadratic program

    minimize  1/2 tau^T H tau + g^T tau   s.t.   W^T tau = f,   tau_min <= tau <= tau_max

built once as a CasADi ``conic`` (qrqp by default, which CasADi generates as C, so the
whole per-sample pipeline — kinematics, reactions, QP — is one compiled function):

- ``min-norm``: ``H = diag(w)``: minimum of ``sum w_i tau_i^2`` (``[actuation] weights``;
  with ``w = 1`` and no active limit, ``tau = (W^T)^+ f``, the pseudo-inverse solution).
- ``min-internal-force`` (the 3-RRR study, mode 2): minimum Euclidean norm of the reaction forces
  ``r`` of the passive joints. Given ``tau``, (1) fixes ``lambda = S (B tau - tau_tree)``,
  ``S = (A A^T)^-1 A``, and every reaction is affine in ``lambda``: ``r = R tau + r0``,
  so ``H = R^T R``, ``g = R^T r0``. ``r`` stacks, for every passive tree joint, the force
  it transmits (parent on child, joint axes, N: the motion's RNEA wrench plus the loop
  forces acting on its subtree) and, for every cut joint, the loop force on frame B's
  body (B's axes, N) — the same quantities as :func:`mbctl.dynamics.constraints.reactions.joint_reactions`.
  With ``[actuation] internal_forces = "tree"`` only the passive tree joints' rows enter
  the objective (the 3-RRR study minimises the forces at the elbows B_i, not at the cut
  joints at P); ``reaction`` still reports every joint.
- ``min-power`` (the 3-RRR study, mode 3): minimum norm of the drive powers ``P_i = tau_i
  omega_i`` (``omega = B^T dq``): ``H = diag(omega_i^2 + omega_eps^2)``. **Zero speed** makes
  ``sum (tau_i omega_i)^2`` blind to the torque of a drive at rest (at a start from rest,
  to every torque); the floor ``omega_eps`` (``[actuation] power_regularization``, rad/s,
  default 1e-3) adds ``omega_eps^2 |tau|^2``, so the mode falls back to min-norm where all
  drives are at rest and otherwise picks, among the minimum-power solutions, the one of
  least norm (to within ``omega_eps^2 |tau|^2`` of the minimum power).
- ``non-redundant``: only the ``[actuation] non_redundant`` drives (d of them) act, the
  others turn freely: ``tau_S = (W_S^T)^-1 f`` (unique).

Torque limits ``|tau_i| <= effort_i`` are the bounds of the QP (a non-redundant solution
is checked against them). When no torques within the limits satisfy (2) at a sample,
:class:`ActuationLimitError` names the time and the drives at their limits.
Every solution is checked: the residual of (1) (with ``lambda`` from ``S``) and of (2)
must vanish to round-off, and the bounds must hold.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
from collections.abc import Callable, Iterator, Sequence

import casadi as ca
import numpy as np
import scipy.linalg
import scipy.optimize

from mbctl.ctrl.actuation import MODES, ActuationSettings, actuation_settings
from mbctl.ctrl.distribution import ActuationLimitError, Distribution
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.constraints.constraint_set import ConstraintSet
from mbctl.dynamics.constraints.errors import SingularConstraintError
from mbctl.dynamics.constraints.loops import FrameOffset, LoopClosure
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.compiled_constraints import wrench_maps
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import ConfigError, MbctlError

__all__ = ["ActuationRedundancy", "ActuationLimitError", "Distribution", "INPUTS", "OUTPUTS"]

INPUTS = ("q", "dq", "ddq", "tau_tree", "tau_min", "tau_max")
OUTPUTS = ("tau", "lam", "reaction", "residual", "reduced_residual", "power")

_QP_OPTIONS = {
    "qrqp": {"print_iter": False, "print_header": False, "print_info": False, "error_on_fail": False},
    "qpoases": {"printLevel": "none", "error_on_fail": False},
}
_CHECK = 1e-8  # largest residual of (1), (2) and bound excess accepted, relative to max(1, |tau_tree|)


@contextlib.contextmanager
def _quiet_stdout() -> Iterator[None]:
    """Silence file descriptor 1: qpOASES prints its licence banner there when a solver or
    its memory is created, whatever its print level, which would corrupt a command's output."""
    sys.stdout.flush()
    saved = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        yield
    finally:
        ctypes.CDLL(None).fflush(None)  # C stdio buffers the banner when stdout is not a terminal
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


class ActuationRedundancy:
    """Torque distribution of one closed-chain robot, built once, evaluated per sample.

    Args:
        robot: The spanning-tree model.
        settings: The ``[actuation]`` table (default: parsed from the robot's TOML).
        constraints: Its constraints; the loop closures are used, programmed rows
            (which prescribe the motion) are ignored.
        q_reference: A configuration on the loops (e.g. the first sample of the
            motion), where the independent coordinates are chosen.
        independent: Names of the independent coordinates instead (d of them).
        dynamics: A :class:`SymbolicDynamics` of the robot to reuse.

    Raises:
        ConfigError: For dependent loop rows, fewer drives than DOF, a bad
            ``non_redundant`` list or independent coordinates that do not fit.
    """

    def __init__(
        self,
        robot: RobotModel,
        settings: ActuationSettings | None = None,
        *,
        constraints: ConstraintSet | Sequence = (),
        q_reference: np.ndarray,
        independent: Sequence[str] | None = None,
        dynamics: SymbolicDynamics | None = None,
    ):
        self.robot = robot
        self.settings = actuation_settings(robot) if settings is None else settings
        self.loops = tuple(c for c in constraints if isinstance(c, LoopClosure))
        for c in constraints:
            if isinstance(c, FrameOffset):  # its rows have a target the symbolic loop rows leave out
                raise ConfigError(f"constraint {c.name!r}: frame_offset drives are not supported with [actuation]", file=robot.source, field="constraints")
            if not isinstance(c, LoopClosure) and not c.programmed:
                raise ConfigError(f"constraint {c.name!r}: only loop closures are supported as material constraints", file=robot.source, field="constraints")
        self.row_names = tuple(r for c in self.loops for r in c.rows)
        self.sd = SymbolicDynamics(robot) if dynamics is None else dynamics
        nv = robot.nv
        self.m = len(self.row_names)
        self.d = nv - self.m
        self.joints = self.settings.joints
        self.na = len(self.joints)
        self._act = np.array([robot.joint(n).idx_v for n in self.joints], dtype=int)
        if self.na < self.d:
            raise ConfigError(f"{self.na} drives cannot move a mechanism with {self.d} DOF", file=robot.source, field="actuation.joints")
        passive = [j for j in robot.joints if j.name not in self.joints]
        self._passive = passive
        self.reaction_names = tuple(j.name for j in passive) + tuple(c.name for c in self.loops)

        q = self.sd.q
        A, gs = self._loop_rows(q)
        self._A = ca.Function("loop_jacobian", [q], [A])
        self._q_reference = np.asarray(q_reference, dtype=float)
        self.dependent, self.independent = self._partition(np.asarray(self._A(self._q_reference)), independent)
        self._data = self._build_data(A, gs)
        self._functions: dict[str, ca.Function] = {}
        self._compiled: dict[str, CompiledFunction] = {}

    # ---------------------------------------------------------------- symbolic set-up

    def _loop_rows(self, q: ca.SX) -> tuple[ca.SX, list]:
        """``A(q)`` (m x nv) and per loop ``(g_A, g_B, R_B, frame ids)`` (rows x 6 each)."""
        sd = self.sd
        rows, gs = [], []
        for c in self.loops:
            fa, fb = c.frames
            gA, gB = wrench_maps(c, sd, q)
            rows.append(gA @ sd.frame_jacobian(fa)(q) + gB @ sd.frame_jacobian(fb)(q))
            gs.append((gA, gB, sd.frame_rotation(fb)(q), c.fid_a, c.fid_b))
        A = ca.vertcat(*rows) if rows else ca.SX(0, self.robot.nv)
        return A, gs

    def _partition(self, A: np.ndarray, independent: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray]:
        nv, m, robot = self.robot.nv, self.m, self.robot
        if m == 0:
            return np.zeros(0, int), np.arange(nv)
        s = np.linalg.svd(A, compute_uv=False)
        if not s[-1] > 1e-9 * s[0]:
            raise ConfigError(
                f"the {m} loop rows are dependent (rank {int(np.sum(s > 1e-9 * s[0]))}) or singular at the reference "
                "configuration: the loop reactions, and so the internal forces, are not unique",
                file=robot.source,
                field="constraints",
            )
        if independent is not None:
            ind = np.sort([robot.joint(n).idx_v for n in independent])
            if len(ind) != self.d or np.linalg.matrix_rank(np.delete(A, ind, axis=1)) < m:
                raise ConfigError(
                    f"independent coordinates must be {self.d} joints whose complement makes the loop rows solvable",
                    file=robot.source,
                    field="independent",
                )
        else:
            piv = scipy.linalg.qr(A, pivoting=True, mode="r")[1]
            ind = np.sort(piv[m:])
        dep = np.setdiff1d(np.arange(nv), ind)
        return dep, ind

    def _build_data(self, A: ca.SX, gs: list) -> ca.Function:
        """``(q, dq, ddq, tau_tree) -> (Wt, f, R, r0, L, l0, E, e0, omega)`` (SX)."""
        sd, robot, model = self.sd, self.robot, self.robot.model
        nv, m, d, na = robot.nv, self.m, self.d, self.na
        q, dq, ddq = sd.q, sd.dq, sd.ddq
        tau_tree = ca.SX.sym("tau_tree", nv)
        B = np.zeros((nv, na))
        B[self._act, np.arange(na)] = 1.0
        V = ca.SX.zeros(nv, d)
        for k, i in enumerate(self.independent):
            V[int(i), k] = 1.0
        if m:
            dep, ind = self.dependent.tolist(), self.independent.tolist()
            V[dep, :] = -ca.solve(A[:, dep], A[:, ind])
            S = ca.solve(A @ A.T, A)  # lambda = S (B tau - tau_tree)
        else:
            S = ca.SX(0, nv)
        Wt = V.T @ ca.DM(B)
        f = V.T @ tau_tree
        L, l0 = S @ ca.DM(B), -S @ tau_tree
        P = ca.SX.eye(nv) - A.T @ S  # residual of (1): P (B tau - tau_tree)
        E, e0 = P @ ca.DM(B), -P @ tau_tree
        # reaction forces: r = r_motion + G lambda
        wrench = sd.joint_wrenches(q, dq, ddq)
        blocks_G, blocks_r = [], []
        offsets = np.cumsum([0] + [c.size for c in self.loops])
        for j in self._passive:
            subtree = set(int(x) for x in model.subtrees[j.id])
            Rj = sd.frame_rotation(j.name)(q)
            acc = ca.SX.zeros(3, m)
            for (gA, gB, _, fid_a, fid_b), start in zip(gs, offsets):
                k = gA.shape[0]
                for g, fid in ((gA, fid_a), (gB, fid_b)):
                    if int(model.frames[fid].parentJoint) in subtree:
                        acc[:, start : start + k] += g[:, :3].T
            blocks_G.append(Rj.T @ acc)
            blocks_r.append(wrench[:3, j.idx_v])
        for (gA, gB, RB, _, _), start in zip(gs, offsets):
            k = gA.shape[0]
            G = ca.SX.zeros(3, m)
            G[:, start : start + k] = -(RB.T @ gB[:, :3].T)
            blocks_G.append(G)
            blocks_r.append(ca.SX.zeros(3, 1))
        G = ca.vertcat(*blocks_G) if blocks_G else ca.SX(0, m)
        r_motion = ca.vertcat(*blocks_r) if blocks_r else ca.SX(0, 1)
        R, r0 = G @ L, G @ l0 + r_motion
        omega = ca.DM(B.T) @ dq
        outs = [Wt, f, R, r0, L, l0, E, e0, omega]
        names = ["Wt", "f", "R", "r0", "L", "l0", "E", "e0", "omega"]
        return ca.Function("redundancy_data", [q, dq, ddq, tau_tree], [ca.densify(o) for o in outs], ["q", "dq", "ddq", "tau_tree"], names)

    # ---------------------------------------------------------------- per-mode functions

    def _subset(self) -> np.ndarray:
        names = self.settings.non_redundant
        field = "actuation.non_redundant"
        if not names:
            raise ConfigError("missing required field (mode non-redundant needs the drives it uses)", file=self.robot.source, field=field)
        if len(names) != self.d:
            raise ConfigError(
                f"mode non-redundant needs exactly {self.d} drives (the mechanism has {self.d} DOF), got {len(names)}",
                file=self.robot.source,
                field=field,
            )
        return np.array([self.joints.index(n) for n in names], dtype=int)

    def function(self, mode: str) -> ca.Function:
        """The mode's CasADi function ``(q, dq, ddq, tau_tree, tau_min, tau_max) ->
        (tau, lam, reaction, residual, reduced_residual, power)``; ``reaction`` stacks the
        3 force components of every entry of :attr:`reaction_names`, ``residual`` is the
        vector residual of (1) (nv), ``reduced_residual`` that of (2) (d)."""
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r} (expected one of: {', '.join(MODES)})")
        if mode not in self._functions:
            self._functions[mode] = self._build_function(mode)
        return self._functions[mode]

    def _build_function(self, mode: str) -> ca.Function:
        nv, na = self.robot.nv, self.na
        # the unique solution stays in SX (its small solve is generated as plain C); a QP needs MX
        sym = ca.SX.sym if mode == "non-redundant" else ca.MX.sym
        q, dq, ddq, tt = sym("q", nv), sym("dq", nv), sym("ddq", nv), sym("tau_tree", nv)
        lo, hi = sym("tau_min", na), sym("tau_max", na)
        Wt, f, R, r0, L, l0, E, e0, omega = self._data(q, dq, ddq, tt)
        if mode == "non-redundant":
            S = self._subset().tolist()
            tau_s = ca.solve(Wt[:, S], f)
            tau = ca.vertcat(*[tau_s[S.index(i)] if i in S else ca.SX(0.0) for i in range(na)])
        else:
            if mode == "min-norm":
                H, g = ca.MX(ca.DM(np.diag(self.settings.weights))), ca.MX.zeros(na, 1)
            elif mode == "min-internal-force":
                # "tree": the passive tree joints only (their 3 force rows come first in r)
                k = 3 * len(self._passive) if self.settings.internal_forces == "tree" else R.shape[0]
                H, g = R[:k, :].T @ R[:k, :], R[:k, :].T @ r0[:k]
            else:
                eps2 = self.settings.power_regularization**2
                H, g = ca.diag(omega**2 + eps2), ca.MX.zeros(na, 1)
            with _quiet_stdout():
                solver = ca.conic(
                    f"qp_{mode.replace('-', '_')}",
                    self.settings.solver,
                    {"h": ca.Sparsity.dense(na, na), "a": ca.Sparsity.dense(self.d, na)},
                    _QP_OPTIONS[self.settings.solver],
                )
            tau = solver(h=H, g=g, a=Wt, lba=f, uba=f, lbx=lo, ubx=hi)["x"]
        outs = [tau, L @ tau + l0, R @ tau + r0, E @ tau + e0, Wt @ tau - f, tau * omega]
        return ca.Function(f"distribute_{mode.replace('-', '_')}", [q, dq, ddq, tt, lo, hi], outs, list(INPUTS), list(OUTPUTS))

    def compiled(self, mode: str) -> CompiledFunction:
        """The mode's function as C (:func:`mbctl.dynamics.codegen.compile_function`); with a QP solver
        CasADi cannot generate (qpoases) it runs in CasADi's interpreter."""
        if mode not in self._compiled:
            f = self.function(mode)
            if mode == "non-redundant" or self.settings.solver == "qrqp":
                self._compiled[mode] = compile_function(f)
            else:
                interpreted = CompiledFunction(f, None)
                with _quiet_stdout():  # the solver's memory (and its banner) is made at the first call
                    interpreted(self._q_reference, *np.zeros((3, self.robot.nv)), *self.limits(mode))
                self._compiled[mode] = interpreted
        return self._compiled[mode]

    @property
    def data(self) -> ca.Function:
        """``(q, dq, ddq, tau_tree) -> (Wt, f, R, r0, L, l0, E, e0, omega)``: the problem data
        of a sample (see module docstring; ``lambda = L tau + l0``, residual of (1) ``E tau + e0``)."""
        return self._data

    # ---------------------------------------------------------------- evaluation

    def limits(self, mode: str) -> tuple[np.ndarray, np.ndarray]:
        """Bounds ``(tau_min, tau_max)`` of the mode (N·m or N)."""
        effort = np.asarray(self.settings.effort, dtype=float)
        return -effort, effort.copy()

    def distribute(
        self,
        t: np.ndarray,
        q: np.ndarray,
        dq: np.ndarray,
        ddq: np.ndarray,
        tau_tree: np.ndarray,
        mode: str | None = None,
        *,
        progress: Callable[[int, int], None] | None = None,
    ) -> Distribution:
        """Drive torques of ``mode`` (default: the settings') at every sample (arrays (N, nv)).

        Raises:
            ActuationLimitError: When the limits make a sample infeasible (time and drives named).
            MbctlError: When the QP solver fails on a feasible sample.
        """
        mode = self.settings.mode if mode is None else mode
        fn = self.compiled(mode)
        t = np.atleast_1d(np.asarray(t, dtype=float))
        q, dq, ddq, tau_tree = (np.atleast_2d(np.asarray(x, dtype=float)) for x in (q, dq, ddq, tau_tree))
        n, na = len(t), self.na
        lo, hi = self.limits(mode)
        outs = [np.empty((n, na)), np.empty((n, self.m)), np.empty((n, 3 * len(self.reaction_names))), np.empty(n), np.empty(n), np.empty((n, na))]
        buffers = fn.inputs
        buffers[4][...] = lo
        buffers[5][...] = hi
        residuals = [np.empty((n, fn.outputs[3].size)), np.empty((n, fn.outputs[4].size))]
        failed = np.zeros(n, dtype=bool)
        # the loop only evaluates; the checks run on all samples at once after it (the first
        # failing sample raises, as a per-sample check would)
        for k in range(n):
            buffers[0][...], buffers[1][...], buffers[2][...], buffers[3][...] = q[k], dq[k], ddq[k], tau_tree[k]
            try:
                fn.eval()
            except RuntimeError:
                failed[k] = True
                break
            tau, lam, reaction, residual, reduced, power = fn.outputs
            outs[0][k], outs[1][k], outs[2][k], residuals[0][k], residuals[1][k], outs[5][k] = tau, lam, reaction, residual.ravel(), reduced.ravel(), power
            if progress is not None and (k + 1) % 1000 == 0:
                progress(k + 1, n)
        done = int(np.argmax(failed)) if failed.any() else n
        scale = np.maximum(1.0, np.abs(tau_tree[:done]).max(axis=1, initial=0.0))
        outs[3][:done] = np.abs(residuals[0][:done]).max(axis=1, initial=0.0)
        outs[4][:done] = np.abs(residuals[1][:done]).max(axis=1, initial=0.0)
        excess = np.maximum(outs[0][:done] - hi, lo - outs[0][:done]).max(axis=1, initial=-np.inf)
        bad = ~((outs[3][:done] <= _CHECK * scale) & (outs[4][:done] <= _CHECK * scale) & (excess <= _CHECK * scale))
        if bad.any() or done < n:
            k = int(np.argmax(bad)) if bad.any() else done
            self._fail(mode, t[k], q[k], dq[k], ddq[k], tau_tree[k], outs[0][k].copy() if k < done else None)
        return Distribution(
            mode=mode,
            t=t,
            joints=self.joints,
            tau=outs[0],
            lam=outs[1],
            reaction_names=self.reaction_names,
            reaction=outs[2].reshape(n, -1, 3),
            residual=outs[3],
            reduced_residual=outs[4],
            power=outs[5],
            row_names=self.row_names,
        )

    def _fail(self, mode: str, t: float, q, dq, ddq, tau_tree, tau: np.ndarray | None) -> None:
        """Raise the error that explains a failed or out-of-bounds sample."""
        source, field = self.robot.source, "actuation.effort"
        lo, hi = self.limits(mode)
        unit = "N·m"
        if mode == "non-redundant" and tau is not None and np.all(np.isfinite(tau)):
            over = np.maximum(tau - hi, lo - tau)
            i = int(np.argmax(over))
            if over[i] > 0:
                name = self.joints[i]
                raise ActuationLimitError(
                    f"mode non-redundant needs tau.{name} = {tau[i]:.4g} {unit} at t = {t:.6g} s, beyond its limit "
                    f"{hi[i]:.4g} {unit}: the torque limits make the trajectory infeasible in this mode",
                    file=source,
                    field=field,
                    time=t,
                    joints=(name,),
                )
        data = self._data(q, dq, ddq, tau_tree)
        Wt, f = np.asarray(data[0]), np.asarray(data[1]).ravel()
        if not (np.isfinite(Wt).all() and np.isfinite(f).all()):
            dep = ", ".join(self.robot.joints[i].name for i in self.dependent)
            raise SingularConstraintError(
                f"at t = {t:.6g} s the loop Jacobian's block of the dependent coordinates ({dep}) is singular: a "
                "singular configuration of the mechanism, or one where other independent coordinates are needed",
                file=self.robot.source,
                field="constraints",
                time=t,
                q=q,
            )
        cols = self._subset() if mode == "non-redundant" else np.arange(self.na)
        best = scipy.optimize.lsq_linear(Wt[:, cols], f, bounds=(lo[cols], hi[cols]), method="bvls", tol=1e-14)
        x = np.zeros(self.na)
        x[cols] = best.x
        miss = float(np.abs(Wt @ x - f).max())
        scale = max(1.0, float(np.abs(tau_tree).max()))
        if miss > _CHECK * scale:
            at = [self.joints[i] for i in range(self.na) if np.isfinite(hi[i]) and abs(x[i]) >= (1 - 1e-9) * hi[i] > 0]
            items = [f"{n} (±{hi[self.joints.index(n)]:.4g} {unit})" for n in at]
            names = " and ".join(items) if len(items) < 3 else ", ".join(items[:-1]) + " and " + items[-1]
            held = f"with {names} at their limits" if at else "within the limits"
            raise ActuationLimitError(
                f"mode {mode}: the torque limits make the trajectory infeasible at t = {t:.6g} s: {held} the drives "
                f"still miss the required generalized force by {miss:.4g} {unit}",
                file=source,
                field=field,
                time=t,
                joints=at,
            )
        raise MbctlError(f"mode {mode}: the {self.settings.solver} QP solver failed at t = {t:.6g} s on a feasible sample")
