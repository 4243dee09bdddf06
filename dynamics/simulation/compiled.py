"""Compiled simulation core: the constrained right-hand side and fixed RK4 steps, generated as C.

From a :class:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics` the same
equations are rebuilt as one CasADi function of ``(t, x)``, ``x = [q, dq, z]``
(DOF coordinates, velocities, LuGre bristle states; SI units):

- rigid dynamics from the symbolic mirror (:class:`~mbctl.dynamics.symbolic.SymbolicDynamics`):
  ``a = M(q)^-1 (Q(dq, z) - h(q, dq))``;
- joint friction as the simulation applies it (:class:`~mbctl.dynamics.forces.JointFriction`):
  static laws ``F = level(v) tanh(v/v_eps) + fv v``, LuGre
  ``F = sigma0 z + sigma1 dz/dt + fv v`` with ``dz/dt = v - sigma0 |v| z / g(v)``;
- programmed constraints ``Phi(q, t) = 0`` with rows ``A = dPhi/dq`` and
  ``gamma = -(d(A dq)/dq dq + 2 d(A dq)/dt + Phi_tt)`` (by automatic differentiation),
  Baumgarte-stabilised ``b = gamma - c1 dPhi - c0 Phi``, solved in the
  Udwadia–Kalaba form for a full-row-rank ``A``:
  ``ddq = a + M^-1 A^T (A M^-1 A^T)^-1 (b - A a)`` (which the Lagrange and
  null-space solvers also give there).

:func:`rk4_stepper` generates ``k`` classical RK4 steps of a given length as one C
function (compiled once, cached by :func:`mbctl.dynamics.codegen.compile_function`),
so Python is not in the inner loop.

Supported: rigid robots (no flexible links or base), joint friction without load
models, ``frame_position`` and ``joint_linear`` constraints with expression targets,
and loop closures, all rows independent (no redundant rows).
Anything else raises :class:`NotCompilable` naming the feature; callers then use the
interpreted reference. The singularity policy is not evaluated in C: the caller
checks the recorded samples with the interpreted evaluation.
"""

from __future__ import annotations

import casadi as ca
import numpy as np
import scipy.linalg.lapack

from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics, ConstrainedState
from mbctl.dynamics.constraints.kinds import FramePosition, JointLinear
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.constraints.targets import ExpressionTarget, parse_expression
from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.friction.laws import CoulombViscous
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import MbctlError

__all__ = ["NotCompilable", "diagnostics_function", "plant_stepper", "rhs_function", "rk4_stepper", "unsupported"]


class NotCompilable(MbctlError):
    """The system uses a feature the compiled core does not cover (the message names it)."""


def unsupported(system: ConstrainedDynamics) -> str:
    """Why ``system`` cannot be compiled, or ``""`` when it can (redundant rows are
    detected once the system has been initialized at its initial state)."""
    robot = system.robot
    if robot.rfe_links or robot.flexible_base is not None:
        return "flexible links or base"
    for element in system.forces:
        if not isinstance(element, JointFriction):
            return f"force element {type(element).__name__}"
        if element.reaction_joints:
            return "load-dependent friction"
    for c in system.constraints:
        if not isinstance(c, (FramePosition, JointLinear, LoopClosure)):
            return f"{type(c).__name__} constraints"
        if not isinstance(c, LoopClosure) and not isinstance(c.target, ExpressionTarget):
            return f"{type(c.target).__name__} targets"
    if system.singularity.action == "damped":
        return "the damped singularity mode"
    if system.eliminate or system.independent is not None:
        return "eliminated rows or independent coordinates"
    if system._setup is not None and system.rank < len(system.constraints.rows):  # known once initialized
        return "redundant constraint rows"
    return ""


