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

generated as one CasADi function (QR solve), compiled to C; stiff integrators take its
state Jacobian by forward differences (one generated function evaluating all 2n shifts).

**Integration**: ``"radau"`` (scipy's Radau IIA, adaptive, with that Jacobian) or
``"ros2"`` (the two-stage Rosenbrock-W method of :mod:`mbctl.dynamics.simulation.integrate`,
fixed step, the Jacobian by forward differences every ``jacobian_interval`` and its stiff
block — the columns of the elastic coordinates, ``-P(q) [K, D]`` — updated every
``stiff_interval``, see :meth:`PlanarFlexibleModel.simulate`). The stiff axial modes
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
import scipy.linalg.lapack

from mbctl.config.simulation import Baumgarte
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.flexible.fem import FEMBeam
from mbctl.dynamics.model.edit import add_inertias, link_inertia, subtract_inertia
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError, MbctlError

__all__ = ["FlexibleRun", "PlanarFlexibleModel", "PlanarFlexibleError", "rigid_limit"]

INTEGRATORS = ("radau", "ros2")


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
        # damping: the Jacobian columns that must stay fresh (see :meth:`simulate`)
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
        self._K_s = scipy.linalg.block_diag(*K_s) if K_s else np.zeros((0, 0))
        self._D_s = scipy.linalg.block_diag(*D_s) if D_s else np.zeros((0, 0))
        self.kkt = ca.Function(f"planar_{robot.name}_{self.n}_kkt", [q], [M, A], ["q"], ["M", "A"])
        self._sx = {"q": q, "v": v, "h": h}
        self.terms = ca.Function("planar_terms", [q, v], [M, h, Qd, Phi, A, b, T, V], ["q", "v"], ["M", "h", "Qd", "Phi", "A", "b", "T", "V"])
        # the right-hand side and its Jacobian: KKT solve in MX (QR, generated as C)
        qm, vm, um = ca.MX.sym("q", self.n), ca.MX.sym("v", self.n), ca.MX.sym("u", self.n)
        Mm, hm, Qm, Phim, Am, bm, _, _ = self.terms(qm, vm)
        m = self.m
        K = ca.vertcat(ca.horzcat(Mm, Am.T), ca.horzcat(Am, ca.MX.zeros(m, m)))
        z = ca.solve(K, ca.vertcat(um + Qm - hm, bm), "qr")
        x = ca.vertcat(qm, vm)
        xdot = ca.vertcat(vm, z[: self.n])
        name = f"planar_{robot.name}_{self.n}"
        self.rhs = ca.Function(f"{name}_rhs", [x, um], [xdot, z[self.n :], Phim], ["x", "u"], ["xdot", "lam", "phi"])
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
        force: Callable[[float], np.ndarray] | None = None,
        *,
        integrator: str = "radau",
        rtol: float = 1e-6,
        atol: float = 1e-9,
        step: float = 1e-4,
        jacobian_interval: float = 1e-2,
        stiff_interval: float = 1e-4,
        compiled_steps: bool = True,
        progress: Callable[[int, int], None] | None = None,
    ) -> FlexibleRun:
        """Integrate from ``x0`` at ``t_out[0]``, recording at ``t_out`` (s).

        Args:
            force: ``t -> Q`` (n,): generalized force on the coordinates (N·m on the joints); default none.
            integrator: ``"radau"`` (adaptive, ``rtol``/``atol``) or ``"ros2"`` (fixed ``step``,
                the Jacobian by forward differences every ``jacobian_interval`` s).
            stiff_interval: ``ros2``: between two forward-difference Jacobians its stiff block is
                updated every ``stiff_interval`` s (0: never), exactly where it is stiff: the
                accelerations' columns of the elastic coordinates and spring joints ``s`` are
                ``da/dq_s = -P K_s + ...`` and ``da/dv_s = -P D_s + ...`` with ``P`` the
                (coordinates x ``s``) block of the KKT matrix's inverse, so the update adds
                ``-(P(q) - P(q_J)) [K_s, D_s]`` to the Jacobian taken at ``q_J`` (one
                ``M, A`` evaluation and a KKT inverse, against 2n + 1 right-hand sides for
                the whole Jacobian). The W-method (ROS2) keeps its order with any Jacobian, but
                its error constant grows with the stale part of the stiff block: on the
                3-RRR this update makes 5e-5 s steps as accurate as 5e-6 s steps without it.
                With ``compiled_steps`` the updates happen at output times. With the update the
                rest of the Jacobian may be older: on the 3-RRR a 10 ms ``jacobian_interval``
                (the default; 2 ms before the update existed) was as accurate as 2 ms.
            compiled_steps: ``ros2`` with equally spaced ``t_out``: the steps between two output
                times run as one generated C function (the force interpolated linearly between
                the output times: exact for torques sampled there); otherwise Python steps.

        Raises:
            ConfigError: For an unknown integrator or a bad step.
            PlanarFlexibleError: If the integration fails or the state becomes non-finite.
        """
        if integrator not in INTEGRATORS:
            raise ConfigError(f"unknown integrator {integrator!r} (expected one of: {', '.join(INTEGRATORS)})", field="integrator")
        t_out = np.asarray(t_out, dtype=float)
        if not (math.isfinite(stiff_interval) and stiff_interval >= 0):
            raise ConfigError(f"must be >= 0, got {stiff_interval!r}", field="stiff_interval")
        start = time.perf_counter()
        rhs, jac = self.compiled("rhs"), self.compiled("jac")
        kkt = self.compiled("kkt") if stiff_interval > 0 and len(self._stiff) else None
        compile_s = time.perf_counter() - start
        zero = np.zeros(self.n)
        counts = {"rhs": 0, "jac": 0}

        def f(t: float, x: np.ndarray) -> np.ndarray:
            counts["rhs"] += 1
            return rhs(x, zero if force is None else force(t))[0].ravel()

        def J(t: float, x: np.ndarray) -> np.ndarray:
            counts["jac"] += 1
            counts["rhs"] += len(x) + 1
            return np.asarray(jac(x, zero if force is None else force(t))[0])

        start = time.perf_counter()
        if integrator == "radau":
            sol = scipy.integrate.solve_ivp(f, (t_out[0], t_out[-1]), x0, method="Radau", t_eval=t_out, jac=J, rtol=rtol, atol=atol)
            if not sol.success or sol.y.shape[1] != len(t_out):
                raise PlanarFlexibleError(f"Radau failed at t = {sol.t[-1]:.6g} s: {sol.message}")
            X, steps = sol.y.T, 0  # scipy does not report its accepted steps
        else:
            if not (math.isfinite(step) and step > 0):
                raise ConfigError(f"must be > 0, got {step!r}", field="step")
            spans = np.diff(t_out)
            if compiled_steps and len(spans) and np.allclose(spans, spans[0], rtol=1e-9, atol=0.0):
                count = max(1, math.ceil(spans[0] / step - 1e-9))
                chunk_start = time.perf_counter()
                chunk = self._ros2_chunk(count)
                compile_s += time.perf_counter() - chunk_start
                start = time.perf_counter()
                tracker = _StiffJacobian(self, J, kkt, jacobian_interval, stiff_interval, counts)
                X, steps = self._ros2_compiled(chunk, count, tracker, force, x0, t_out, progress, counts)
            else:
                tracker = _StiffJacobian(self, J, kkt, jacobian_interval, stiff_interval, counts)
                X, steps = self._ros2(f, tracker, x0, t_out, step, progress)
        wall = time.perf_counter() - start
        n, m = self.n, self.m
        A = np.empty((len(t_out), n))
        lam = np.empty((len(t_out), m))
        phi = np.empty((len(t_out), m))
        for k, (tk, xk) in enumerate(zip(t_out, X)):
            xdot, lk, pk = rhs(xk, zero if force is None else force(tk))
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

    def _ros2_chunk(self, count: int) -> CompiledFunction:
        """``(x0, u0, u1, h, S_inv, J_q) -> x``: ``count`` ROS2 steps of length ``h`` in C, the
        force going linearly from ``u0`` to ``u1``; the stages solve ``(I - gamma h J) k = r`` by
        the blocks of :func:`_s_inverse` (``S_inv``, ``J_q`` from the caller): ``k_v = S_inv (r_v
        + gamma h J_q r_q)``, ``k_q = r_q + gamma h k_v``, half the operations of a full inverse."""
        key = f"ros2s{count}"
        if key not in self._compiled:
            n2, n = 2 * self.n, self.n
            x0, u0, u1 = ca.MX.sym("x0", n2), ca.MX.sym("u0", n), ca.MX.sym("u1", n)
            h, Si, Jq = ca.MX.sym("h"), ca.MX.sym("S_inv", n, n), ca.MX.sym("J_q", n, n)
            gh = (1.0 + 1.0 / math.sqrt(2.0)) * h

            def solve(r):
                kv = Si @ (r[n:] + gh * (Jq @ r[:n]))
                return ca.vertcat(r[:n] + gh * kv, kv)

            x = x0
            for i in range(count):
                ua = u0 + (u1 - u0) * (i / count)
                ub = u0 + (u1 - u0) * ((i + 1) / count)
                k1 = solve(self.rhs(x, ua)[0])
                k2 = solve(self.rhs(x + h * k1, ub)[0] - 2.0 * k1)
                x = x + h * (1.5 * k1 + 0.5 * k2)
            fn = ca.Function(f"{self.rhs.name()}_{key}", [x0, u0, u1, h, Si, Jq], [x], ["x0", "u0", "u1", "h", "S_inv", "J_q"], ["x"])
            self._compiled[key] = compile_function(fn)
        return self._compiled[key]

    def _ros2_compiled(self, chunk, count, tracker: _StiffJacobian, force, x0, t_out, progress, counts) -> tuple[np.ndarray, int]:
        """ROS2 with the steps between output times in C (:meth:`_ros2_chunk`)."""
        gamma = 1.0 + 1.0 / math.sqrt(2.0)
        zero = np.zeros(self.n)
        x = np.array(x0, dtype=float)
        out = np.empty((len(t_out), len(x)))
        out[0] = x
        h = (t_out[1] - t_out[0]) / count
        Si = Jq = None
        u_prev = zero if force is None else force(t_out[0])
        for k in range(1, len(t_out)):
            t = t_out[k - 1]
            if tracker.update(t, x) or Si is None:
                Si, Jq = _s_inverse(tracker.J, gamma * h)
            u_next = zero if force is None else force(t_out[k])
            x = np.array(chunk(x, u_prev, u_next, h, Si, Jq)[0]).ravel()
            counts["rhs"] += 2 * count
            u_prev = u_next
            if not np.isfinite(x).all():
                raise PlanarFlexibleError(f"the state became non-finite at t = {t_out[k]:.6g} s: try a smaller step")
            out[k] = x
            if progress is not None:
                progress(k, len(t_out) - 1)
        return out, count * (len(t_out) - 1)

    @staticmethod
    def _ros2(f, tracker: _StiffJacobian, x0, t_out, step, progress) -> tuple[np.ndarray, int]:
        """Two-stage Rosenbrock-W (ROS2, gamma = 1 + 1/sqrt 2) with fixed steps that land on every output time."""
        gamma = 1.0 + 1.0 / math.sqrt(2.0)
        x = np.array(x0, dtype=float)
        out = np.empty((len(t_out), len(x)))
        out[0] = x
        t = float(t_out[0])
        lu, h_lu = None, math.nan
        steps = 0
        eye = np.eye(len(x))
        for k in range(1, len(t_out)):
            span = t_out[k] - t_out[k - 1]
            count = max(1, math.ceil(span / step - 1e-9))
            h = span / count
            for _ in range(count):
                if tracker.update(t, x) or lu is None or h != h_lu:
                    lu, h_lu = scipy.linalg.lu_factor(eye - gamma * h * tracker.J), h
                f0 = f(t, x)
                k1 = scipy.linalg.lu_solve(lu, f0)
                k2 = scipy.linalg.lu_solve(lu, f(t + h, x + h * k1) - 2.0 * k1)
                x = x + h * (1.5 * k1 + 0.5 * k2)
                t += h
                steps += 1
            if not np.isfinite(x).all():
                raise PlanarFlexibleError(f"the state became non-finite at t = {t:.6g} s: try a smaller step")
            out[k] = x
            if progress is not None:
                progress(k, len(t_out) - 1)
        return out, steps


