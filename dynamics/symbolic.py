"""CasADi mirror of a robot's rigid-body dynamics, kinematics and friction.

The PyPI wheel of pinocchio has no ``pinocchio.casadi``, so :class:`SymbolicDynamics`
rebuilds the model's dynamics as CasADi SX expressions from the same data
pinocchio uses (``model.parents``, ``model.jointPlacements``, ``model.inertias``,
``model.armature``, ``model.gravity``) and each DOF's kind and axis from
:class:`~mbctl.dynamics.model.robot.RobotModel`. The tests compare every function with
pinocchio to round-off.

Conventions (pinocchio's): spatial motion ``(v, w)`` and force ``(f, n)`` vectors,
linear part first, each expressed in the frame of the joint that carries the body.
Inputs are DOF coordinates: ``q`` has one entry per DOF (rad or m), so a continuous
joint takes its angle directly, not pinocchio's ``(cos, sin)`` pair.

Recursions (Featherstone), for joint ``i`` with parent ``p``, motion subspace ``S_i``
and ``X_i = placement_i * joint_motion_i(q_i)`` (child to parent)::

    v_i = X_i^-1 v_p + S_i dq_i                        (v_0 = 0)
    a_i = X_i^-1 a_p + S_i ddq_i + v_i x S_i dq_i      (a_0 = -gravity)
    f_i = I_i a_i + v_i x* I_i v_i,  f_p += X_i f_i    (children first)
    tau_i = S_i^T f_i + armature_i ddq_i               (RNEA)
    Ic_p += X_i Ic_i,  M_ij = S_j^T X_(j<-i) Ic_i S_i  (CRBA), M_ii += armature_i

``f_i`` after the backward pass is the wrench joint ``i`` transmits (pinocchio's
``data.f[i]``, joint frame), which feeds load-dependent friction symbolically.

To keep generated C small the expressions are built element by element: numeric
constants stay Python floats (so products with 0 and 1 vanish before CasADi sees
them), and a joint about a coordinate axis rotates only the two components normal
to it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cached_property
from typing import Any, Literal

import casadi as ca
import numpy as np

from mbctl.dynamics.friction.laws import LuGre, motion_direction
from mbctl.dynamics.model.robot import Joint, RobotModel
from mbctl.dynamics.symbolic_algebra import (
    JointMotion,
    Mat,
    Placement,
    Scalar,
    Vec,
    add,
    body_inertia,
    const,
    cross,
    dot,
    function_name,
    matmul,
    matvec,
    mul,
    scale,
    sx,
    vadd,
    vsub,
    zero,
)

__all__ = ["SymbolicDynamics", "body_inertia"]


class SymbolicDynamics:
    """CasADi functions of a robot's dynamics, kinematics and friction, built once.

    Args:
        robot: The robot model (fixed base, 1-DOF joints; any axis; armature kept).
        lugre: How LuGre joints enter :attr:`friction`: ``"dynamic"`` uses the
            bristle state input ``z``; ``"steady"`` uses the steady-state curve
            (Stribeck with ``delta = 2``) and ignores ``z``.
        bodies: Inertial parameters to use instead of the model's, one per joint in
            pinocchio order: ``(m, m c, I_O)`` (kg, kg·m, kg·m² about the joint frame's
            origin; :func:`body_inertia` gives them), floats or CasADi SX scalars. With
            symbols the functions below have free variables: build expressions with
            :meth:`mass_matrix_of`, :meth:`bias_of` and :meth:`joint_wrenches_of` instead
            (the compiled simulation core does, with the parameters as inputs).
        armature: Rotor inertias (kg·m² or kg) per joint, instead of the model's.
        friction: ``{idx_v: (law, load model)}`` replacing the joints' friction laws and load
            models (of the same kinds, e.g. with symbolic coefficients).

    Functions (CasADi ``Function``; ``q``, ``dq``, ``ddq``, ``z``, ``load`` are nv-vectors
    in pinocchio velocity order; SI units):

    - ``rnea(q, dq, ddq) -> tau``: ``M(q) ddq + h(q, dq)`` (N·m or N), gravity included.
    - ``mass_matrix(q) -> M`` (nv x nv), armature on the diagonal.
    - ``bias(q, dq) -> h``: Coriolis, centrifugal and gravity forces (pinocchio's nle).
    - ``gravity(q) -> g``.
    - ``joint_wrenches(q, dq, ddq) -> wrench`` (6 x nv): column ``k`` is the wrench the
      joint of DOF ``k`` transmits, in its joint frame, force (N) then moment (N·m).
    - ``normal_load(q, dq, ddq) -> load``: equivalent normal load of each joint with a
      load model (:mod:`mbctl.dynamics.friction.loads`); NaN for the other joints.
    - ``friction(dq, ddq, z, load) -> tau_f``: every joint's friction law; the sign at
      ``dq = 0`` follows ``ddq`` (:func:`~mbctl.dynamics.friction.laws.motion_direction`); ``load``
      is used by joints with a load model, ``z`` by LuGre joints (when dynamic).
    - ``inverse_dynamics(q, dq, ddq, z) -> (tau, tau_rigid, tau_friction, wrench, load)``:
      rigid torques plus friction, with load-dependent friction loaded by the
      reaction wrenches of the same RNEA pass.
    - per frame (methods): :meth:`frame_position` ``(q) -> p`` (3, world),
      :meth:`frame_rotation` ``(q) -> R`` (3x3, frame to world) and
      :meth:`frame_jacobian` ``(q) -> J`` (6 x nv, world-aligned axes at the frame
      origin, linear rows first: pinocchio's ``LOCAL_WORLD_ALIGNED``).
    """

    def __init__(
        self,
        robot: RobotModel,
        *,
        lugre: Literal["dynamic", "steady"] = "dynamic",
        bodies: Sequence[tuple[Scalar, Vec, Mat]] | None = None,
        armature: Sequence[Scalar] | None = None,
        friction: Mapping[int, tuple[Any, Any]] | None = None,
    ):
        if lugre not in ("dynamic", "steady"):
            raise ValueError(f"lugre must be 'dynamic' or 'steady', got {lugre!r}")
        self.robot = robot
        self.lugre = lugre
        model = robot.model
        self.nv = robot.nv
        by_id = {j.id: j for j in robot.joints}
        if sorted(by_id) != list(range(1, model.njoints)):
            raise ValueError("SymbolicDynamics needs every pinocchio joint to be one DOF of the RobotModel")
        self._joints = [by_id[i] for i in range(1, model.njoints)]
        self._parent = [int(model.parents[i]) for i in range(1, model.njoints)]  # pinocchio ids
        self._placement = [Placement(model.jointPlacements[i]) for i in range(1, model.njoints)]
        self._body = list(bodies) if bodies is not None else [body_inertia(model.inertias[i]) for i in range(1, model.njoints)]
        self._armature = list(armature) if armature is not None else [float(model.armature[j.idx_v]) for j in self._joints]
        if len(self._body) != len(self._joints) or len(self._armature) != len(self._joints):
            raise ValueError(f"SymbolicDynamics needs one body and one armature per joint ({len(self._joints)})")
        self._gravity = [const(x) for x in np.asarray(model.gravity.linear)]

        self.q = ca.SX.sym("q", self.nv)
        self.dq = ca.SX.sym("dq", self.nv)
        self.ddq = ca.SX.sym("ddq", self.nv)
        self.z = ca.SX.sym("z", self.nv)
        self.load = ca.SX.sym("load", self.nv)
        self._frames: dict[tuple[str, str], ca.Function] = {}
        self._laws = {j.idx_v: (j.friction.law, j.friction.load) for j in self._joints if j.friction is not None}
        self._laws.update(friction or {})

    # ---- recursions -------------------------------------------------------------

    def _motions(self, q: ca.SX) -> list[JointMotion]:
        return [JointMotion(j, q[j.idx_v]) for j in self._joints]

    def _rnea(self, q: ca.SX, dq: Sequence[Scalar], ddq: Sequence[Scalar], gravity: bool = True) -> tuple[list, list]:
        """Joint torques (nv Scalars, DOF order) and joint wrenches (per joint, 6 Scalars)."""
        X = self._motions(q)
        n = len(self._joints)
        v: list[tuple[Vec, Vec]] = []
        a: list[tuple[Vec, Vec]] = []
        f: list[tuple[Vec, Vec]] = []
        base_acc = ([-g for g in self._gravity] if gravity else zero(), zero())
        for i, joint in enumerate(self._joints):
            p = self._parent[i]
            vp = v[p - 1] if p > 0 else (zero(), zero())
            ap = a[p - 1] if p > 0 else base_acc
            vl, vw = X[i].motion_inv(*self._placement[i].motion_inv(*vp))
            al, aw = X[i].motion_inv(*self._placement[i].motion_inv(*ap))
            axis = X[i].axis
            qd, qdd = dq[joint.idx_v], ddq[joint.idx_v]
            if joint.kind == "revolute":
                vw = vadd(vw, scale(qd, axis))
                # v x (S qd) with S qd = (0, axis qd)
                al = vadd(al, scale(qd, cross(vl, axis)))
                aw = vadd(vadd(aw, scale(qdd, axis)), scale(qd, cross(vw, axis)))
            else:
                vl = vadd(vl, scale(qd, axis))
                al = vadd(vadd(al, scale(qdd, axis)), scale(qd, cross(vw, axis)))
            v.append((vl, vw))
            a.append((al, aw))
            m, h, Ibar = self._body[i]
            # I a: f = m a_lin - h x a_ang, n = Ibar a_ang + h x a_lin
            fl = vsub(scale(m, al), cross(h, aw))
            fn = vadd(matvec(Ibar, aw), cross(h, al))
            # v x* (I v): (w x f_v, w x n_v + v x f_v)
            Il = vsub(scale(m, vl), cross(h, vw))
            In = vadd(matvec(Ibar, vw), cross(h, vl))
            fl = vadd(fl, cross(vw, Il))
            fn = vadd(fn, vadd(cross(vw, In), cross(vl, Il)))
            f.append((fl, fn))
        tau: list[Scalar] = [0.0] * self.nv
        for i in range(n - 1, -1, -1):
            joint = self._joints[i]
            fl, fn = f[i]
            axis = X[i].axis
            t = dot(axis, fn if joint.kind == "revolute" else fl)
            tau[joint.idx_v] = add(t, mul(self._armature[i], ddq[joint.idx_v]))
            p = self._parent[i]
            if p > 0:
                up = self._placement[i].force(*X[i].force(fl, fn))
                f[p - 1] = (vadd(f[p - 1][0], up[0]), vadd(f[p - 1][1], up[1]))
        return tau, [fl + fn for fl, fn in f]

    def _crba(self, q: ca.SX) -> list[list[Scalar]]:
        X = self._motions(q)
        n = len(self._joints)
        composite = [(m, list(h), [list(r) for r in Ibar]) for m, h, Ibar in self._body]
        for i in range(n - 1, -1, -1):
            p = self._parent[i]
            if p > 0:
                m, h, Ibar = composite[i]
                h, Ibar = X[i].inertia(m, h, Ibar)
                h, Ibar = self._placement[i].inertia(m, h, Ibar)
                mp, hp, Ip = composite[p - 1]
                composite[p - 1] = (mp + m, vadd(hp, h), [vadd(Ip[r], Ibar[r]) for r in range(3)])
        M: list[list[Scalar]] = [[0.0] * self.nv for _ in range(self.nv)]
        for i in range(n):
            joint = self._joints[i]
            m, h, Ibar = composite[i]
            axis = X[i].axis
            # F = Ic S: revolute S = (0, a) -> (a x h, Ibar a); prismatic S = (a, 0) -> (m a, h x a)
            if joint.kind == "revolute":
                F = (cross(axis, h), matvec(Ibar, axis))
            else:
                F = (scale(m, axis), cross(h, axis))
            k = joint.idx_v
            M[k][k] = add(self._column_entry(joint, axis, F), self._armature[i])
            j = i
            while self._parent[j] > 0:
                F = self._placement[j].force(*X[j].force(*F))
                j = self._parent[j] - 1
                other = self._joints[j]
                M[other.idx_v][k] = M[k][other.idx_v] = self._column_entry(other, X[j].axis, F)
        return M

    @staticmethod
    def _column_entry(joint: Joint, axis: Vec, F: tuple[Vec, Vec]) -> Scalar:
        return dot(axis, F[1] if joint.kind == "revolute" else F[0])

    def _placements(self, q: ca.SX) -> list[tuple[Mat, Vec]]:
        """World rotation and position of every joint frame."""
        X = self._motions(q)
        out: list[tuple[Mat, Vec]] = []
        eye = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
        for i, joint in enumerate(self._joints):
            p = self._parent[i]
            Rp, pp = out[p - 1] if p > 0 else (eye, zero())
            P = self._placement[i]
            R = matmul(Rp, P.R)
            pos = vadd(pp, matvec(Rp, P.p))
            if joint.kind == "revolute":
                # rows of R R_J: R_J^T applied to each row of R
                R = [X[i].rotate(row, inverse=True) for row in R]
            else:
                pos = vadd(pos, matvec(R, X[i].offset))
            out.append((R, pos))
        return out

    # ---- friction ---------------------------------------------------------------

    def _friction(self, dq: ca.SX, ddq: ca.SX, z: ca.SX, load: Sequence[Scalar]) -> list[Scalar]:
        out: list[Scalar] = [0.0] * self.nv
        for j in self._joints:
            if j.idx_v not in self._laws:
                continue
            k = j.idx_v
            v = dq[k]
            law, model = self._laws[k]
            factor = load[k] if model is not None else 1.0
            if isinstance(law, LuGre) and self.lugre == "dynamic":
                out[k] = law.torque(v, z[k], factor)
            else:
                out[k] = law.steady(v, motion_direction(v, ddq[k]), factor)
        return out

    def _normal_load(self, wrenches: list) -> list[Scalar]:
        out: list[Scalar] = [float("nan")] * self.nv
        for i, j in enumerate(self._joints):
            model = self._laws.get(j.idx_v, (None, None))[1]
            if model is not None:
                out[j.idx_v] = model.normal_load(sx(wrenches[i]), j.axis, j.kind)
        return out

    def _wrench_matrix(self, wrenches: list) -> ca.SX:
        cols = [None] * self.nv
        for i, j in enumerate(self._joints):
            cols[j.idx_v] = sx(wrenches[i])
        return ca.horzcat(*cols)

    # ---- expressions (for callers that inline them, e.g. with symbolic parameters) --

    def mass_matrix_of(self, q: ca.SX) -> ca.SX:
        """``M(q)`` (nv x nv) as an SX expression of ``q``, armature on the diagonal."""
        return ca.vertcat(*[ca.horzcat(*[ca.SX(x) if isinstance(x, float) else x for x in row]) for row in self._crba(q)])

    def bias_of(self, q: ca.SX, dq: ca.SX) -> ca.SX:
        """``h(q, dq)``: Coriolis, centrifugal and gravity forces as an SX expression."""
        return sx(self._rnea(q, dq, [0.0] * self.nv)[0])

    def joint_wrenches_of(self, q: ca.SX, dq: ca.SX, ddq: ca.SX) -> ca.SX:
        """The joint wrenches (6 x nv, as :attr:`joint_wrenches`) as an SX expression."""
        return self._wrench_matrix(self._rnea(q, dq, ddq)[1])

    def gravity_of(self, q: ca.SX) -> ca.SX:
        """``g(q)`` as an SX expression."""
        return sx(self._rnea(q, [0.0] * self.nv, [0.0] * self.nv)[0])

    def friction_of(self, dq: ca.SX, ddq: ca.SX, z: ca.SX, load: ca.SX) -> ca.SX:
        """The friction torques (as :attr:`friction`) as an SX expression."""
        return sx(self._friction(dq, ddq, z, [load[k] for k in range(self.nv)]))

    def inverse_dynamics_of(self, q: ca.SX, dq: ca.SX, ddq: ca.SX, z: ca.SX) -> tuple[ca.SX, ca.SX, ca.SX, ca.SX, ca.SX]:
        """``(tau, tau_rigid, tau_friction, wrench, load)`` (as :attr:`inverse_dynamics`) as SX expressions."""
        rigid, w = self._rnea(q, dq, ddq)
        load = self._normal_load(w)
        tau_f = self._friction(dq, ddq, z, load)
        total = [add(r, f) for r, f in zip(rigid, tau_f)]
        return sx(total), sx(rigid), sx(tau_f), self._wrench_matrix(w), sx(load)

    # ---- public functions -------------------------------------------------------

    @cached_property
    def rnea(self) -> ca.Function:
        tau, _ = self._rnea(self.q, self.dq, self.ddq)
        return ca.Function("rnea", [self.q, self.dq, self.ddq], [sx(tau)], ["q", "dq", "ddq"], ["tau"])

    @cached_property
    def mass_matrix(self) -> ca.Function:
        return ca.Function("mass_matrix", [self.q], [self.mass_matrix_of(self.q)], ["q"], ["M"])

    @cached_property
    def bias(self) -> ca.Function:
        return ca.Function("bias", [self.q, self.dq], [self.bias_of(self.q, self.dq)], ["q", "dq"], ["h"])

    @cached_property
    def gravity(self) -> ca.Function:
        return ca.Function("gravity", [self.q], [self.gravity_of(self.q)], ["q"], ["g"])

    @cached_property
    def joint_wrenches(self) -> ca.Function:
        w = self.joint_wrenches_of(self.q, self.dq, self.ddq)
        return ca.Function("joint_wrenches", [self.q, self.dq, self.ddq], [w], ["q", "dq", "ddq"], ["wrench"])

    @cached_property
    def normal_load(self) -> ca.Function:
        _, w = self._rnea(self.q, self.dq, self.ddq)
        return ca.Function("normal_load", [self.q, self.dq, self.ddq], [sx(self._normal_load(w))], ["q", "dq", "ddq"], ["load"])

    @cached_property
    def friction(self) -> ca.Function:
        tau_f = self.friction_of(self.dq, self.ddq, self.z, self.load)
        return ca.Function("friction", [self.dq, self.ddq, self.z, self.load], [tau_f], ["dq", "ddq", "z", "load"], ["tau_f"])

    @cached_property
    def inverse_dynamics(self) -> ca.Function:
        return ca.Function(
            "inverse_dynamics",
            [self.q, self.dq, self.ddq, self.z],
            list(self.inverse_dynamics_of(self.q, self.dq, self.ddq, self.z)),
            ["q", "dq", "ddq", "z"],
            ["tau", "tau_rigid", "tau_friction", "wrench", "load"],
        )

    def _frame(self, name: str) -> tuple[int, Any]:
        model = self.robot.model
        if not model.existFrame(name):
            names = ", ".join(f.name for f in model.frames)
            raise KeyError(f"no frame {name!r} in robot {self.robot.name} (frames: {names})")
        frame = model.frames[model.getFrameId(name)]
        return int(frame.parentJoint), frame.placement

    def _frame_placement(self, name: str) -> tuple[Mat, Vec, list, int]:
        parent, placement = self._frame(name)
        joints = self._placements(self.q)
        if parent == 0:
            Rj, pj = [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]], zero()
        else:
            Rj, pj = joints[parent - 1]
        P = Placement(placement)
        return matmul(Rj, P.R), vadd(pj, matvec(Rj, P.p)), joints, parent

    def frame_position(self, name: str) -> ca.Function:
        """``p(q)``: position (m) of frame ``name`` in the world frame."""
        if ("position", name) not in self._frames:
            _, p, _, _ = self._frame_placement(name)
            self._frames["position", name] = ca.Function(function_name("position", name), [self.q], [sx(p)], ["q"], ["p"])
        return self._frames["position", name]

    def frame_rotation(self, name: str) -> ca.Function:
        """``R(q)``: rotation of frame ``name`` (frame coordinates to world coordinates)."""
        if ("rotation", name) not in self._frames:
            R, _, _, _ = self._frame_placement(name)
            rows = [ca.horzcat(*[ca.SX(x) if isinstance(x, float) else x for x in row]) for row in R]
            self._frames["rotation", name] = ca.Function(function_name("rotation", name), [self.q], [ca.vertcat(*rows)], ["q"], ["R"])
        return self._frames["rotation", name]

    def frame_jacobian(self, name: str) -> ca.Function:
        """``J(q)`` (6 x nv): ``(v, w) = J dq``, the velocity of frame ``name``'s origin and
        its angular velocity in world-aligned axes (m/s, rad/s), linear rows first."""
        if ("jacobian", name) not in self._frames:
            _, p, joints, parent = self._frame_placement(name)
            cols: list[list[Scalar]] = [[0.0] * 6 for _ in range(self.nv)]
            j = parent
            while j > 0:
                joint = self._joints[j - 1]
                R, pj = joints[j - 1]
                axis_world = matvec(R, [const(x) for x in joint.axis])
                if joint.kind == "revolute":
                    cols[joint.idx_v] = cross(axis_world, vsub(p, pj)) + axis_world
                else:
                    cols[joint.idx_v] = axis_world + zero()
                j = self._parent[j - 1]
            J = ca.horzcat(*[sx(c) for c in cols])
            self._frames["jacobian", name] = ca.Function(function_name("jacobian", name), [self.q], [J], ["q"], ["J"])
        return self._frames["jacobian", name]
