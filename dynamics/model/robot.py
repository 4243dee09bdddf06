"""Robot models: a pinocchio model from URDF plus what URDF cannot say, from TOML.

:func:`load_robot` reads a robot TOML (schema in :mod:`mbctl.dynamics.model.overlay`), parses its
URDF with pinocchio and returns a :class:`RobotModel`: the pinocchio model, its
joints in pinocchio order with kind, axis, limits, actuation and friction.

Every degree of freedom is a 1-DOF pinocchio joint (revolute, prismatic or
continuous). Elastic DOF — a flexible base (``[base]``, :mod:`mbctl.dynamics.flexible.base`) and
rigid-finite-element links (``[flexible.<link>]``, :mod:`mbctl.dynamics.flexible.rfe`) — are
such joints too, inserted into the pinocchio model and marked unactuated, so every
rigid algorithm keeps working on the same :class:`RobotModel`; their springs and
dampers are force elements (:mod:`mbctl.dynamics.flexible.elastic`).

Coordinates: ``q`` has one entry per DOF (rad or m), in pinocchio's velocity
order; :meth:`RobotModel.configuration` turns it into pinocchio's configuration
vector (a continuous joint is stored there as ``(cos q, sin q)``).
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Literal

import numpy as np
import pinocchio as pin

from mbctl.config.flexible import FEMSpec
from mbctl.config.joints import JointSpec
from mbctl.config.robot import RobotSpec, read_robot_spec
from mbctl.dynamics.flexible.base import FlexibleBase, add_flexible_base
from mbctl.dynamics.flexible.rfe import RFELink, add_rfe_link
from mbctl.dynamics.friction.laws import JointFriction, LuGre
from mbctl.dynamics.model.overlay import joint_friction
from mbctl.dynamics.model.urdf import parse_urdf
from mbctl.dynamics.model.validate import check_model, check_urdf
from mbctl.errors import ConfigError, InputError
from mbctl.xacro_files import in_expansion

__all__ = ["Joint", "JointLimits", "RobotModel", "build_robot", "load_robot", "robot_from_pinocchio"]

JointKind = Literal["revolute", "prismatic"]


@dataclass(frozen=True)
class JointLimits:
    """Limits of one joint, SI units (rad, rad/s, N·m or m, m/s, N); inf when unknown."""

    lower: float = -math.inf
    upper: float = math.inf
    velocity: float = math.inf
    effort: float = math.inf


@dataclass(frozen=True, eq=False)
class Joint:
    """One degree of freedom of the model.

    Attributes:
        name: Joint name (URDF name for URDF joints).
        id: Pinocchio joint index (``model.joints[id]``).
        idx_q: Index of the joint in pinocchio's configuration vector.
        idx_v: Index of the joint in ``q``, ``dq``, ``tau`` (pinocchio velocity order).
        kind: ``"revolute"`` (rad, N·m) or ``"prismatic"`` (m, N).
        continuous: True for an unbounded revolute joint (two configuration entries).
        axis: Unit joint axis in the joint frame, shape (3,).
        actuated: True when a drive acts on this DOF.
        limits: Position, velocity and effort limits.
        friction: Friction model, or None for a frictionless joint.
    """

    name: str
    id: int
    idx_q: int
    idx_v: int
    kind: JointKind
    continuous: bool
    axis: np.ndarray
    actuated: bool
    limits: JointLimits
    friction: JointFriction | None


@dataclass(frozen=True, eq=False)
class RobotModel:
    """A robot: pinocchio model plus per-joint data mbctl needs.

    Attributes:
        name: Robot name (the TOML file stem).
        model: Pinocchio model (fixed base). Treat as read-only.
        joints: Every DOF, in pinocchio velocity order.
        urdf: The URDF file the rigid structure came from.
        source: The robot TOML file, if loaded from one.
        spec: The description the model was built from, or None.
        rfe_links: Links modelled by rigid finite elements (their joints are elastic DOF).
        flexible_base: The flexible base support, or None for a rigid base.
    """

    name: str
    model: pin.Model
    joints: tuple[Joint, ...]
    urdf: Path
    source: Path | None = None
    spec: RobotSpec | None = None
    rfe_links: tuple[RFELink, ...] = ()
    flexible_base: FlexibleBase | None = None

    @property
    def nv(self) -> int:
        """Number of degrees of freedom."""
        return self.model.nv

    @cached_property
    def joint_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints)

    @cached_property
    def actuated_names(self) -> tuple[str, ...]:
        return tuple(j.name for j in self.joints if j.actuated)

    @property
    def ident(self) -> str:
        """The name as an identifier of generated code (letters, digits, single underscores):
        a file ``my-arm.toml`` gives ``my_arm``."""
        ident = re.sub(r"[^A-Za-z0-9]+", "_", self.name).strip("_") or "robot"
        return ident if ident[0].isalpha() else f"r_{ident}"

    def joint(self, name: str) -> Joint:
        """The joint called ``name``.

        Raises:
            ConfigError: If there is no such joint.
        """
        for j in self.joints:
            if j.name == name:
                return j
        raise ConfigError(f"no joint {name!r} in robot {self.name} (joints: {', '.join(self.joint_names)})")

    @cached_property
    def elastic_names(self) -> tuple[str, ...]:
        """The elastic DOF (flexible base, then RFE links), in model order."""
        names = set(self.flexible_base.joint_names if self.flexible_base else ())
        names.update(n for link in self.rfe_links for n in link.names)
        return tuple(j.name for j in self.joints if j.name in names)

    @property
    def is_elastic(self) -> bool:
        """True when the model has elastic DOF."""
        return bool(self.rfe_links) or self.flexible_base is not None

    @cached_property
    def actuation_matrix(self) -> np.ndarray:
        """``B`` (nv x n_actuated): generalized forces ``B @ tau_actuators``."""
        actuated = [j.idx_v for j in self.joints if j.actuated]
        B = np.zeros((self.nv, len(actuated)))
        B[actuated, np.arange(len(actuated))] = 1.0
        return B

    def configuration(self, q: np.ndarray) -> np.ndarray:
        """Pinocchio configuration vector(s) for DOF coordinates ``q`` (..., nv) -> (..., nq)."""
        q = np.asarray(q, dtype=float)
        out = np.empty(q.shape[:-1] + (self.model.nq,))
        for j in self.joints:
            if j.continuous:
                out[..., j.idx_q] = np.cos(q[..., j.idx_v])
                out[..., j.idx_q + 1] = np.sin(q[..., j.idx_v])
            else:
                out[..., j.idx_q] = q[..., j.idx_v]
        return out

    def create_data(self) -> pin.Data:
        return self.model.createData()

    def with_friction(self, friction: Mapping[str, JointFriction | None]) -> RobotModel:
        """A copy with the friction of the named joints replaced."""
        for name in friction:
            self.joint(name)
        joints = tuple(
            dataclasses.replace(j, friction=friction[j.name]) if j.name in friction else j for j in self.joints
        )
        return dataclasses.replace(self, joints=joints)


def _joint_kind(model: pin.Model, data: pin.Data, jid: int) -> tuple[JointKind, np.ndarray]:
    """Kind and unit axis (joint frame) of a 1-DOF joint, from its motion subspace."""
    # eigenpy returns a 1-D array when nv == 1
    J = np.asarray(pin.computeJointJacobian(model, data, pin.neutral(model), jid)).reshape(6, model.nv)
    s = J[:, model.joints[jid].idx_v]
    linear, angular = s[:3], s[3:]
    if np.linalg.norm(linear) < 1e-12 and abs(np.linalg.norm(angular) - 1) < 1e-9:
        return "revolute", angular.copy()
    if np.linalg.norm(angular) < 1e-12 and abs(np.linalg.norm(linear) - 1) < 1e-9:
        return "prismatic", linear.copy()
    raise ConfigError(f"joint {model.names[jid]!r}: helical joints are not supported")


def _known(value: float) -> float:
    """URDF/pinocchio use 0 or huge numbers for 'no limit'; map those to inf."""
    return value if math.isfinite(value) and 0 < value < 1e15 else math.inf


def robot_from_pinocchio(
    model: pin.Model,
    *,
    name: str,
    urdf: Path,
    overrides: Mapping[str, JointSpec] | None = None,
    source: Path | None = None,
    spec: RobotSpec | None = None,
    rfe_links: tuple[RFELink, ...] = (),
    flexible_base: FlexibleBase | None = None,
) -> RobotModel:
    """Wrap a fixed-base pinocchio model whose joints all have one DOF.

    The joints of ``rfe_links`` and ``flexible_base`` are marked unactuated.

    Raises:
        ConfigError: For multi-DOF joints (floating, planar, spherical) or an
            override naming a joint the model does not have.
    """
    overrides = dict(overrides or {})
    elastic = {n for link in rfe_links for n in link.names} | set(flexible_base.joint_names if flexible_base else ())
    for elastic_name in elastic & set(overrides):
        raise ConfigError(
            f"joint {elastic_name!r} is an elastic DOF added by [flexible] or [base]; its springs and dampers are set there",
            file=source,
            field=f"joints.{elastic_name}",
        )
    for elastic_name in elastic:
        overrides[elastic_name] = JointSpec(actuated=False)
    if any(ov.armature is not None for ov in overrides.values()):
        model = pin.Model(model)  # the caller's model stays as it was
    data = model.createData()
    joints = []
    for jid in range(1, model.njoints):
        jname = model.names[jid]
        jm = model.joints[jid]
        if jm.nv != 1:
            raise ConfigError(
                f"joint {jname!r} of type {jm.shortname()} has {jm.nv} DOF; mbctl models fixed-base robots "
                "with 1-DOF joints (revolute, continuous, prismatic)",
                file=urdf,
            )
        kind, axis = _joint_kind(model, data, jid)
        continuous = jm.nq == 2
        ov = overrides.pop(jname, JointSpec())
        if ov.armature is not None:
            model.armature[jm.idx_v] = ov.armature
        if continuous:
            lower, upper = -math.inf, math.inf
        else:
            lower, upper = float(model.lowerPositionLimit[jm.idx_q]), float(model.upperPositionLimit[jm.idx_q])
            lower = lower if lower > -1e15 else -math.inf
            upper = upper if upper < 1e15 else math.inf
        lo, hi = ov.position if ov.position is not None else (lower, upper)
        limits = JointLimits(
            lower=lo,
            upper=hi,
            velocity=ov.velocity if ov.velocity is not None else _known(float(model.velocityLimit[jm.idx_v])),
            effort=ov.effort if ov.effort is not None else _known(float(model.effortLimit[jm.idx_v])),
        )
        joints.append(
            Joint(
                name=jname,
                id=jid,
                idx_q=jm.idx_q,
                idx_v=jm.idx_v,
                kind=kind,
                continuous=continuous,
                axis=axis,
                actuated=ov.actuated,
                limits=limits,
                friction=None if ov.friction is None else joint_friction(ov.friction),
            )
        )
    if overrides:
        unknown = next(iter(overrides))
        raise ConfigError(
            f"no joint {unknown!r} in the URDF (joints: {', '.join(j.name for j in joints)})",
            file=source,
            field=f"joints.{unknown}",
        )
    return RobotModel(
        name=name,
        model=model,
        joints=tuple(joints),
        urdf=urdf,
        source=source,
        spec=spec,
        rfe_links=tuple(rfe_links),
        flexible_base=flexible_base,
    )


def _check_lugre_dissipative(robot: RobotModel) -> None:
    """LuGre laws must stay dissipative over the joint's whole velocity range."""
    for j in robot.joints:
        if j.friction is None or not isinstance(j.friction.law, LuGre):
            continue
        field = f"joints.{j.name}.friction"
        if not math.isfinite(j.limits.velocity):
            raise ConfigError(
                "a LuGre law needs the joint's velocity limit to check dissipativity; set limits.velocity",
                file=robot.source,
                field=f"joints.{j.name}.limits.velocity",
            )
        v_p = j.friction.law.passive_speed_limit(load_dependent=j.friction.load is not None)
        if v_p < j.limits.velocity:
            unit = "rad/s" if j.kind == "revolute" else "m/s"
            raise ConfigError(
                f"LuGre law is not dissipative above {v_p:.4g} {unit}, below the joint velocity limit "
                f"{j.limits.velocity:.4g} {unit} (needs sigma1**2*|v| <= 4*sigma0*(sigma1 + fv)*g(v)); "
                "lower sigma1",
                file=robot.source,
                field=f"{field}.sigma1",
            )