def _friction(element: JointFriction, dq: ca.SX, z: ca.SX, nv: int) -> tuple[ca.SX, ca.SX]:
    """Generalized friction forces ``Q = -F`` (nv,) and bristle rates, as :class:`JointFriction` computes them."""
    Q = [ca.SX(0.0)] * nv
    for i, law, _ in element._static:
        v = dq[i]
        level = law.fc if isinstance(law, CoulombViscous) else law.fc + (law.fs - law.fc) * ca.exp(-(ca.fabs(v / law.vs) ** law.delta))
        Q[i] = -(level * ca.tanh(v / element.smoothing) + law.fv * v)
    rates = []
    for k, (i, law, _) in enumerate(element._lugre):
        v = dq[i]
        g = law.fc + (law.fs - law.fc) * ca.exp(-((v / law.vs) ** 2))
        rate = v - law.sigma0 * ca.fabs(v) * z[k] / g
        rates.append(rate)
        Q[i] = -(law.sigma0 * z[k] + law.sigma1 * rate + law.fv * v)
    return ca.vertcat(*Q), ca.vertcat(*rates) if rates else ca.SX(0, 1)


def _loop_rows(c: LoopClosure, sym: SymbolicDynamics, q: ca.SX) -> ca.SX:
    """The rows of :class:`LoopClosure` (its ``row_spec``): ``p_A - p_B``, ``(R_A u)·(R_B w)``, ``(R_A u)·(p_B - p_A)``."""
    a, b = c.frames
    pA, pB = sym.frame_position(a)(q), sym.frame_position(b)(q)
    RA, RB = sym.frame_rotation(a)(q), sym.frame_rotation(b)(q)
    rows = []
    for row in c.row_spec:
        if row[0] == "pos":
            rows.append(pA[row[1]] - pB[row[1]])
        elif row[0] == "dot":
            rows.append(ca.dot(RA @ ca.DM(row[1]), RB @ ca.DM(row[2])))
        else:
            rows.append(ca.dot(RA @ ca.DM(row[1]), pB - pA))
    return ca.vertcat(*rows)


def _phi(system: ConstrainedDynamics, sym: SymbolicDynamics, q: ca.SX, t: ca.SX) -> tuple[ca.SX, ca.SX]:
    """The position-level constraint rows ``Phi(q, t)`` and their targets ``g(t)`` (NaN for loop rows)."""
    rows, targets = [], []
    for c in system.constraints:
        if isinstance(c, LoopClosure):
            rows.append(_loop_rows(c, sym, q))
            targets.append(ca.SX(ca.DM.nan(c.size)))
            continue
        target = ca.vertcat(*(parse_expression(text, t) for text in c.target.expressions))
        targets.append(target)
        if isinstance(c, FramePosition):
            p = sym.frame_position(c.frame)(q)
            rows.append(ca.vertcat(*(p[a] for a in c.axes)) - target)
        else:
            rows.append(ca.dot(ca.DM(c.c), q) - target)
    if not rows:
        return ca.SX(0, 1), ca.SX(0, 1)
    return ca.vertcat(*rows), ca.vertcat(*targets)


def _expressions(system: ConstrainedDynamics) -> tuple[ca.SX, ca.SX, dict[str, ca.SX]]:
    """Symbols ``t``, ``x`` and the expressions of one evaluation (see :func:`diagnostics_function`)."""
    reason = unsupported(system)
    if reason:
        raise NotCompilable(f"the compiled simulation core does not cover {reason}; use the interpreted backend")
    robot = system.robot
    nv, ns = robot.nv, system.n_states
    sym = SymbolicDynamics(robot)
    t = ca.SX.sym("t")
    x = ca.SX.sym("x", 2 * nv + ns)
    q, dq, z = x[:nv], x[nv : 2 * nv], x[2 * nv :]
    Q = ca.SX.zeros(nv)
    rates = []
    for element, sl in zip(system.forces, system.state_slices):
        Qe, re = _friction(element, dq, z[sl.start : sl.stop], nv)
        Q += Qe
        rates.append(re)
    M = sym.mass_matrix(q)
    a = ca.solve(M, Q - sym.bias(q, dq))
    phi, target = _phi(system, sym, q, t)
    m = phi.numel()
    if m:
        A = ca.jacobian(phi, q)
        phi_t = ca.jacobian(phi, t)
        dphi = A @ dq + phi_t
        gamma = -(ca.jacobian(A @ dq, q) @ dq + 2 * ca.jacobian(A @ dq, t) + ca.jacobian(phi_t, t))
        b = gamma
        if system.baumgarte is not None:
            c1, c0 = system.baumgarte.coefficients
            b = gamma - c1 * dphi - c0 * ca.if_else(ca.DM(system.constraints.level) == 2, phi, 0)
        MinvAt = ca.solve(M, A.T)
        lam = -ca.solve(A @ MinvAt, b - A @ a)  # Q_c = -A^T lam
        ddq = a - MinvAt @ lam
        force = -A.T @ lam
    else:
        A, dphi, lam, ddq, force = ca.SX(0, nv), ca.SX(0, 1), ca.SX(0, 1), a, ca.SX.zeros(nv)
    rate = ca.vertcat(*rates) if rates else ca.SX(0, 1)
    out = {"xdot": ca.vertcat(dq, ddq, rate), "ddq": ddq, "applied": Q, "force": force, "lam": lam, "phi": phi, "dphi": dphi, "target": target, "jac": A}
    return t, x, out


