"""What a compiled simulation core depends on: its structure, and the numbers it takes at run time.

The compiled core (:mod:`mbctl.dynamics.simulation.compiled`) is generated once per
*structure* and called with the robot's *numbers* as an input vector ``p``, so a study that
changes masses, friction, stiffness or stabilization gains from run to run compiles once:

- **Parameters** (run-time inputs, SI units), in this order:

  - per body ``(m, m c_x, m c_y, m c_z, I_xx, I_xy, I_yy, I_xz, I_yz, I_zz)`` (kg, kg·m,
    kg·m²; inertia about the joint frame's origin, pinocchio's ``toDynamicParameters``
    order), then the rotor inertia of each joint (kg·m² or kg);
  - every field of each joint friction law (:mod:`mbctl.dynamics.friction.laws`), and the
    load models' coefficients of load-dependent joints;
  - the sde springs and dampers of RFE links ``k``, ``c`` and the flexible base's support
    stiffness and damping ``S``, ``D`` per axis;
  - the Baumgarte gains ``c1`` (1/s) and ``c0`` (1/s²).

  Inertial parameters and load coefficients that are exactly zero (a centre of mass on an
  axis, a principal frame, an absent load term) stay constants in the generated code,
  which keeps it small; which of them are zero is part of the structure.

- **Structure** (anything else: compiled in): the kinematic tree (joints, axes,
  placements, frames, gravity), the constraints (kinds, frames, targets), the force
  elements and law kinds, the solver and its decisions at the initial state (rank, kept
  rows), and the names of the parameters above. :func:`structure_key` hashes it.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field, fields
from typing import Any

import casadi as ca
import numpy as np
import pinocchio as pin

from mbctl.dynamics.constraints.constrained import ConstrainedDynamics
from mbctl.dynamics.flexible.elastic import ElasticForces
from mbctl.dynamics.forces import JointFriction
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.parameters import Parameters
from mbctl.dynamics.symbolic import body_inertia

__all__ = [
    "ParameterVector",
    "Parametrized",
    "parameter_values",
    "parametrize",
    "parametrize_plant",
    "parametrize_robot",
    "plant_key",
    "robot_key",
    "structure_key",
    "twin",
]

Scalar = Any  # a float (a constant) or a casadi.SX symbol

# inertial parameter names, pinocchio's toDynamicParameters order
_INERTIAL = ("m", "mc_x", "mc_y", "mc_z", "I_xx", "I_xy", "I_yy", "I_xz", "I_yz", "I_zz")


class ParameterVector:
    """Named run-time parameters collected in a fixed order: SX symbols, or just the values.

    Args:
        symbolic: True: :meth:`scalar` returns a new SX symbol (the parameter as an input
            of a generated function); False: it returns the value (to fill the input).
    """

    def __init__(self, symbolic: bool):
        self.symbolic = symbolic
        self.names: list[str] = []
        self.values: list[float] = []
        self._symbols: list[ca.SX] = []

    def scalar(self, name: str, value: float, *, fold_zero: bool = False) -> Scalar:
        """The parameter ``name``; with ``fold_zero`` an exact zero stays the constant 0.0 (no input)."""
        value = float(value)
        if fold_zero and value == 0.0:
            return 0.0
        self.names.append(name)
        self.values.append(value)
        if not self.symbolic:
            return value
        s = ca.SX.sym(name)
        self._symbols.append(s)
        return s

    @property
    def symbols(self) -> ca.SX:
        """The input vector ``p`` (symbolic vectors only)."""
        return ca.vertcat(*self._symbols) if self._symbols else ca.SX(0, 1)

    @property
    def array(self) -> np.ndarray:
        return np.array(self.values, dtype=float)


def twin(law: Parameters, prefix: str, vec: ParameterVector) -> Parameters:
    """A copy of a parameter set (friction law, load model) whose fields are ``vec``'s parameters.

    It is built without ``__post_init__``: its fields may be symbols, which the range checks
    cannot judge (the original passed them)."""
    copy = object.__new__(type(law))
    for f in fields(law):  # type: ignore[arg-type]
        object.__setattr__(copy, f.name, vec.scalar(f"{prefix}.{f.name}", getattr(law, f.name)))
    return copy


@dataclass
class Parametrized:
    """A system's numbers as :class:`ParameterVector` entries, in the places the generator reads them.

    Attributes:
        vector: The parameters, in input order.
        bodies: ``(m, m c, I_O)`` per pinocchio joint (for :class:`~mbctl.dynamics.symbolic.SymbolicDynamics`).
        armature: Rotor inertia per pinocchio joint.
        static, lugre: Per friction element (by its index in ``system.forces``), its laws
            in the element's ``_static`` and ``_lugre`` order.
        radial, axial: Per friction element, the load coefficients (rows: loaded joints;
            columns: force, moment).
        springs: Per elastic element, ``(k, c, S, D)``: sde springs and dampers, support
            stiffness and damping (3 per support point).
        baumgarte: ``(c1, c0)``, or None without stabilization.
    """

    vector: ParameterVector
    bodies: list = field(default_factory=list)
    armature: list = field(default_factory=list)
    static: dict = field(default_factory=dict)
    lugre: dict = field(default_factory=dict)
    radial: dict = field(default_factory=dict)
    axial: dict = field(default_factory=dict)
    springs: dict = field(default_factory=dict)
    baumgarte: tuple | None = None


def _joint_name(robot: RobotModel, idx_v: int) -> str:
    return robot.joint_names[[j.idx_v for j in robot.joints].index(idx_v)]


def parametrize_robot(robot: RobotModel, forces, vec: ParameterVector) -> Parametrized:
    """The inertial parameters of ``robot`` and the coefficients of the force elements ``forces``."""
    model = robot.model
    out = Parametrized(vec)
    by_id = {j.id: j for j in robot.joints}
    for i in range(1, model.njoints):
        name = by_id[i].name
        m, h, Ibar = body_inertia(model.inertias[i])
        values = (m, *h, Ibar[0][0], Ibar[0][1], Ibar[1][1], Ibar[0][2], Ibar[1][2], Ibar[2][2])
        p = [vec.scalar(f"{name}.{k}", v, fold_zero=True) for k, v in zip(_INERTIAL, values)]
        inertia = [[p[4], p[5], p[7]], [p[5], p[6], p[8]], [p[7], p[8], p[9]]]
        out.bodies.append((p[0], p[1:4], inertia))
    for i in range(1, model.njoints):
        j = by_id[i]
        out.armature.append(vec.scalar(f"{j.name}.armature", model.armature[j.idx_v], fold_zero=True))
    for e, element in enumerate(forces):
        if isinstance(element, JointFriction):
            out.static[e] = [twin(law, f"{_joint_name(robot, i)}.friction", vec) for i, law, _ in element._static]
            out.lugre[e] = [twin(law, f"{_joint_name(robot, i)}.friction", vec) for i, law, _ in element._lugre]
            loaded = [_joint_name(robot, int(i)) for i in element._load_dofs]
            out.radial[e] = [[vec.scalar(f"{n}.load.radial{k}", element._radial[r, k], fold_zero=True) for k in range(2)] for r, n in enumerate(loaded)]
            out.axial[e] = [[vec.scalar(f"{n}.load.axial{k}", element._axial[r, k], fold_zero=True) for k in range(2)] for r, n in enumerate(loaded)]
        elif isinstance(element, ElasticForces):
            names = [_joint_name(robot, int(i)) for i in element._idx]
            k = [vec.scalar(f"{n}.stiffness", v) for n, v in zip(names, element._k)]
            c = [vec.scalar(f"{n}.damping", v) for n, v in zip(names, element._c)]
            frames = robot.flexible_base.frame_names if element._fids else ()
            S = [[vec.scalar(f"{f}.support_stiffness{a}", v) for a, v in enumerate(row)] for f, row in zip(frames, np.atleast_2d(element._S))] if frames else []
            D = [[vec.scalar(f"{f}.support_damping{a}", v) for a, v in enumerate(row)] for f, row in zip(frames, np.atleast_2d(element._D))] if frames else []
            out.springs[e] = (k, c, S, D)
    return out


def parametrize(system: ConstrainedDynamics, *, symbolic: bool = True) -> Parametrized:
    """The run-time parameters of ``system`` (see the module docstring): symbols to generate
    the core with, or (``symbolic=False``) the values to call it with, in the same order."""
    vec = ParameterVector(symbolic)
    out = parametrize_robot(system.robot, system.forces, vec)
    if system.baumgarte is not None:
        c1, c0 = system.baumgarte.coefficients
        out.baumgarte = (vec.scalar("baumgarte.c1", c1), vec.scalar("baumgarte.c0", c0))
    return out


def parametrize_plant(robot: RobotModel, forces, *, symbolic: bool = True) -> Parametrized:
    """The run-time parameters of the simulated plant: the robot's and its force elements'
    (``forces``: its joint friction, and its springs if elastic; servos are compiled in)."""
    return parametrize_robot(robot, forces, ParameterVector(symbolic))


def parameter_values(system: ConstrainedDynamics) -> np.ndarray:
    """The input vector ``p`` of ``system``'s compiled core (the order of :func:`parametrize`)."""
    return parametrize(system, symbolic=False).vector.array


