"""Planar mechanisms with floating-frame FEM levers: model, constrained dynamics, stiff integration.

A planar robot (every joint revolute about the world z axis, the mechanism moving in
the x-y plane, e.g. the 3-RRR) is described by its pinocchio spanning tree; some of its
links are flexible levers (:class:`~mbctl.dynamics.flexible.fem.FEMBeam`, clamped at
their joint). The generalized coordinates are

    q = [theta (the tree's joint angles, pinocchio velocity order), w_1, ..., w_k]

(rad, then each lever's elastic coordinates u, v in m and theta in rad), ``v = dq/dt``.

**Kinematics.** Body ``j`` has a frame origin ``r_j`` and angle ``phi_j``: a joint at
placement ``(a, theta_0)`` on its parent turns ``phi_j = phi_p + theta_0 + theta_j``,
``r_j = r_p + R(phi_p) a``. On a flexible parent the attachment point follows the deformed
lever: ``r_j = r_p + R(phi_p) ([a_x, a_y] + S(a_x) w_p)`` and the child turns with the
section there, ``phi_j = phi_p + v'(a_x) + theta_0 + theta_j`` (a joint at a lever's tip
sits on the tip section). Frames (loop cuts, the end-effector) attach the same way.

**Dynamics** by Lagrange's equations of ``L = T - V``:

- rigid bodies ``T = 1/2 m |r_c_dot|^2 + 1/2 I_zz phi_dot^2`` (mass, centre and central
  ``I_zz`` from pinocchio's bodies, i.e. the URDF);
- a flexible lever ``T = 1/2 ∫ mu |r_dot(x)|^2 dx + 1/2 rho I L phi_dot^2
  - 1/2 phi_dot^2 w^T K_G1 w`` with ``r(x) = r_O + R(phi) ([x, 0] + S(x) w)``, the integral
  by 4-point Gauss quadrature per element (exact for the cubic shape functions): this is
  the floating-frame consistent mass with its rigid–elastic coupling; the last term the
  optional geometric stiffness (:mod:`mbctl.dynamics.flexible.fem`). Its own URDF inertia
  is replaced by the beam's; any mass fixed to it (lumped) stays, attached to the
  lever where its centre is;
- ``V = 1/2 sum w^T K w`` plus in-plane gravity (and ``1/2 k theta^2`` of joint springs);
  dampers ``Q_d = -D w_dot`` (and ``-c theta_dot``).

So ``M(q) a + h(q, v) = Q``, ``M = d²T/dv²`` and ``h = d(M v)/dq v - dT/dq + dV/dq``
(the quadratic-velocity vector) by automatic differentiation in CasADi.

**Loops** closed at a planar revolute cut (``[[constraints]] kind = "loop"``, ``joint =
"revolute"``, ``plane = "xy"``) give the rows ``Phi = p_A - p_B`` (x, y) with the
deformed attachment points; ``A = dPhi/dq``, ``gamma = -d(A v)/dq v``. The accelerations
solve the Lagrange (KKT) system with Baumgarte's stabilization
``b = gamma - c1 A v - c0 Phi``::

    [M  A^T] [a     ]   [Q - h]
    [A  0  ] [lambda] = [b    ]        (Q_c = -A^T lambda, the repository's convention)

generated as one CasADi SX function, compiled to C: ``a0 = M^-1 (u + Q - h)`` by a
Cholesky factorization of ``M`` (its zeros skipped: three 11 x 11 blocks on the 3-RRR),
``lambda = (A M^-1 A^T)^-1 (A a0 - b)``, ``a = a0 - M^-1 A^T lambda``. Radau takes the state
Jacobian by forward differences (one generated function evaluating all 2n shifts).

**Integration**: ``"radau"`` (scipy's Radau IIA, adaptive, with that Jacobian) or
``"ros2"`` (the two-stage Rosenbrock-W method of :mod:`mbctl.dynamics.simulation.ros2`,
fixed step, its Jacobian the exact stiff block ``[[0, I], [-G K~, -G D~]]`` of the elastic
coordinates and spring joints at every step, :class:`~mbctl.dynamics.simulation.ros2.StiffBlockUpdate`;
:mod:`mbctl.dynamics.flexible.planar_run`, bound as :meth:`PlanarFlexibleModel.simulate`). The stiff axial modes
(tens of kHz) are damped by both, not resolved.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence

import casadi as ca
import numpy as np
import pinocchio as pin
import scipy.linalg

from mbctl.config.simulation import Baumgarte
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.flexible.fem import FEMBeam
from mbctl.dynamics.flexible.planar_run import FlexibleRun, PlanarFlexibleError, interpolate_force, simulate
from mbctl.dynamics.model.edit import add_inertias, link_inertia, subtract_inertia
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation import ros2
from mbctl.dynamics.simulation.compiled_constraints import cholesky, cholesky_solve
from mbctl.errors import ConfigError

__all__ = ["FlexibleRun", "PlanarFlexibleModel", "PlanarFlexibleError", "rigid_limit"]


def _rot(phi):
    c, s = ca.cos(phi), ca.sin(phi)
    return ca.vertcat(ca.horzcat(c, -s), ca.horzcat(s, c))


def _planar_placement(X: pin.SE3, what: str, source) -> tuple[np.ndarray, float]:
    R = X.rotation
    if abs(R[2, 2] - 1.0) > 1e-9:
        raise ConfigError(f"{what} is not a planar placement (its rotation is not about z)", file=source, field="urdf")
    return np.array(X.translation[:2]), math.atan2(R[1, 0], R[0, 0])


def _beam_inertia(beam: FEMBeam) -> pin.Inertia:
    """The lever as a rigid body in its joint's frame (the beam along x): mass ``mu L`` (kg),
    centre ``L/2`` (m), ``I_zz = mu L^3/12 + rho Iz L`` about the centre (kg·m²) and a thin
    bar's out-of-plane moments (``I_yy = I_zz``, ``I_xx = rho Iz L``; they only load the bearings)."""
    mass, L = beam.mu * beam.length, beam.length
    izz = mass * L**2 / 12 + beam.rotary_inertia
    return pin.Inertia(mass, np.array([L / 2, 0.0, 0.0]), np.diag([beam.rotary_inertia, izz, izz]))


