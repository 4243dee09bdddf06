"""The model predictive controller the real-time loop calls: ``(t, state) -> tau``, with its fallback.

Each cycle (``state`` is the loop's estimate: positions and the estimated velocity):

1. the call is pointed at the rows of a table laid out once per trajectory (the reference states, the
   model's inputs and the feed-forward) at the new knots ``t + k h`` from the samples below and above
   ``t``, with the weight between them (:class:`~mbctl.ctrl.optimal.mpc_cycle.KnotRows`): no copy;
2. one compiled call (:func:`~mbctl.ctrl.optimal.mpc_cycle.cycle_function`) interpolates them, shifts
   the previous plan's inputs to the current time (linear interpolation between its knots, the last
   held), runs the update of :func:`~mbctl.ctrl.optimal.mpc.update_function` from them, and applies its first
   input ``u0`` as a correction of the feed-forward of now::

       tau = clip(tau_ff(t) + u0 - u_ref,0, ±effort)

   ``u0`` is held over the model's whole first step, so it carries that step's feed-forward (its
   mean, ``h/2`` ahead of ``t``: 0.3 N·m on the UR5's shoulder at 10 ms); applied for one loop
   period it would lead the motion. ``tau_ff`` is the reference's inverse dynamics with the exact
   friction law, as computed torque's;
3. **fallback**: when the update fails (a non-finite result, or ``fail`` says so) or takes longer
   than its budget (``budget`` x the control period, wall clock; not the first call, the loop's
   warm-up before its first deadline, whose command is not applied), the cycle applies the previous
   plan's input at this time plus computed-torque feedback toward the plan's state,
   ``u = clip(u_plan(t) + M(q) (Kp (q_plan - q) + Kd (dq_plan - dq)))`` with the
   ``[control.computed-torque]`` gains; fallbacks are counted and reported. An update that was
   only late still becomes the plan of the next cycle.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

import numpy as np

from mbctl.config.control import MpcSpec
from mbctl.ctrl.feedforward import feedforward
from mbctl.ctrl.limits import PLANNING_VELOCITY_MARGIN, run_limits
from mbctl.ctrl.optimal.box_ipm import REALTIME_ITERATIONS, WARM_MU
from mbctl.ctrl.optimal.box_qp import PATHS
from mbctl.ctrl.optimal.mpc import MpcWeights, linearisation_function, reference_input_function, step_function, update_function
from mbctl.ctrl.optimal.mpc_cycle import KnotRows, cycle_function
from mbctl.ctrl.settings import control_settings
from mbctl.ctrl.trajectory import Trajectory
from mbctl.dynamics.codegen import compile_function
from mbctl.dynamics.model.per_joint import per_joint_values
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.symbolic import SymbolicDynamics
from mbctl.errors import ConfigError

__all__ = ["MpcController", "mpc_weights"]


def mpc_weights(robot: RobotModel, spec: MpcSpec, q0: np.ndarray) -> MpcWeights:
    """The spec's weights per DOF (checked against the robot's joint names); the defaults of ``dq`` and
    ``tau`` from the bandwidth ``w`` and the mass matrix ``M`` at ``q0``: ``2 q / w²`` and, on the
    torque, the matrix ``M⁻¹ diag(q / w⁴) M⁻¹``, i.e. ``q / w⁴`` on the acceleration the torque's
    departure gives: each joint of a double integrator under these weights closes its error at ``w``,
    critically damped, with the first stage's gain ``≈ M diag(w², 2 w)`` like computed torque's. A
    diagonal ``q / (w⁴ M_jj²)`` would make a heavy joint's torque thousands of times cheaper than a
    wrist's, and the plan would correct a wrist through the heavy joints' coupling."""
    control = robot.spec.control if robot.spec is not None else None
    file = control.file if control is not None and control.file is not None else robot.source

    def values(key: str, default: np.ndarray) -> np.ndarray:
        given = getattr(spec, key)
        return default if given is None else per_joint_values(robot, given, default=0.0, require_all=True, file=file, field=f"control.mpc.{key}")

    q = values("q", np.zeros(robot.nv))
    w = spec.bandwidth
    inverse = np.linalg.inv(np.asarray(SymbolicDynamics(robot).mass_matrix(q0)))
    tau = inverse @ np.diag(q / w**4) @ inverse if spec.tau is None else values("tau", np.zeros(robot.nv))
    return MpcWeights(q=q, dq=values("dq", 2.0 * q / w**2), tau=0.5 * (tau + tau.T) if tau.ndim == 2 else tau, terminal=spec.terminal)


class MpcController:
    """Callable ``(t, state) -> tau`` for :func:`mbctl.hardware.loop.run_loop` (see the module docstring).

    Args:
        robot: A fully actuated robot.
        trajectory: The reference, covering every DOF.
        spec: ``[control.mpc]`` (default: the robot's).
        period: The loop's control period (s), for the budget; None: no budget (a lock-step run,
            which is not paced).
        compiled: Compile the update to C (else CasADi's interpreter: tests and no compiler).
        fail: ``fail(cycle) -> bool`` forces a failed update (tests of the fallback).

    Attributes:
        saturated_cycles: Cycles whose applied input sits on a torque limit.
        fallbacks: Cycles that applied the fallback.
        paths: Updates by the path their subproblem took (:data:`~mbctl.ctrl.optimal.box_qp.PATHS`: the
            active-set passes settled, the interior point within its cap did, or neither: the clamped plan).
        solve_times: Wall time of every update (s).
    """

    def __init__(
        self,
        robot: RobotModel,
        trajectory: Trajectory,
        *,
        spec: MpcSpec | None = None,
        period: float | None = 1e-3,
        compiled: bool = True,
        fail: Callable[[int], bool] | None = None,
    ):
        if any(not j.actuated for j in robot.joints):
            raise ConfigError("model predictive control needs the state of every DOF; this robot has unactuated DOF", file=robot.source)
        control = robot.spec.control if robot.spec is not None else None
        spec = spec if spec is not None else (control.mpc if control is not None else MpcSpec())
        settings = control_settings(robot)
        gains = settings.require("computed-torque")
        self.robot, self.spec, self.period = robot, spec, period
        q, dq, ddq = trajectory.columns(robot.joint_names)
        self.trajectory = Trajectory(t=trajectory.t, joint_names=robot.joint_names, q=q, dq=dq, ddq=ddq)
        self._effort = np.asarray(settings.effort, dtype=float)
        tau_ff = np.clip(feedforward(robot, self.trajectory).dynamics.tau, -self._effort, self._effort)
        self._tau_ref = np.clip(_model_inputs(robot, self.trajectory, spec.step), -self._effort, self._effort)
        # rows interpolated at the knots' times: reference state, the model's inputs, the feed-forward
        self._table = np.hstack([q, dq, self._tau_ref, tau_ff])
        self._kp, self._kd = np.asarray(gains.kp, dtype=float), np.asarray(gains.kd, dtype=float)
        step = step_function(robot, spec.step)
        limits = run_limits(robot)
        # the planned speeds keep the planners' margin below the speed limit the run stops at
        speed = PLANNING_VELOCITY_MARGIN * limits.velocity
        update = update_function(
            step, spec.knots, mpc_weights(robot, spec, q[0]), self._effort, spec.iterations, linearisation_function(robot, spec.step),
            lower=np.concatenate([limits.lower, -speed]), upper=np.concatenate([limits.upper, speed]), step_size=spec.step,
            qp_iterations=REALTIME_ITERATIONS, qp_mu0=WARM_MU,  # a bounded worst case: the interior point capped, warm
        )  # fmt: skip
        mass = SymbolicDynamics(robot).mass_matrix
        cycle = cycle_function(update, self._effort)
        self._update = compile_function(cycle, optimise_large=True) if compiled else _Interpreted(cycle)
        self._mass = compile_function(mass) if compiled else _Interpreted(mass)
        self._fail = fail
        N, f = spec.knots, self._update
        f.inputs[2][...] = self._tau_ref[0][:, None]  # the first plan: holding the first sample's feed-forward
        f.inputs[3][...] = np.concatenate([q[0], dq[0]])[:, None]
        self._plan_t: float | None = None
        self._rows = KnotRows(self.trajectory.t, self._table, spec.step, N)
        self._at_limit = self._effort * (1 - 1e-9)
        # what a cycle touches, looked up once: the call's buffers and the rows' addresses
        self._nv, self._per_knot = robot.nv, 1.0 / spec.step
        self._x0, self._s, self._w, self._out = f.inputs[0], f.inputs[1], f.inputs[6], f.outputs
        self._late = spec.budget * period if period is not None else math.inf
        self._point = f.point_input if compiled and f.compiled else None
        self.cycles = 0
        self.saturated_cycles = 0
        self.fallbacks = 0
        self.paths = [0] * len(PATHS)
        self.solve_times: list[float] = []

    def reference(self, t: float) -> tuple[np.ndarray, np.ndarray]:
        """Desired positions and velocities at ``t`` (s)."""
        q, dq, _ = self.trajectory.at(t)
        return q, dq

    def __call__(self, t: float, state) -> np.ndarray:  # noqa: ANN001  (mbctl.hardware.interface.JointState)
        # the cycle's Python: a few assignments around the call, each attribute looked up once
        f, x0, nv, out = self._update, self._x0, self._nv, self._out
        x0[:nv] = state.q
        x0[nv:] = state.dq
        plan_t = self._plan_t
        self._s[0] = 0.0 if plan_t is None else max(t - plan_t, 0.0) * self._per_knot
        rows = self._rows
        i, self._w[0] = rows.locate(t)
        point = self._point
        if point is not None:
            address = rows.address
            point(4, address[i])
            point(5, address[i + 1])
        else:
            f.inputs[4][...], f.inputs[5][...] = rows.block(i), rows.block(i + 1)
        clock = time.perf_counter
        start = clock()
        f.eval()
        elapsed = clock() - start
        self.solve_times.append(elapsed)
        cycle = self.cycles
        self.cycles = cycle + 1
        failed = not math.isfinite(out[7][0]) or (self._fail is not None and self._fail(cycle))
        if failed or (elapsed > self._late and cycle):
            self.fallbacks += 1
            tau = self._fallback(state, out[6], out[5])
            self.saturated_cycles += bool((np.abs(tau) >= self._at_limit).any())
        else:
            # u0 holds over the model's whole first step, so it carries that step's feed-forward (h/2
            # ahead of now); applied for one loop period, the plan's correction rides on the feed-forward of now
            tau = out[2].copy()
            if out[8][0]:
                self.saturated_cycles += 1
        path = out[4][0]
        if path == path:  # not NaN
            self.paths[int(path)] += 1
        if not failed:
            f.inputs[2][...] = out[0]
            f.inputs[3][...] = out[1]
            self._plan_t = t
        return tau

    def _fallback(self, state, x_plan: np.ndarray, u_plan: np.ndarray) -> np.ndarray:  # noqa: ANN001
        nv = self.robot.nv
        self._mass.inputs[0][...] = state.q
        self._mass.eval()
        M = self._mass.outputs[0].reshape(nv, nv)
        a = self._kp * (x_plan[:nv] - state.q) + self._kd * (x_plan[nv:] - state.dq)
        return np.clip(u_plan + M @ a, -self._effort, self._effort)

    def describe(self) -> dict[str, float | int | str]:
        """Solve-time percentiles (µs), updates, iterations per update, fallbacks and the updates by the
        subproblem's path (``active_set``, ``interior_point``, ``clamped``; :data:`~mbctl.ctrl.optimal.box_qp.PATHS`),
        for the run summary."""
        times = np.asarray(self.solve_times) * 1e6 if self.solve_times else np.zeros(1)
        return {
            "solver": f"{self.spec.solver} (Gauss-Newton, exact box QP, {self.spec.knots} knots of {self.spec.step:g} s)",
            "updates": self.cycles, "iterations_per_update": self.spec.iterations, "fallbacks": self.fallbacks, **dict(zip(PATHS, self.paths)),
            "solve_us_p50": float(np.percentile(times, 50)), "solve_us_p99": float(np.percentile(times, 99)), "solve_us_max": float(times.max()),
        }  # fmt: skip


def _model_inputs(robot: RobotModel, trajectory: Trajectory, h: float) -> np.ndarray:
    """The model's reference inputs at every sample (n, nv): :func:`~mbctl.ctrl.optimal.mpc.reference_input_function`
    with the acceleration that carries the sample's velocity to the reference's ``h`` (s) later."""
    t = trajectory.t
    later = np.column_stack([np.interp(t + h, t, trajectory.dq[:, j]) for j in range(robot.nv)])
    later[t + h > t[-1]] = 0.0  # the trajectory ends at rest
    f = reference_input_function(robot, h).map(len(t))
    x = np.concatenate([trajectory.q, trajectory.dq], axis=1).T
    return np.asarray(f(x, (later - trajectory.dq).T / h)).T


class _Interpreted:
    """A CasADi function with :class:`~mbctl.dynamics.codegen.CompiledFunction`'s buffer interface."""

    def __init__(self, function):  # noqa: ANN001
        self._f = function
        shape = lambda r, c: np.zeros(r) if c == 1 else np.zeros((r, c), order="F")  # noqa: E731
        self.inputs = [shape(function.size1_in(i), function.size2_in(i)) for i in range(function.n_in())]
        self.outputs = [shape(function.size1_out(i), function.size2_out(i)) for i in range(function.n_out())]

    def eval(self) -> None:
        for buf, value in zip(self.outputs, self._f.call(list(self.inputs))):
            buf[...] = np.asarray(value).reshape(buf.shape, order="F")
