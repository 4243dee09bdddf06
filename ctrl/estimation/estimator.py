"""What the loop calls each cycle: velocity estimate and external-torque observer in one compiled call.

:class:`StateEstimator` keeps the states of :func:`mbctl.ctrl.estimation.step.build_step`'s
function in its preallocated input buffers, so a cycle writes the measurement and the applied
torque, calls the generated C once and reads the estimates: no allocation. The time step ``h``
is the measurement's own time difference (a repeated measurement, ``h = 0``, changes nothing).

On a detection (``|tau_ext_i| > threshold_i`` on some joint) the loop reacts as the settings
say; :meth:`StateEstimator.hold_torque` is the compliant hold: gravity compensation with a soft
spring to where the arm was and damping, ``tau = g(q) + m (w^2 (q_hold - q) - 2 w dq)`` per
joint, ``m`` the diagonal of ``M(q)`` and ``w = 2 pi`` :data:`HOLD_HZ` (a critically damped
joint of that natural frequency if decoupled).
"""

from __future__ import annotations

import math
import threading

import casadi as ca
import numpy as np

from mbctl.ctrl.estimation.model import EstimationModel
from mbctl.ctrl.estimation.settings import EstimationSettings, estimation_settings
from mbctl.ctrl.estimation.step import build_step, initial_state
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.structure import ParameterVector, robot_key

__all__ = ["HOLD_HZ", "StateEstimator", "step_function", "step_values"]

HOLD_HZ = 2.0
"""Natural frequency (Hz) of the compliant hold's joint springs."""

_KEPT = 16  # step functions kept per thread
_steps = threading.local()


def step_values(robot: RobotModel, settings: EstimationSettings, period_s: float) -> tuple[np.ndarray, str]:
    """``(p, key)``: the values of :func:`step_function`'s last input and the key of its structure and
    settings (what a generated function built from it is cached by)."""
    values = ParameterVector(symbolic=False)
    EstimationModel(robot, values)
    s = settings
    kinds = [(j.idx_v, type(j.friction.law).__name__) for j in robot.joints if j.friction is not None]
    return values.array, robot_key(robot, "estimation", s.velocity, s.cutoff_hz, period_s, s.gain, s.threshold, s.observer_cutoff_hz, kinds, values.names)


def step_function(robot: RobotModel, settings: EstimationSettings, period_s: float) -> ca.Function:
    """The step of :func:`~mbctl.ctrl.estimation.step.build_step` with the robot's numbers as its last input ``p``."""
    symbols = ParameterVector(symbolic=True)
    model = EstimationModel(robot, symbols)
    s = settings
    return build_step(model, s.velocity, s.cutoff_hz, period_s, s.gain, s.threshold, s.observer_cutoff_hz, symbols.symbols)


def _step_function(robot: RobotModel, settings: EstimationSettings, period_s: float, compiled: bool) -> CompiledFunction:
    """The step of :func:`step_function` with its numbers bound: generated and compiled once per
    structure and settings in a thread (a parameter study that changes masses or friction compiles
    it once), as the laws are (:mod:`mbctl.ctrl.compiled_laws`)."""
    values, key = step_values(robot, settings, period_s)
    kept = getattr(_steps, "by_key", None)
    if kept is None:
        kept = _steps.by_key = {}
    if (key, compiled) in kept:
        return kept[key, compiled].instance().bind(values)
    function = step_function(robot, settings, period_s)
    kept[key, compiled] = step = compile_function(function) if compiled else CompiledFunction(function, None)
    while len(kept) > _KEPT:
        kept.pop(next(iter(kept)))
    return step.bind(values)


