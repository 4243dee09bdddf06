"""Flexible base support (the flexible-manipulator study): six base DOF held by spring–damper elements.

```toml
[base]
support = "flexible"           # "rigid" (default): nothing is inserted
[[base.supports]]              # one table per support point, at least one
name = "front_left"            # optional (default "1", "2", ...): frame base_support_<name>
position = [0.15, 0.15, 0.0]   # m, in the base frame (the URDF root link's frame)
stiffness = [1.0e5, 1.0e5, 1.5e5]   # N/m along x, y, z (one number: the same on all three)
damping = [300.0, 300.0, 300.0]     # N*s/m (default 0)
```

``support = "flexible"`` inserts six unactuated joints between the world and the root
body, in this order: ``base_x``, ``base_y``, ``base_z`` (prismatic along the world axes,
m) and ``base_rx``, ``base_ry``, ``base_rz`` (revolute about the body's x, then y, then z
axes through the base frame's origin, rad): the base pose is
``T_b = Trans(x, y, z) * Rx(rx) * Ry(ry) * Rz(rz)``. The root body — the root link with
every link fixed to it, their frames and the joints attached to them — rides on
``base_rz``; at zero base coordinates everything is where the URDF puts it.

Each support point E gets an OP frame ``base_support_<name>`` on the base. Its springs
and dampers connect it to where it sits at rest, along the world axes:
``d = p_E(q) - p_E(0)``, force ``F = -S d - D d_dot`` (``S``, ``D`` diagonal), generalized
force ``J_E^T F`` with ``J_E`` the point's translational Jacobian. The deflection is
evaluated exactly through pinocchio's frame placements (no small-angle linearization).
The supports must hold the base in all six directions (their combined stiffness matrix
positive definite); the loader checks this.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.config.base import BaseSupport
from mbctl.dynamics.model.edit import JointSpec, insert_chain
from mbctl.errors import ConfigError

__all__ = ["BASE_JOINTS", "FlexibleBase", "add_flexible_base", "support_stiffness_matrix"]

BASE_JOINTS = ("base_x", "base_y", "base_z", "base_rx", "base_ry", "base_rz")


@dataclass(frozen=True)
class FlexibleBase:
    """A flexible base as built into a model.

    Attributes:
        support: Its parameters.
        joint_names: The six base joints (:data:`BASE_JOINTS`).
        frame_names: The support points' frames, one per support.
    """

    support: BaseSupport
    joint_names: tuple[str, ...]
    frame_names: tuple[str, ...]


def support_stiffness_matrix(support: BaseSupport) -> np.ndarray:
    """6x6 stiffness of the supports on the base coordinates at rest (N/m, N, N·m/rad):
    ``sum_E J_E^T S_E J_E`` with ``J_E = [I, -[r_E]x]`` for small rotations about the origin."""
    K = np.zeros((6, 6))
    for r, s in zip(support.positions, support.stiffness):
        skew = np.array([[0, -r[2], r[1]], [r[2], 0, -r[0]], [-r[1], r[0], 0]])
        J = np.hstack([np.eye(3), -skew])
        K += J.T @ np.diag(s) @ J
    return K


def add_flexible_base(model: pin.Model, support: BaseSupport, *, file=None, field: str = "base") -> tuple[pin.Model, FlexibleBase]:
    """A copy of ``model`` standing on the flexible support (see module docstring).

    Raises:
        ConfigError: If the supports do not hold the base in every direction, or a
            base joint or support frame name is taken.
    """
    K = support_stiffness_matrix(support)
    eig, vec = np.linalg.eigh(K)
    if eig[0] <= 1e-9 * max(eig[-1], 1e-300):
        free = vec[:, 0]
        direction = ", ".join(f"{n} {c:+.2f}" for n, c in zip(BASE_JOINTS, free) if abs(c) > 0.05)
        raise ConfigError(
            f"the supports do not hold the base in every direction (their stiffness matrix is singular; free motion: {direction}); "
            "add support points or stiffness",
            file=file,
            field=f"{field}.supports",
        )
    joints = [pin.JointModelPX, pin.JointModelPY, pin.JointModelPZ, pin.JointModelRX, pin.JointModelRY, pin.JointModelRZ]
    chain = [JointSpec(name, jm(), pin.SE3.Identity()) for name, jm in zip(BASE_JOINTS, joints)]
    # the root body: everything on joint 0 but the universe frame itself
    frames = [fid for fid in range(1, len(model.frames)) if model.frames[fid].parentJoint == 0]
    children = [jid for jid in range(1, model.njoints) if model.parents[jid] == 0]
    last = len(chain) - 1
    chain[last] = JointSpec(chain[last].name, chain[last].joint, chain[last].placement, model.inertias[0])
    try:
        edited = insert_chain(
            model, 0, chain, anchor_inertia=pin.Inertia.Zero(), frames=frames, joints=children, assign=lambda _: last
        )
    except ValueError as exc:
        raise ConfigError(str(exc), file=file, field=field) from None
    new = edited.model
    body = edited.chain_ids[last]
    frame_names = []
    for name, r in zip(support.names, support.positions):
        fname = f"base_support_{name}"
        if new.existFrame(fname):
            raise ConfigError(f"a frame called {fname!r} exists already", file=file, field=f"{field}.supports")
        parent_frame = new.getFrameId(BASE_JOINTS[-1], pin.FrameType.JOINT)
        new.addFrame(pin.Frame(fname, body, parent_frame, pin.SE3(np.eye(3), r), pin.FrameType.OP_FRAME), False)
        frame_names.append(fname)
    return new, FlexibleBase(support=support, joint_names=BASE_JOINTS, frame_names=tuple(frame_names))
