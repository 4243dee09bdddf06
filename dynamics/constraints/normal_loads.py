"""Load-dependent friction in the constrained dynamics: the algebraic loop, solved exactly.

Friction whose dry part scales with a joint's normal load makes ``Q`` depend on the reaction
wrenches, which depend on ``ddq`` and ``lambda``, which depend on ``Q``. It is resolved exactly at every
evaluation, without lagging or iterating the whole solve: at a given state the force
is affine in the normal loads, ``Q = Q0 + B N`` (``B`` column i: minus the friction
coefficient — ``sigma0*z + sigma1*dz/dt`` for LuGre, a function of the state — on the
joint's DOF); the solution is affine in ``Q`` (the factored solver's linear part) and
the wrenches are affine in the solution (RNEA at ``(q, dq)``, loop-closure forces as
external forces), so ``W(N) = W0 + sum_i N_i W_i`` from ``1 + k`` RNEA calls, and the k
loads solve ``N = loads(W(N))`` — norms of wrench components, one equation per
load-dependent joint — by Newton's method to ``tolerance`` (the loads are nearly
affine in themselves, so the first step from zero lands on the answer and the second
evaluation confirms it). A plain fixed point would not do: right after a velocity reversal LuGre's bristle-damping
term ``sigma1*dz/dt ~ sigma1*v`` can make the effective coefficient exceed 1 and the
iteration diverge. When no consistent loads exist (a Painlevé-type paradox of too
much friction) the run stops with :class:`ReactionLoopError`. Elements take part
through ``reaction_joints``, ``load_terms`` and ``loads_and_gradient``
(:class:`mbctl.dynamics.forces.ForceElement`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import pinocchio as pin
import scipy.linalg

from mbctl.dynamics.constraints.constraint_set import ConstraintSet
from mbctl.dynamics.constraints.errors import ReactionLoopError
from mbctl.dynamics.constraints.loops import acts_on_bodies
from mbctl.dynamics.constraints.solvers import Factored
from mbctl.dynamics.forces import ForceElement
from mbctl.dynamics.model.frames import KinematicState
from mbctl.dynamics.model.robot import RobotModel

__all__ = ["NormalLoads"]


class NormalLoads:
    """The normal loads of the load-dependent friction elements, solved with the dynamics (module docstring).

    Args:
        robot: The robot.
        constraints: The constraint rows (their loop-closure forces load the joints).
        forces: Every force element, with ``state_slices`` their states' slices.
        configuration: ``q -> `` pinocchio configuration.
        tolerance: Convergence of the loads (relative residual of ``N = loads(W(N))``).
        max_iterations: Newton steps allowed.

    Attributes:
        ids: Pinocchio ids of the joints whose reactions the elements need, sorted.
        body_forces: The constraints apply forces to bodies (loop closures): the wrenches need
            the multipliers.
        iterations: Newton steps summed over all solves so far.
    """

    def __init__(
        self,
        robot: RobotModel,
        constraints: ConstraintSet,
        forces: Sequence[ForceElement],
        state_slices: Sequence[slice],
        configuration: Callable[[np.ndarray], np.ndarray],
        tolerance: float,
        max_iterations: int,
    ):
        self._robot = robot
        self._constraints = constraints
        self._configuration = configuration
        self.ids = sorted({j for f in forces for j in f.reaction_joints})
        self._elements = [(f, sl, [self.ids.index(j) for j in f.reaction_joints]) for f, sl in zip(forces, state_slices) if f.reaction_joints]
        self._model = robot.model
        self._data = robot.model.createData()
        self._model0 = pin.Model(robot.model)
        self._model0.gravity = pin.Motion.Zero()
        self._data0 = self._model0.createData()
        self.body_forces = any(acts_on_bodies(c) for c in constraints)
        self.tolerance = tolerance
        self.max_iterations = max_iterations
        self.iterations = 0

    def wrenches(self, ks: KinematicState, ddq: np.ndarray, lam: np.ndarray, *, linear: bool = False, qp: np.ndarray | None = None) -> np.ndarray:
        """Reaction wrenches ((k, 6), joint frames, N then N·m) of the joints the force
        elements name in ``reaction_joints``, at the state of ``ks`` with accelerations
        ``ddq`` and multipliers ``lam``: RNEA with the loop-closure forces as external forces.
        ``linear=True`` gives only the part linear in ``(ddq, lam)`` (no gravity, velocity terms);
        ``qp`` is the pinocchio configuration of ``ks.q`` if already at hand."""
        model, data = (self._model0, self._data0) if linear else (self._model, self._data)
        qp = self._configuration(ks.q) if qp is None else qp
        v = np.zeros(self._robot.nv) if linear else ks.dq
        return self._constraints.joint_wrenches(model, data, ks, qp, v, ddq, lam if self.body_forces else None, self.ids)[0]

    def solve(
        self,
        solve: Factored,
        t: float,
        q: np.ndarray,
        dq: np.ndarray,
        s: np.ndarray,
        ks: KinematicState,
        f0: np.ndarray,
        state_rate: np.ndarray,
        frozen: np.ndarray | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Solve the dynamics (``solve``, factored at this state) together with the normal loads (module docstring).

        The load-dependent forces are ``Q0 + B N``; the solution is affine in them and the
        wrenches are affine in the solution, so ``W(N) = W0 + sum_i N_i W_i`` and the loads
        solve ``N = loads(W(N))``, k equations, by Newton's method.

        Returns ``(ddq, Q_c, lambda, Q_r, N)`` with ``Q_r = Q0 + B N`` the load-dependent
        forces; with ``frozen`` loads, ``N = frozen`` and one solve.
        """
        Q0 = np.zeros(self._robot.nv)
        blocks, columns = [], []
        for element, sl, rows in self._elements:
            Qe, Be, ds = element.load_terms(t, q, dq, s[sl])
            Q0 += Qe
            state_rate[sl] = ds
            blocks.append((element, rows, len(columns)))
            columns.append(Be)
        B = np.column_stack(columns)
        if frozen is not None:
            Q_r = Q0 + B @ frozen
            return (*solve(f0 + Q_r), Q_r, np.asarray(frozen, dtype=float))
        active = np.flatnonzero(np.abs(B).max(axis=0) > 0)  # loads that change some force now
        ddq, force, lam = solve(f0 + Q0)
        qp = self._configuration(q)
        W0 = self.wrenches(ks, ddq, lam, qp=qp)
        n_loads = B.shape[1]
        Wl = np.zeros((n_loads,) + W0.shape)
        lin = None
        if len(active):
            lin = solve.linear(B[:, active])
            for c, i in enumerate(active):
                Wl[i] = self.wrenches(ks, lin[0][:, c], lin[2][:, c], linear=True, qp=qp)
        Wl_flat = Wl.reshape(n_loads, -1)

        def loads(N: np.ndarray, gradient: bool = False):
            W = W0 + (N @ Wl_flat).reshape(W0.shape)
            out = np.empty(n_loads)
            G = np.zeros((n_loads, n_loads)) if gradient else None
            for element, rows, start in blocks:
                k = len(rows)
                out[start : start + k], g = element.loads_and_gradient(W[rows], gradient)
                if gradient:  # dN_r/dN_j = g_r . W_j[row r]
                    G[start : start + k] = np.einsum("rc,jrc->rj", g, Wl[:, rows, :])
            return out, G

        # Newton from N = 0, then chord steps with the first Jacobian (refreshed only if
        # they stall): the loads are nearly affine in N, so the chord converges at once
        N = np.zeros(n_loads)
        L, G = loads(N, gradient=True)
        scale = max(1.0, np.abs(L).max())
        residual = N - L
        eye = np.eye(n_loads)
        lu = scipy.linalg.lu_factor(eye - G, check_finite=False)
        previous = np.inf
        for iteration in range(1, self.max_iterations + 1):
            N = N - scipy.linalg.lu_solve(lu, residual, check_finite=False)
            L, _ = loads(N)
            residual = N - L
            size = np.abs(residual).max()
            if size <= self.tolerance * max(scale, np.abs(N).max()):
                break
            if size > 0.1 * previous:  # not contracting fast: a full Newton step next
                _, G = loads(N, gradient=True)
                lu = scipy.linalg.lu_factor(eye - G, check_finite=False)
            previous = size
        else:
            raise ReactionLoopError(
                f"{self._robot.source or self._robot.name}: no consistent joint normal loads at t = {t:.6g} s "
                f"(load-dependent friction; residual {np.abs(residual).max():.3g} after {self.max_iterations} "
                "Newton steps): the friction coefficients, bristle damping sigma1 or journal radii are too large "
                "for the loads to be determined (a Painleve-type inconsistency)"
            )
        self.iterations += iteration
        Q_r = Q0 + B @ N
        if lin is not None:
            x = N[active]
            ddq = ddq + lin[0] @ x
            force = force + lin[1] @ x
            lam = lam + lin[2] @ x
        return ddq, force, lam, Q_r, N
