"""Compiled simulation core: the constrained right-hand side and fixed-step integrators, generated as C.

From a :class:`~mbctl.dynamics.constraints.constrained.ConstrainedDynamics` the same
equations are rebuilt as one CasADi function of ``(t, x, p)``, ``x = [q, dq, z]``
(DOF coordinates, velocities, LuGre bristle states; SI units) and ``p`` the robot's
numbers (inertias, friction, springs, Baumgarte gains:
:mod:`mbctl.dynamics.simulation.structure`), so one compiled core serves every system of
the same structure:

- rigid dynamics from the symbolic mirror (:class:`~mbctl.dynamics.symbolic.SymbolicDynamics`):
  ``a = M(q)^-1 (Q(dq, z) - h(q, dq))``, ``M^-1`` by a Cholesky factorization
  shared by every right-hand side;
- joint friction as the simulation applies it (:class:`~mbctl.dynamics.forces.JointFriction`):
  static laws ``F = level(v) tanh(v/v_eps) + fv v``, LuGre
  ``F = sigma0 z + sigma1 dz/dt + fv v`` with ``dz/dt = v - sigma0 |v| z / g(v)``;
- springs and dampers of RFE links and the flexible base
  (:class:`~mbctl.dynamics.flexible.elastic.ElasticForces`);
- load-dependent friction: the forces are affine in the normal loads, ``Q0 + B N``,
  so are the solution and the joint reaction wrenches, ``W(N) = W0 + dW N``; the
  loads solve ``N = loads(W(N))`` by Newton steps from ``N = 0``, unrolled (the
  interpreted dynamics iterates the same equations to a tolerance);
- constraint rows of every kind the interpreted core knows (programmed, loop closures,
  ``frame_offset`` drives, velocity-level rows) and the solution of every solver and
  singularity mode: :mod:`mbctl.dynamics.simulation.compiled_constraints`; with
  load-dependent friction in closed loops the constraint forces on bodies enter the
  reaction wrenches.

:class:`CompiledCore` generates RK4 steppers of ``k`` steps of a given length as one C
function, and ROS2 steppers through :mod:`mbctl.dynamics.simulation.ros2`, compiled once per
structure and thread (and cached on disk by :func:`mbctl.dynamics.codegen.compile_function`),
so Python is not in the inner loop and a study that changes the robot's numbers compiles
once; :func:`~mbctl.dynamics.simulation.compiled_plant.plant_stepper` does the same for the
simulated plant's semi-implicit steps. The force elements' expressions are in
:mod:`mbctl.dynamics.simulation.compiled_forces`.

Not covered (:func:`unsupported` names it, :class:`NotCompilable` is raised, callers
use the interpreted reference): force elements other than joint friction and elastic
forces, :class:`~mbctl.dynamics.constraints.kinds.Pfaffian` rows (Python callables),
other targets. The singularity policy's stop is not evaluated in C: the caller checks
the recorded samples with the interpreted evaluation.
"""

from __future__ import annotations

import threading
import time

import casadi as ca
import numpy as np

from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.constraints.loops import acts_on_bodies
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.simulation import ros2
from mbctl.dynamics.simulation.compiled_constraints import (
    constrained_solution,
    constraint_rows,
    loop_wrenches,
    spd_solve,
    stabilized,
    unsupported_constraints,
)
from mbctl.dynamics.simulation.compiled_forces import elastic_of, friction_of, normal_loads_of, state_diagonal
from mbctl.dynamics.simulation.compiled_plant import plant_stepper  # public here, where callers look for compiled steps
from mbctl.dynamics.simulation.compiled_samples import DIAGNOSTICS, block_evaluator, sample_evaluator_of
from mbctl.dynamics.simulation.structure import parametrize, structure_key
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import MbctlError

__all__ = [
    "CompiledCore",
    "NotCompilable",
    "constraint_kinematics_function",
    "diagnostics_function",
    "plant_stepper",
    "rhs_function",
    "sample_evaluator",
    "unsupported",
]


# Newton steps on the normal loads of load-dependent friction: they are nearly affine in
# themselves, so the first step lands on the answer and the others take it to round-off
_LOAD_NEWTON_STEPS = 4


class NotCompilable(MbctlError):
    """The system uses a feature the compiled core does not cover (the message names it)."""


def unsupported(system: ConstrainedDynamics) -> str:
    """Why ``system`` cannot be compiled, or ``""`` when it can."""
    for element in system.forces:
        if not isinstance(element, (JointFriction, ElasticForces)):
            return f"force element {type(element).__name__}"
    return unsupported_constraints(system)


