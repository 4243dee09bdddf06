"""Flexible links as rigid finite elements (RFE, modified formulation of the flexible-manipulator study).

A TOML table ``[flexible.<link>]`` turns a URDF link into a chain of rigid elements
inside the pinocchio model:

```toml
[flexible.upper_arm]           # URDF link name
method = "rfe"
elements = 4                   # m spring-damping elements (sdes) -> m+1 rigid elements (rfes)
axis = "x"                     # link axis in the link frame, from its joint to its tip (x, y or z)
length = 0.5                   # L, m
E = 70e9                       # Young's modulus, Pa
G = 26e9                       # shear modulus, Pa
section = { A = 3.4872e-4, Iy = 6.0066e-8, Iz = 6.0066e-8, J = 1.2013e-7 }   # m^2, m^4
density = 2700                 # kg/m^3 (or mass_per_length = 0.94, kg/m)
damping = { ratio = 0.01 }     # or { twist = 0.05, bend_y = 0.2, bend_z = 0.2 } in N*m*s/rad per sde
```

**Discretization.** The link, from its frame's origin along ``axis`` over ``L``, is cut
into m primary segments of length ``D = L/m``; an sde sits at the middle of each, at
``s_k = (k - 1/2) D`` (k = 1..m). Rigid element 0 (``[0, D/2]``) moves with the link's
joint, rfe k (k = 1..m-1) spans ``[s_k, s_k + D]`` and the last one ``[L - D/2, L]``.

**Beam axes.** ``x'`` is the link axis; ``y'``, ``z'`` follow cyclically in the link frame
(axis x: y, z; axis y: z, x; axis z: x, y). ``Iy``, ``Iz`` are the section's second
moments about ``y'`` and ``z'``, ``J`` its torsion constant.

**Elastic coordinates.** Every sde adds three revolute joints (unactuated), applied in
this order: ``<link>_sde<k>_twist`` about ``x'``, then ``<link>_sde<k>_bend_y`` about the
(twisted) ``y'``, then ``<link>_sde<k>_bend_z`` about the (twisted, bent) ``z'``; the first
two carry no mass, the third carries rfe k and a BODY frame ``<link>_rfe<k>``. The
springs and dampers act on these coordinates ``d = (psi, theta, phi)``::

    Q = -S d - D_d d_dot,   S = diag(G*J/D, E*Iy/D, E*Iz/D)   (N*m/rad)

(:class:`mbctl.dynamics.flexible.elastic.ElasticForces`). Translational sde DOF are neglected, as in
the flexible-manipulator study.

**Masses.** A rigid element of length ``l`` has mass ``mu*l`` (``mu = rho*A`` or the
given mass per length), its centre at mid-length and the centroidal inertia of a
uniform beam: ``rho*(Iy + Iz)*l`` about ``x'``, ``rho*Iy*l + mu*l^3/12`` about ``y'``,
``rho*Iz*l + mu*l^3/12`` about ``z'`` (``rho = mu/A``). These replace the link's own URDF
inertia. Everything else the link carries — links fixed to it (lumped masses such as a
drive housing, with their inertia), frames (a tool, sensors) and child joints (the
next joint) — goes to the rigid element that contains its position along the axis: at
the tip, the last one; the link's own frame stays on rfe 0 with the joint.

**Damping.** ``ratio = zeta`` gives stiffness-proportional damping per DOF family,
``D_d = (2*zeta/omega_1) S``, with ``omega_1`` the family's first clamped-free frequency
of the bare link: ``BETA1^2*sqrt(E*I/(mu*L^4))`` (``BETA1 = 1.87510...``) in bending, ``(pi/2)/L*sqrt(G*J/(rho*(Iy + Iz)))``
in torsion. That mode gets the damping ratio ``zeta``, mode ``i`` about
``zeta*omega_i/omega_1``. Explicit values (N*m*s/rad, per sde) are used as given.

Checks with known answers (tests): static tip deflection of a cantilever under a tip
load P is exactly ``P*L^3/(3*E*I)*(1 - 1/(4*m^2))``; the first bending frequency
converges to the Euler–Bernoulli value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.config.flexible import AXES, RFESpec
from mbctl.dynamics.flexible.fem import clamped_free_bending_frequency
from mbctl.dynamics.model.edit import (
    JointSpec,
    add_inertias,
    insert_chain,
    link_inertia,
    rigid_frames,
    subtract_inertia,
)
from mbctl.errors import ConfigError

__all__ = ["ChordDeflection", "RFELink", "add_rfe_link", "chord_deflection", "first_frequencies", "rfe_joint_names", "sde_damping", "sde_stiffness"]

_JOINT_MODELS = {"x": pin.JointModelRX, "y": pin.JointModelRY, "z": pin.JointModelRZ}


def sde_stiffness(spec: RFESpec) -> np.ndarray:
    """``(G*J/D, E*Iy/D, E*Iz/D)`` (N·m/rad) with ``D = L/m``, the same for every sde."""
    D = spec.segment
    return np.array([spec.G * spec.J / D, spec.E * spec.Iy / D, spec.E * spec.Iz / D])


def first_frequencies(spec: RFESpec) -> np.ndarray:
    """First clamped-free frequencies (rad/s) of the bare link: torsion, bending about y', about z'.

    Torsion ``(pi/2)/L sqrt(G J / (rho (Iy + Iz)))``; bending ``BETA1² sqrt(E I / (mu L⁴))``
    (:func:`mbctl.dynamics.flexible.fem.clamped_free_bending_frequency`).
    """
    L, mu = spec.length, spec.mass_per_length
    torsion = (math.pi / 2) / L * math.sqrt(spec.G * spec.J / (spec.density * (spec.Iy + spec.Iz)))
    bending = [clamped_free_bending_frequency(spec.E, area_moment, mu, L) for area_moment in (spec.Iy, spec.Iz)]
    return np.array([torsion, *bending])


def sde_damping(spec: RFESpec) -> np.ndarray:
    """Damping ``(twist, bend_y, bend_z)`` per sde (N·m·s/rad): explicit, or ``2 zeta k / omega_1`` per direction."""
    if spec.damping is not None:
        return np.array(spec.damping)
    return 2.0 * float(spec.damping_ratio or 0.0) / first_frequencies(spec) * sde_stiffness(spec)


@dataclass(frozen=True)
class RFELink:
    """A link modelled by rigid finite elements, as built into a model.

    Attributes:
        spec: Its parameters.
        joint_names: ``(m, 3)`` names of the elastic joints (twist, bend_y, bend_z per sde).
        stiffness: Spring constant per elastic joint, in ``joint_names`` order (N·m/rad).
        damping: Damper constant per elastic joint (N·m·s/rad).
    """

    spec: RFESpec
    joint_names: tuple[tuple[str, str, str], ...]
    stiffness: np.ndarray
    damping: np.ndarray

    @property
    def names(self) -> tuple[str, ...]:
        """Elastic joint names, flattened in model order."""
        return tuple(n for sde in self.joint_names for n in sde)


def rfe_joint_names(link: str, elements: int) -> tuple[tuple[str, str, str], ...]:
    """``((<link>_sde1_twist, <link>_sde1_bend_y, <link>_sde1_bend_z), ...)``."""
    return tuple((f"{link}_sde{k}_twist", f"{link}_sde{k}_bend_y", f"{link}_sde{k}_bend_z") for k in range(1, elements + 1))


def _beam_rotation(axis: str) -> np.ndarray:
    """Columns: the link-frame directions of the beam axes x', y', z'."""
    i = AXES.index(axis)
    e = np.eye(3)
    return np.column_stack([e[i], e[(i + 1) % 3], e[(i + 2) % 3]])


