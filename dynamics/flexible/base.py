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

import math
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.dynamics.model.edit import JointSpec, insert_chain
from mbctl.errors import ConfigError
from mbctl.tomlfields import Table

__all__ = ["BASE_JOINTS", "BaseSupport", "FlexibleBase", "add_flexible_base", "parse_base", "support_stiffness_matrix"]

BASE_JOINTS = ("base_x", "base_y", "base_z", "base_rx", "base_ry", "base_rz")
BASE_KEYS = ("support", "supports")
SUPPORT_KEYS = ("name", "position", "stiffness", "damping")


@dataclass(frozen=True, eq=False)
class BaseSupport:
    """The ``[base]`` table, parsed (SI units).

    Attributes:
        flexible: True for ``support = "flexible"``.
        names: Support point names.
        positions: (n, 3) support points in the base frame (m).
        stiffness: (n, 3) spring constants along x, y, z (N/m).
        damping: (n, 3) damper constants (N·s/m).
    """

    flexible: bool
    names: tuple[str, ...]
    positions: np.ndarray
    stiffness: np.ndarray
    damping: np.ndarray


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


def _triple(t: Table, key: str, default: float | None = None) -> np.ndarray:
    value = t.get(key, default)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        value = [value] * 3
    if not (isinstance(value, list) and len(value) == 3 and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value)):
        raise t.error(key, f"must be a number or 3 finite numbers (x, y, z), got {value!r}")
    out = np.array(value, dtype=float)
    if (out < 0).any():
        raise t.error(key, f"must be >= 0, got {value!r}")
    return out


def parse_base(t: Table) -> BaseSupport:
    """Parse the ``[base]`` table.

    Raises:
        ConfigError: Naming file and field.
    """
    t.only(BASE_KEYS)
    flexible = t.string("support", "rigid", choices=["rigid", "flexible"]) == "flexible"
    items = t.get("supports", [])
    if not isinstance(items, list) or not all(isinstance(x, dict) for x in items):
        raise t.error("supports", "must be an array of tables ([[base.supports]])")
    if flexible and not items:
        raise t.error("supports", "a flexible base needs at least one support point ([[base.supports]])")
    names, positions, stiffness, damping = [], [], [], []
    for i, item in enumerate(items):
        st = Table(item, t.file, f"{t.path('supports')}[{i}]")
        st.only(SUPPORT_KEYS)
        name = st.string("name", str(i + 1))
        if not name or not all(c.isalnum() or c == "_" for c in name):
            raise st.error("name", f"must be letters, digits or underscores, got {name!r}")
        if name in names:
            raise st.error("name", f"support {name!r} is listed twice")
        names.append(name)
        positions.append(st.vector("position", 3))
        stiffness.append(_triple(st, "stiffness"))
        damping.append(_triple(st, "damping", 0.0))
    return BaseSupport(
        flexible=flexible,
        names=tuple(names),
        positions=np.array(positions, dtype=float).reshape(-1, 3),
        stiffness=np.array(stiffness, dtype=float).reshape(-1, 3),
        damping=np.array(damping, dtype=float).reshape(-1, 3),
    )


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