# ---------------------------------------------------------------------------------


def _put(h: Any, value: Any, depth: int = 0) -> None:
    """Feed ``value`` to the hash ``h``: arrays by their bytes, floats exactly, objects by their attributes."""
    if isinstance(value, np.ndarray):
        h.update(f"a{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, float):
        h.update(float(value).hex().encode())
    elif isinstance(value, (str, int, bool, type(None))):
        h.update(repr(value).encode())
    elif isinstance(value, (tuple, list)):
        h.update(f"[{len(value)}".encode())
        for v in value:
            _put(h, v, depth)
    elif isinstance(value, dict):
        for k in sorted(value, key=repr):
            _put(h, k, depth)
            _put(h, value[k], depth)
    elif isinstance(value, RobotModel) or type(value).__module__.startswith(("pinocchio", "casadi")):
        # the robot is hashed on its own; a target's CasADi function and buffer by the text it was built from
        h.update(type(value).__name__.encode())
    elif depth < 4 and hasattr(value, "__dict__"):
        h.update(type(value).__qualname__.encode())
        _put(h, vars(value), depth + 1)
    else:
        h.update(repr(value).encode())  # callables and the like: their identity, never a false match


def _robot_structure(h: Any, robot: RobotModel) -> None:
    model = robot.model
    for i in range(1, model.njoints):
        _put(h, (int(model.parents[i]), model.joints[i].shortname(), np.asarray(model.jointPlacements[i].homogeneous)))
    for f in model.frames:
        _put(h, (f.name, int(f.parentJoint), np.asarray(f.placement.homogeneous)))
    _put(h, np.asarray(model.gravity.linear))
    _put(h, [(j.name, j.idx_v, j.idx_q, j.kind, tuple(np.asarray(j.axis, dtype=float)), j.continuous) for j in robot.joints])


def _forces_structure(h: Any, forces) -> None:
    for element in forces:
        h.update(type(element).__qualname__.encode())
        if isinstance(element, JointFriction):
            _put(h, (element.smoothing, [(i, type(law).__name__, slot) for i, law, slot in element._static]))
            _put(h, ([(i, type(law).__name__, slot) for i, law, slot in element._lugre], element.reaction_joints, element._load_axes))
        elif isinstance(element, ElasticForces):
            _put(h, (element._idx, list(element._fids), getattr(element, "_p0", None)))
        else:
            _put(h, element)


def structure_key(system: ConstrainedDynamics, names: list[str]) -> str:
    """SHA-256 of the structure of ``system`` (see the module docstring) and its parameter ``names``."""
    h = hashlib.sha256()
    _robot_structure(h, system.robot)
    setup = system._setup
    _put(h, (system.solver, system.baumgarte is None, vars(system.singularity), system.eliminate, system.independent, system.rank_tolerance))
    _put(h, None if setup is None else (setup.rank, setup.kept, setup.eliminated, setup.orientation))
    for c in system.constraints:
        _put(h, c)
    _forces_structure(h, system.forces)
    _put(h, (names, pin.__version__))
    return h.hexdigest()


def plant_key(robot: RobotModel, forces, servos, names: list[str]) -> str:
    """SHA-256 of the simulated plant's structure: the robot's, its force elements', its servos
    (numbers included: compiled in) and its parameter ``names``."""
    h = hashlib.sha256()
    _robot_structure(h, robot)
    _forces_structure(h, forces)
    _put(h, (list(servos), names, pin.__version__))
    return h.hexdigest()


def robot_key(robot: RobotModel, *parts: Any) -> str:
    """SHA-256 of the robot's structure and of ``parts`` (arrays by their bytes, objects by their
    attributes): the key of a function generated from the robot whose numbers are inputs."""
    h = hashlib.sha256()
    _robot_structure(h, robot)
    _put(h, (list(parts), pin.__version__))
    return h.hexdigest()