def _element_inertia(spec: RFESpec, length: float, start: float) -> pin.Inertia:
    """Inertia of a uniform beam piece ``[start, start + length]`` along the axis, link-frame axes."""
    mass = spec.mass_per_length * length
    rho = spec.density
    centroidal = np.diag(
        [
            rho * (spec.Iy + spec.Iz) * length,
            rho * spec.Iy * length + mass * length**2 / 12,
            rho * spec.Iz * length + mass * length**2 / 12,
        ]
    )
    R = _beam_rotation(spec.axis)
    return pin.Inertia(mass, R[:, 0] * (start + length / 2), R @ centroidal @ R.T)


def add_rfe_link(model: pin.Model, spec: RFESpec, *, file=None, field: str | None = None) -> tuple[pin.Model, RFELink]:
    """A copy of ``model`` in which link ``spec.link`` is a chain of rigid finite elements.

    Raises:
        ConfigError: If the model has no such link or its inertia bookkeeping does not
            add up.
    """
    field = field or f"flexible.{spec.link}"
    links = [f.name for f in model.frames if f.type == pin.FrameType.BODY]
    if spec.link not in links:
        raise ConfigError(f"no link {spec.link!r} in the URDF (links: {', '.join(links)})", file=file, field=field)
    body = model.getFrameId(spec.link, pin.FrameType.BODY)
    anchor = int(model.frames[body].parentJoint)
    P_b = model.frames[body].placement  # link frame in the anchor joint's frame
    m, D = spec.elements, spec.segment
    R = _beam_rotation(spec.axis)
    jm = [_JOINT_MODELS[AXES[int(np.argmax(np.abs(R[:, c])))]] for c in range(3)]
    names = rfe_joint_names(spec.link, m)

    attached = rigid_frames(model, body)
    try:
        own = link_inertia(model, body)
    except ValueError as exc:
        raise ConfigError(str(exc), file=file, field=field) from None

    def element_of(placement_in_anchor: pin.SE3) -> int:
        s = float(P_b.actInv(placement_in_anchor).translation @ R[:, 0])
        return int(min(max(math.floor(s / D + 0.5), 0), m))

    chain: list[JointSpec] = []
    for k in range(1, m + 1):
        step = pin.SE3(np.eye(3), R[:, 0] * (D / 2 if k == 1 else D))
        first = P_b * step if k == 1 else step
        length = D / 2 if k == m else D
        inertia = _element_inertia(spec, length, 0.0)
        chain += [
            JointSpec(names[k - 1][0], jm[0](), first),
            JointSpec(names[k - 1][1], jm[1](), pin.SE3.Identity()),
            JointSpec(names[k - 1][2], jm[2](), pin.SE3.Identity(), inertia, body_frame=f"{spec.link}_rfe{k}"),
        ]

    # lumped masses: links fixed to this one keep their inertia where their frame goes
    anchor_body = subtract_inertia(model.inertias[anchor], own, what=f"link {spec.link!r}")
    anchor_body = add_inertias(anchor_body, P_b.act(_element_inertia(spec, D / 2, 0.0)))
    lumped: dict[int, list[pin.Inertia]] = {}
    for fid in attached:
        f = model.frames[fid]
        if fid == body or f.type != pin.FrameType.FIXED_JOINT or f.inertia.mass <= 0:
            continue
        k = element_of(f.placement)
        if k > 0:
            piece = f.placement.act(f.inertia)
            anchor_body = subtract_inertia(anchor_body, piece, what=f"link {spec.link!r}")
            lumped.setdefault(k, []).append(piece)
    # the chain's rest placements are needed to express lumped inertias; build once to get them
    rest = []
    X = pin.SE3.Identity()
    for c in chain:
        X = X * c.placement
        rest.append(X.copy())
    for k, pieces in lumped.items():
        i = 3 * (k - 1) + 2
        c = chain[i]
        local = [rest[i].actInv(p) for p in pieces]
        chain[i] = JointSpec(c.name, c.joint, c.placement, add_inertias(c.inertia, *local), body_frame=c.body_frame)

    child_joints = [
        jid
        for jid in range(1, model.njoints)
        if model.parents[jid] == anchor
        and any(f.type == pin.FrameType.JOINT and f.parentJoint == jid and int(f.parentFrame) in attached for f in model.frames)
    ]

    def assign(placement: pin.SE3) -> int | None:
        k = element_of(placement)
        return None if k == 0 else 3 * (k - 1) + 2

    moved_frames = [fid for fid in attached if fid != body]
    try:
        edited = insert_chain(
            model, anchor, chain, anchor_inertia=anchor_body, frames=moved_frames, joints=child_joints, assign=assign
        )
    except ValueError as exc:
        raise ConfigError(str(exc), file=file, field=field) from None
    S = np.tile(sde_stiffness(spec), m)
    Dd = np.tile(sde_damping(spec), m)
    return edited.model, RFELink(spec=spec, joint_names=names, stiffness=S, damping=Dd)