def _expressions(system: ConstrainedDynamics) -> tuple[ca.SX, ca.SX, dict[str, ca.SX]]:
    """Symbols ``t``, ``x`` and the expressions of one evaluation (see :func:`diagnostics_function`)."""
    reason = unsupported(system)
    if reason:
        raise NotCompilable(f"the compiled simulation core does not cover {reason}; use the interpreted backend")
    robot = system.robot
    nv, ns = robot.nv, system.n_states
    params = parametrize(system)
    sym = SymbolicDynamics(robot, bodies=params.bodies, armature=params.armature)
    t = ca.SX.sym("t")
    x = ca.SX.sym("x", 2 * nv + ns)
    p = params.vector.symbols
    q, dq, z = x[:nv], x[nv : 2 * nv], x[2 * nv :]
    Q = ca.SX.zeros(nv)  # the forces that do not depend on normal loads
    rates, columns, loaded = [], [], []
    for e, (element, sl) in enumerate(zip(system.forces, system.state_slices)):
        if isinstance(element, ElasticForces):
            Q += elastic_of(element, sym, q, dq, params.springs[e])
            continue
        Qe, Be, re = friction_of(element, dq, z[sl.start : sl.stop], nv, params.static[e], params.lugre[e])
        Q += Qe
        rates.append(re)
        if Be.size2():
            columns.append(Be)
            loaded.append(e)
    B = ca.horzcat(*columns) if columns else ca.SX(nv, 0)
    k = B.size2()
    # one factorization of M for every right-hand side: M^-1 [Q - h, A^T, B]
    rows = constraint_rows(system, sym, t, q, dq)
    m, A = system.constraints.m, rows.jac
    X = spd_solve(sym.mass_matrix_of(q), ca.horzcat(Q - sym.bias_of(q, dq), A.T, B))
    a, MinvAt, MinvB = X[:, 0], X[:, 1 : 1 + m], X[:, 1 + m :]
    if m:
        b = rows.gamma
        if params.baumgarte is not None:
            c1, c0 = params.baumgarte
            b = stabilized(rows, system.constraints.level, c1, c0)
        solution = constrained_solution(system, A, b, a, MinvAt, MinvB)
        ddq0, D, lam0, lamB = solution.ddq0, solution.ddqB, solution.lam0, solution.lamB
        force0, forceB, singular = solution.force0, solution.forceB, solution.singular
    else:
        lam0, lamB, ddq0, D = ca.SX(0, 1), ca.SX(0, k), a, MinvB
        force0, forceB, singular = ca.SX.zeros(nv), ca.SX(nv, k), ca.SX(0.0)
    if k:
        # the reaction wrenches are affine in ddq, hence in N: W(N) = W0 + dW N, and the
        # loads solve N = loads(W(N)), by Newton's method from N = 0, unrolled
        acc, mult = ca.SX.sym("ddq", nv), ca.SX.sym("lam", m)
        wrenches = sym.joint_wrenches_of(q, dq, acc)
        joints = [j for e in loaded for j in system.forces[e].reaction_joints]
        W_acc = ca.vertcat(*(wrenches[:, robot.model.joints[j].idx_v] for j in joints))
        if any(acts_on_bodies(c) for c in system.constraints):  # the constraint forces on bodies enter the reactions
            W_acc += ca.reshape(loop_wrenches(system, sym, q, mult, joints).T, -1, 1)
        unknowns = ca.vertcat(acc, mult)
        W0 = ca.substitute(W_acc, unknowns, ca.vertcat(ddq0, lam0))
        dW = ca.substitute(ca.jtimes(W_acc, unknowns, ca.vertcat(D, lamB)), unknowns, ca.DM.zeros(nv + m))  # forward mode: k directions
        N = ca.SX.sym("N", k)
        W = W0 + dW @ N
        L, G, start = [], [], 0
        for e in loaded:
            n = len(system.forces[e].reaction_joints)
            Le, ge = normal_loads_of(system.forces[e], ca.reshape(W[6 * start : 6 * (start + n)], 6, n).T, params.radial[e], params.axial[e])
            L.append(Le)
            G.extend(ge[r, :] @ dW[6 * (start + r) : 6 * (start + r + 1), :] for r in range(n))
            start += n
        loads = ca.Function("loads", [N, t, x, p], [ca.vertcat(*L), ca.vertcat(*G)])
        n_loads = ca.SX.zeros(k)
        for _ in range(_LOAD_NEWTON_STEPS):
            Ln, Gn = loads(n_loads, t, x, p)
            n_loads = n_loads - ca.solve(ca.SX.eye(k) - Gn, n_loads - Ln)
        residual = n_loads - loads(n_loads, t, x, p)[0]
    else:
        n_loads = residual = ca.SX(0, 1)
    ddq = ddq0 + D @ n_loads
    lam = lam0 + lamB @ n_loads
    force = force0 + forceB @ n_loads
    Q = Q + B @ n_loads
    rate = ca.vertcat(*rates) if rates else ca.SX(0, 1)
    out = {
        "xdot": ca.vertcat(dq, ddq, rate),
        "ddq": ddq,
        "applied": Q,
        "force": force,
        "lam": lam,
        "phi": rows.phi,
        "dphi": rows.dphi,
        "target": rows.target,
        "jac": A,
        "singular": singular,
        "loads": n_loads,
        "load_residual": residual,
    }
    return t, x, p, out


