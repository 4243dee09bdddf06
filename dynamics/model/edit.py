"""Editing pinocchio models: hang a chain of new joints from a joint and move what it carried.

Pinocchio cannot insert a joint into an existing model, so :func:`insert_chain` rebuilds
the model joint by joint. Flexibility uses it twice:

- a flexible base hangs six joints from the universe (joint 0) and moves the whole root
  body (its inertia, every frame on it and every joint attached to it) to the last one;
- a rigid-finite-element link hangs ``3*m`` revolute joints from the link's joint and
  moves the frames, child joints and lumped masses along the link to the rigid element
  that contains them.

**The chain.** ``chain[0]`` is placed relative to the anchor joint's frame, ``chain[i]``
relative to ``chain[i-1]``; each carries the body inertia of its :class:`JointSpec`
(in its own frame). With every chain coordinate at zero the chain joint ``i`` sits at
``rest[i] = chain[0].placement * ... * chain[i].placement`` in the anchor's frame.

**Moving things.** A frame or child joint of the anchor listed in ``frames`` /
``joints`` is given to the chain joint ``i = assign(placement)`` (its placement in the
anchor frame; ``None`` keeps it on the anchor) with the new placement
``rest[i]^-1 * placement``, so at zero chain coordinates every frame and joint is where
it was. Inertia is *not* moved implicitly: the caller states the anchor's new body
inertia and the chain bodies' inertias.

**Pitfalls handled here.**

- ``Model.addFrame(frame, append_inertia=True)`` (the default) adds ``frame.inertia`` to
  the parent joint's body. Pinocchio's URDF parser stores a fixed child link's inertia
  on its ``FIXED_JOINT`` frame *and* in the joint's body inertia, so copying frames with
  the default would count those masses twice. Frames are copied with
  ``append_inertia=False`` (their ``inertia`` field is kept as a record), and body
  inertias are assembled explicitly.
- The chain's joints come right after the anchor in joint (velocity) order, before the
  anchor's original children, so coordinates read base, joint, link elements, next joint.
- Limits, armature, rotor and pinocchio-side friction/damping fields are copied per DOF.

:func:`link_inertia` recovers one URDF link's own inertia from such a model (pinocchio
merges a joint's fixed links into one body); :func:`rigid_frames` lists the frames
rigidly attached below a frame.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
import pinocchio as pin

__all__ = [
    "EditedModel",
    "JointSpec",
    "add_inertias",
    "insert_chain",
    "link_inertia",
    "rigid_frames",
    "subtract_inertia",
]


@dataclass(frozen=True, eq=False)
class JointSpec:
    """A 1-DOF joint to insert.

    Attributes:
        name: Joint name (unique in the model).
        joint: Pinocchio joint model with one DOF (e.g. ``pin.JointModelRX()``).
        placement: Placement relative to the previous chain joint (the anchor for the first).
        inertia: Body inertia carried by the joint, in its frame.
        lower, upper: Position limits (rad or m); infinite when unlimited.
        velocity, effort: Velocity and effort limits; infinite when unknown.
        body_frame: Also add a BODY frame of this name at the joint (None: none).
    """

    name: str
    joint: pin.JointModel
    placement: pin.SE3
    inertia: pin.Inertia = field(default_factory=pin.Inertia.Zero)
    lower: float = -math.inf
    upper: float = math.inf
    velocity: float = math.inf
    effort: float = math.inf
    body_frame: str | None = None


@dataclass(frozen=True, eq=False)
class EditedModel:
    """Result of :func:`insert_chain`.

    Attributes:
        model: The new pinocchio model.
        joint_map: Original joint id -> new joint id.
        frame_map: Original frame id -> new frame id.
        chain_ids: New joint ids of the chain, in chain order.
        rest: Rest placement of every chain joint in the anchor's frame.
    """

    model: pin.Model
    joint_map: dict[int, int]
    frame_map: dict[int, int]
    chain_ids: tuple[int, ...]
    rest: tuple[pin.SE3, ...]


def add_inertias(*inertias: pin.Inertia) -> pin.Inertia:
    """Sum of spatial inertias expressed in one frame."""
    total = np.zeros(10)
    for inertia in inertias:
        total += inertia.toDynamicParameters()
    return pin.Inertia.FromDynamicParameters(total)


def subtract_inertia(a: pin.Inertia, b: pin.Inertia, *, what: str = "body") -> pin.Inertia:
    """``a - b`` for inertias in one frame (removing a part from a body).

    Dynamic parameters (mass, first and second moments) are linear, so the difference is
    exact; round-off below ``1e-9`` of ``a``'s largest parameter becomes exactly zero.

    Raises:
        ValueError: If the remainder has negative mass (``b`` is not part of ``a``).
    """
    pa, pb = a.toDynamicParameters(), b.toDynamicParameters()
    rest = pa - pb
    scale = max(np.abs(pa).max(), np.abs(pb).max(), 1e-300)
    rest[np.abs(rest) < 1e-9 * scale] = 0.0
    if rest[0] < 0:
        raise ValueError(f"{what}: removing {pb[0]:.6g} kg from a body of {pa[0]:.6g} kg")
    if rest[0] == 0:
        return pin.Inertia.Zero()
    return pin.Inertia.FromDynamicParameters(rest)


def rigid_frames(model: pin.Model, root_frame: int) -> list[int]:
    """``root_frame`` and every frame below it through the frame tree without crossing a
    joint: the frames that move rigidly with it. JOINT frames of child joints are
    excluded (the joint and what hangs from it move with the joint)."""
    children: dict[int, list[int]] = {}
    for fid in range(1, len(model.frames)):
        children.setdefault(int(model.frames[fid].parentFrame), []).append(fid)
    out = [root_frame]
    stack = [root_frame]
    while stack:
        for child in children.get(stack.pop(), []):
            f = model.frames[child]
            if f.type == pin.FrameType.JOINT or f.parentJoint != model.frames[root_frame].parentJoint:
                continue
            out.append(child)
            stack.append(child)
    return out


def link_inertia(model: pin.Model, body_frame: int) -> pin.Inertia:
    """The own inertia of the URDF link whose BODY frame is ``body_frame``, in the frame of
    the joint carrying it.

    Pinocchio's URDF parser merges a link with the links fixed to it into the body of
    their joint; the inertia of a link attached by a fixed joint is also stored on that
    ``FIXED_JOINT`` frame, and the root link's on its BODY frame. So the own inertia is
    that frame's inertia, or (for a link that is the child of a moving joint) the joint
    body minus every fixed link's inertia on the same joint.
    """
    f = model.frames[body_frame]
    parent = model.frames[int(f.parentFrame)]
    if parent.type == pin.FrameType.FIXED_JOINT and f.parentFrame != 0 and parent.parentJoint == f.parentJoint:
        return parent.placement.act(parent.inertia)
    if f.inertia.mass > 0 or f.parentJoint == 0:
        return f.placement.act(f.inertia)
    fixed = [
        g.placement.act(g.inertia)
        for g in model.frames
        if g.parentJoint == f.parentJoint and g.type == pin.FrameType.FIXED_JOINT and g.inertia.mass > 0
    ]
    return subtract_inertia(model.inertias[f.parentJoint], add_inertias(*fixed), what=f"link {f.name!r}") if fixed else model.inertias[f.parentJoint]


def _limits(model: pin.Model, jid: int) -> dict[str, np.ndarray]:
    jm = model.joints[jid]
    q = slice(jm.idx_q, jm.idx_q + jm.nq)
    v = slice(jm.idx_v, jm.idx_v + jm.nv)
    return {
        "min_effort": model.lowerEffortLimit[v],
        "max_effort": model.upperEffortLimit[v],
        "min_velocity": model.lowerVelocityLimit[v],
        "max_velocity": model.upperVelocityLimit[v],
        "min_config": model.lowerPositionLimit[q],
        "max_config": model.upperPositionLimit[q],
        "config_limit_margin": model.positionLimitMargin[q],
        "min_friction": model.lowerDryFrictionLimit[v],
        "max_friction": model.upperDryFrictionLimit[v],
        "damping": model.damping[v],
    }


def _spec_limits(spec: JointSpec) -> dict[str, np.ndarray]:
    def one(x: float) -> np.ndarray:
        return np.array([x if math.isfinite(x) else (np.finfo(float).max if x > 0 else -np.finfo(float).max)])

    # pinocchio stores "no limit" as the largest double, as its URDF parser does
    return {
        "min_effort": one(-spec.effort),
        "max_effort": one(spec.effort),
        "min_velocity": one(-spec.velocity),
        "max_velocity": one(spec.velocity),
        "min_config": one(spec.lower),
        "max_config": one(spec.upper),
        "config_limit_margin": np.zeros(1),
        "min_friction": np.zeros(1),
        "max_friction": np.zeros(1),
        "damping": np.zeros(1),
    }


def _add_joint(model: pin.Model, parent: int, jm: pin.JointModel, placement: pin.SE3, name: str, lim: dict) -> int:
    return model.addJoint(
        parent,
        jm,
        placement,
        name,
        lim["min_effort"],
        lim["max_effort"],
        lim["min_velocity"],
        lim["max_velocity"],
        lim["min_config"],
        lim["max_config"],
        lim["config_limit_margin"],
        lim["min_friction"],
        lim["max_friction"],
        lim["damping"],
    )


def insert_chain(
    model: pin.Model,
    anchor: int,
    chain: Sequence[JointSpec],
    *,
    anchor_inertia: pin.Inertia | None = None,
    frames: Collection[int] = (),
    joints: Collection[int] = (),
    assign: Callable[[pin.SE3], int | None] | None = None,
) -> EditedModel:
    """A copy of ``model`` with ``chain`` hung from joint ``anchor`` (see module docstring).

    Args:
        model: Original model (not modified).
        anchor: Joint the chain hangs from (0: the universe).
        chain: The new joints, each placed relative to the previous one.
        anchor_inertia: New body inertia of the anchor (default: unchanged).
        frames: Frame ids of the anchor to offer to ``assign``.
        joints: Child joint ids of the anchor to offer to ``assign``.
        assign: Placement in the anchor frame -> chain index, or None to stay.

    Raises:
        ValueError: For a multi-DOF chain joint, a duplicate name, or a listed frame or
            joint that is not attached to the anchor.
    """
    names = set(model.names) | {f.name for f in model.frames}
    for spec in chain:
        if spec.joint.nv != 1:
            raise ValueError(f"chain joint {spec.name!r} must have one DOF")
        if spec.name in names:
            raise ValueError(f"a joint or frame called {spec.name!r} exists already")
        names.add(spec.name)
    for fid in frames:
        if model.frames[fid].parentJoint != anchor:
            raise ValueError(f"frame {model.frames[fid].name!r} is not attached to joint {model.names[anchor]!r}")
    for jid in joints:
        if model.parents[jid] != anchor:
            raise ValueError(f"joint {model.names[jid]!r} is not a child of joint {model.names[anchor]!r}")
    moved_frames, moved_joints = set(frames), set(joints)

    rest: list[pin.SE3] = []
    X = pin.SE3.Identity()
    for spec in chain:
        X = X * spec.placement
        rest.append(X.copy())

    def where(placement: pin.SE3) -> tuple[int | None, pin.SE3]:
        i = assign(placement) if assign is not None else None
        if i is None:
            return None, placement
        if not 0 <= i < len(chain):
            raise ValueError(f"assign returned {i}, outside the chain of {len(chain)} joints")
        return i, rest[i].actInv(placement)

    new = pin.Model()
    new.name = model.name
    new.gravity = model.gravity
    joint_map = {0: 0}
    chain_ids: list[int] = []

    def add_chain() -> None:
        parent = joint_map[anchor]
        for spec in chain:
            jid = _add_joint(new, parent, spec.joint, spec.placement, spec.name, _spec_limits(spec))
            new.appendBodyToJoint(jid, spec.inertia, pin.SE3.Identity())
            chain_ids.append(jid)
            parent = jid

    if anchor == 0:
        new.inertias[0] = anchor_inertia if anchor_inertia is not None else model.inertias[0]
        add_chain()
    else:
        new.inertias[0] = model.inertias[0]
    for jid in range(1, model.njoints):
        parent_new = joint_map[model.parents[jid]]
        placement = model.jointPlacements[jid]
        if jid in moved_joints:
            i, placement = where(placement)
            if i is not None:
                parent_new = chain_ids[i]
        new_id = _add_joint(new, parent_new, model.joints[jid], placement, model.names[jid], _limits(model, jid))
        inertia = anchor_inertia if (jid == anchor and anchor_inertia is not None) else model.inertias[jid]
        new.appendBodyToJoint(new_id, inertia, pin.SE3.Identity())
        joint_map[jid] = new_id
        jm, jn = model.joints[jid], new.joints[new_id]
        for name in ("armature", "rotorInertia", "rotorGearRatio", "friction"):
            getattr(new, name)[jn.idx_v : jn.idx_v + jn.nv] = getattr(model, name)[jm.idx_v : jm.idx_v + jm.nv]
        if jid == anchor:
            add_chain()

    # frames: originals in order (frame 0 'universe' exists in a new model), the chain's
    # own frames right after the anchor's JOINT frame so parent frames always precede
    frame_map = {0: 0}
    chain_frame: list[int] = []
    anchor_frame = 0
    if anchor != 0:
        anchor_frame = next(
            (fid for fid, f in enumerate(model.frames) if f.type == pin.FrameType.JOINT and f.parentJoint == anchor), 0
        )

    def add_chain_frames() -> None:
        previous = frame_map[anchor_frame]
        for spec, jid in zip(chain, chain_ids):
            fid = new.addFrame(pin.Frame(spec.name, jid, previous, pin.SE3.Identity(), pin.FrameType.JOINT), False)
            if spec.body_frame:
                new.addFrame(pin.Frame(spec.body_frame, jid, fid, pin.SE3.Identity(), pin.FrameType.BODY), False)
            chain_frame.append(fid)
            previous = fid

    if anchor_frame == 0:
        add_chain_frames()
    for fid in range(1, len(model.frames)):
        f = model.frames[fid]
        parent_joint = joint_map[f.parentJoint]
        placement = f.placement
        parent_frame = frame_map.get(int(f.parentFrame), 0)
        if fid in moved_frames:
            i, placement = where(placement)
            if i is not None:
                parent_joint = chain_ids[i]
                if new.frames[parent_frame].parentJoint != parent_joint:
                    parent_frame = chain_frame[i]
        frame_map[fid] = new.addFrame(pin.Frame(f.name, parent_joint, parent_frame, placement, f.type, f.inertia), False)
        if fid == anchor_frame:
            add_chain_frames()
    return EditedModel(
        model=new,
        joint_map=joint_map,
        frame_map=frame_map,
        chain_ids=tuple(chain_ids),
        rest=tuple(rest),
    )
