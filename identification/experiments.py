"""Running friction experiments through any joint interface: host-side loops in torque mode.

**How the joints are driven.** Every experiment runs in the fixed-rate loop of
:func:`mbctl.hardware.loop.run_loop` with torque commands, so it works unchanged on the
simulated plant (which takes torques only) and on real drives in current mode,
and it inherits the loop's safety checks (limits, watchdog, signals, torque off on
every exit) and its complete log. The drives' own velocity loops are not used:
they differ between vendors, and their internal current is what has to be
measured anyway.

- The tested joint follows the plan's reference (:mod:`mbctl.identification.plan`) with
  a PID on position plus a feed-forward of the robot model: rigid-body inverse
  dynamics at the reference (gravity and inertia) and the joint's friction law
  from the TOML (the prior) at the reference velocity. A constant-speed "velocity
  loop" is thus a position loop on a ramp: the mean speed equals the commanded
  one exactly, even with a coarse encoder, and the integral term absorbs
  whatever the prior gets wrong.
- Every other joint is held where it was at the start by the same PID (reference
  fixed, gravity feed-forward).
- Gains scale with each joint's inertia (:class:`mbctl.identification.plan.ControlGains`).
  ``coupled=True`` scales them with the whole mass matrix instead: the PD's accelerations
  ``w² e + 2 zeta w e'`` times ``M(q_hold)``, so that one joint's correction does not drive the
  others through the arm's inertia coupling. With each joint's own inertia, a held joint meets
  the tested one's loop through ``M⁻¹``, whose diagonal can be several times ``1/M_ii`` (the UR5's
  elbow with the upper arm upright: 6.1 times); at a 4 ms period that pushes the pair past the
  sampled loop's stability limit and they chatter at half the rate. Where a joint's torque
  exceeds the level the loop saturates it at, the others are given the coupling of the
  acceleration it will actually have, not of the one it asked for:
  ``tau_F += M_FS M_SS⁻¹ (sat(tau_S) - tau_S)`` (``S`` the saturated joints, ``F`` the rest).
- Presliding tests switch the tested joint to open-loop torque (the holding torque
  plus a profile) and back to position hold, bumplessly: the integral is reset so
  that the torque is continuous at each switch. A ramp through break-away ends
  when the joint has moved ``slip_distance`` from its start; the joint is then
  held where it is.

The log of the tested joint becomes LOG.csv (``t, q, dq, tau, dq_ref, tau_g``:
``tau`` is the drive's measured effort, ``tau_g`` the model's gravity torque at
the measured configuration) or PRE.csv (``t, q, dq, tau, test``), see
:mod:`mbctl.identification.logs`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pinocchio as pin

from mbctl.ctrl.limits import effort_levels
from mbctl.dynamics.friction.laws import LuGre
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.interface import JointInterface, JointState
from mbctl.hardware.loop import LoopConfig, RunSummary, log_columns
from mbctl.hardware.runlog import RunLog
from mbctl.hardware.session import enable_and_run
from mbctl.identification.logs import (
    TEST_CYCLE,
    TEST_NONE,
    TEST_RAMP,
    TEST_STEP,
    ConstantSpeedLog,
    PreslidingLog,
)
from mbctl.identification.plan import ControlGains, Phase, PreslidingPlan, Timeline

__all__ = ["ExperimentController", "ExperimentRun", "presliding_timeline", "run_experiment", "prior_slip_distance"]

_LABELS = {"cycle": TEST_CYCLE, "step": TEST_STEP, "ramp": TEST_RAMP}


def presliding_timeline(plan: PreslidingPlan) -> Timeline:
    """Hold, slow cycle, hold, steps (+dF, back, -dF, back), hold, then for every rate a
    ramp each way with holds between."""
    phases: list[Phase] = []
    t = 0.0

    def add(kind: str, duration: float, **kw: float) -> None:
        nonlocal t
        phases.append(Phase(kind, t, t + duration, **kw))
        t += duration

    add("hold", plan.hold_s)
    add("cycle", plan.cycle_s)
    add("hold", plan.hold_s)
    add("step", 4 * plan.step_s)
    add("hold", plan.hold_s)
    for r in plan.ramp_rates:
        rate = r * plan.breakaway
        ramp_s = plan.max_torque * plan.breakaway / rate
        for sign in (1.0, -1.0):
            add("ramp", ramp_s, sign=sign, rate=rate)
            add("hold", plan.hold_s)
    return Timeline(tuple(phases))


class ExperimentController:
    """The host-side loops of one experiment; a :class:`mbctl.hardware.loop.Controller`.

    Args:
        robot: The model (feed-forward, inertias); every joint must be actuated.
        joint: The tested joint.
        timeline: Its plan.
        gains: PID scaling.
        presliding: Torque levels of the presliding phases (needed if the timeline has any).
        friction_feedforward: Add the joint's TOML friction law at the reference velocity.
        coupled: Scale the PD with the mass matrix ``M(q_hold)`` of the actuated joints instead of
            its diagonal (module docstring); the integral stays per joint.
    """

    def __init__(
        self,
        robot: RobotModel,
        joint: str,
        timeline: Timeline,
        gains: ControlGains,
        presliding: PreslidingPlan | None = None,
        *,
        friction_feedforward: bool = True,
        coupled: bool = False,
    ):
        self.robot = robot
        self.names = robot.actuated_names
        self.k = self.names.index(joint)
        self.timeline = timeline
        self.gains = gains
        self.presliding = presliding
        self._data = robot.create_data()
        self._law = robot.joint(joint).friction.law if (friction_feedforward and robot.joint(joint).friction) else None
        self._idx = np.array([robot.joint(n).idx_v for n in self.names], dtype=int)
        n = len(self.names)
        self.coupled = coupled
        self.kp = self.kd = self.ki = np.zeros(n)
        self.Kp = self.Kd = self.M = np.zeros((n, n))  # coupled: M and the PD's gains through it (N·m/rad, N·m·s/rad)
        self._effort = effort_levels(robot)[self._idx]  # where the loop saturates (N·m, N)
        self.q_hold: np.ndarray | None = None
        self.integral = np.zeros(n)
        self._phase = -1
        self._t_prev: float | None = None
        self._last_tau = np.zeros(n)
        self._last_ff = np.zeros(n)
        self._u0 = 0.0
        self._q_capture = math.nan
        self._slipped = False
        self._ref = (np.zeros(n), np.zeros(n))
        self.failed_ramps: list[Phase] = []
        self.times: list[float] = []
        self.labels: list[int] = []
        self.dq_ref: list[float] = []

    def _setup(self, state: JointState) -> None:
        self.q_hold = np.array(state.q, dtype=float)
        self._q_capture = float(self.q_hold[self.k])
        q = np.zeros(self.robot.nv)
        q[self._idx] = self.q_hold
        M = pin.crba(self.robot.model, self._data, self.robot.configuration(q))[np.ix_(self._idx, self._idx)]
        M = np.triu(M) + np.triu(M, 1).T  # crba fills the upper triangle
        J = np.diag(M).copy()
        w = 2 * math.pi * self.gains.bandwidth_hz
        self.kp = J * w**2
        self.kd = 2 * self.gains.damping * J * w
        self.ki = self.gains.integral * self.kp * w
        self.M = M
        self.Kp = M * w**2
        self.Kd = M * (2 * self.gains.damping * w)

    def _feedforward(self, q: np.ndarray, dq: np.ndarray, ddq: np.ndarray) -> np.ndarray:
        qf, dqf, ddqf = (np.zeros(self.robot.nv) for _ in range(3))
        qf[self._idx], dqf[self._idx], ddqf[self._idx] = q, dq, ddq
        tau = pin.rnea(self.robot.model, self._data, self.robot.configuration(qf), dqf, ddqf)[self._idx].copy()
        v = float(dq[self.k])
        if self._law is not None and v != 0.0:
            tau[self.k] += float(self._law.steady(v, math.copysign(1.0, v)))
        return tau

    def __call__(self, t: float, state: JointState) -> np.ndarray:
        if self.q_hold is None:
            self._setup(state)
        dt = 0.0 if self._t_prev is None else max(t - self._t_prev, 0.0)
        self._t_prev = t
        i = self.timeline.index(t)
        phase = self.timeline.phases[i]
        k = self.k
        if i != self._phase:
            previous = self.timeline.phases[self._phase] if self._phase >= 0 else None
            if phase.is_torque:
                self._u0 = float(self._last_ff[k] + self.integral[k])  # the smooth part of the holding torque
                self._q_capture = float(state.q[k])
                self._slipped = False
            elif previous is not None and previous.is_torque:
                self._hold_here(state, previous)
            self._phase = i

        q_ref = self.q_hold.copy()
        dq_ref = np.zeros(len(self.names))
        ddq_ref = np.zeros(len(self.names))
        torque_mode = phase.is_torque and not self._slipped
        if not phase.is_torque:
            if phase.kind == "hold" and math.isnan(phase.q0):
                q_ref[k] = self._q_capture
            else:
                qk, dqk, ddqk = phase.reference(np.array([t]))
                q_ref[k], dq_ref[k], ddq_ref[k] = qk[0], dqk[0], ddqk[0]
        elif self._slipped:
            q_ref[k] = self._q_capture
        else:
            q_ref[k] = float(state.q[k])
        ff = self._feedforward(q_ref, dq_ref, ddq_ref)
        e = q_ref - state.q
        ed = dq_ref - state.dq
        if torque_mode:  # the tested joint's row is replaced below: no damping demand of it reaches the others
            ed[k] = 0.0
        self.integral += self.ki * e * dt
        tau = ff + (self.Kp @ e + self.Kd @ ed if self.coupled else self.kp * e + self.kd * ed) + self.integral
        label = TEST_NONE
        if torque_mode:  # e[k] = 0: the tested joint's integral stays frozen
            profile, label = self._profile(phase, t, state)
            tau[k] = self._u0 + profile
        if self.coupled:
            tau = self._saturated(tau)
        self._last_tau = tau
        self._last_ff = ff
        self._ref = (q_ref, dq_ref)
        self.times.append(t)
        self.labels.append(label)
        self.dq_ref.append(float(dq_ref[k]))
        return tau

    def _saturated(self, tau: np.ndarray) -> np.ndarray:
        """``tau`` saturated at the loop's levels, the unsaturated joints given the coupling of the
        saturated ones' actual accelerations (module docstring)."""
        over = np.abs(tau) > self._effort
        if not over.any():
            return tau
        clipped = np.clip(tau, -self._effort, self._effort)
        free = ~over
        out = clipped.copy()
        out[free] += self.M[np.ix_(free, over)] @ np.linalg.solve(self.M[np.ix_(over, over)], clipped[over] - tau[over])
        return np.clip(out, -self._effort, self._effort)

    def _hold_here(self, state: JointState, previous: Phase) -> None:
        """Bumpless switch from torque mode to holding the present position."""
        k = self.k
        self._q_capture = float(state.q[k])
        q_ref = self.q_hold.copy()
        q_ref[k] = self._q_capture
        ff = self._feedforward(q_ref, np.zeros(len(self.names)), np.zeros(len(self.names)))
        self.integral[k] = float(self._last_tau[k] - ff[k] + self.kd[k] * float(state.dq[k]))

    def _profile(self, phase: Phase, t: float, state: JointState) -> tuple[float, int]:
        """Torque added to the holding torque, and the test label, in a torque phase."""
        plan = self.presliding
        if plan is None:
            raise ValueError("a torque phase needs the presliding plan")
        s = t - phase.t0
        T = phase.t1 - phase.t0
        if phase.kind == "cycle":
            A = plan.amplitude * plan.breakaway
            x = s / T
            tri = 4 * x if x < 0.25 else (2 - 4 * x if x < 0.75 else 4 * x - 4)
            return A * tri, TEST_CYCLE
        if phase.kind == "step":  # +dF, back, -dF, back
            level = (1.0, 0.0, -1.0, 0.0)[min(int(4 * s / T), 3)]
            return level * plan.step * plan.breakaway, TEST_STEP
        # ramp through break-away
        moved = abs(float(state.q[self.k]) - self._q_capture)
        top = plan.max_torque * plan.breakaway
        rise = min(phase.rate * s, top)
        if moved > plan.slip_distance:
            self._slipped = True
            self._hold_here(state, phase)
            return phase.sign * rise, TEST_NONE
        if rise >= top and (not self.failed_ramps or self.failed_ramps[-1] is not phase):
            self.failed_ramps.append(phase)
        return phase.sign * rise, (TEST_RAMP if rise < top else TEST_NONE)

    def reference(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """The reference of the last cycle (for the loop's tracking errors)."""
        return self._ref


@dataclass(frozen=True)
class ExperimentRun:
    """What an experiment produced.

    Attributes:
        summary: The loop's run summary (stop reason, timing, ...).
        constant_speed: The tested joint's LOG.csv content (constant-speed experiments).
        presliding: Its PRE.csv content (presliding experiments).
        notes: What did not go to plan (ramps that did not slip).
    """

    summary: RunSummary
    constant_speed: ConstantSpeedLog | None = None
    presliding: PreslidingLog | None = None
    notes: tuple[str, ...] = ()


def run_experiment(
    backend: JointInterface,
    robot: RobotModel,
    controller: ExperimentController,
    *,
    rate_hz: float,
    paced: bool,
    npz_path: str | Path,
    kind: str,
) -> ExperimentRun:
    """Run one experiment on an opened backend (enables torque; always ends with torque off).

    Args:
        backend: Opened joint interface serving the robot's actuated joints.
        robot: The model (limits, gravity for ``tau_g``).
        controller: The experiment's loops.
        rate_hz: Loop rate (Hz).
        paced: Follow the wall clock (False: lock-step simulated plant).
        npz_path: Where the loop's full log goes (.npz).
        kind: ``"constant-speed"`` or ``"presliding"``.
    """
    config = LoopConfig(rate_hz=rate_hz, duration_s=controller.timeline.duration, paced=paced)
    summary = enable_and_run(backend, controller, robot, config, RunLog(npz_path, log_columns(backend.joint_names)), controller.reference)
    data = np.load(npz_path)
    k = controller.k
    ok = (data["read_ok"] > 0) if data["read_ok"].ndim else np.ones(0, bool)
    t = data["t"][ok]
    q_all = data["q"].reshape(len(data["t"]), -1)[ok]
    q, dq = q_all[:, k], data["dq"].reshape(len(data["t"]), -1)[ok][:, k]
    effort = data["effort"].reshape(len(data["t"]), -1)[ok][:, k]
    command = data["tau"].reshape(len(data["t"]), -1)[ok][:, k]
    tau = np.where(np.isfinite(effort), effort, command)
    # controller records are keyed by the loop time of the cycle that called it
    times = np.array(controller.times)
    pos = np.clip(np.searchsorted(times, t), 0, max(len(times) - 1, 0))
    matched = times[pos] == t if len(times) else np.zeros(len(t), bool)
    labels = np.where(matched, np.array(controller.labels)[pos], TEST_NONE) if len(times) else np.zeros(len(t), int)
    dq_ref = np.where(matched, np.array(controller.dq_ref)[pos], 0.0) if len(times) else np.zeros(len(t))
    keep = np.isfinite(q) & np.isfinite(dq) & np.isfinite(tau)
    if kind == "presliding":
        notes = []
        for p in controller.failed_ramps:  # a ramp run must end with a slip (mbctl.identification.logs)
            labels[(t >= p.t0) & (t < p.t1)] = TEST_NONE
            notes.append(f"the ramp at t = {p.t0:.3f} s ({'+' if p.sign > 0 else '-'}, {p.rate:.4g}/s) did not slip "
                         f"within {controller.presliding.max_torque:g} x the expected break-away torque; left out")
        pre = PreslidingLog(t=t[keep], q=q[keep], dq=dq[keep], tau=tau[keep], test=labels[keep].astype(int))
        return ExperimentRun(summary, presliding=pre, notes=tuple(notes))
    tau_g = _gravity_torques(robot, controller, q_all[keep])
    log_cs = ConstantSpeedLog(t=t[keep], q=q[keep], dq=dq[keep], tau=tau[keep], dq_ref=dq_ref[keep], tau_g=tau_g)
    return ExperimentRun(summary, constant_speed=log_cs)


def _gravity_torques(robot: RobotModel, controller: ExperimentController, q_act: np.ndarray) -> np.ndarray:
    """The model's gravity torque on the tested joint at every measured configuration."""
    data = robot.create_data()
    idx = controller._idx
    jv = idx[controller.k]
    out = np.empty(len(q_act))
    qf = np.zeros(robot.nv)
    for i, row in enumerate(q_act):
        qf[idx] = row
        out[i] = pin.computeGeneralizedGravity(robot.model, data, robot.configuration(qf))[jv]
    return out


def prior_slip_distance(robot: RobotModel, joint: str, breakaway: float) -> float:
    """Default ramp-ending displacement: 10 ``fs/sigma0`` for a LuGre prior, else 1 mrad (0.1 mm)."""
    friction = robot.joint(joint).friction
    if friction is not None and isinstance(friction.law, LuGre):
        return 10 * breakaway / friction.law.sigma0
    return 1e-3 if robot.joint(joint).kind == "revolute" else 1e-4