@dataclass(frozen=True, eq=False)
class ChordDeflection:
    """Deflection of an RFE link from its chord along a run.

    Attributes:
        link: The link's name.
        s: (P,) undeformed positions of the points along the axis (m): the link's
            origin, the sdes ``s_k = (k - 1/2) D``, the tip ``L``.
        w: (N, P) distance of each point from the chord, the straight line through the
            origin and the tip (m); 0 at both ends.
    """

    link: str
    s: np.ndarray
    w: np.ndarray

    @property
    def peak(self) -> np.ndarray:
        """(N,) the largest distance from the chord per sample (m)."""
        return self.w.max(axis=1)


def chord_deflection(robot, link: str, q: np.ndarray) -> ChordDeflection:
    """Distances of the elastic line's points from the chord of link ``link`` (m).

    The points are the link frame's origin, the sde points (origins of the frames
    ``<link>_rfe<k>``) and the tip (``D/2`` beyond the last sde along the last rigid
    element's axis). With ``a`` the origin, ``b`` the tip and ``u = (b - a)/|b - a|``,
    a point ``p`` is ``|(p - a) - ((p - a)·u) u|`` from the chord: the deflection shape of a
    link held at both ends (a coupler in a loop), free of its rigid motion.

    Args:
        robot: A :class:`~mbctl.dynamics.model.robot.RobotModel` with RFE link ``link``.
        q: (N, nv) or (nv,) DOF coordinates.

    Raises:
        ConfigError: If the robot has no RFE link of that name.
    """
    rfe = next((r for r in robot.rfe_links if r.spec.link == link), None)
    if rfe is None:
        raise ConfigError(f"no flexible (RFE) link {link!r} in robot {robot.name}", field="link")
    spec = rfe.spec
    m, D = spec.elements, spec.segment
    axis = _beam_rotation(spec.axis)[:, 0]
    model, data = robot.model, robot.model.createData()
    fids = [model.getFrameId(link)] + [model.getFrameId(f"{link}_rfe{k}") for k in range(1, m + 1)]
    q = np.atleast_2d(np.asarray(q, dtype=float))
    w = np.empty((len(q), m + 2))
    for n, qn in enumerate(q):
        pin.framesForwardKinematics(model, data, robot.configuration(qn))
        pts = [data.oMf[f].translation.copy() for f in fids]
        last = data.oMf[fids[-1]]
        pts.append(last.translation + last.rotation @ (axis * (D / 2)))
        P = np.array(pts)
        u = P[-1] - P[0]
        u /= np.linalg.norm(u)
        d = P - P[0]
        w[n] = np.linalg.norm(d - np.outer(d @ u, u), axis=1)
    s = np.concatenate([[0.0], (np.arange(1, m + 1) - 0.5) * D, [spec.length]])
    return ChordDeflection(link=link, s=s, w=w)
