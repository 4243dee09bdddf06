"""Rigid-model drive torques fed forward, open loop, into a planar mechanism with flexible FEM levers.

The experiment of the 3-RRR study with flexible levers (``configs/rrr3_flexible.toml``):

1. the config's constraints (loops plus the programmed end-effector path) fix the motion
   of the *rigid* mechanism (:func:`mbctl.ctrl.constrained_path.trajectory_from_constraints`),
   sampled at ``rate``; the FEM levers are rigid there with the beam's own mass
   distribution (mass ``mu L``, centre ``L/2``, ``I_zz = mu L^3/12 + rho I L``) plus any
   mass fixed to them, so the rigid model is the flexible one's stiff limit
   (:func:`mbctl.dynamics.flexible.planar.rigid_limit`);
2. rigid inverse dynamics and the torque distribution of :mod:`mbctl.ctrl.redundancy`
   give the drive torques in every mode asked for;
3. each torque history (linearly interpolated between samples) drives the flexible
   model (:class:`~mbctl.dynamics.flexible.planar.PlanarFlexibleModel`) from the rigid
   start at rest, open loop, with a stiff integrator;
4. what a user compares: end-effector error against the rigid path, each lever's frame
   angle error, angular velocity and acceleration, and the tip deformation (axial,
   transverse, elastic angle) of the flexible levers.

The cross-check rebuilds the flexible levers as rigid finite elements
(:meth:`mbctl.config.flexible.FEMSpec.as_rfe`, :func:`rfe_planar_model`), feeds the same
torques with the same integrator and compares tip deflections and end-effector errors. Out-of-plane gravity is left
out of both (the planar beam has no out-of-plane DOF; the levers' weight only loads the
bearings).
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import pinocchio as pin

from mbctl.config.flexible import FEMSpec
from mbctl.config.robot import RobotSpec
from mbctl.ctrl.closed_chain import closed_chain_feedforward
from mbctl.ctrl.constrained_path import trajectory_from_constraints
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.trajectory import Trajectory, _sample_times
from mbctl.dynamics.constraints.loops import LoopClosure
from mbctl.dynamics.flexible.fem import beam_from_spec
from mbctl.dynamics.flexible.planar import FlexibleRun, PlanarFlexibleModel, rigid_limit
from mbctl.dynamics.forces import ForceElement
from mbctl.dynamics.model.robot import RobotModel, build_robot, robot_from_pinocchio
from mbctl.dynamics.simulation.pilot import RunTimeEstimate, calibrated_run_time
from mbctl.dynamics.simulation.setup import build_dynamics, constraint_set, initial_state, simulation_setup
from mbctl.errors import ConfigError

__all__ = [
    "ROS2_EVALUATIONS_PER_STEP",
    "STUDY_MODES",
    "FlexFeedResult",
    "ModeRun",
    "RFECheck",
    "SampledTorques",
    "estimate_flexible_runs",
    "flexible_feedforward",
    "flexible_setup",
    "rfe_planar_model",
    "summary_table",
]

STUDY_MODES = ("non-redundant", "min-internal-force", "min-power")
Progress = Callable[[str], None]


class SampledTorques(ForceElement):
    """Drive torques given at sample times, linearly interpolated, as a force element (N·m)."""

    def __init__(self, nv: int, columns: Sequence[int], t: np.ndarray, tau: np.ndarray):
        self.nv, self.columns, self.t, self.tau = nv, np.asarray(columns, dtype=int), np.asarray(t), np.asarray(tau)

    def generalized(self, t: float) -> np.ndarray:
        """``Q(t)`` (nv,): the interpolated torques on their coordinates, zero elsewhere (held
        at the end values outside the samples, as ``np.interp``)."""
        Q = np.zeros(self.nv)
        n = len(self.t)
        # one search for all drives: the integrators call this at every sample
        k = min(max(int(np.searchsorted(self.t, t, side="right")) - 1, 0), max(n - 2, 0))
        if n == 1:
            Q[self.columns] = self.tau[0]
            return Q
        w = min(max((t - self.t[k]) / (self.t[k + 1] - self.t[k]), 0.0), 1.0)
        Q[self.columns] = self.tau[k] + w * (self.tau[k + 1] - self.tau[k])
        return Q

    def __call__(self, t, q, dq, s):
        return self.generalized(t), np.zeros(0)


@dataclass(frozen=True, eq=False)
class ModeRun:
    """One distribution mode fed forward into the flexible model (N samples, SI units).

    Attributes:
        mode: The distribution mode.
        tau: Drive torques (N, na), N·m.
        p: End-effector position (N, 2), m; error: ``p - p_rigid`` (N, 2), m.
        angle_error: Frame angle minus the rigid one, per lever (N, 6), rad.
        omega, alpha: Levers' angular velocity (rad/s) and acceleration (rad/s²) (N, 6).
        tip: Tip deformation of each flexible lever (N, k, 3): axial (m), transverse (m), elastic angle (rad).
        run: The integration record.
    """

    mode: str
    tau: np.ndarray
    p: np.ndarray
    error: np.ndarray
    angle_error: np.ndarray
    omega: np.ndarray
    alpha: np.ndarray
    tip: np.ndarray
    run: FlexibleRun


@dataclass(frozen=True, eq=False)
class RFECheck:
    """The same torques fed into the levers as rigid finite elements.

    Attributes:
        mode: The mode compared; elements: RFE segments per lever; nv: DOF of the RFE model.
        tip: Tip deformation (N, k, 3) as in :class:`ModeRun`; error: end-effector error (N, 2), m.
        wall_s: Wall time of the RFE run (s).
    """

    mode: str
    elements: int
    nv: int
    tip: np.ndarray
    error: np.ndarray
    wall_s: float


@dataclass(frozen=True, eq=False)
class FlexFeedResult:
    """Outcome of :func:`flexible_feedforward`.

    Attributes:
        name: Robot name; links: the flexible levers; lever_joints: joints whose bodies are the levers.
        t: Sample times (s); reference: the rigid motion; p_rigid: its end-effector path (N, 2), m.
        runs: Per mode.
        frequencies: Lowest natural frequencies (Hz) of the flexible mechanism at the start, drives locked.
        stiff_error: Largest end-effector error (m) of the stiff-limit run (E x ``stiff_factor``), or NaN.
        stiff_factor: The factor.
        rfe: The RFE cross-check, or None.
        integrator, step: Integration settings of the FEM runs (``step`` in s).
        rigid_s: Wall time of the rigid part (inverse kinematics, inverse dynamics, distribution), s.
    """

    name: str
    links: tuple[str, ...]
    lever_joints: tuple[str, ...]
    t: np.ndarray
    reference: Trajectory
    p_rigid: np.ndarray
    runs: dict[str, ModeRun]
    frequencies: np.ndarray
    stiff_error: float
    stiff_factor: float
    rfe: RFECheck | None
    integrator: str
    step: float
    rigid_s: float


def _fem_specs(spec: RobotSpec) -> tuple[FEMSpec, ...]:
    fem = tuple(f for f in spec.flexible if isinstance(f, FEMSpec))
    if not fem:
        raise ConfigError('no [flexible.<link>] table with method = "fem"', file=spec.source, field="flexible")
    return fem


def flexible_setup(spec: RobotSpec, *, E_factor: float = 1.0, damping: bool = True) -> tuple[RobotModel, PlanarFlexibleModel, list[LoopClosure]]:
    """The rigid robot (the flexible model's stiff limit,
    :func:`~mbctl.dynamics.flexible.planar.rigid_limit`), the planar flexible model and the loops of ``spec``.

    ``E_factor`` scales every lever's Young's modulus (stiff-limit checks).

    Raises:
        ConfigError: Without FEM levers, or for a model the planar FEM cannot take.
    """
    fem = _fem_specs(spec)
    beams = {f.link: beam_from_spec(f, E=f.E * E_factor) for f in fem}
    tree = build_robot(spec, rigid_links=True)
    robot = rigid_limit(tree, beams)
    loops = [c for c in constraint_set(robot) if isinstance(c, LoopClosure)]
    return robot, PlanarFlexibleModel(tree, beams, loops, damping=damping), loops


def _lever_joints(robot: RobotModel) -> tuple[str, ...]:
    return tuple(j.name for j in sorted(robot.joints, key=lambda j: j.idx_v))


def _observe(pm: PlanarFlexibleModel, run: FlexibleRun, joints, frame: str):
    # all samples in one call of the mapped function (a Python loop over samples cost ~0.1 s a run)
    fn = pm.lever_kinematics(joints, [frame]).map(len(run.t))
    p, phi, om, al = (np.asarray(o).T for o in fn(run.q.T, run.v.T, run.a.T))
    tip = np.stack([run.q[:, pm.elastic[link]][:, -3:] for link in pm.links], axis=1)
    return p, phi, om, al, tip


def flexible_feedforward(
    spec: RobotSpec,
    *,
    modes: Sequence[str] = STUDY_MODES,
    duration: float | None = None,
    rate: float = 10000.0,
    integrator: str = "ros2",
    step: float = 1e-4,
    rtol: float = 1e-6,
    atol: float = 1e-9,
    frame: str | None = None,
    stiff_factor: float = 1e4,
    stiff_check: bool = True,
    rfe_elements: int | None = 8,
    rfe_mode: str = "min-internal-force",
    compiled_steps: bool = True,
    progress: Progress | None = None,
) -> FlexFeedResult:
    """Run the experiment on a config with FEM levers, loops, a programmed path and ``[actuation]``.

    Args:
        spec: The robot description.
        modes: Distribution modes fed forward.
        duration: Of the motion (s); default ``[simulation] duration``.
        rate: Sampling rate of the rigid motion and torques (Hz); also the recording rate. The
            torques are interpolated linearly between samples: at 1 kHz that alone moves the
            stiff-limit end effector by ~4 µm over the spiral, at 10 kHz by ~0.1 µm.
        integrator, step, rtol, atol: ``"ros2"`` (fixed ``step``) or ``"radau"`` (tolerances).
        frame: End-effector frame (default: the frame of the programmed path).
        stiff_factor, stiff_check: Also run ``rfe_mode`` with every modulus times ``stiff_factor``.
        rfe_elements: RFE segments per lever for the cross-check (None: no cross-check).
        compiled_steps: ROS2 steps between samples in generated C (else stepped from Python,
            which needs no compilation per step count).
        progress: Called with a line of text at every stage.

    Raises:
        ConfigError: For a config the experiment cannot use.
    """
    say = progress or (lambda text: None)
    robot, pm, loops = flexible_setup(spec)
    setup = simulation_setup(robot)
    duration = setup.duration if duration is None else duration
    if not (duration and duration > 0 and rate > 0):
        raise ConfigError("the experiment needs a duration > 0 ([simulation] duration)", file=spec.source, field="simulation.duration")
    start = time.perf_counter()
    dynamics = build_dynamics(robot, setup)
    if frame is None:
        frames = [getattr(c, "frame", None) for c in dynamics.constraints if c.programmed]
        frame = next((f for f in frames if isinstance(f, str)), None)
        if frame is None:
            raise ConfigError("no programmed frame path to take the end-effector from", file=spec.source, field="constraints")
    q0, _ = initial_state(robot, setup, dynamics)
    t = _sample_times(duration, rate)
    say(f"rigid motion: {len(t)} samples over {duration:g} s")
    traj = trajectory_from_constraints(dynamics, t, q0)
    ff = feedforward(robot, traj)
    torques = closed_chain_feedforward(ff, modes[0], compare=True)
    missing = [m for m in modes if m not in torques.modes]
    if missing:
        raise ConfigError(f"mode {missing[0]} is not available: {torques.infeasible.get(missing[0], 'see [actuation]')}", file=spec.source, field="actuation")
    rigid_s = time.perf_counter() - start
    joints = _lever_joints(robot)
    drives = torques.chosen.joints
    columns = [robot.joint(n).idx_v for n in drives]
    x_rigid = np.zeros((len(t), 2 * pm.n))
    x_rigid[:, : robot.nv] = traj.q
    kin = pm.lever_kinematics(joints, [frame]).map(len(t))
    p_rigid, phi_rigid = (np.asarray(o).T for o in kin(x_rigid[:, : pm.n].T, x_rigid[:, pm.n :].T, np.zeros((pm.n, len(t))))[:2])
    x0 = pm.state(traj.q[0], traj.dq[0])
    frequencies = pm.locked_frequencies(x0[: pm.n], drives)

    def drive(tau: np.ndarray) -> np.ndarray:
        """The generalized force at the samples (the model takes it linear in between)."""
        Q = np.zeros((len(t), pm.n))
        Q[:, columns] = tau
        return Q

    options = {"integrator": integrator, "step": step, "rtol": rtol, "atol": atol, "compiled_steps": compiled_steps}
    runs: dict[str, ModeRun] = {}
    for mode in modes:
        tau = torques.modes[mode].tau
        say(f"mode {mode}: feeding the torques into the flexible model ({integrator})")
        run = pm.simulate(x0, t, drive(tau), **options)
        p, phi, om, al, tip = _observe(pm, run, joints, frame)
        runs[mode] = ModeRun(mode, tau, p, p - p_rigid, phi - phi_rigid, om, al, tip, run)
    stiff_error = math.nan
    if stiff_check:
        say(f"stiff limit: moduli x {stiff_factor:g}, mode {rfe_mode}")
        _, stiff, _ = flexible_setup(spec, E_factor=stiff_factor)
        run = stiff.simulate(stiff.state(traj.q[0], traj.dq[0]), t, drive(torques.modes[rfe_mode].tau), **options)
        p = _observe(stiff, run, joints, frame)[0]
        stiff_error = float(np.abs(p - p_rigid).max())
    rfe = None
    if rfe_elements:
        say(f"cross-check: levers as {rfe_elements} rigid finite elements, mode {rfe_mode}")
        rfe = _rfe_check(spec, robot, traj, t, torques.modes[rfe_mode].tau, drives, frame, p_rigid, rfe_elements, rfe_mode, options)
    return FlexFeedResult(
        name=robot.name,
        links=pm.links,
        lever_joints=joints,
        t=t,
        reference=traj,
        p_rigid=p_rigid,
        runs=runs,
        frequencies=frequencies,
        stiff_error=stiff_error,
        stiff_factor=stiff_factor,
        rfe=rfe,
        integrator=integrator,
        step=step,
        rigid_s=rigid_s,
    )


# ROS2 steps of the planar FEM model cost about this many evaluations of its compiled right-hand
# side timed from Python (measured 2.2-2.4 on rrr3_flexible: the fused first stage with the KKT
# factorization, the second evaluation, two stiff-block solves)
ROS2_EVALUATIONS_PER_STEP = 2.5


def estimate_flexible_runs(spec: RobotSpec, *, runs: int, duration: float | None, step: float) -> RunTimeEstimate | None:
    """The wall time of ``runs`` ROS2 runs of the flexible model over ``duration`` (s; default
    ``[simulation] duration``) at ``step`` (s): their steps x a calibrated cost per step
    (:data:`ROS2_EVALUATIONS_PER_STEP` timed evaluations of the model's right-hand side). The rigid
    part, the samples and the plots come on top (they scale with the rate, not the step). None
    without a duration (the run says what is missing)."""
    robot, pm, _ = flexible_setup(spec)
    duration = simulation_setup(robot).duration if duration is None else duration
    if not (duration and duration > 0):
        return None
    rhs, x, u = pm.compiled("rhs"), np.zeros(2 * pm.n), np.zeros(pm.n)
    steps = duration / step
    units = runs * (math.ceil(steps - 1e-9) if math.isfinite(steps) else math.inf)
    return calibrated_run_time(lambda: rhs(x, u), ROS2_EVALUATIONS_PER_STEP, units)


def rfe_planar_model(spec: RobotSpec, elements: int) -> tuple[RobotModel, PlanarFlexibleModel, dict[str, list[str]]]:
    """The FEM levers of ``spec`` rebuilt as ``elements`` rigid finite elements each
    (:func:`mbctl.dynamics.flexible.rfe.add_rfe_link` in pinocchio), reduced to the plane: the
    twist and out-of-plane bending joints of every sde are locked at zero (in-plane loads
    without gravity leave them at rest exactly), the in-plane bending joints keep their
    springs and dampers, and the tree runs in :class:`PlanarFlexibleModel` with the same
    loops, stabilization and integrators as the FEM model.

    Returns:
        The reduced robot, its planar model and, per lever, its bending joints (root to tip).

    Raises:
        ConfigError: If a lever lacks G, Iy or J (needed to build the RFE chain).
    """
    fem = _fem_specs(spec)
    try:
        rfe_specs = tuple(f.as_rfe(elements) for f in fem)
    except ValueError as exc:
        raise ConfigError(str(exc), file=spec.source, field="flexible") from None
    rfe_spec = dataclasses.replace(spec, flexible=rfe_specs, gravity=(0.0, 0.0, 0.0))
    full = build_robot(rfe_spec)
    model = full.model
    locked = [model.getJointId(n) for link in full.rfe_links for sde in link.joint_names for n in sde[:2]]
    reduced = pin.buildReducedModel(model, locked, pin.neutral(model))
    robot = robot_from_pinocchio(reduced, name=f"{full.name}_rfe{elements}", urdf=spec.urdf, overrides=spec.joints, source=spec.source, spec=rfe_spec)
    springs, bends = {}, {}
    for link in full.rfe_links:
        names = link.names
        for k, name in enumerate(names):
            if name.endswith("_bend_z"):
                springs[name] = (float(link.stiffness[k]), float(link.damping[k]))
        bends[link.spec.link] = [n for n in names if n.endswith("_bend_z")]
    loops = [c for c in constraint_set(robot) if isinstance(c, LoopClosure)]
    return robot, PlanarFlexibleModel(robot, {}, loops, springs=springs), bends


def _rfe_check(spec: RobotSpec, rigid: RobotModel, traj: Trajectory, t, tau, drives, frame, p_rigid, elements: int, mode: str, options: dict) -> RFECheck:
    robot, pm, bends = rfe_planar_model(spec, elements)
    fem = _fem_specs(spec)
    theta0 = np.zeros(robot.nv)
    for j in rigid.joints:
        theta0[robot.joint(j.name).idx_v] = traj.q[0, j.idx_v]
    drive = SampledTorques(pm.n, [robot.joint(n).idx_v for n in drives], t, tau)
    run = pm.simulate(pm.state(theta0), t, drive.generalized, **options)
    model = rigid.model
    tips = []
    for f in fem:
        jid = int(model.frames[model.getFrameId(f.link, pin.FrameType.BODY)].parentJoint)
        child = next(k for k in range(1, model.njoints) if int(model.parents[k]) == jid)
        tips.append((model.names[jid], model.names[child], [robot.joint(n).idx_v for n in bends[f.link]]))
    p_fn = pm.point(frame)
    fns = [(pm.body_angle(root), pm.point(tip), pm.point(root)) for root, tip, _ in tips]
    n = len(run.t)
    p = np.empty((n, 2))
    tip = np.empty((n, len(fem), 3))
    for k, qk in enumerate(run.q):
        p[k] = np.asarray(p_fn(qk)).ravel()
        for i, ((angle, tip_point, root_point), (_, _, idx)) in enumerate(zip(fns, tips)):
            phi = float(angle(qk))
            d = np.asarray(tip_point(qk)).ravel() - np.asarray(root_point(qk)).ravel()
            c, s_ = math.cos(phi), math.sin(phi)
            tip[k, i] = (c * d[0] + s_ * d[1] - fem[i].length, -s_ * d[0] + c * d[1], float(np.sum(qk[idx])))
    return RFECheck(mode=mode, elements=elements, nv=robot.nv, tip=tip, error=p - p_rigid, wall_s=run.wall_s)


def _stats(x: np.ndarray) -> dict[str, float]:
    return {"rms": float(np.sqrt(np.mean(x**2))), "peak": float(np.abs(x).max())}


def summary_table(result: FlexFeedResult) -> dict:
    """The JSON table: per mode RMS and peak of the end-effector error (m), of each lever's
    angle error (rad) and of the flexible levers' tip deformation; the cross-check and
    the stiff-limit figure."""
    out: dict = {
        "robot": result.name,
        "flexible_levers": list(result.links),
        "levers": list(result.lever_joints),
        "duration_s": float(result.t[-1]),
        "integrator": result.integrator,
        "step_s": result.step,
        "locked_frequencies_Hz": [float(f) for f in result.frequencies],
        "stiff_limit": {"E_factor": result.stiff_factor, "peak_ee_error_m": result.stiff_error},
        "rigid_part_s": result.rigid_s,
        "modes": {},
    }
    for mode, r in result.runs.items():
        entry = {
            "ee_error_m": {**_stats(np.linalg.norm(r.error, axis=1)), "x": _stats(r.error[:, 0]), "y": _stats(r.error[:, 1])},
            "lever_angle_error_rad": {j: _stats(r.angle_error[:, i]) for i, j in enumerate(result.lever_joints)},
            "tip": {
                link: {"axial_m": _stats(r.tip[:, i, 0]), "transverse_m": _stats(r.tip[:, i, 1]), "elastic_angle_rad": _stats(r.tip[:, i, 2])}
                for i, link in enumerate(result.links)
            },
            "torque_peak_Nm": [float(v) for v in np.abs(r.tau).max(axis=0)],
            "wall_s": r.run.wall_s,
            "steps": r.run.steps,
            "evaluations": r.run.evaluations,
        }
        out["modes"][mode] = entry
    if result.rfe is not None:
        fem = result.runs.get(result.rfe.mode)
        c = result.rfe
        entry = {"mode": c.mode, "elements": c.elements, "nv": c.nv, "wall_s": c.wall_s, "ee_error_m": _stats(np.linalg.norm(c.error, axis=1))}
        if fem is not None:
            n = len(c.error)
            entry["tip_transverse_difference_m"] = {link: _stats(c.tip[:, i, 1] - fem.tip[:n, i, 1]) for i, link in enumerate(result.links)}
            entry["tip_transverse_fem_m"] = {link: _stats(fem.tip[:n, i, 1]) for i, link in enumerate(result.links)}
            entry["tip_transverse_rfe_m"] = {link: _stats(c.tip[:, i, 1]) for i, link in enumerate(result.links)}
            entry["ee_error_difference_m"] = _stats(np.linalg.norm(c.error - fem.error[:n], axis=1))
        out["rfe_check"] = entry
    return out