def _s_inverse(J: np.ndarray, gh: float) -> tuple[np.ndarray, np.ndarray]:
    """``(S^-1, J_q)`` with ``S = I - gh J_v - gh^2 J_q`` (n x n) for ``J = [[0, I], [J_q, J_v]]``
    (first-order form of second-order equations; the top row of ``J`` is taken as exactly
    ``[0, I]``, which a W-method allows): ``(I - gh J) k = r`` is then solved by
    ``k_v = S^-1 (r_v + gh J_q r_q)``, ``k_q = r_q + gh k_v``, an n x n inverse instead of 2n x 2n."""
    n = J.shape[0] // 2
    Jq, Jv = J[n:, :n], J[n:, n:]
    lu, piv, info = scipy.linalg.lapack.dgetrf(np.eye(n) - gh * Jv - gh * gh * Jq)
    Si, info2 = scipy.linalg.lapack.dgetri(lu, piv) if info == 0 else (None, info)
    if info or info2:
        raise PlanarFlexibleError("singular iteration matrix I - gamma h J: try a smaller step")
    return Si, np.ascontiguousarray(Jq)


class _StiffJacobian:
    """The Jacobian a ROS2 run steps with: by forward differences every ``full`` s, its stiff
    block updated every ``stiff`` s in between (see :meth:`PlanarFlexibleModel.simulate`)."""

    def __init__(self, model: PlanarFlexibleModel, fd, kkt, full: float, stiff: float, counts: dict):
        self.model, self.fd, self.kkt, self.full, self.stiff, self.counts = model, fd, kkt, full, stiff, counts
        self.J: np.ndarray | None = None
        self.t_full = self.t_stiff = -math.inf

    def _P(self, q: np.ndarray) -> np.ndarray:
        """``P`` (n x s): the stiff coordinates' columns of the KKT matrix's inverse, first n rows."""
        pm = self.model
        if not hasattr(self, "_K"):
            self._K = np.zeros((pm.n + pm.m, pm.n + pm.m), order="F")
            self._E = np.zeros((pm.n + pm.m, len(pm._stiff)), order="F")
            self._E[pm._stiff, np.arange(len(pm._stiff))] = 1.0
        M, A = self.kkt(q)
        K = self._K
        K[: pm.n, : pm.n], K[: pm.n, pm.n :], K[pm.n :, : pm.n] = M, A.T, A
        # LAPACK directly: numpy's solve costs as much again in checks and copies at this size
        _, _, P, info = scipy.linalg.lapack.dgesv(K, self._E)
        if info != 0:
            raise PlanarFlexibleError(f"singular KKT matrix in the Jacobian update (LAPACK info {info})")
        return P[: pm.n]

    def update(self, t: float, x: np.ndarray) -> bool:
        """Refresh what is due at ``t`` (s) and state ``x``; True if :attr:`J` changed."""
        pm = self.model
        if self.J is None or t - self.t_full >= self.full - 1e-12:
            self.base = self.fd(t, x)
            self.J = self.base.copy()
            self.t_full = self.t_stiff = t
            if self.kkt is not None:
                self.P0 = self._P(x[: pm.n])
            return True
        if self.kkt is None or not self.stiff or t - self.t_stiff < self.stiff - 1e-12:
            return False
        dP = self._P(x[: pm.n]) - self.P0
        n, s = pm.n, pm._stiff
        self.J[n:, s] = self.base[n:, s] - dP @ pm._K_s
        self.J[n:, n + s] = self.base[n:, n + s] - dP @ pm._D_s
        self.t_stiff = t
        return True