def rhs_function(system: ConstrainedDynamics) -> ca.Function:
    """``f(t, x) -> dx/dt`` of ``system`` as one CasADi function (see the module docstring).

    Raises:
        NotCompilable: For a feature outside the compiled core.
    """
    t, x, e = _expressions(system)
    return ca.Function(f"rhs_{system.robot.name}", [t, x], [e["xdot"]], ["t", "x"], ["xdot"])


def diagnostics_function(system: ConstrainedDynamics) -> ca.Function:
    """``(t, x) -> (xdot, applied, force, lam, phi, dphi, target, jac)`` of one evaluation: what a recorded
    sample reports (:class:`~mbctl.dynamics.constraints.constrained.ConstrainedState`): the force
    elements' ``Q``, the constraint force ``Q_c = -A^T lam``, multipliers, violations and ``A``."""
    t, x, e = _expressions(system)
    names = ["xdot", "applied", "force", "lam", "phi", "dphi", "target", "jac"]
    return ca.Function(f"diagnostics_{system.robot.name}", [t, x], [e[k] for k in names], ["t", "x"], names)


def sample_evaluator(system: ConstrainedDynamics, cache=None):
    """``(t, x) -> ConstrainedState`` of a recorded sample from the compiled diagnostics, with the
    interpreted checks: a near-singular constraint Jacobian, or one whose orientation flipped
    since the initial state, is re-evaluated by the interpreted dynamics, which raises the
    same error it would have raised (at this sample rather than at the step it happened)."""
    diag = compile_function(diagnostics_function(system), cache=cache)
    nv, m = system.robot.nv, system.constraints.m
    prog = system.constraints.programmed
    policy = system.singularity

    def evaluate(t: float, x: np.ndarray) -> ConstrainedState:
        xdot, applied, force, lam, phi, dphi, target, A = diag(t, x)
        A = A.reshape(m, nv)
        setup = system._setup
        sigma = scipy.linalg.lapack.dgesdd(A, compute_uv=0)[1] if m else np.zeros(0)
        if m and setup.rank and sigma[setup.rank - 1] < policy.tolerance * sigma[0]:
            system.evaluate(t, x[:nv], x[nv : 2 * nv], x[2 * nv :])
        elif setup.orientation and np.sign(np.linalg.det(A[setup.kept])) != setup.orientation:
            system.evaluate(t, x[:nv], x[nv : 2 * nv], x[2 * nv :])
        programmed = -A[prog].T @ lam[prog] if m and prog.any() else np.zeros(nv)
        if system.solver == "nullspace":
            lam = np.full(m, np.nan)  # the null-space solver reports no multipliers (all rows kept: the same force)
        return ConstrainedState(
            t=t,
            ddq=xdot[nv : 2 * nv],
            state_rate=xdot[2 * nv :],
            force=force,
            programmed_force=programmed,
            applied=applied,
            lam=lam,
            phi=phi,
            dphi=dphi,
            target=target,
            sigma=sigma,
        )

    return evaluate