def constraint_kinematics_function(system: ConstrainedDynamics) -> ca.Function:
    """``(t, q, dq) -> (phi, jac, phi_t, gamma)`` of the constraint rows of ``system``:
    ``Phi(q, t)`` (target subtracted), ``A = dPhi/dq``, ``dPhi/dt`` and
    ``gamma = -d(A dq + Phi_t)/dq dq - d(A dq + Phi_t)/dt`` (so ``A ddq = gamma``), the
    values the interpreted constraint set gives, generated (used for inverse kinematics
    along a path, :func:`mbctl.ctrl.constrained_path.trajectory_from_constraints`).

    Raises:
        NotCompilable: For a constraint kind or target outside the compiled core.
    """
    reason = unsupported_constraints(system)
    if reason:
        raise NotCompilable(f"the compiled simulation core does not cover {reason}")
    nv = system.robot.nv
    t, q, dq = ca.SX.sym("t"), ca.SX.sym("q", nv), ca.SX.sym("dq", nv)
    rows = constraint_rows(system, SymbolicDynamics(system.robot), t, q, dq)
    outputs = [rows.phi, rows.jac, rows.phi_t, rows.gamma]
    return ca.Function(f"constraint_kinematics_{system.robot.ident}", [t, q, dq], outputs, ["t", "q", "dq"], ["phi", "jac", "phi_t", "gamma"])


def _functions(system: ConstrainedDynamics) -> tuple[ca.Function, ca.Function]:
    """:func:`rhs_function` and :func:`diagnostics_function` of ``system``, from one generation."""
    t, x, p, e = _expressions(system)
    setup = system._setup
    square = setup is not None and setup.orientation and len(setup.kept) == system.robot.nv
    e["det"] = ca.det(e["jac"][[int(k) for k in setup.kept], :]) if square else ca.SX(0.0)
    name = system.robot.ident
    rhs = ca.Function(f"rhs_{name}", [t, x, p], [e["xdot"]], ["t", "x", "p"], ["xdot"])
    return rhs, ca.Function(f"diagnostics_{name}", [t, x, p], [e[k] for k in DIAGNOSTICS], ["t", "x", "p"], list(DIAGNOSTICS))


def rhs_function(system: ConstrainedDynamics) -> ca.Function:
    """``f(t, x, p) -> dx/dt`` of ``system`` as one CasADi function (see the module docstring);
    ``p`` holds the run-time parameters (:func:`~mbctl.dynamics.simulation.structure.parameter_values`).

    Raises:
        NotCompilable: For a feature outside the compiled core.
    """
    return _functions(system)[0]


def diagnostics_function(system: ConstrainedDynamics) -> ca.Function:
    """``(t, x, p) -> (xdot, applied, force, lam, phi, dphi, target, jac, loads, load_residual, det, singular)`` of one
    evaluation: what a recorded sample reports (:class:`~mbctl.dynamics.constraints.constrained.ConstrainedState`):
    the force elements' ``Q``, the constraint force ``Q_c = -A^T lam``, multipliers, violations,
    ``A``, the normal loads and their residual, and ``det(A[kept])`` where the constraints fix
    every DOF (the orientation check; 0 otherwise)."""
    return _functions(system)[1]


