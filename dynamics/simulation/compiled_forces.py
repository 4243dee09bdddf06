"""Force elements of the compiled simulation core as CasADi expressions, from the interpreted elements' own formulas.

Joint friction (:class:`~mbctl.dynamics.forces.JointFriction`) through
:func:`~mbctl.dynamics.forces.friction_terms` and
:func:`~mbctl.dynamics.forces.friction_damping`, the springs and dampers of RFE links and the
flexible base (:class:`~mbctl.dynamics.flexible.elastic.ElasticForces`) through
:func:`~mbctl.dynamics.forces.elastic_forces` fed the symbolic kinematics of
:class:`~mbctl.dynamics.symbolic.SymbolicDynamics`, the normal loads of load-dependent friction,
and the LuGre states' diagonal for ROS2. The coefficients are the parameter symbols of
:mod:`mbctl.dynamics.simulation.structure`. Used by :mod:`mbctl.dynamics.simulation.compiled`.
"""

from __future__ import annotations

import casadi as ca

from mbctl.dynamics.backend import casadi_namespace
from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.forces import JointFriction, elastic_diagonal, elastic_forces, friction_damping, friction_terms, normal_load, place_terms
from mbctl.dynamics.simulation.structure import Parametrized
from mbctl.dynamics.symbolic import SymbolicDynamics

__all__ = ["elastic_diagonal_of", "elastic_of", "friction_damping_of", "friction_of", "normal_loads_of", "state_diagonal"]


def _with_laws(entries: list, laws: list) -> list:
    """The element's ``(idx_v, law, slot)`` entries with its laws replaced by ``laws`` (symbols)."""
    return [(i, law, slot) for (i, _, slot), law in zip(entries, laws)]


def friction_of(element: JointFriction, dq: ca.SX, z: ca.SX, nv: int, static: list, lugre: list) -> tuple[ca.SX, ca.SX, ca.SX]:
    """``(Q0, B, ds/dt)`` of :class:`JointFriction` from the same lines (``friction_terms``): the
    generalized friction forces are ``Q = Q0 + B N`` with ``N`` the normal loads of the
    load-dependent joints (``B`` is nv x 0 without any). ``static`` and ``lugre`` are the
    element's laws (its ``_static`` and ``_lugre`` order) with parameters as symbols."""
    terms, rates = friction_terms(casadi_namespace(), _with_laws(element._static, static), _with_laws(element._lugre, lugre), dq, z, element.smoothing)
    Q, B = place_terms(terms, ca.SX.zeros(nv), ca.SX.zeros(nv, len(element.reaction_joints)))
    return Q, B, ca.vertcat(*rates) if rates else ca.SX(0, 1)


def friction_damping_of(element: JointFriction, dq: ca.SX, static: list, lugre: list, smoothing: float) -> list[tuple[int, ca.SX]]:
    """``(idx_v, dF/dv)`` of the element's joints (``friction_damping``), laws as :func:`friction_of`."""
    return friction_damping(casadi_namespace(), _with_laws(element._static, static), _with_laws(element._lugre, lugre), dq, smoothing)


def _supports(element: ElasticForces, sym: SymbolicDynamics, q: ca.SX) -> list[tuple[ca.SX, ca.SX, ca.DM]]:
    """``(p_E, J_E = dp_E/dq, p_E0)`` of every base support point, from the symbolic kinematics."""
    if not element._fids:
        return []
    out = []
    for name, p0 in zip(element.robot.flexible_base.frame_names, element._p0):
        p = sym.frame_position(name)(q)
        out.append((p, ca.jacobian(p, q), ca.DM(p0)))
    return out


def elastic_of(element: ElasticForces, sym: SymbolicDynamics, q: ca.SX, dq: ca.SX, springs: tuple) -> ca.SX:
    """``Q`` of :class:`ElasticForces` (``elastic_forces``) with the symbolic kinematics; ``springs =
    (k, c, S, D)``: the element's coefficients as parameters."""
    k, c, S, D = springs
    supports = [(p, J, p0, ca.vertcat(*Se), ca.vertcat(*De)) for (p, J, p0), Se, De in zip(_supports(element, sym, q), S, D)]
    return elastic_forces(ca.SX.zeros(q.numel()), q, dq, [int(i) for i in element._idx], ca.vertcat(*k), ca.vertcat(*c), supports)


def elastic_diagonal_of(element: ElasticForces, sym: SymbolicDynamics, q: ca.SX, sde, support) -> ca.SX:
    """Diagonal of ``-dQ/dq`` (stiffness: ``sde = k``, ``support = S``) or ``-dQ/d(dq)``
    (damping: ``c``, ``D``) of :class:`ElasticForces` (``elastic_diagonal``)."""
    supports = [(J, ca.vertcat(*C)) for (_, J, _), C in zip(_supports(element, sym, q), support)]
    return elastic_diagonal(ca.SX.zeros(q.numel()), [int(i) for i in element._idx], ca.vertcat(*sde), supports)


def normal_loads_of(element: JointFriction, W: ca.SX, radial, axial) -> tuple[ca.SX, ca.SX]:
    """``(N, dN/dW)`` of ``JointFriction.loads_and_gradient`` (``normal_load`` per joint): ``W`` is (k, 6), the reaction
    wrenches (force, moment; joint frames) of the element's load-dependent joints; ``radial``
    and ``axial`` (k x 2: force, moment) the load models' coefficients."""
    N, G = [], []
    for r in range(W.size1()):
        n = ca.DM(element._load_axes[r])
        parts = [normal_load(casadi_namespace(), n, W[r, 3 * i : 3 * i + 3].T, radial[r][i], axial[r][i]) for i in range(2)]  # force, moment
        N.append(parts[0][0] + parts[1][0])
        G.append(ca.vertcat(parts[0][1], parts[1][1]).T)
    return ca.vertcat(*N), ca.vertcat(*G)


def state_diagonal(system: ConstrainedDynamics, params: Parametrized) -> ca.Function:
    """``(dq, p) -> d``: the diagonal ``d(ds/dt)/ds`` of the force elements' states (LuGre
    ``-sigma0 |v| / g(v)``, 1/s), as ``JointFriction.state_jacobian`` computes it."""
    dq = ca.SX.sym("dq", system.robot.nv)
    d = [
        -law.decay(dq[i])
        for e, element in enumerate(system.forces)
        if isinstance(element, JointFriction)
        for (i, _, _), law in zip(element._lugre, params.lugre[e])
    ]
    return ca.Function("state_diagonal", [dq, params.vector.symbols], [ca.vertcat(*d) if d else ca.SX(0, 1)])