def rigid_limit(robot: RobotModel, beams: Mapping[str, FEMBeam]) -> RobotModel:
    """The stiff limit of :class:`PlanarFlexibleModel` with these ``beams`` as a rigid robot: a
    copy of ``robot`` with each lever's own URDF inertia
    (:func:`~mbctl.dynamics.model.edit.link_inertia`) replaced by the beam's rigid one
    (:func:`_beam_inertia`); masses fixed to the lever's body stay, as the flexible model
    keeps them (``robot`` itself is not changed).

    Raises:
        ConfigError: For a lever that is not a link of the model, or whose own inertia is not
            part of its joint's body.
    """
    model = robot.model.copy()
    for link, beam in beams.items():
        fid = model.getFrameId(link, pin.FrameType.BODY)
        if fid >= len(model.frames):
            raise ConfigError(f"no link {link!r} in the URDF", file=robot.source, field=f"flexible.{link}")
        jid = int(model.frames[fid].parentJoint)
        try:
            rest = subtract_inertia(model.inertias[jid], link_inertia(model, fid), what=f"link {link!r}")
        except ValueError as exc:
            raise ConfigError(str(exc), file=robot.source, field=f"flexible.{link}") from None
        model.inertias[jid] = _beam_inertia(beam) if rest.mass == 0 else add_inertias(rest, _beam_inertia(beam))
    return dataclasses.replace(robot, model=model)


