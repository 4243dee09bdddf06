"""Model editing: rebuilt pinocchio models against the originals and hand-computed inertias."""

from __future__ import annotations

import numpy as np
import pinocchio as pin
import pytest

from mbctl.dynamics.model.edit import (
    JointSpec,
    insert_chain,
    link_inertia,
    rigid_frames,
    subtract_inertia,
)
from mbctl.dynamics.model.urdf import parse_urdf

# a fixed child link at the tip of l1 with its own mass, a root link with mass
URDF = """<?xml version="1.0"?><robot name="r">
<link name="base"><inertial><origin xyz="0 0 0.1"/><mass value="5"/><inertia ixx="0.1" ixy="0" ixz="0" iyy="0.2" iyz="0" izz="0.3"/></inertial></link>
<joint name="j1" type="revolute"><parent link="base"/><child link="l1"/><origin xyz="0 0 0.2"/><axis xyz="0 0 1"/><limit lower="-3" upper="3" velocity="2" effort="10"/></joint>
<link name="l1"><inertial><origin xyz="0.2 0 0"/><mass value="1"/><inertia ixx="0.01" ixy="0" ixz="0" iyy="0.02" iyz="0" izz="0.03"/></inertial></link>
<joint name="tipj" type="fixed"><parent link="l1"/><child link="tip"/><origin xyz="0.4 0 0"/></joint>
<link name="tip"><inertial><origin xyz="0 0 0.05"/><mass value="0.5"/><inertia ixx="0.001" ixy="0" ixz="0" iyy="0.002" iyz="0" izz="0.003"/></inertial></link>
<joint name="j2" type="prismatic"><parent link="tip"/><child link="l2"/><axis xyz="0 1 0"/><limit lower="-1" upper="1" velocity="2" effort="10"/></joint>
<link name="l2"><inertial><origin xyz="0.1 0 0"/><mass value="2"/><inertia ixx="0.04" ixy="0" ixz="0" iyy="0.05" iyz="0" izz="0.06"/></inertial></link>
<joint name="toolj" type="fixed"><parent link="l2"/><child link="tool"/><origin xyz="0.3 0 0"/></joint>
<link name="tool"/>
</robot>"""


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> pin.Model:
    path = tmp_path_factory.mktemp("edit") / "r.urdf"
    path.write_text(URDF)
    return parse_urdf(path)