class StateEstimator:
    """Velocity estimator plus momentum observer of a robot (every DOF actuated).

    Args:
        robot: The controller's model.
        period_s: Nominal sampling period (s), for the filter gains.
        settings: Estimation settings (default: the robot's ``[control]``).
        compiled: Run generated C (False: CasADi's interpreter, the same arithmetic).

    Attributes:
        q_hat, dq_hat: Estimated positions (rad, m) and velocities (rad/s, m/s).
        tau_ext: Observed external joint torques (N·m, N).
        threshold: The detection threshold of the last step per DOF (N·m, N; inf: none): the settings'
            plus the filtered error bound of the torque input (:mod:`mbctl.ctrl.estimation.step`).
        q_pred, dq_pred: The state predicted to the instant the next command acts.
        worst: ``max |tau_ext_i| / threshold_i`` of the last step (> 1: a detection).

    The arrays are the compiled function's output buffers: the next :meth:`update`
    overwrites them in place (copy what you keep).
    """

    def __init__(self, robot: RobotModel, period_s: float, settings: EstimationSettings | None = None, *, compiled: bool = True):
        self.robot = robot
        self.settings = estimation_settings(robot) if settings is None else settings
        self.model = EstimationModel(robot)
        self._f = _step_function(robot, self.settings, period_s, compiled)
        q, dq, f = ca.SX.sym("q", robot.nv), ca.SX.sym("dq", robot.nv), ca.SX.sym("f")
        self._momentum = ca.Function("momentum", [q, dq, f], list(self.model.momentum(q, dq, f)[:2]))
        outputs = self._f.outputs
        self.q_hat, self.dq_hat, self.tau_ext, self._g, self._m, self._worst = outputs[2], outputs[3], outputs[4], outputs[5], outputs[6], outputs[7]
        self.q_pred, self.dq_pred, self.threshold = outputs[8], outputs[9], outputs[10]
        self._x, self._o = self._f.inputs[0], self._f.inputs[1]
        self._x_next, self._o_next = outputs[0], outputs[1]
        self._q_in, self._dq_in, self._tau_in, self._h_in, self._bound_in, self._f_in, self._horizon_in, self._next_in = self._f.inputs[2:10]
        self._f_in[0] = 1.0
        self.threshold[:] = self.settings.threshold
        self.worst = 0.0
        self._t = math.nan

    @property
    def friction_share(self) -> float:
        """The share of the model's joint friction acting beyond the torque input (1: a drive torque; 0:
        a joint torque sensor's, measured behind the friction)."""
        return float(self._f_in[0])

    @friction_share.setter
    def friction_share(self, value: float) -> None:
        self._f_in[0] = value

    @property
    def compiled(self) -> bool:
        """The step runs generated C."""
        return self._f.compiled

    @property
    def step(self) -> CompiledFunction:
        """The step function on its buffers (:func:`step_function`, the robot's numbers bound)."""
        return self._f

    def initial(self, q: np.ndarray, dq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The step's states ``(x, o)`` started from the measurement ``(q, dq)``
        (:func:`~mbctl.ctrl.estimation.step.initial_state`)."""
        return initial_state(self.model, np.asarray(q, dtype=float), np.asarray(dq, dtype=float), self._momentum, self.friction_share)

    def reset(self, t: float, q: np.ndarray, dq: np.ndarray) -> None:
        """Start from a measurement at time ``t`` (s): estimates equal to it, no external torque."""
        x, o = self.initial(q, dq)
        self._x[:], self._o[:] = x, o
        self.q_hat[:], self.dq_hat[:] = q, dq
        self.q_pred[:], self.dq_pred[:] = q, dq
        self.tau_ext[:] = 0.0
        self.threshold[:] = self.settings.threshold
        self.worst = 0.0
        self._t = t

    def update(
        self, t: float, q: np.ndarray, dq: np.ndarray, tau: np.ndarray, bound: np.ndarray | float = 0.0,
        horizon: float = 0.0, tau_next: np.ndarray | None = None,
    ) -> float:  # fmt: skip
        """One step to the measurement ``(q, dq)`` at ``t`` (s), ``tau`` (N·m, N) applied since the
        last one, at most ``bound`` (N·m, N) from the torque that really acted; then the state predicted
        ``horizon`` seconds on under ``tau_next`` (default ``tau``) into :attr:`q_pred`, :attr:`dq_pred`.
        Returns :attr:`worst`. A repeated time is no step (the prediction is left as it was)."""
        h = t - self._t
        if not h > 0:
            return self.worst
        self._t = t
        self._q_in[:], self._dq_in[:], self._tau_in[:] = q, dq, tau
        self._bound_in[:] = bound
        self._h_in[0], self._horizon_in[0] = h, horizon
        self._next_in[:] = tau if tau_next is None else tau_next
        self._f.eval()
        self._x[:], self._o[:] = self._x_next, self._o_next
        self.worst = float(self._worst[0])
        return self.worst

    def detected_joint(self, tau_ext: np.ndarray | None = None, threshold: np.ndarray | None = None) -> int:
        """DOF index with the largest ``|tau_ext| / threshold`` (of the last estimate and its thresholds, or of
        the ones given)."""
        tau_ext = self.tau_ext if tau_ext is None else tau_ext
        return int(np.argmax(np.abs(tau_ext) / (self.threshold if threshold is None else threshold)))

    def hold_torque(self, q_hold: np.ndarray) -> np.ndarray:
        """The compliant hold's torques (N·m, N) at the last estimate (see the module docstring)."""
        w = 2.0 * math.pi * HOLD_HZ
        return self._g + self._m * (w * w * (q_hold - self.q_hat) - 2.0 * w * self.dq_hat)
