"""Constrained dynamics: accelerations and constraint forces, by Lagrange, Udwadia–Kalaba or null space.

The robot obeys ``M(q) ddq + h(q, dq) = Q + Q_c`` subject to the stacked constraint
rows ``A ddq = b`` with ``A = Phi_q`` and ``b`` = the stabilized right-hand side
(:class:`Baumgarte`). ``Q`` collects the force elements (friction, later springs and
drives), ``Q_c = -A^T lambda`` is the generalized constraint force (N·m or N per DOF;
**sign convention**: a row's multiplier ``lambda`` is the force, N or N·m, that pushes the
system towards decreasing ``Phi``). ``solver`` picks Lagrange (KKT), Udwadia–Kalaba or the
null space of ``A`` (independent coordinates); their formulas are in
:mod:`mbctl.dynamics.constraints.solvers`. All three give the same ``ddq`` for consistent
constraints, and the Lagrange and Udwadia–Kalaba forces agree (for independent rows, also
their multipliers).

**Checks.** At every evaluation the singular values ``s_1 >= s_2 >= ...`` of ``A``
are compared with the rank ``r`` found at the initial state: ``s_r < tolerance*s_1``
(or, when the constraints fix every DOF, a sign change of ``det A``) means a
near-singular constraint Jacobian (e.g. a SCARA stretched out under a position
constraint) and raises :class:`SingularConstraintError` with the time and
configuration, unless the damped mode is chosen (then only near-singular
evaluations use damped least squares). A residual ``|A ddq - b|`` above
``consistency_tolerance`` (relative) means the rows contradict each other and
raises :class:`InconsistentConstraintsError`.

**Load-dependent friction.** Friction whose dry part scales with a joint's normal load makes
``Q`` depend on the reaction wrenches, which depend on ``ddq`` and ``lambda``: the loop is solved
exactly at every evaluation (:mod:`mbctl.dynamics.constraints.normal_loads`).

**Unactuated DOF.** The part of ``Q_c`` due to programmed constraints,
``-A_prog^T lambda_prog`` (minimum-norm multipliers for the null-space solver), is
what the drives must supply; its components on unactuated joints are reported
(``programmed_force``), never silently given to actuators.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin
import scipy.linalg
import scipy.linalg.lapack

from mbctl.dynamics.constraints import assembly
from mbctl.dynamics.constraints.constraint_set import ConstraintSet
from mbctl.dynamics.constraints.errors import (
    InconsistentConstraintsError,
    SingularConstraintError,
)
from mbctl.dynamics.constraints.kinds import Constraint, ConstraintEvaluationError
from mbctl.dynamics.constraints.normal_loads import NormalLoads
from mbctl.dynamics.constraints.rank import RowSetup, Where, row_setup, singular_error
from mbctl.dynamics.constraints.solvers import (
    SOLVERS,
    Factored,
    KeptRows,
    Solver,
    lagrange_factor,
    nullspace_factor,
    udwadia_kalaba_factor,
)
from mbctl.dynamics.constraints.stabilization import Baumgarte, SingularityPolicy, stabilize
from mbctl.dynamics.forces import ForceElement
from mbctl.dynamics.model.frames import KinematicState
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError

__all__ = ["ConstrainedDynamics", "ConstrainedState"]


@dataclass(frozen=True, eq=False)
class ConstrainedState:
    """Everything one evaluation of the constrained dynamics yields, at time ``t``.

    Attributes:
        t: Time (s).
        ddq: Accelerations (nv,) (rad/s², m/s²).
        state_rate: Rates of the force elements' internal states.
        force: Generalized constraint force ``Q_c`` (nv,) (N·m, N).
        programmed_force: The part of ``Q_c`` due to programmed constraints.
        applied: Sum of the force elements ``Q`` (nv,).
        lam: Multipliers (m,) with ``Q_c = -A^T lambda``: KKT (zeros for eliminated
            rows), minimum-norm (Udwadia–Kalaba), NaN (null space).
        phi: ``Phi`` per row (NaN for velocity-level rows).
        dphi: ``dPhi/dt`` per row (the velocity-level residual for Pfaffian rows).
        target: Target value per row (NaN where there is none).
        sigma: Singular values of ``A``, decreasing.
        singular: True when ``A`` was near-singular (damped mode only; otherwise an
            error is raised).
        normal_loads: Normal loads of the load-dependent friction joints (N·m or N),
            in the order of the force elements' ``reaction_joints``; empty without any.
    """

    t: float
    ddq: np.ndarray
    state_rate: np.ndarray
    force: np.ndarray
    programmed_force: np.ndarray
    applied: np.ndarray
    lam: np.ndarray
    phi: np.ndarray
    dphi: np.ndarray
    target: np.ndarray
    sigma: np.ndarray
    singular: bool = False
    normal_loads: np.ndarray = field(default_factory=lambda: np.zeros(0))


class ConstrainedDynamics:
    """The dynamics of a robot under a constraint set, built once and evaluated many times.

    Args:
        robot: The robot.
        constraints: Constraint objects (or a :class:`ConstraintSet`).
        solver: ``"udwadia-kalaba"``, ``"lagrange"`` or ``"nullspace"``.
        baumgarte: Stabilization, or None for the plain ``A ddq = gamma``.
        forces: Force elements summed into ``Q``.
        independent: Names of the independent coordinates for ``"nullspace"``
            (default: QR with column pivoting at every evaluation).
        eliminate: Names of redundant rows to drop for ``"lagrange"`` and
            ``"nullspace"`` (default: QR with column pivoting at the initial state).
        rank_tolerance: Relative singular-value threshold for the rank at the
            initial state (and for the pseudo-inverse).
        singularity: Near-singularity threshold and action.
        consistency_tolerance: Largest relative residual ``|A ddq - b|`` accepted. Not
            tighter than ~1e-5: the stage states of an explicit step lie off the
            constraint manifold by its local error, and there an eliminated redundant
            row ``a_r = u^T A_kept`` misses its target by ``(du/dt)^T dPhi_kept``, which
            grows where ``u`` turns fast (the parallelogram's crank through vertical at
            1 ms steps reaches 7e-6).
        loop_tolerance: Convergence of the normal loads of load-dependent friction
            (relative residual of ``N = loads(W(N))``).
        max_loop_iterations: Newton steps allowed for them.

    A :class:`ConstrainedDynamics` owns one pinocchio ``Data``: use one per thread.
    """

    def __init__(
        self,
        robot: RobotModel,
        constraints: Sequence[Constraint] | ConstraintSet,
        *,
        solver: Solver = "udwadia-kalaba",
        baumgarte: Baumgarte | None = None,
        forces: Sequence[ForceElement] = (),
        independent: Sequence[str] | None = None,
        eliminate: Sequence[str] | None = None,
        rank_tolerance: float = 1e-9,
        singularity: SingularityPolicy | None = None,
        consistency_tolerance: float = 1e-5,
        loop_tolerance: float = 1e-10,
        max_loop_iterations: int = 50,
    ):
        source = robot.source
        if solver not in SOLVERS:
            raise ConfigError(f"unknown solver {solver!r} (expected one of: {', '.join(SOLVERS)})", file=source, field="simulation.solver")
        self.robot = robot
        self.constraints = constraints if isinstance(constraints, ConstraintSet) else ConstraintSet(constraints, robot.nv)
        self.solver = solver
        self.baumgarte = baumgarte
        self.forces = tuple(forces)
        self.rank_tolerance = rank_tolerance
        self.singularity = singularity or SingularityPolicy()
        self.consistency_tolerance = consistency_tolerance
        if self.singularity.action == "damped" and solver != "udwadia-kalaba":
            raise ConfigError(f'the damped mode needs solver = "udwadia-kalaba", not {solver!r}', file=source, field="simulation.singularity.action")
        self.independent: np.ndarray | None = None
        if independent is not None:
            if solver != "nullspace":
                raise ConfigError('independent coordinates apply to solver = "nullspace" only', file=source, field="simulation.independent")
            idx = []
            for name in independent:
                try:
                    idx.append(robot.joint(name).idx_v)
                except ConfigError as exc:
                    raise ConfigError(exc.reason, file=source, field="simulation.independent") from None
            if len(set(idx)) != len(idx):
                raise ConfigError("a coordinate is named twice", file=source, field="simulation.independent")
            self.independent = np.array(sorted(idx), dtype=int)
        self.eliminate: tuple[int, ...] | None = None
        if eliminate is not None:
            try:
                self.eliminate = tuple(self.constraints.row_index(r) for r in eliminate)
            except ConfigError as exc:
                raise ConfigError(exc.reason, file=source, field="simulation.eliminate") from None
        self.state_names = tuple(n for f in self.forces for n in f.state_names)
        self.n_states = len(self.state_names)
        self.state_slices = []
        start = 0
        for f in self.forces:
            self.state_slices.append(slice(start, start + f.n_states))
            start += f.n_states
        self._model = robot.model
        self._data = robot.model.createData()
        self._plain = np.array([(j.idx_q, j.idx_v) for j in robot.joints if not j.continuous], dtype=int).reshape(-1, 2)
        self._continuous = np.array([(j.idx_q, j.idx_v) for j in robot.joints if j.continuous], dtype=int).reshape(-1, 2)
        self._prog = self.constraints.programmed
        self._lower = np.tril_indices(robot.nv, -1)
        self._setup: RowSetup | None = None
        self.evaluations = 0
        self.loop_tolerance = loop_tolerance
        self.max_loop_iterations = max_loop_iterations
        reactive = any(f.reaction_joints for f in self.forces)
        self._loads = (
            NormalLoads(robot, self.constraints, self.forces, self.state_slices, self.configuration, loop_tolerance, max_loop_iterations) if reactive else None
        )
        if self._loads is not None and self._loads.body_forces and solver == "nullspace":
            raise ConfigError(
                "load-dependent friction needs the loop-closure multipliers for the joint reactions; the nullspace "
                "solver gives none (use lagrange or udwadia-kalaba)",
                file=source,
                field="simulation.solver",
            )

    # ------------------------------------------------------------------ helpers

    @property
    def rows(self) -> tuple[str, ...]:
        return self.constraints.rows

    @property
    def loop_iterations(self) -> int:
        """Steps of the load loop of load-dependent friction summed over all evaluations so far."""
        return 0 if self._loads is None else self._loads.iterations

    @property
    def rank(self) -> int:
        """Rank of the constraint Jacobian at the initial state."""
        return self._require_setup().rank

    @property
    def redundancy(self) -> int:
        """Degree of redundancy ``p = rows - rank``."""
        return self.constraints.m - self.rank

    @property
    def eliminated_rows(self) -> tuple[str, ...]:
        """Rows dropped by the Lagrange and null-space solvers."""
        return self._require_setup().eliminated

    def _require_setup(self) -> RowSetup:
        if self._setup is None:
            raise RuntimeError("evaluate or initialize the dynamics first")
        return self._setup

    def initial_state(self) -> np.ndarray:
        """Internal states of the force elements at the start."""
        return np.concatenate([f.initial_state() for f in self.forces]) if self.forces else np.zeros(0)

    def configuration(self, q: np.ndarray) -> np.ndarray:
        """Pinocchio configuration of DOF coordinates ``q``."""
        qp = np.empty(self._model.nq)
        qp[self._plain[:, 0]] = q[self._plain[:, 1]]
        if len(self._continuous):
            qp[self._continuous[:, 0]] = np.cos(q[self._continuous[:, 1]])
            qp[self._continuous[:, 0] + 1] = np.sin(q[self._continuous[:, 1]])
        return qp

    def kinematics(self, q: np.ndarray, dq: np.ndarray) -> KinematicState:
        """Run ``computeAllTerms`` at ``(q, dq)`` and return the frame kinematics."""
        pin.computeAllTerms(self._model, self._data, self.configuration(q), dq)
        return KinematicState(self._model, self._data, q, dq)

    def describe(self, q: np.ndarray) -> str:
        """``j1 = 0.5236 rad, j4 = 0.01 m`` for messages."""
        return ", ".join(f"{j.name} = {q[j.idx_v]:.6g} {'rad' if j.kind == 'revolute' else 'm'}" for j in self.robot.joints)

    def _error(self, cls: type, reason: str) -> Exception:
        return cls(reason, file=self.robot.source, field="constraints")

    # ------------------------------------------------------------------ set-up

    def _free_coordinates(self, keep: Sequence[str]) -> np.ndarray:
        """Velocity indices of every coordinate but those of the joints named in ``keep``
        (``simulation.initial.keep``: held while assembling or balancing)."""
        fixed = []
        for name in keep:
            try:
                fixed.append(self.robot.joint(name).idx_v)
            except ConfigError as exc:
                raise ConfigError(exc.reason, file=self.robot.source, field="simulation.initial.keep") from None
        return np.setdiff1d(np.arange(self.robot.nv), fixed)

    def initialize(self, t: float, q: np.ndarray, dq: np.ndarray) -> None:
        """Find the rank at the initial state and the rows Lagrange / null space keep.

        Raises:
            ConfigError: If the named eliminated rows do not leave an independent set.
            SingularConstraintError: If the initial state is already near-singular.
        """
        q, dq = np.asarray(q, dtype=float), np.asarray(dq, dtype=float)
        cv = self._evaluate_constraints(self.kinematics(q, dq), t)
        self._setup = row_setup(
            cv.jac,
            cv.phi,
            cv.jac @ dq + cv.phi_t,
            self.rows,
            nv=self.robot.nv,
            solver=self.solver,
            rank_tolerance=self.rank_tolerance,
            singularity=self.singularity,
            consistency_tolerance=self.consistency_tolerance,
            eliminate=self.eliminate,
            independent=self.independent,
            where=Where(t, q, self.describe(q), self.robot.source),
        )

    def _evaluate_constraints(self, ks: KinematicState, t: float):
        try:
            return self.constraints.evaluate(ks, t)
        except ConstraintEvaluationError as exc:
            raise self._error(SingularConstraintError, f"at t = {t:.6g} s: {exc}") from None

    def _singular(self, t: float, q: np.ndarray, A: np.ndarray, s: np.ndarray, rank: int, crossed: bool = False) -> SingularConstraintError:
        where = Where(t, q, self.describe(q), self.robot.source)
        return singular_error(A, s, rank, self.rows, self.singularity.tolerance, where, crossed=crossed)

    # ------------------------------------------------------------------ evaluation

    def evaluate(self, t: float, q: np.ndarray, dq: np.ndarray, s: np.ndarray | None = None, *, normal_loads: np.ndarray | None = None) -> ConstrainedState:
        """Accelerations, constraint forces and violations at time ``t`` and state ``(q, dq, s)``.

        ``normal_loads`` freezes the loads of load-dependent friction at the given values
        instead of solving for them (an approximation for Jacobians of stiff integrators).

        Raises:
            SingularConstraintError: Near-singular Jacobian (``action="stop"``).
            InconsistentConstraintsError: Contradicting rows.
        """
        q = np.asarray(q, dtype=float)
        dq = np.asarray(dq, dtype=float)
        loads = np.zeros(0)
        if self._setup is None:
            self.initialize(t, q, dq)
        setup = self._setup
        s = np.zeros(self.n_states) if s is None else s
        self.evaluations += 1
        ks = self.kinematics(q, dq)
        data = self._data
        M = data.M.copy()
        M[self._lower] = M.T[self._lower]  # computeAllTerms fills the upper triangle only
        f = -data.nle
        applied = np.zeros(self.robot.nv)
        state_rate = np.empty(self.n_states)
        for element, sl in zip(self.forces, self.state_slices):
            if element.reaction_joints:
                continue
            Qe, ds = element.evaluate(t, q, dq, s[sl], ks)
            applied += Qe
            state_rate[sl] = ds
        cv = self._evaluate_constraints(ks, t)
        A = cv.jac
        dphi = A @ dq + cv.phi_t
        b = cv.gamma if self.baumgarte is None else stabilize(self.baumgarte, cv.gamma, cv.phi, dphi, self.constraints.level)
        m = self.constraints.m

        sigma = scipy.linalg.lapack.dgesdd(A, compute_uv=0)[1] if m else np.zeros(0)
        singular = False
        if m and setup.rank and sigma[setup.rank - 1] < self.singularity.tolerance * sigma[0]:
            if self.singularity.action == "stop":
                raise self._singular(t, q, A, sigma, setup.rank)
            singular = True
        elif setup.orientation and self.singularity.action == "stop":
            if np.sign(np.linalg.det(A[setup.kept])) != setup.orientation:
                raise self._singular(t, q, A, sigma, setup.rank, crossed=True)

        try:
            solve = self._factor(M, A, b, singular)
            if self._loads is None:
                ddq, force, lam = solve(f + applied)
            else:
                ddq, force, lam, Q_r, loads = self._loads.solve(solve, t, q, dq, s, ks, f + applied, state_rate, normal_loads)
                applied = applied + Q_r
        except np.linalg.LinAlgError as exc:
            raise self._error(SingularConstraintError, f"at t = {t:.6g} s, q = ({self.describe(q)}): {self.solver} failed: {exc}") from None

        if m and not singular:
            res = np.abs(A @ ddq - b)
            residual = res.max()
            scale = max(1.0, np.abs(b).max(), sigma[0] * np.abs(ddq).max())
            if not residual <= self.consistency_tolerance * scale:
                bad = res > self.consistency_tolerance * scale
                raise self._error(
                    InconsistentConstraintsError,
                    f"inconsistent constraints at t = {t:.6g} s: rows {', '.join(np.array(self.rows)[bad])} cannot hold "
                    f"together with the others (acceleration residual {residual:.3g}); remove or fix the contradicting rows",
                )

        if m and self._prog.any():
            if self.solver == "nullspace":  # the kept rows are independent: lambda = -(A A^T)^-1 A Q_c
                Ak = A[setup.kept]
                lam_p = np.zeros(m)
                lam_p[setup.kept] = np.linalg.solve(Ak @ Ak.T, -(Ak @ force))
            else:
                lam_p = lam
            programmed_force = -A[self._prog].T @ lam_p[self._prog]
        else:
            programmed_force = np.zeros(self.robot.nv)
        return ConstrainedState(
            t=t,
            ddq=ddq,
            state_rate=state_rate,
            force=force,
            programmed_force=programmed_force,
            applied=applied,
            lam=lam,
            phi=cv.phi,
            dphi=dphi,
            target=cv.target,
            sigma=sigma,
            singular=singular,
            normal_loads=loads,
        )

    def _factor(self, M: np.ndarray, A: np.ndarray, b: np.ndarray, singular: bool) -> Factored:
        """The chosen solver, factored for this evaluation; multipliers over every row
        (zeros for rows Lagrange eliminated, NaN for the null-space solver)."""
        m = self.constraints.m
        if m == 0 or self.solver == "udwadia-kalaba":
            damping = self.singularity.damping if singular else 0.0
            return udwadia_kalaba_factor(M, A, b, self.rank_tolerance, damping)
        kept = self._require_setup().kept
        inner = lagrange_factor(M, A[kept], b[kept]) if self.solver == "lagrange" else nullspace_factor(M, A[kept], b[kept], self.independent)
        return inner if len(kept) == m else KeptRows(inner, kept, m)

    # ------------------------------------------------------------------ initial states

    def assemble(
        self,
        t: float,
        q: np.ndarray,
        dq: np.ndarray,
        keep: Sequence[str] = (),
        tol: float = 1e-12,
        max_iterations: int = 50,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Move ``(q, dq)`` onto the constraints at time ``t`` (consistent initial state).

        Gauss–Newton on the position-level rows to ``max|Phi| < tol``, then the minimum-norm
        velocity correction (:func:`mbctl.dynamics.constraints.assembly.assemble`);
        coordinates named in ``keep`` stay unchanged. A guess near the wanted branch (e.g.
        elbow up) converges to that branch.

        Raises:
            InconsistentConstraintsError: If Newton does not converge.
        """

        def rows(qq: np.ndarray, vv: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            cv = self._evaluate_constraints(self.kinematics(qq, vv), t)
            return cv.phi, cv.jac, cv.phi_t

        found = assembly.assemble(rows, q, dq, position=self.constraints.level == 2, free=self._free_coordinates(keep), tol=tol, max_iterations=max_iterations)
        if not found.converged:
            raise self._error(
                InconsistentConstraintsError,
                f"cannot assemble the initial state at t = {t:.6g} s: max |Phi| = {found.position_error:.3g} after "
                f"{found.iterations} Newton steps (constraints contradict each other or are out of reach)",
            )
        if not found.consistent_velocity:
            raise self._error(
                InconsistentConstraintsError,
                f"cannot assemble the initial velocities at t = {t:.6g} s: max |dPhi| = {found.velocity_error:.3g} "
                "(velocity constraints contradict each other)",
            )
        return found.q, found.dq

    def equilibrate(
        self,
        t: float,
        q: np.ndarray,
        keep: Sequence[str] = (),
        tol: float = 1e-10,
        max_iterations: int = 50,
    ) -> np.ndarray:
        """Static equilibrium on the constraints near ``q``: ``Q(q, 0) - g(q) - A(q)^T lambda = 0`` on the
        free coordinates and ``Phi(t, q) = 0`` (:func:`mbctl.dynamics.constraints.assembly.equilibrium`),
        with the force elements at rest in their initial states (springs; friction is zero at rest): the
        programmed rows' multipliers are the drives' static forces, the loop rows' the cut-joint
        reactions. Coordinates in ``keep`` are held (their rows of ``R`` dropped). At such a state and
        at rest, with the targets at rest, the constrained accelerations vanish.

        Args:
            t: Time (s) at which the targets are evaluated.
            q: Starting coordinates (rad, m), e.g. an assembled configuration.
            keep: Joints whose coordinates are held.
            tol: Largest ``|R|`` accepted, relative to ``1 + max(max|Q|, max|g|)`` at the
                start (N·m, N); the position rows must also vanish to 1e-12 (m, rad).
            max_iterations: Newton steps allowed.

        Returns:
            The equilibrium coordinates (rad, m).

        Raises:
            InconsistentConstraintsError: If Newton's method does not converge.
        """
        zero = np.zeros(self.robot.nv)

        def rows(qq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            cv = self._evaluate_constraints(self.kinematics(qq, zero), t)
            return cv.jac, cv.phi

        rest = assembly.RestForces(self.robot, [f for f in self.forces if not f.reaction_joints], t)  # load-dependent friction is 0 at rest
        found = assembly.equilibrium(rest, q, self._free_coordinates(keep), rows, position=self.constraints.level == 2, tol=tol, max_iterations=max_iterations)
        if not found.converged:
            raise self._error(
                InconsistentConstraintsError,
                f"no static equilibrium on the constraints found near the start at t = {t:.6g} s after {max_iterations} "
                f"Newton steps (force residual {found.force_residual:.3g}, max |Phi| {found.position_error:.3g}); "
                "is every free direction held by a spring or a constraint?",
            )
        return found.q