def _lock_joints(model: pin.Model, spec: RobotSpec) -> pin.Model:
    """The model with ``spec.locked`` joints held at their positions and removed (bodies merged)."""
    if not spec.locked:
        return model
    q_ref = pin.neutral(model)
    ids = []
    for name, value in spec.locked.items():
        field = f"locked.{name}"
        if not model.existJointName(name) or name == "universe":
            raise ConfigError(f"no joint {name!r} in the URDF", file=spec.source, field=field)
        jid = model.getJointId(name)
        jm = model.joints[jid]
        if jm.nq != 1:
            raise ConfigError(f"joint {name!r} has {jm.nq} configuration entries; only 1-DOF joints can be locked", file=spec.source, field=field)
        lo, hi = model.lowerPositionLimit[jm.idx_q], model.upperPositionLimit[jm.idx_q]
        if not lo - 1e-12 <= value <= hi + 1e-12:
            raise ConfigError(f"{value:g} is outside the joint's range [{lo:g}, {hi:g}]", file=spec.source, field=field)
        if name in spec.joints:
            raise ConfigError("a locked joint has no DOF left to describe; remove its [joints] table", file=spec.source, field=f"joints.{name}")
        q_ref[jm.idx_q] = value
        ids.append(jid)
    return pin.buildReducedModel(model, ids, q_ref)