def _rk4(f: ca.Function, steps: int) -> ca.Function:
    """``(t0, x0, h, p) -> x``: ``steps`` classical RK4 steps of length ``h`` (s) of ``f(t, x, p)``."""
    n, n_p = f.size1_in(1), f.size1_in(2)
    t0, h = ca.MX.sym("t0"), ca.MX.sym("h")
    x, p = ca.MX.sym("x", n), ca.MX.sym("p", n_p)
    k1 = f(t0, x, p)
    k2 = f(t0 + h / 2, x + h / 2 * k1, p)
    k3 = f(t0 + h / 2, x + h / 2 * k2, p)
    k4 = f(t0 + h, x + h * k3, p)
    # one step maps (t, x) to (t + h, x'); h and p ride along as constant states
    state = ca.vertcat(t0, x, h, p)
    step = ca.Function("rk4_step", [state], [ca.vertcat(t0 + h, x + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4), h, p)])
    many = step.fold(steps) if steps > 1 else step
    t_in, x_in, h_in, p_in = ca.MX.sym("t0"), ca.MX.sym("x0", n), ca.MX.sym("h"), ca.MX.sym("p", n_p)
    out = many(ca.vertcat(t_in, x_in, h_in, p_in))
    return ca.Function(f"rk4x{steps}_{f.name()}", [t_in, x_in, h_in, p_in], [out[1 : 1 + n]], ["t0", "x0", "h", "p"], ["x"])


def _difference_jacobian(f: ca.Function) -> ca.Function:
    """``(t, x, p, dx) -> (f0, J)``: ``f0 = f(t, x, p)`` (the first output) and its forward-difference
    Jacobian ``J[:, i] = (f(t, x + dx_i e_i, p) - f0) / dx_i``, the ``n + 1`` evaluations in one call
    (the arithmetic of the interpreted differences, so the same numbers)."""
    n, n_p = f.size1_in(1), f.size1_in(2)
    t, x, p, dx = ca.MX.sym("t"), ca.MX.sym("x", n), ca.MX.sym("p", n_p), ca.MX.sym("dx", n)
    columns = ca.horzcat(x, ca.repmat(x, 1, n) + ca.diag(dx))
    values = f.map(n + 1)(ca.repmat(t, 1, n + 1), columns, ca.repmat(p, 1, n + 1))[0]
    J = (values[:, 1:] - ca.repmat(values[:, 0], 1, n)) / ca.repmat(dx.T, n, 1)
    return ca.Function(f"jacobian_{f.name()}", [t, x, p, dx], [values[:, 0], J], ["t", "x", "p", "dx"], ["f0", "J"])


# ---------------------------------------------------------------------------------
# one compiled core per structure, per thread (a CompiledFunction owns its buffers)

_CORES_KEPT = 16  # structures kept per thread; a study has one or a few
_cores = threading.local()


class _Structure:
    """The symbolic functions of one structure and what has been compiled from them."""

    def __init__(self, system: ConstrainedDynamics):
        self.rhs, self.diagnostics = _functions(system)
        self.diagonal = state_diagonal(system, parametrize(system))
        self.compiled: dict[tuple, CompiledFunction] = {}


