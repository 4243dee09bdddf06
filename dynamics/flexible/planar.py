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
see :meth:`PlanarFlexibleModel.simulate`). The stiff axial modes
(tens of kHz) are damped by both, not resolved.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import casadi as ca
import numpy as np
import pinocchio as pin
import scipy.integrate
import scipy.linalg

from mbctl.config.simulation import Baumgarte
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.flexible.fem import FEMBeam
from mbctl.dynamics.model.edit import add_inertias, link_inertia, subtract_inertia
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation import ros2
from mbctl.dynamics.simulation.compiled_constraints import cholesky, cholesky_solve
from mbctl.errors import ConfigError, MbctlError

__all__ = ["FlexibleRun", "PlanarFlexibleModel", "PlanarFlexibleError", "rigid_limit"]

INTEGRATORS = ("radau", "ros2")

# ROS2 steps per call into C at most: enough to make the return to Python rare, few enough that the
# generated function compiles in seconds
_CHUNK_STEPS = 100


class PlanarFlexibleError(MbctlError):
    """The integration of the planar flexible model failed (the message says where)."""


@dataclass(frozen=True, eq=False)
class FlexibleRun:
    """A simulated run of a :class:`PlanarFlexibleModel` (one row per recorded sample).

    Attributes:
        t: Times (s), (N,).
        q, v, a: Generalized coordinates, velocities, accelerations (N, n).
        lam: Loop multipliers (N, m), N (``Q_c = -A^T lambda`` on the position rows ``p_A - p_B``).
        phi: Loop violation (N, m) (m).
        integrator: ``"radau"`` or ``"ros2"``.
        steps: Integrator steps (ros2; 0 for radau); evaluations: right-hand-side evaluations; jacobians: Jacobian evaluations.
        wall_s: Wall time of the integration (s), compile time excluded; compile_s: of the code generation.
    """

    t: np.ndarray
    q: np.ndarray
    v: np.ndarray
    a: np.ndarray
    lam: np.ndarray
    phi: np.ndarray
    integrator: str
    steps: int
    evaluations: int
    jacobians: int
    wall_s: float
    compile_s: float


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
        self.kkt = ca.Function(f"planar_{robot.name}_{self.n}_kkt", [q], [M, A], ["q"], ["M", "A"])
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
        name = f"planar_{robot.name}_{self.n}"
        n2, m = 2 * self.n, self.m
        self.rhs = ca.Function(f"{name}_rhs", [x, u], [out[:n2], out[n2 : n2 + m], out[n2 + m :]], ["x", "u"], ["xdot", "lam", "phi"])
        # the same with the force interpolated linearly over [t_a, t_b], the form the ROS2 steps take
        # the same with the force on a line over one step, u_step = [u_a, u_b, t_a, t_b]: the form
        # the ROS2 steps take (one such column per step)
        t, u_step = ca.SX.sym("t"), ca.SX.sym("u_step", 2 * self.n + 2)
        self.forced = ca.Function(f"{name}_forced", [t, x, u_step], [self.rhs(x, _interpolate(t, u_step, self.n))[0]], ["t", "x", "u_step"], ["xdot"])
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

    # ------------------------------------------------------------------ integration

    def simulate(
        self,
        x0: np.ndarray,
        t_out: np.ndarray,
        force: Callable[[float], np.ndarray] | np.ndarray | None = None,
        *,
        integrator: str = "radau",
        rtol: float = 1e-6,
        atol: float = 1e-9,
        step: float = 1e-4,
        compiled_steps: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> FlexibleRun:
        """Integrate from ``x0`` at ``t_out[0]``, recording at ``t_out`` (s).

        Args:
            force: ``t -> Q`` (n,): generalized force on the coordinates (N·m on the joints), or its
                samples at ``t_out`` (len(t_out), n), linear in between; default none. ``ros2``
                takes it at ``t_out`` and linear in between in any case.
            integrator: ``"radau"`` (adaptive, ``rtol``/``atol``, the Jacobian by forward differences)
                or ``"ros2"`` (fixed ``step``, :mod:`mbctl.dynamics.simulation.ros2` with its
                :class:`~mbctl.dynamics.simulation.ros2.StiffBlockUpdate`: ``J`` is the stiff block
                ``da/dq_s = -G K_s``, ``da/dv_s = -G D_s`` of the elastic coordinates and spring
                joints ``s`` at every step's state, ``G`` the coordinates' block of the KKT matrix's
                inverse; the rest of the Jacobian (joint columns, Baumgarte terms, velocity
                terms: eigenvalues far below ``1/step``) is left to the W-method, which keeps its
                order with any ``J``). The force is interpolated linearly between the output times
                (exact for torques sampled there).
            compiled_steps: ``ros2`` with equally spaced ``t_out``: the steps run in generated C,
                one call per output interval; otherwise the same arithmetic stepped in numpy.
            progress: Called with ``(done, total)`` steps (``ros2``) about 20 times per run.

        Raises:
            ConfigError: For an unknown integrator or a bad step.
            PlanarFlexibleError: If the integration fails or the state becomes non-finite.
        """
        if integrator not in INTEGRATORS:
            raise ConfigError(f"unknown integrator {integrator!r} (expected one of: {', '.join(INTEGRATORS)})", field="integrator")
        t_out = np.asarray(t_out, dtype=float)
        start = time.perf_counter()
        rhs = self.compiled("rhs")
        compile_s = time.perf_counter() - start
        counts = {"rhs": 0, "jac": 0}
        if force is None or callable(force):
            zero = np.zeros(self.n)

            def u(t: float) -> np.ndarray:
                return zero if force is None else force(t)

            forces = np.array([u(tk) for tk in t_out]).reshape(len(t_out), self.n)
        else:
            forces = np.asarray(force, dtype=float)
            if forces.shape != (len(t_out), self.n):
                raise ValueError(f"force samples of shape {forces.shape}, expected ({len(t_out)}, {self.n}): one row per output time")

            def u(t: float) -> np.ndarray:
                k = min(max(int(np.searchsorted(t_out, t, side="right")) - 1, 0), len(t_out) - 2)
                w = (t - t_out[k]) / (t_out[k + 1] - t_out[k])
                return forces[k] + w * (forces[k + 1] - forces[k])

        start = time.perf_counter()
        if integrator == "radau":
            jac = self.compiled("jac")
            compile_s += time.perf_counter() - start
            start = time.perf_counter()

            def f(t: float, x: np.ndarray) -> np.ndarray:
                counts["rhs"] += 1
                return rhs(x, u(t))[0].ravel()

            def J(t: float, x: np.ndarray) -> np.ndarray:
                counts["jac"] += 1
                counts["rhs"] += len(x) + 1
                return np.asarray(jac(x, u(t))[0])

            sol = scipy.integrate.solve_ivp(f, (t_out[0], t_out[-1]), x0, method="Radau", t_eval=t_out, jac=J, rtol=rtol, atol=atol)
            if not sol.success or sol.y.shape[1] != len(t_out):
                raise PlanarFlexibleError(f"Radau failed at t = {sol.t[-1]:.6g} s: {sol.message}")
            X, steps = sol.y.T, 0  # scipy does not report its accepted steps
        else:
            if not (math.isfinite(step) and step > 0):
                raise ConfigError(f"must be > 0, got {step!r}", field="step")
            X, steps, compile_s, wall = self._ros2(x0, t_out, forces, step, compiled_steps, progress, counts, compile_s)
        if integrator == "radau":
            wall = time.perf_counter() - start
        n, m = self.n, self.m
        A = np.empty((len(t_out), n))
        lam = np.empty((len(t_out), m))
        phi = np.empty((len(t_out), m))
        for k, xk in enumerate(X):
            xdot, lk, pk = rhs(xk, forces[k])
            A[k], lam[k], phi[k] = xdot.ravel()[n:], lk.ravel(), pk.ravel()
        return FlexibleRun(
            t=t_out,
            q=X[:, :n].copy(),
            v=X[:, n:].copy(),
            a=A,
            lam=lam,
            phi=phi,
            integrator=integrator,
            steps=steps,
            evaluations=counts["rhs"],
            jacobians=counts["jac"],
            wall_s=wall,
            compile_s=compile_s,
        )

    def _ros2(self, x0, t_out, forces, step, compiled_steps, progress, counts, compile_s) -> tuple[np.ndarray, int, float, float]:
        """ROS2 through :func:`mbctl.dynamics.simulation.ros2.integrate` with steps that land on every
        output time, ``forces`` (N x n) given there: ``(X, steps, compile_s, wall_s)``."""
        start = time.perf_counter()
        update = self._stiff_update()
        compile_s += time.perf_counter() - start
        rhs = self.compiled("rhs")
        spans = np.diff(t_out)
        uniform = len(spans) > 0 and np.allclose(spans, spans[0], rtol=1e-9, atol=0.0)
        counts_per_span = [max(1, math.ceil(span / step - 1e-9)) for span in (spans[:1] if uniform else spans)]

        def per_step(first: int, samples: int, count: int) -> np.ndarray:
            """``u_step`` columns of the ``count`` steps of each output interval ``first ... first + samples - 1``:
            the force on the line between the interval's samples, at each step's ends."""
            w0, w1 = np.arange(count) / count, np.arange(1, count + 1) / count
            Fa, Fb = forces[first : first + samples], forces[first + 1 : first + samples + 1]
            ta, tb = t_out[first : first + samples, None], t_out[first + 1 : first + samples + 1, None]

            def at(w):
                return (Fa[:, None, :] + w[None, :, None] * (Fb - Fa)[:, None, :]).reshape(samples * count, -1).T, (ta + w * (tb - ta)).reshape(1, -1)

            (ua, t0), (ub, t1) = at(w0), at(w1)
            return np.vstack([ua, ub, t0, t1])

        def f(t: float, x: np.ndarray, u_step: np.ndarray) -> np.ndarray:
            counts["rhs"] += 1
            return rhs(x, _interpolate(t, u_step, self.n))[0].ravel()

        records: list[np.ndarray] = []

        def record(t: float, x: np.ndarray) -> None:
            records.append(x)

        def check(t: float, X: np.ndarray) -> None:
            if not np.isfinite(X).all():
                raise PlanarFlexibleError(f"the state became non-finite by t = {t:.6g} s: try a smaller step")

        steps = 0
        if uniform:
            count = counts_per_span[0]
            n = count * len(spans)
            h = spans[0] / count
            # several samples per call into C (fewer returns to Python), at most _CHUNK_STEPS steps
            chunk = ros2.chunk_steps(n, count, n, _CHUNK_STEPS, several=True)
            outputs = max(1, chunk // count)
            advance = ros2.python_steps(f, update, outputs=outputs, per_step=(0,))
            if compiled_steps:
                start = time.perf_counter()
                key = f"ros2x{chunk}o{outputs}"
                if key not in self._compiled:
                    self._compiled[key] = ros2.ros2_stepper(self.forced, chunk, update, outputs=outputs, per_step=(0,))
                stepper = self._compiled[key]
                compile_s += time.perf_counter() - start

                def advance(t, x, h, taken, extra, inputs):
                    counts["rhs"] += 2 * taken
                    return stepper(t, x, h, *extra, *inputs)[0]

            def extra(ta: float, tb: float) -> tuple[np.ndarray]:
                first, offset = divmod(round((ta - t_out[0]) / h), count)
                if chunk < count:  # a part of one output interval
                    return (per_step(first, 1, count)[:, offset : offset + chunk],)
                return (per_step(first, chunk // count, count),)

            start = time.perf_counter()
            ros2.integrate(
                advance, update, x0, float(t_out[0]), h, n, chunk, every=count, refresh_every=n, record=record, check=check, extra=extra, progress=progress
            )
            steps = n
        else:
            start = time.perf_counter()
            records.append(np.array(x0, dtype=float))
            advance = ros2.python_steps(f, update, per_step=(0,))
            for k, count in enumerate(counts_per_span):
                X = advance(float(t_out[k]), records[-1], spans[k] / count, count, (per_step(k, 1, count),), ())
                check(float(t_out[k + 1]), X)
                records.append(X[:, -1])
                steps += count
                if progress is not None:
                    progress(k + 1, len(spans))
        return np.array(records), steps, compile_s, time.perf_counter() - start

    def _stiff_update(self) -> ros2.StiffBlockUpdate:
        """The ROS2 Jacobian of this model: its stiff block (built once)."""
        if self._update is None:
            self._update = ros2.StiffBlockUpdate(self.kkt, self.stiffness_matrix, self.damping_matrix, self.compiled("kkt"))
        return self._update


def _interpolate(t, u_step, n: int):
    """The force at ``t`` on the line from ``u_a`` at ``t_a`` to ``u_b`` at ``t_b``, ``u_step = [u_a, u_b,
    t_a, t_b]`` (numpy or CasADi)."""
    ua, ub, ta, tb = u_step[:n], u_step[n : 2 * n], u_step[2 * n], u_step[2 * n + 1]
    return ua + (ub - ua) * ((t - ta) / (tb - ta))