def _set_inertials(model: pin.Model, spec: RobotSpec) -> None:
    """Replace the bodies of joints with an ``inertial`` table; each must be physically consistent."""
    for name, joint in spec.joints.items():
        ins = joint.inertial
        if ins is None:
            continue
        if not model.existJointName(name):
            raise ConfigError(f"no joint {name!r} in the URDF", file=spec.source, field=f"joints.{name}")
        ixx, iyy, izz, ixy, ixz, iyz = ins.inertia
        inertia_c = np.array([[ixx, ixy, ixz], [ixy, iyy, iyz], [ixz, iyz, izz]])
        eig = np.linalg.eigvalsh(inertia_c)
        # a mass density exists iff the principal moments are positive and obey the triangle inequalities;
        # the tolerance admits a line of mass (one moment ~0) written with six significant digits
        tol = 1e-6 * eig[2]
        if eig[0] < -tol or eig[2] <= 0 or eig[0] + eig[1] < eig[2] - tol:
            raise ConfigError(
                f"principal moments {eig[0]:.4g}, {eig[1]:.4g}, {eig[2]:.4g} kg·m² are not those of a body (need >= 0 and "
                "the two smaller adding up to at least the largest)",
                file=ins.file,
                field=f"{ins.field}.inertia",
            )
        model.inertias[model.getJointId(name)] = pin.Inertia(ins.mass, np.asarray(ins.com, dtype=float), inertia_c)


