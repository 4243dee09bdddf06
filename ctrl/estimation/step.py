"""One estimation step as a CasADi function: velocity estimate, momentum observer, prediction.

``(x, o, q_meas, dq_meas, tau, h, bound, f, horizon, tau_next) -> (x', o', q_hat, dq_hat, tau_ext, g, m, worst,
q_pred, dq_pred, threshold)``

``x`` (3 nv) is the velocity estimator's state, ``o`` (6 nv) the observer's: the integral ``I``,
the initial momentum ``p0``, the last output ``r``, the last ``beta``, its own velocity ``v`` and the
filtered bound ``b`` of its input's error; ``q_meas, dq_meas`` what the backend reports, ``tau`` the
torques that acted over the last ``h`` seconds (N·m, N per DOF: measured by the drives, or the
command the timing says acted), ``bound`` how far the torque that really acted may be from ``tau``
(N·m, N per DOF: 0 for a measured torque; the spread of the commands that may have acted, when the
time a command takes to act is uncertain), ``f`` the share of the model's joint friction that acts
on the arm beyond ``tau`` (1: ``tau`` is a drive torque, friction opposes it; 0: a joint torque
sensor measures ``tau`` behind the friction), ``horizon`` the time (s) from the sample to the instant
the next command will act and ``tau_next`` the torque acting until then.

Velocity (``[control] velocity``, gains of :mod:`mbctl.ctrl.estimation.filters`):

- ``measured``: ``dq_hat = dq_meas``;
- ``first-order``: ``x = (q_last, v)``, ``v' = v + a ((q_meas - q_last)/h - v)``;
- ``alpha-beta``: ``x = (q_hat, v_hat)``, prediction ``v- = v_hat``, ``q- = q_hat + h v-``;
- ``model``: ``x = (q_hat, v_hat, d_hat)``, prediction ``v- = v_hat + dv + h d_hat``,
  ``q- = q_hat + h (v_hat + v-) / 2``, ``dv`` the robot's dynamics driven by ``tau`` over ``h``
  (:meth:`~mbctl.ctrl.estimation.model.EstimationModel.velocity_increment`; the trapezoidal position
  step is exact for an arm that accelerates through the step, where ``q_hat + h v-`` overshoots by
  ``h dv / 2`` and the correction drags the velocity estimate back by a fraction of ``dv``: an error
  that grows with ``h``, and at 100 Hz made an arm falling for its first period, before the drives
  applied their first command, read as 7 N·m on the UR5's shoulder); correction
  ``(l1, l2/h, l3/h^2) e`` (:func:`~mbctl.ctrl.estimation.filters.observer_gains`). A Luenberger
  observer with an acceleration-bias state: the model follows the commanded accelerations, so the
  correction only removes quantisation noise, and ``d_hat`` takes up a constant unmodelled load
  (without it the velocity estimate would carry a bias ``l1 d / l2``).

Generalized-momentum observer (``K`` the gain, 1/s; ``p = M(q) dq``, ``beta`` of
:meth:`~mbctl.ctrl.estimation.model.EstimationModel.momentum`)::

    r = K (p - p0 - integral of (tau + beta + r) dt)

discretised with ``I`` the integral, ``beta`` by the trapezoidal rule and ``r`` implicitly (so a
long gap between samples, ``K h > 2``, cannot make it ring)::

    r' = K (p - p0 - I - h (tau + (beta + beta_last)/2)) / (1 + K h)
    I' = I + h (tau + (beta + beta_last)/2 + r')

``r`` follows the external joint torque ``tau_ext`` as a first-order lag of time constant
``1/K``; an error ``e`` in the torque input shows in ``r`` as ``-e`` through the same lag, so the
detection threshold of a joint grows by the input's error bound filtered alike (an adaptive
threshold; implicit Euler as ``r``)::

    b' = (b + K h (bound + s |f Q_f(v)|)) / (1 + K h),   threshold = threshold_0 + b'

The second term is stiction: near rest (``s = exp(-(v / STICK_BAND)^2)``, ``v`` the observer's
velocity) a joint may stick at any torque within its break-away friction, which the default
``threshold_0`` covers, while the model's friction at the estimated velocity (a smoothed sign, and the
estimate dithers about zero) may have the other sign: the error reaches ``fs + |Q_f(v)|``.

and ``worst = max_i |r_i| / threshold_i`` (a detection when > 1).

Prediction: the state at the instant the next command will act, ``horizon`` seconds after the
sample, from the estimate and the model driven by ``tau_next`` (the same semi-implicit velocity step
and trapezoidal position step as the ``model`` estimator's prediction, plus the acceleration bias
``d_hat`` where that estimator runs). ``horizon = 0``: the estimate itself. Velocity noise reaches ``r`` as ``K M(q) dv`` unfiltered (through ``p``), so the observer
may low-pass its velocity first (``[control.collision] velocity_cutoff_hz``): ``v' = v + (1 -
exp(-2 pi f h)) (dq_hat - v)``, ``p`` and ``beta`` taken at ``v``. A torque that changes no
motion (a sensor's) still shows with lag ``1/K``; one that moves the arm, ``1/(2 pi f)`` later. ``g`` is the gravity torque and ``m`` the diagonal of ``M`` (for the compliant hold).
"""