class CompiledCore:
    """The compiled simulation core of ``system``: generated and compiled once per structure
    (:func:`~mbctl.dynamics.simulation.structure.structure_key`) in this thread and reused for
    every system of the same structure, called with this system's parameters :attr:`p`.

    Args:
        system: The constrained dynamics, initialized at its initial state.
        cache: Directory of compiled libraries (default: :func:`mbctl.dynamics.codegen.cache_dir`).

    Attributes:
        p: The run-time parameters of ``system``.
        reused: True when the structure was already generated in this thread.
        build_s: Seconds spent generating, compiling or loading C for this system (exactly 0
            when everything it needed was built before in this thread).

    Raises:
        NotCompilable: For a feature outside the compiled core.
    """

    def __init__(self, system: ConstrainedDynamics, *, cache=None):
        reason = unsupported(system)
        if reason:
            raise NotCompilable(f"the compiled simulation core does not cover {reason}; use the python backend")
        self.system = system
        self.cache = cache
        values = parametrize(system, symbolic=False).vector
        self.p = values.array
        self.key = structure_key(system, values.names)
        cores = getattr(_cores, "by_key", None)
        if cores is None:
            cores = _cores.by_key = {}
        self.reused = self.key in cores
        self.build_s = 0.0
        if not self.reused:
            start = time.perf_counter()
            cores[self.key] = _Structure(system)
            while len(cores) > _CORES_KEPT:
                cores.pop(next(iter(cores)))
            self.build_s = time.perf_counter() - start
        self._structure = cores[self.key]

    def _compiled(self, kind: str, steps: int = 0) -> CompiledFunction:
        done = self._structure.compiled
        if (kind, steps) not in done:
            start = time.perf_counter()
            s = self._structure
            f = {"rhs": lambda: s.rhs, "diagnostics": lambda: s.diagnostics, "rk4": lambda: _rk4(s.rhs, steps), "jacobian": lambda: _difference_jacobian(s.diagnostics)}[kind]()
            done[kind, steps] = compile_function(f, cache=self.cache)
            self.build_s += time.perf_counter() - start
        return done[kind, steps]

    def rhs(self) -> CompiledFunction:
        """``(t, x, p) -> dx/dt``."""
        return self._compiled("rhs")

    def diagnostics(self) -> CompiledFunction:
        """``(t, x, p) -> (xdot, applied, ...)``: one evaluation (see :func:`diagnostics_function`)."""
        return self._compiled("diagnostics")

    def jacobian(self) -> CompiledFunction:
        """``(t, x, p, dx) -> (xdot, J)``: ``dx/dt`` and its forward-difference Jacobian with steps ``dx``,
        in one call (:func:`_difference_jacobian`; ROS2's refreshes)."""
        return self._compiled("jacobian")

    def rk4(self, steps: int) -> CompiledFunction:
        """``(t0, x0, h, p) -> x``: ``steps`` RK4 steps of length ``h`` (s), in C."""
        return self._compiled("rk4", steps)

    def ros2(self, steps: int, update: ros2.StateDiagonalUpdate, samples: int = 0) -> CompiledFunction:
        """``(t0, x0, h, p, W_inv, d_ref) -> X``: ``steps`` ROS2 steps
        (:func:`mbctl.dynamics.simulation.ros2.ros2_stepper`) with ``update``'s LuGre diagonal
        (:attr:`diagonal`), in C. ``samples``: ``-> (X, D)`` instead, with the states after every
        ``steps / samples`` steps and the diagnostics at the start of each such group (the
        stepper's own first-stage evaluation; :meth:`block_evaluator` reads them)."""
        done = self._structure.compiled
        key = ("ros2", steps, samples)
        if key not in done:
            start = time.perf_counter()
            s = self._structure
            if samples:
                done[key] = ros2.ros2_stepper(s.diagnostics, steps, update, outputs=samples, diagnostics=True, cache=self.cache)
            else:
                done[key] = ros2.ros2_stepper(s.rhs, steps, update, cache=self.cache)
            self.build_s += time.perf_counter() - start
        return done[key]

    @property
    def diagonal(self) -> ca.Function:
        """``(dq, p) -> d``: the LuGre states' diagonal ``d(ds/dt)/ds`` (1/s), for ROS2's update."""
        return self._structure.diagonal

    def check(self, t: float, x: np.ndarray, rtol: float = 1e-6) -> None:
        """Compare the compiled ``dx/dt`` at ``(t, x)`` with the interpreted evaluation.

        The structure key covers what the generator reads; this guards the rest. On a
        mismatch the core is generated again from this system (and replaces the cached one).
        """
        nv = self.system.robot.nv
        counted = self.system.evaluations
        reference = self.system.evaluate(t, x[:nv], x[nv : 2 * nv], x[2 * nv :])
        self.system.evaluations = counted  # a check, not a step of the run
        expected = np.concatenate([x[nv : 2 * nv], reference.ddq, reference.state_rate])
        if self._structure.rhs.size1_in(2) == len(self.p):
            got = self.diagnostics()(t, x, self.p)[0]  # its xdot: compiled for the samples in any case
            if np.abs(got - expected).max() <= rtol * max(1.0, np.abs(expected).max()):
                return
        start = time.perf_counter()
        self._structure = _cores.by_key[self.key] = _Structure(self.system)
        self.reused = False
        self.build_s += time.perf_counter() - start

    def sample_evaluator(self):
        """``(t, x) -> ConstrainedState`` of a recorded sample (see :func:`sample_evaluator`)."""
        return sample_evaluator_of(self.system, self.diagnostics(), self.p)

    def block_evaluator(self):
        """``(times, states, D) -> SampleBlock``: the samples of a :meth:`ros2` block (``D``: the
        diagnostics outputs, each as a column, stacked; one column per sample), with the checks
        and arithmetic of :meth:`sample_evaluator` (the same numbers as it gives at those states)."""
        return block_evaluator(self.system, self._structure.diagnostics)


def sample_evaluator(system: ConstrainedDynamics, cache=None):
    """``(t, x) -> ConstrainedState`` of a recorded sample from the compiled diagnostics, with the
    interpreted checks: a near-singular constraint Jacobian, or one whose orientation flipped
    since the initial state, is re-evaluated by the interpreted dynamics, which raises the
    same error it would have raised (at this sample rather than at the step it happened)."""
    return CompiledCore(system, cache=cache).sample_evaluator()