def rk4_stepper(system: ConstrainedDynamics, steps: int, *, rhs: ca.Function | None = None, cache=None) -> CompiledFunction:
    """``(t0, x0, h) -> x``: ``steps`` classical RK4 steps of length ``h`` (s) from ``x0`` at ``t0``, in C.

    Raises:
        NotCompilable: For a feature outside the compiled core.
    """
    f = rhs or rhs_function(system)
    n = f.size1_in(1)
    t0, h = ca.MX.sym("t0"), ca.MX.sym("h")
    x = ca.MX.sym("x", n)
    k1 = f(t0, x)
    k2 = f(t0 + h / 2, x + h / 2 * k1)
    k3 = f(t0 + h / 2, x + h / 2 * k2)
    k4 = f(t0 + h, x + h * k3)
    # one step maps (t, x) to (t + h, x'); h rides along as a constant state
    state = ca.vertcat(t0, x, h)
    step = ca.Function("rk4_step", [state], [ca.vertcat(t0 + h, x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), h)])
    many = step.fold(steps) if steps > 1 else step
    t_in, x_in, h_in = ca.MX.sym("t0"), ca.MX.sym("x0", n), ca.MX.sym("h")
    out = many(ca.vertcat(t_in, x_in, h_in))
    g = ca.Function(f"rk4x{steps}_{f.name()}", [t_in, x_in, h_in], [out[1 : 1 + n]], ["t0", "x0", "h"], ["x"])
    return compile_function(g, cache=cache)


def plant_stepper(robot: RobotModel, steps: int = 1, *, v_smooth: float = 1e-3, cache=None) -> CompiledFunction:
    """``(q, dq, s, tau, h) -> (q_next, dq_next, s_next)``: ``steps`` steps of
    :class:`~mbctl.dynamics.simulation.stepper.FrictionStepper` (semi-implicit, friction
    damping implicit, LuGre states exact) of length ``h`` (s) each, holding the
    generalized forces ``tau`` (N·m, N), in C.

    Raises:
        NotCompilable: For elastic robots (flexible links or base); load-dependent
            friction is refused as by the interpreted stepper.
    """
    if robot.is_elastic:
        raise NotCompilable("the compiled plant does not cover flexible links or bases")
    friction = JointFriction(robot, smoothing=v_smooth)
    nv, ns = robot.nv, len(friction._lugre)
    sym = SymbolicDynamics(robot)
    q, dq, z, tau = ca.SX.sym("q", nv), ca.SX.sym("dq", nv), ca.SX.sym("s", ns), ca.SX.sym("tau", nv)
    h = ca.SX.sym("h")
    z_next = ca.vertcat(*(law.z_step(z[k], dq[i], h) for k, (i, law, _) in enumerate(friction._lugre))) if ns else ca.SX(0, 1)
    Q, _ = _friction(friction, dq, z_next, nv)
    damping = [ca.SX(0.0)] * nv
    for i, law, _ in friction._static:
        v = dq[i]
        level = law.steady(v, 1.0) - law.fv * v  # the dry level at |v|
        damping[i] = level * (1 - ca.tanh(v / v_smooth) ** 2) / v_smooth + law.fv
    for i, law, _ in friction._lugre:
        damping[i] = ca.SX(law.sigma1 + law.fv)
    M = sym.mass_matrix(q) + h * ca.diag(ca.vertcat(*damping))
    dq_next = dq + ca.solve(M, h * (tau + Q - sym.bias(q, dq)))
    x = ca.vertcat(q, dq, z)
    one = ca.Function("plant_step", [x, tau, h], [ca.vertcat(q + h * dq_next, dq_next, z_next)])
    many = one.fold(steps)
    q_in, dq_in, z_in, tau_in, h_in = ca.MX.sym("q", nv), ca.MX.sym("dq", nv), ca.MX.sym("s", ns), ca.MX.sym("tau", nv), ca.MX.sym("h")
    out = many(ca.vertcat(q_in, dq_in, z_in), ca.repmat(tau_in, 1, steps), ca.repmat(h_in, 1, steps))
    names = (["q", "dq", "s", "tau", "h"], ["q_next", "dq_next", "s_next"])
    f = ca.Function(f"plant{steps}_{robot.name}", [q_in, dq_in, z_in, tau_in, h_in], [out[:nv], out[nv : 2 * nv], out[2 * nv :]], *names)
    return compile_function(f, cache=cache)