from __future__ import annotations

import math

import casadi as ca
import numpy as np

from mbctl.ctrl.estimation.filters import alpha_beta_gains, first_order_gain, observer_gains
from mbctl.ctrl.estimation.model import EstimationModel

__all__ = ["STICK_BAND", "STEP_INPUTS", "STEP_OUTPUTS", "build_step", "initial_state"]

STICK_BAND = 0.02
"""rad/s (m/s): the velocity within which a joint may be sticking whatever the estimate says (twice the
observer friction's smoothing, :data:`~mbctl.ctrl.estimation.model.FRICTION_SMOOTHING`: the estimate's dither at rest)."""
STEP_INPUTS = ("x", "o", "q_meas", "dq_meas", "tau", "h", "bound", "f", "horizon", "tau_next")
STEP_OUTPUTS = ("x_next", "o_next", "q_hat", "dq_hat", "tau_ext", "g", "m", "worst", "q_pred", "dq_pred", "threshold")
OBSERVER_STATES = 6
"""Entries of the observer's state ``o`` per DOF."""


def _velocity(kind: str, model: EstimationModel, x, q_meas, dq_meas, tau, h, f, cutoff_hz: float, period_s: float):
    """``(x', q_hat, dq_hat)`` of the velocity estimator ``kind``."""
    nv = model.nv
    q_x, v_x, d_x = x[:nv], x[nv : 2 * nv], x[2 * nv :]
    if kind == "measured":
        return ca.vertcat(q_meas, dq_meas, d_x), q_meas, dq_meas
    if kind == "first-order":
        a = first_order_gain(cutoff_hz, period_s)
        v = v_x + a * ((q_meas - q_x) / h - v_x)
        return ca.vertcat(q_meas, v, d_x), q_meas, v
    if kind == "alpha-beta":
        alpha, beta = alpha_beta_gains(cutoff_hz, period_s)
        q_pred = q_x + h * v_x
        e = q_meas - q_pred
        q_hat, v_hat = q_pred + alpha * e, v_x + (beta / h) * e
        return ca.vertcat(q_hat, v_hat, d_x), q_hat, v_hat
    l1, l2, l3 = observer_gains(cutoff_hz, period_s)
    v_pred = v_x + model.velocity_increment(q_x, v_x, tau, h, f) + h * d_x
    q_pred = q_x + 0.5 * h * (v_x + v_pred)  # trapezoid: exact under a constant acceleration
    e = q_meas - q_pred
    q_hat, v_hat, d_hat = q_pred + l1 * e, v_pred + (l2 / h) * e, d_x + (l3 / (h * h)) * e
    return ca.vertcat(q_hat, v_hat, d_hat), q_hat, v_hat