class PlanarFlexibleModel:
    """A planar robot with flexible FEM levers, built once (symbolic, then compiled C).

    Args:
        robot: The rigid spanning tree (all joints revolute about z).
        beams: Flexible links by URDF link name (each the body of a joint, the link's frame
            that joint's frame).
        loops: Loop closures (planar revolute, plane xy) cutting the tree.
        baumgarte: Stabilization of the loop rows (default: squared form, alpha = beta = 50 1/s).
        damping: False drops every damper (for energy checks).
        springs: Torsional spring–dampers on joints, ``name -> (k N·m/rad, c N·m·s/rad)``:
            ``Q = -k theta - c theta_dot`` (e.g. the bending joints of rigid finite elements).

    Raises:
        ConfigError: For a joint that is not revolute about z, a non-planar placement or
            loop, or a flexible link that is not the body of a joint.
    """

    def __init__(
        self,
        robot: RobotModel,
        beams: Mapping[str, FEMBeam],
        loops: Sequence[LoopClosure] = (),
        *,
        baumgarte: Baumgarte | None = None,
        damping: bool = True,
        springs: Mapping[str, tuple[float, float]] | None = None,
    ):
        self.robot = robot
        self.beams = dict(beams)
        self.loops = tuple(loops)
        self.baumgarte = baumgarte or Baumgarte("squared", 50.0, 50.0)
        model, source = robot.model, robot.source
        self.n_joints = robot.nv
        # elastic coordinate slices, in the order of the beams
        self.links = tuple(self.beams)
        self.elastic: dict[str, slice] = {}
        start = robot.nv
        body_of: dict[int, str] = {}
        for link in self.links:
            try:
                fid = model.getFrameId(link, pin.FrameType.BODY)
            except Exception:  # noqa: BLE001 - pinocchio raises a generic error for a missing name
                fid = len(model.frames)
            if fid >= len(model.frames):
                raise ConfigError(f"no link {link!r} in the URDF", file=source, field=f"flexible.{link}")
            f = model.frames[fid]
            if int(f.parentJoint) == 0 or not f.placement.isIdentity(1e-12):
                raise ConfigError(
                    f"link {link!r} must be the body of a joint with the joint's frame as its own (the lever is clamped there)",
                    file=source,
                    field=f"flexible.{link}",
                )
            body_of[int(f.parentJoint)] = link
            self.elastic[link] = slice(start, start + self.beams[link].n)
            start += self.beams[link].n
        self.n = start
        self._body_of = body_of
        self._fid = {link: model.getFrameId(link, pin.FrameType.BODY) for link in self.links}
        for j in robot.joints:
            short = model.joints[j.id].shortname()
            if short not in ("JointModelRZ", "JointModelRUBZ"):
                raise ConfigError(f"joint {j.name!r} ({short}) is not revolute about z: the FEM model is planar", file=source, field="urdf")
        for c in self.loops:
            if any(spec[0] != "pos" or spec[1] > 1 for spec in c.row_spec):
                raise ConfigError(
                    f'loop {c.name!r}: the planar FEM model closes planar revolute loops (joint = "revolute", plane = "xy")',
                    file=source,
                    field="constraints",
                )
        self.row_names = tuple(r for c in self.loops for r in c.rows)
        self.m = len(self.row_names)
        self._damping = damping
        self.springs = {robot.joint(name).idx_v: (float(k), float(c)) for name, (k, c) in (springs or {}).items()}
        self._build()
        self._compiled: dict[str, CompiledFunction] = {}
        self._update: ros2.StiffBlockUpdate | None = None

    # ------------------------------------------------------------------ symbolic model

    def _attach(self, parent: int, local: np.ndarray, poses: dict, q: ca.SX) -> tuple[ca.SX, ca.SX]:
        """World position and angle of a point fixed at ``local`` (x, y) in joint ``parent``'s frame."""
        r, phi = poses[parent]
        link = self._body_of.get(parent)
        if link is None:
            return r + _rot(phi) @ ca.DM(local), phi
        beam = self.beams[link]
        w = q[self.elastic[link]]
        s = float(local[0])
        disp = ca.DM(beam.shape_at(s)) @ w
        return r + _rot(phi) @ (ca.DM(local) + disp), phi + ca.dot(ca.DM(beam.slope_at(s)), w)

    def _build(self) -> None:
        robot, model = self.robot, self.robot.model
        q, v = ca.SX.sym("q", self.n), ca.SX.sym("v", self.n)
        poses: dict[int, tuple] = {0: (ca.SX.zeros(2, 1), ca.SX(0.0))}
        idx = {j.id: j.idx_v for j in robot.joints}
        for jid in range(1, model.njoints):
            a, theta0 = _planar_placement(model.jointPlacements[jid], f"joint {model.names[jid]!r}", robot.source)
            r, phi = self._attach(int(model.parents[jid]), a, poses, q)
            poses[jid] = (r, phi + theta0 + q[idx[jid]])
        self._poses = poses

        def velocity(x: ca.SX) -> ca.SX:
            return ca.jtimes(x, q, v)

        g = np.asarray(model.gravity.linear[:2], dtype=float)
        T, V = ca.SX(0.0), ca.SX(0.0)
        for jid in range(1, model.njoints):
            inertia = model.inertias[jid]
            r, phi = poses[jid]
            link = self._body_of.get(jid)
            omega = velocity(phi)
            if link is not None:
                beam = self.beams[link]
                w = q[self.elastic[link]]
                R = _rot(phi)
                for xk, wk, Sk in zip(beam.x_points, beam.weights, beam.S_points):
                    rk = r + R @ (ca.DM([xk, 0.0]) + ca.DM(Sk) @ w)
                    vk = velocity(rk)
                    T += 0.5 * wk * ca.dot(vk, vk)
                    V -= wk * ca.dot(ca.DM(g), rk)
                T += 0.5 * beam.rotary_inertia * omega**2
                if beam.geometric_stiffness:
                    T -= 0.5 * omega**2 * ca.dot(w, ca.DM(beam.K_G1) @ w)
                V += 0.5 * ca.dot(w, ca.DM(beam.K) @ w)
                try:
                    inertia = subtract_inertia(inertia, link_inertia(model, self._fid[link]), what=f"link {link!r}")
                except ValueError as exc:
                    raise ConfigError(str(exc), file=robot.source, field=f"flexible.{link}") from None
                if inertia.mass <= 0:
                    continue
                rc, phic = self._attach(jid, np.array(inertia.lever[:2]), poses, q)
            else:
                if inertia.mass <= 0:
                    continue
                rc, phic = r + _rot(phi) @ ca.DM(np.array(inertia.lever[:2])), phi
            vc = velocity(rc)
            T += 0.5 * inertia.mass * ca.dot(vc, vc) + 0.5 * float(inertia.inertia[2, 2]) * velocity(phic) ** 2
            V -= inertia.mass * ca.dot(ca.DM(g), rc)
        Qd = ca.SX.zeros(self.n, 1)
        if self._damping:
            for link in self.links:
                sl = self.elastic[link]
                Qd[sl] = -ca.DM(self.beams[link].D) @ v[sl]
        for i, (k, c) in self.springs.items():
            V += 0.5 * k * q[i] ** 2
            if self._damping:
                Qd[i] -= c * v[i]
        p = ca.gradient(T, v)
        M = ca.jacobian(p, v)
        h = ca.jtimes(p, q, v) - ca.gradient(T, q) + ca.gradient(V, q)
        rows = []
        model_frames = model.frames
        for c in self.loops:
            pts = []
            for fid in (c.fid_a, c.fid_b):
                f = model_frames[fid]
                local, _ = _planar_placement(f.placement, f"frame {f.name!r}", robot.source)
                pts.append(self._attach(int(f.parentJoint), local, poses, q)[0])
            rows.append(pts[0] - pts[1])
        Phi = ca.vertcat(*rows) if rows else ca.SX(0, 1)
        A = ca.jacobian(Phi, q) if rows else ca.SX(0, self.n)
        dPhi = A @ v
        gamma = -ca.jtimes(dPhi, q, v) if rows else ca.SX(0, 1)
        c1, c0 = self.baumgarte.coefficients
        b = gamma - c1 * dPhi - c0 * Phi
        # the stiff coordinates (elastic ones, spring joints) with their constant stiffness and
        # damping: the Jacobian block ROS2 keeps fresh (see :meth:`simulate`)
        stiff, K_s, D_s = [], [], []
        for link in self.links:
            sl, beam = self.elastic[link], self.beams[link]
            stiff += list(range(sl.start, sl.stop))
            K_s.append(beam.K)
            D_s.append(beam.D if self._damping else np.zeros_like(beam.D))
        for i, (k, c) in sorted(self.springs.items()):
            stiff.append(i)
            K_s.append(np.array([[k]]))
            D_s.append(np.array([[c if self._damping else 0.0]]))
        self._stiff = np.array(stiff, dtype=int)
        block = np.ix_(self._stiff, self._stiff)
        self.stiffness_matrix, self.damping_matrix = np.zeros((self.n, self.n)), np.zeros((self.n, self.n))
        if stiff:
            self.stiffness_matrix[block], self.damping_matrix[block] = scipy.linalg.block_diag(*K_s), scipy.linalg.block_diag(*D_s)
        self.kkt = ca.Function(f"planar_{robot.ident}_{self.n}_kkt", [q], [M, A], ["q"], ["M", "A"])
        self._sx = {"q": q, "v": v, "h": h}
        self.terms = ca.Function("planar_terms", [q, v], [M, h, Qd, Phi, A, b, T, V], ["q", "v"], ["M", "h", "Qd", "Phi", "A", "b", "T", "V"])
        # the right-hand side: the KKT system by a Cholesky factorization of M (its zeros, three
        # 11 x 11 blocks on the 3-RRR, skipped in the generated code) and the m x m Schur complement:
        # a0 = M^-1 (u + Q - h), lambda = (A M^-1 A^T)^-1 (A a0 - b), a = a0 - M^-1 A^T lambda
        x, u = ca.SX.sym("x", 2 * self.n), ca.SX.sym("u", self.n)
        qx, vx = x[: self.n], x[self.n :]
        Mx, hx, Qx, Phix, Ax, bx, _, _ = self.terms(qx, vx)
        X = cholesky_solve(cholesky(Mx), ca.horzcat(u + Qx - hx, Ax.T))
        a0, MinvAt = X[:, 0], X[:, 1:]
        lam = ca.solve(Ax @ MinvAt, Ax @ a0 - bx) if self.m else ca.SX(0, 1)
        a = a0 - MinvAt @ lam if self.m else a0
        out = ca.cse(ca.vertcat(vx, a, lam, Phix))
        name = f"planar_{robot.ident}_{self.n}"
        n2, m = 2 * self.n, self.m
        self.rhs = ca.Function(f"{name}_rhs", [x, u], [out[:n2], out[n2 : n2 + m], out[n2 + m :]], ["x", "u"], ["xdot", "lam", "phi"])
        # the same with the force interpolated linearly over [t_a, t_b], the form the ROS2 steps take
        # the same with the force on a line over one step, u_step = [u_a, u_b, t_a, t_b]: the form
        # the ROS2 steps take (one such column per step)
        t, u_step = ca.SX.sym("t"), ca.SX.sym("u_step", 2 * self.n + 2)
        self.forced = ca.Function(f"{name}_forced", [t, x, u_step], [self.rhs(x, interpolate_force(t, u_step, self.n))[0]], ["t", "x", "u_step"], ["xdot"])
        # forward-difference Jacobian df/dx, all 2n + 1 evaluations in one generated function
        # (the exact one, generated through the KKT solve, takes minutes of C compilation)
        xj, uj = ca.MX.sym("x", 2 * self.n), ca.MX.sym("u", self.n)
        steps = 1.5e-8 * ca.fmax(1.0, ca.fabs(xj))
        shifted = ca.repmat(xj, 1, 2 * self.n) + ca.diag(steps)
        f0 = self.rhs(xj, uj)[0]
        fs = self.rhs.map(2 * self.n)(shifted, ca.repmat(uj, 1, 2 * self.n))[0]
        self.jac = ca.Function(f"{name}_jac", [xj, uj], [(fs - ca.repmat(f0, 1, 2 * self.n)) / ca.repmat(steps.T, 2 * self.n, 1)], ["x", "u"], ["J"])
        self.energy = ca.Function(f"{name}_energy", [q, v], [T, V], ["q", "v"], ["T", "V"])

    # ------------------------------------------------------------------ numeric helpers

    def compiled(self, which: str) -> CompiledFunction:
        """``"rhs"`` (``(x, u) -> (xdot, lam, phi)``), ``"jac"`` (``(x, u) -> df/dx`` by forward
        differences), ``"kkt"`` (``q -> (M, A)``) or ``"energy"`` (``(q, v) -> (T, V)``) as
        compiled C (cached on disk)."""
        if which not in self._compiled:
            self._compiled[which] = compile_function(getattr(self, which))
        return self._compiled[which]

    def point(self, frame: str) -> ca.Function:
        """``q -> p`` (2,): world x-y position of a frame (m) on the deformed mechanism."""
        model = self.robot.model
        fid = model.getFrameId(frame)
        if fid >= len(model.frames):
            raise ConfigError(f"no frame {frame!r}", file=self.robot.source)
        f = model.frames[fid]
        local, _ = _planar_placement(f.placement, f"frame {frame!r}", self.robot.source)
        p = self._attach(int(f.parentJoint), local, self._poses, self._sx["q"])[0]
        return ca.Function(f"point_{frame}", [self._sx["q"]], [p])

    def body_angle(self, joint: str) -> ca.Function:
        """``q -> phi`` (rad): absolute angle of the frame of ``joint``'s body (a lever's root section)."""
        jid = self.robot.joint(joint).id
        return ca.Function(f"angle_{joint}", [self._sx["q"]], [self._poses[jid][1]])

    def lever_kinematics(self, joints: Sequence[str], frames: Sequence[str] = ()) -> ca.Function:
        """``(q, v, a) -> (p, phi, omega, alpha)``: world x-y positions of ``frames`` (2k, m) and,
        for the body of every joint in ``joints``, its frame angle (rad), angular velocity
        (rad/s) and acceleration (rad/s², ``J a + d(J v)/dq v``)."""
        q, v = self._sx["q"], self._sx["v"]
        a = ca.SX.sym("a", self.n)
        phi = ca.vertcat(*[self._poses[self.robot.joint(j).id][1] for j in joints])
        omega = ca.jtimes(phi, q, v)
        alpha = ca.jtimes(phi, q, a) + ca.jtimes(omega, q, v)
        pts = [self.point(f)(q) for f in frames]
        p = ca.vertcat(*pts) if pts else ca.SX(0, 1)
        return ca.Function("lever_kinematics", [q, v, a], [p, phi, omega, alpha], ["q", "v", "a"], ["p", "phi", "omega", "alpha"])

    def locked_frequencies(self, q0: np.ndarray, locked: Sequence[str], count: int = 4) -> np.ndarray:
        """Lowest ``count`` natural frequencies (Hz) of the mechanism linearized at rest at ``q0``
        (n,), with the joints ``locked`` held (e.g. every drive), the loops closed, undamped:
        ``Z^T K Z x = omega^2 Z^T M Z x`` on the null space ``Z`` of the loop rows and the locks,
        ``K = dh/dq`` at ``v = 0``."""
        q, v = self._sx["q"], self._sx["v"]
        K = ca.Function("stiffness", [q, v], [ca.jacobian(self._sx["h"], q)])(q0, np.zeros(self.n)).full()
        M, _, _, _, A, _, _, _ = (np.asarray(x) for x in self.terms(q0, np.zeros(self.n)))
        rows = [A] if self.m else []
        for name in locked:
            e = np.zeros((1, self.n))
            e[0, self.robot.joint(name).idx_v] = 1.0
            rows.append(e)
        C = np.vstack(rows) if rows else np.zeros((0, self.n))
        Z = scipy.linalg.null_space(C) if len(C) else np.eye(self.n)
        w2 = scipy.linalg.eigh(Z.T @ K @ Z, Z.T @ M @ Z, eigvals_only=True)
        return np.sqrt(np.maximum(np.sort(w2), 0.0))[:count] / (2 * math.pi)

    def state(self, theta: np.ndarray, dtheta: np.ndarray | None = None) -> np.ndarray:
        """``x = [q, v]`` with the joint angles ``theta`` (rad), their rates (rad/s) and the levers undeformed at rest."""
        x = np.zeros(2 * self.n)
        x[: self.n_joints] = theta
        if dtheta is not None:
            x[self.n : self.n + self.n_joints] = dtheta
        return x

    def stiff_update(self) -> ros2.StiffBlockUpdate:
        """The ROS2 Jacobian of this model: its stiff block (built once)."""
        if self._update is None:
            self._update = ros2.StiffBlockUpdate(self.kkt, self.stiffness_matrix, self.damping_matrix, self.compiled("kkt"))
        return self._update

    def ros2_stepper(self, chunk: int, outputs: int) -> CompiledFunction:
        """``chunk`` ROS2 steps of :attr:`forced` in generated C recording ``outputs`` states (built once per shape)."""
        key = f"ros2x{chunk}o{outputs}"
        if key not in self._compiled:
            self._compiled[key] = ros2.ros2_stepper(self.forced, chunk, self.stiff_update(), outputs=outputs, per_step=(0,))
        return self._compiled[key]

    simulate = simulate  # planar_run.simulate(model, ...) as a method