def build_robot(spec: RobotSpec, *, rigid_base: bool = False, rigid_links: bool = False) -> RobotModel:
    """Build the model a :class:`~mbctl.config.RobotSpec` describes.

    ``spec.flexible`` turns links into rigid finite elements and a flexible ``spec.base``
    puts the robot on springs; ``rigid_links`` / ``rigid_base`` leave the structure rigid
    anyway (to compare variants of one description).

    Raises:
        ConfigError: With the file and field at fault, for a malformed URDF, an unknown
            joint, or a non-physical parameter (a fault in a xacro description's expansion names
            the xacro file and its arguments, not the cached URDF).
    """
    try:
        return _build_robot(spec, rigid_base=rigid_base, rigid_links=rigid_links)
    except InputError as exc:
        if spec.xacro is None:
            raise
        raise in_expansion(exc, spec.urdf, spec.xacro, spec.xacro_args) from None


def _build_robot(spec: RobotSpec, *, rigid_base: bool, rigid_links: bool) -> RobotModel:
    check_urdf(spec.urdf)  # before pinocchio, whose messages do not name the joint
    model = _lock_joints(parse_urdf(spec.urdf), spec)
    if spec.gravity is not None:
        model.gravity = pin.Motion(np.concatenate([np.asarray(spec.gravity, dtype=float), np.zeros(3)]))
    _set_inertials(model, spec)
    rfe_links = []
    fem = [link for link in spec.flexible if isinstance(link, FEMSpec)]
    if fem and not rigid_links:
        raise ConfigError(
            "method fem (a planar floating-frame beam) is not a pinocchio model: the flexible mechanism is built by "
            "mbctl.dynamics.flexible.planar (`mbctl flexfeed`); elsewhere load the config with rigid links or use "
            "method rfe",
            file=spec.source,
            field=f"flexible.{fem[0].link}.method",
        )
    if not rigid_links:
        for link in spec.flexible:
            model, rfe = add_rfe_link(model, link, file=spec.source, field=f"flexible.{link.link}")
            rfe_links.append(rfe)
    flexible_base = None
    if spec.base is not None and spec.base.flexible and not rigid_base:
        model, flexible_base = add_flexible_base(model, spec.base, file=spec.source)
    robot = robot_from_pinocchio(
        model,
        name=spec.name,
        urdf=spec.urdf,
        overrides=spec.joints,
        source=spec.source,
        spec=spec,
        rfe_links=tuple(rfe_links),
        flexible_base=flexible_base,
    )
    _check_lugre_dissipative(robot)
    check_model(robot.model, [j.name for j in sorted(robot.joints, key=lambda j: j.idx_v)], file=spec.source or spec.urdf)
    return robot


def load_robot(path: str | Path, *, rigid_base: bool = False, rigid_links: bool = False, xacro_args: Mapping[str, str] | None = None) -> RobotModel:
    """Load a robot from its TOML description, a path or a bundled name such as ``"scara"``.

    Equivalent to ``build_robot(read_robot_spec(path, xacro_args=xacro_args), ...)``; see
    :func:`build_robot` (``xacro_args``: arguments of a xacro description, over the TOML's ``[xacro]``).

    Raises:
        ConfigError: With the file and field at fault, for any missing file,
            malformed TOML or URDF, unknown joint, field or law, or non-physical
            parameter.
    """
    return build_robot(read_robot_spec(path, xacro_args=xacro_args), rigid_base=rigid_base, rigid_links=rigid_links)