def build_step(
    model: EstimationModel,
    kind: str,
    cutoff_hz: float,
    period_s: float,
    gain: float,
    threshold: np.ndarray,
    observer_cutoff_hz: float = math.inf,
    parameters: ca.SX | None = None,
) -> ca.Function:
    """The step function (see the module docstring) with its constants: the filter's cutoff (Hz)
    at the nominal ``period_s`` (s), the observer ``gain`` K (1/s), the per-DOF ``threshold``
    (N·m, N; inf: never detects), the cutoff of the observer's own velocity filter (Hz; inf: none).
    ``parameters``: the symbols ``model`` was built on, the function's last input ``p``."""
    nv = model.nv
    x, o = ca.SX.sym("x", 3 * nv), ca.SX.sym("o", OBSERVER_STATES * nv)
    q_meas, dq_meas, tau, bound, tau_next = (ca.SX.sym(name, nv) for name in ("q_meas", "dq_meas", "tau", "bound", "tau_next"))
    h, f, horizon = ca.SX.sym("h"), ca.SX.sym("f"), ca.SX.sym("horizon")
    integral, p0, beta_last, v_obs, b = o[:nv], o[nv : 2 * nv], o[3 * nv : 4 * nv], o[4 * nv : 5 * nv], o[5 * nv :]
    x_next, q_hat, dq_hat = _velocity(kind, model, x, q_meas, dq_meas, tau, h, f, cutoff_hz, period_s)
    if math.isfinite(observer_cutoff_hz):
        v_obs = v_obs + (1.0 - ca.exp(-2.0 * math.pi * observer_cutoff_hz * h)) * (dq_hat - v_obs)
    else:
        v_obs = dq_hat
    p, beta, g, m = model.momentum(q_hat, v_obs, f)
    known = integral + h * (tau + 0.5 * (beta + beta_last))
    r = gain * (p - p0 - known) / (1.0 + gain * h)
    integral = known + h * r
    # near rest a joint may stick anywhere within its break-away friction whatever the model says at the
    # estimated velocity: its friction is uncertain by that much more (module docstring)
    sticking = ca.exp(-((v_obs / STICK_BAND) ** 2)) * f * ca.fabs(model.friction_force(v_obs))
    b = (b + gain * h * (bound + sticking)) / (1.0 + gain * h)
    limit = ca.DM(np.where(np.isfinite(threshold), threshold, 0.0)) + b
    finite = np.isfinite(threshold)
    ratio = [ca.fabs(r[i]) / limit[i] for i in range(nv) if finite[i]]
    worst = ca.mmax(ca.vertcat(*ratio)) if ratio else ca.SX(0.0)
    shown = ca.vertcat(*(limit[i] if finite[i] else ca.SX(math.inf) for i in range(nv)))
    # the state when the next command acts: the model from the estimate, driven by tau_next
    bias = x_next[2 * nv :] if kind == "model" else ca.SX.zeros(nv)
    dq_pred = dq_hat + model.velocity_increment(q_hat, dq_hat, tau_next, horizon, f) + horizon * bias
    q_pred = q_hat + 0.5 * horizon * (dq_hat + dq_pred)
    outputs = [x_next, ca.vertcat(integral, p0, r, beta, v_obs, b), q_hat, dq_hat, r, g, m, worst, q_pred, dq_pred, shown]
    inputs, names = [x, o, q_meas, dq_meas, tau, h, bound, f, horizon, tau_next], list(STEP_INPUTS)
    if parameters is not None:
        inputs, names = [*inputs, parameters], [*names, "p"]
    return ca.Function(f"estimate_{kind.replace('-', '_')}_{model.robot.ident}", inputs, outputs, names, list(STEP_OUTPUTS))


def initial_state(model: EstimationModel, q: np.ndarray, dq: np.ndarray, momentum: ca.Function, f: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """``(x, o)`` at rest or in motion at ``(q, dq)``: the estimate equal to the measurement,
    ``I = 0``, ``r = 0``, ``b = 0``, ``p0 = M(q) dq`` and ``beta`` at ``(q, dq)`` (``momentum`` evaluates
    ``(p, beta)`` from ``(q, dq, f)``, ``f`` the friction share of the step's input ``f``)."""
    nv = model.nv
    p0, beta = (np.asarray(v).ravel() for v in momentum(q, dq, f))
    return np.concatenate([q, dq, np.zeros(nv)]), np.concatenate([np.zeros(nv), p0, np.zeros(nv), beta, dq, np.zeros(nv)])