def _random_state(model: pin.Model, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.uniform(-1, 1, model.nq), rng.uniform(-1, 1, model.nv), rng.uniform(-1, 1, model.nv)


@pytest.mark.parametrize("name", ["fourbar", "scara", "tree5", "parallelogram"])
def test_rebuilding_without_a_chain_reproduces_the_model(configs, name):
    """An empty chain gives the same mass matrix, RNEA and frame placements."""
    original = parse_urdf(configs / f"{name}.urdf")
    rebuilt = insert_chain(original, 1, []).model
    q, v, a = _random_state(original, 0)
    d1, d2 = original.createData(), rebuilt.createData()
    assert np.allclose(pin.crba(original, d1, q), pin.crba(rebuilt, d2, q), atol=1e-14)
    assert np.allclose(pin.rnea(original, d1, q, v, a), pin.rnea(rebuilt, d2, q, v, a), atol=1e-13)
    pin.framesForwardKinematics(original, d1, q)
    pin.framesForwardKinematics(rebuilt, d2, q)
    assert [f.name for f in original.frames] == [f.name for f in rebuilt.frames]
    for i in range(len(original.frames)):
        assert np.allclose(d1.oMf[i].homogeneous, d2.oMf[i].homogeneous, atol=1e-14)


def test_link_inertia_recovers_each_urdf_link(model):
    """Merged bodies split back into the URDF's own inertial blocks (joint-frame COM)."""
    tip = link_inertia(model, model.getFrameId("tip"))
    l1 = link_inertia(model, model.getFrameId("l1"))
    base = link_inertia(model, model.getFrameId("base"))
    assert tip.mass == pytest.approx(0.5) and np.allclose(tip.lever, [0.4, 0, 0.05])
    assert np.allclose(tip.inertia, np.diag([0.001, 0.002, 0.003]))
    assert l1.mass == pytest.approx(1.0) and np.allclose(l1.lever, [0.2, 0, 0])
    assert np.allclose(l1.inertia, np.diag([0.01, 0.02, 0.03]))
    assert base.mass == pytest.approx(5.0) and np.allclose(base.lever, [0, 0, 0.1])


def test_rigid_frames_stop_at_child_joints(model):
    """Frames of l1: its body, the fixed joint and the tip link; not j2 or l2."""
    names = [model.frames[i].name for i in rigid_frames(model, model.getFrameId("l1"))]
    assert sorted(names) == ["l1", "tip", "tipj"]


def test_subtract_inertia_refuses_more_mass_than_there_is():
    """Taking 2 kg from 1 kg is an error, not a silent negative mass."""
    with pytest.raises(ValueError, match="removing 2 kg from a body of 1 kg"):
        subtract_inertia(pin.Inertia.FromSphere(1.0, 0.1), pin.Inertia.FromSphere(2.0, 0.1))


def test_root_chain_carries_the_whole_robot(model):
    """Six massless joints before the root: at zero chain coordinates the original block of
    M is unchanged, frames stay put, and the translational block is the total mass."""
    joints = [pin.JointModelPX, pin.JointModelPY, pin.JointModelPZ, pin.JointModelRX, pin.JointModelRY, pin.JointModelRZ]
    chain = [JointSpec(f"c{i}", jm(), pin.SE3.Identity()) for i, jm in enumerate(joints)]
    chain[-1] = JointSpec("c5", pin.JointModelRZ(), pin.SE3.Identity(), model.inertias[0])
    frames = [i for i in range(1, len(model.frames)) if model.frames[i].parentJoint == 0]
    children = [j for j in range(1, model.njoints) if model.parents[j] == 0]
    new = insert_chain(model, 0, chain, anchor_inertia=pin.Inertia.Zero(), frames=frames, joints=children, assign=lambda _: 5).model
    assert new.nv == model.nv + 6 and [new.names[i] for i in range(1, 7)] == [f"c{i}" for i in range(6)]
    q, _, _ = _random_state(model, 1)
    qn = np.concatenate([np.zeros(6), q])
    M = pin.crba(new, new.createData(), qn)
    M = np.triu(M) + np.triu(M, 1).T
    assert np.allclose(M[6:, 6:], pin.crba(model, model.createData(), q), atol=1e-14)
    assert np.allclose(M[:3, :3], (5 + 1 + 0.5 + 2) * np.eye(3), atol=1e-13)
    d1, d2 = model.createData(), new.createData()
    pin.framesForwardKinematics(model, d1, q)
    pin.framesForwardKinematics(new, d2, qn)
    for f in model.frames:
        assert np.allclose(d1.oMf[model.getFrameId(f.name)].homogeneous, d2.oMf[new.getFrameId(f.name)].homogeneous, atol=1e-14)


def test_chain_inside_a_body_moves_what_it_carries(model):
    """A revolute joint hung from j1 at x = 0.3, taking the tip link, j2 and everything
    beyond: at zero it changes nothing; turned by 90 deg it swings them about its axis."""
    moved = [model.getFrameId("tipj"), model.getFrameId("tip")]
    tip_piece = model.frames[model.getFrameId("tipj")]
    piece = tip_piece.placement.act(tip_piece.inertia)
    rest = pin.SE3(np.eye(3), np.array([0.3, 0, 0]))
    body = subtract_inertia(model.inertias[1], piece)
    chain = [JointSpec("hinge", pin.JointModelRZ(), rest, rest.actInv(piece))]
    edited = insert_chain(
        model, 1, chain, anchor_inertia=body, frames=moved, joints=[model.getJointId("j2")], assign=lambda p: 0 if p.translation[0] > 0.3 else None
    )
    new = edited.model
    q, v, a = _random_state(model, 2)
    hinge = new.joints[edited.chain_ids[0]].idx_q
    qn = np.insert(q, hinge, 0.0)
    vn, an = np.insert(v, hinge, 0.0), np.insert(a, hinge, 0.0)
    keep = [i for i in range(new.nv) if i != hinge]
    assert np.allclose(pin.rnea(new, new.createData(), qn, vn, an)[keep], pin.rnea(model, model.createData(), q, v, a), atol=1e-13)
    d = new.createData()
    pin.framesForwardKinematics(new, d, np.insert(np.zeros(model.nq), hinge, np.pi / 2))
    # tool 0.4 m beyond the hinge at (0.3, 0, 0.2), swung by 90 deg about z
    assert np.allclose(d.oMf[new.getFrameId("tool")].translation, [0.3, 0.4, 0.2], atol=1e-14)
