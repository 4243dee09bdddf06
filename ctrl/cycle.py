"""One control cycle as one generated function: the estimate step, the collision check, the law, the
safety checks, the chatter and tracking counters and the log row, from a measurement to the command.

``(y, r, s, m, p_law, p_est, c) -> (tau, row, m_next, status)`` with ``n`` joints:

- ``y`` (3n): measured positions (rad, m), velocities (rad/s, m/s) and drive efforts (N·m, N);
- ``r`` (6n): the reference ``(q_d, dq_d, ddq_d)`` at the two loop-rate samples around the law's
  instant (the instant the command will act: :mod:`mbctl.hardware.sample_timing`);
- ``s`` (:data:`S_SIZE`, named by :data:`S`): ``t`` (s since the start), the sample instant ``t_s`` (s,
  the estimator's clock), the weight ``w`` of the second reference sample (the reference is ``(1 - w)
  r_0 + w r_1``), 1 where the cycle counts in the tracking errors, the cycle's index ``k``, the delay
  ``d`` of the command that acted since the last sample (cycles, at most :data:`SENT_CAPACITY` - 1: the
  command written ``d + 1`` cycles before), the prediction horizon ``H`` (s), 1 where the observer takes
  the measured effort as the torque that acted (else the command ``d``), 1 where the robot keeps its own
  time (the commands next to ``d`` may have acted instead of it, and an interval longer than
  :data:`MEASURED_SPAN` robot periods held more than the last update's measured torque: the spread of
  the commands widens the detection threshold), the sample's instant on
  the loop's clock ``t_sample``, the friction share ``f`` of the estimate step
  (:mod:`mbctl.ctrl.estimation.step`), the ``lead`` of the law's instant over ``t_sample`` (s) and the
  robot's update period ``period_r`` (s);
- ``m``: the memory carried from one cycle to the next (:class:`CycleLayout`): the estimator's
  states and last sample time, the commands written the last :data:`SENT_CAPACITY` cycles, the LuGre
  bristle states, the chatter and saturation counters, the collision flags and the held position,
  the tracking error sums, the last prediction and thresholds;
- ``p_law``, ``p_est``: the robot's numbers of the law (:func:`~mbctl.ctrl.compiled_laws.law_function`)
  and of the estimator (:func:`~mbctl.ctrl.estimation.estimator.step_function`);
- ``c`` (5n): lower and upper positions, velocity and effort limits, the chatter's reversal step.

The law sees the state predicted ``H`` after the sample (a sample read again: the last prediction
carried on at its velocity, ``q + (H - H_last) dq``) and the reference at its own instant; the log's
reference is the one at the sample's instant, ``lead`` earlier, by a second-order Taylor step from
the law's (``q_d - lead dq_d + lead^2 ddq_d / 2``; off by ``lead^3`` times the jerk over 6: 1e-6 rad
for a jerk of 100 rad/s^3 and a lead of 4 ms).

``status`` is ``(code, new_detection)``: code 0 (go on), 1 a joint outside its position or velocity
limits, 3 a non-finite command, 4 a collision with reaction ``stop`` (the row is logged, its ``tau``
NaN, nothing is written). Codes 1 and 3 stop the run before anything is logged, and their ``m_next`` is
not carried on, as the interpreted cycle of :mod:`mbctl.hardware.cycle` raises before its counters move.

A controller that is not a compiled law (the MPC, the task-space law) is called from Python between
two generated calls (:func:`build_cycle_around`): the estimate and the checks before it, the rest after.

Each part is the interpreted cycle's arithmetic, in the same order, so the two agree to round-off:
the estimate (no step for a repeated sample instant: ``h`` under :data:`MIN_STEP` robot periods), the detection (once), then the law
or, after a detection with reaction ``hold``, the compliant hold
(:meth:`~mbctl.ctrl.estimation.estimator.StateEstimator.hold_torque`), the clip to the effort limits
(counted), the torque step statistics (:func:`~mbctl.hardware.summary.chatter_warnings`), the command
queue that feeds the observer the torque the drives applied.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import casadi as ca
import numpy as np

from mbctl.ctrl.estimation.estimator import HOLD_HZ
from mbctl.ctrl.estimation.step import OBSERVER_STATES
from mbctl.dynamics.friction.laws import LuGre

__all__ = ["FOUND", "MEASURED_SPAN", "MIN_STEP", "S", "S_SIZE", "SENT_CAPACITY", "STATUS_BREACH", "STATUS_INVALID", "STATUS_DETECTED", "CycleLayout", "build_cycle", "build_cycle_around"]

STATUS_BREACH, STATUS_INVALID, STATUS_DETECTED = 1, 3, 4
SENT_CAPACITY = 4
"""Commands the cycle keeps for the observer: the command that acted may have been written up to 4 cycles before."""
MIN_STEP = 0.2
"""A sample less than this many robot periods after the last is no step of the estimator (its filter gains,
set for a period, would turn the round-off of so short an interval into a divergence)."""
MEASURED_SPAN = 1.25
"""An interval between two samples longer than this many robot periods held more than one of its updates."""
S = ("t", "t_est", "w", "tracking", "k", "d", "horizon", "measured", "spread", "t_sample", "f", "lead", "period_r")
"""The entries of the cycle's input ``s``, in order (module docstring)."""
S_SIZE = len(S)


@dataclass(frozen=True)
class CycleLayout:
    """Where each quantity sits in the cycle's memory ``m`` and its log row.

    Attributes:
        n: Joints.
        estimating: An estimator runs (else the law sees the measured velocity).
        log_estimates: The row holds ``dq_hat`` and ``tau_ext``.
        memory: Name -> (start, length) in ``m``.
    """

    n: int
    estimating: bool
    log_estimates: bool
    memory: dict[str, tuple[int, int]] = field(default_factory=dict)

    @classmethod
    def of(cls, n: int, estimating: bool, log_estimates: bool) -> CycleLayout:
        sizes = {
            "x": 3 * n, "o": OBSERVER_STATES * n, "t_est": 1, "g": n, "m": n, "sent": SENT_CAPACITY * n, "z": n, "t_law": 1,
            "tau_last": n, "step_last": n, "step_sq": n, "reversals": n, "steps": 1, "saturated": 1, "law_saturated": 1,
            "detected": 1, "holding": 1, "q_hold": n, "sq_error": n, "max_error": 1, "tracked": 1,
            "pred": 2 * n, "pred_h": 1, "threshold": n, "ratio_max": 1,
        }  # fmt: skip
        memory, at = {}, 0
        for name, size in sizes.items():
            memory[name] = (at, size)
            at += size
        return cls(n=n, estimating=estimating, log_estimates=log_estimates, memory=memory)

    @property
    def size(self) -> int:
        """Entries of ``m``."""
        return sum(size for _, size in self.memory.values())

    def part(self, m: np.ndarray | ca.SX, name: str) -> np.ndarray | ca.SX:
        """The entries of ``name`` in the memory ``m``."""
        start, size = self.memory[name]
        return m[start : start + size]


def _inputs(layout: CycleLayout) -> tuple[ca.SX, ca.SX, ca.SX, ca.SX]:
    n = layout.n
    return ca.SX.sym("y", 3 * n), ca.SX.sym("r", 6 * n), ca.SX.sym("s", S_SIZE), ca.SX.sym("c", 5 * n)


def _parameters(name: str, f: ca.Function | None) -> ca.SX:
    """The numbers input of a law or an estimate step (its input ``p``; empty for none)."""
    return ca.SX.sym(name, f.size1_in("p") if f is not None and "p" in f.name_in() else 0)


def _estimate(layout: CycleLayout, estimate: ca.Function | None, reaction: str, y, s, m, p_est, c) -> tuple[dict, dict]:  # noqa: ANN001
    """The estimate step, the prediction and the collision check (once: the first detection is the one
    reported): the memory after it (name -> expression) and what the rest of the cycle needs of it."""
    n = layout.n
    part = lambda name: layout.part(m, name)  # noqa: E731
    out = {name: part(name) for name in layout.memory}
    q, dq_meas, effort = y[:n], y[n : 2 * n], y[2 * n :]
    at = {name: s[i] for i, name in enumerate(S)}
    new_detection, stopping = ca.SX(0), ca.SX(0)
    dq_hat, tau_ext, q_hat = dq_meas, ca.SX.nan(n), q
    q_law, dq_law = q, dq_meas
    if estimate is not None:
        x, o, t_est, sent = part("x"), part("o"), part("t_est"), part("sent")
        h = at["t_est"] - t_est
        stepped = h > MIN_STEP * at["period_r"]
        d = at["d"]

        def command(delay):  # noqa: ANN001, ANN202  the command written delay + 1 cycles before (zeros out of the queue)
            return sum((delay == SENT_CAPACITY - 1 - j) * sent[j * n : (j + 1) * n] for j in range(SENT_CAPACITY))

        applied = command(d)
        spread = [ca.fabs(command(d + e) - applied) * (d + e >= 0) * (d + e <= SENT_CAPACITY - 1) for e in (-1, 1)]
        # measured: the effort is the torque of the robot's last update; a longer interval held earlier ones
        # too, each one of the commands written (their distance to the effort bounds the error)
        longer = at["spread"] * (h > MEASURED_SPAN * at["period_r"])
        beyond = ca.SX.zeros(n)
        for j in range(SENT_CAPACITY):
            beyond = ca.fmax(beyond, ca.fabs(sent[j * n : (j + 1) * n] - effort))
        bound = ca.if_else(at["measured"], longer * beyond, at["spread"] * ca.fmax(*spread))
        tau_in = ca.if_else(at["measured"], effort, applied)
        args = [x, o, q, dq_meas, tau_in, ca.if_else(stepped, h, 1.0), bound, at["f"], at["horizon"], sent[(SENT_CAPACITY - 1) * n :]]
        x1, o1, _, _, _, g1, m1, worst, q_pred, dq_pred, threshold = estimate(*args + ([p_est] if p_est.numel() else []))
        out["x"], out["o"] = ca.if_else(stepped, x1, x), ca.if_else(stepped, o1, o)
        out["t_est"] = ca.if_else(stepped, at["t_est"], t_est)
        out["g"], out["m"] = ca.if_else(stepped, g1, part("g")), ca.if_else(stepped, m1, part("m"))
        q_hat, dq_hat, tau_ext = out["x"][:n], out["x"][n : 2 * n], out["o"][2 * n : 3 * n]
        pred = part("pred")
        # a sample read again: the last prediction carried on to this cycle's horizon
        q_law = ca.if_else(stepped, q_pred, pred[:n] + (at["horizon"] - part("pred_h")) * pred[n:])
        dq_law = ca.if_else(stepped, dq_pred, pred[n:])
        out["pred"] = ca.if_else(stepped, ca.vertcat(q_pred, dq_pred), pred)
        out["pred_h"] = ca.if_else(stepped, at["horizon"], part("pred_h"))
        out["threshold"] = ca.if_else(stepped, threshold, part("threshold"))
        out["ratio_max"] = ca.if_else(stepped, ca.fmax(part("ratio_max"), worst), part("ratio_max"))
        new_detection = (1 - part("detected")) * stepped * (worst > 1)
        out["detected"] = part("detected") + new_detection
        if reaction == "stop":
            stopping = new_detection
        if reaction == "hold":
            out["holding"] = ca.fmax(part("holding"), new_detection)
            out["q_hold"] = ca.if_else(new_detection, q, part("q_hold"))
    wn = 2.0 * math.pi * HOLD_HZ
    tau_hold = out["g"] + out["m"] * (wn * wn * (out["q_hold"] - q_hat) - 2.0 * wn * dq_hat)
    lower, upper, vmax = c[:n], c[n : 2 * n], c[2 * n : 3 * n]
    breach = ca.mmax(ca.vertcat((q < lower) + (q > upper) + (ca.fabs(dq_hat) > vmax), ca.SX(0)))
    found = {"dq_hat": dq_hat, "tau_ext": tau_ext, "tau_hold": tau_hold, "q_law": q_law, "dq_law": dq_law, "stopping": stopping,
             "holding": out["holding"], "breach": breach, "new_detection": new_detection}  # fmt: skip
    return out, found


FOUND = (("dq_hat", 1), ("tau_ext", 1), ("tau_hold", 1), ("q_law", 1), ("dq_law", 1), ("stopping", 0), ("holding", 0), ("breach", 0), ("new_detection", 0))
"""What the estimate part hands to the rest of the cycle: name and whether it is per joint (else one value);
``q_law``, ``dq_law``: the state the law sees (the prediction, or the measurement without an estimator)."""


def _finish(layout: CycleLayout, y, r, s, c, m, out: dict, found: dict, tau) -> tuple[ca.SX, ca.SX, ca.SX, ca.SX]:  # noqa: ANN001
    """The rest of the cycle after a candidate command ``tau``: the status, the clip to the effort
    limits, the counters, the command queue and the row; ``(tau, row, m_next, status)``."""
    n = layout.n
    part = lambda name: layout.part(m, name)  # noqa: E731
    q, dq_meas, effort = y[:n], y[n : 2 * n], y[2 * n :]
    at = {name: s[i] for i, name in enumerate(S)}
    t, w, tracking, k, lead = at["t"], at["w"], at["tracking"], at["k"], at["lead"]
    ref = (1 - w) * r[: 3 * n] + w * r[3 * n :]
    # the reference at the sample's instant, lead before the law's (module docstring)
    q_d = ref[:n] - lead * ref[n : 2 * n] + 0.5 * lead * lead * ref[2 * n :]
    dq_d = ref[n : 2 * n] - lead * ref[2 * n :]
    effort_max, reverse_by = c[3 * n : 4 * n], c[4 * n :]
    stopping = found["stopping"]
    go = 1 - stopping
    finite = ca.mmin(ca.vertcat(ca.fabs(tau) < math.inf, ca.SX(1)))
    code = ca.if_else(stopping, STATUS_DETECTED, ca.if_else(found["breach"], STATUS_BREACH, ca.if_else(finite, 0, STATUS_INVALID)))
    over = ca.fabs(tau) > effort_max
    out["saturated"] = part("saturated") + go * ca.sum1(over)
    tau = ca.fmin(ca.fmax(tau, -effort_max), effort_max)

    # the torque step statistics, from the second cycle on (reversals from the third)
    step = tau - part("tau_last")
    counted = go * (k >= 1)
    out["step_sq"] = part("step_sq") + counted * step * step
    back = ca.fmin(ca.fabs(step), ca.fabs(part("step_last")))
    reversed_ = (step * part("step_last") < 0) * (back > reverse_by)
    out["reversals"] = part("reversals") + counted * (k >= 2) * reversed_
    out["step_last"] = ca.if_else(counted, step, part("step_last"))
    out["steps"] = part("steps") + counted
    out["tau_last"] = ca.if_else(go, tau, part("tau_last"))
    if layout.estimating:
        sent = part("sent")
        out["sent"] = ca.if_else(go, ca.vertcat(sent[n:], tau), sent)

    error = q - q_d
    out["sq_error"] = part("sq_error") + tracking * error * error
    out["max_error"] = ca.if_else(tracking, ca.fmax(part("max_error"), ca.mmax(ca.fabs(error))), part("max_error"))
    out["tracked"] = part("tracked") + tracking

    columns = [t, ca.SX.nan(), ca.SX.nan(), 1.0, at["t_sample"], q, dq_meas, q_d, dq_d, ca.if_else(stopping, ca.SX.nan(n), tau), effort]
    if layout.log_estimates:
        columns += [found["dq_hat"], found["tau_ext"]]
    row = ca.vertcat(*columns, ca.SX.nan(4))
    m_next = ca.vertcat(*(out[name] for name in layout.memory))
    return tau, row, m_next, ca.vertcat(code, found["new_detection"])


def build_cycle(
    layout: CycleLayout,
    law: ca.Function,
    estimate: ca.Function | None,
    reaction: str,
    lugre: list[tuple[int, LuGre]],
    measured_friction: bool,
) -> ca.Function:
    """The cycle function (module docstring) of a law ``(q, dq, q_d, dq_d, ddq_d, z[, p]) -> (tau,
    tau_demand, saturated)`` and an estimate step of :func:`~mbctl.ctrl.estimation.step.build_step`
    (None: no estimator); ``reaction`` to a collision (``stop``, ``hold``, ``none``); the LuGre joints
    ``(index, law)`` whose bristle states the law takes, stepped at the measured (estimated) velocity
    or at the desired one."""
    n = layout.n
    y, r, s, c = _inputs(layout)
    m = ca.SX.sym("m", layout.size)
    p_law, p_est = _parameters("p_law", law), _parameters("p_est", estimate)
    out, found = _estimate(layout, estimate, reaction, y, s, m, p_est, c)
    part = lambda name: layout.part(m, name)  # noqa: E731

    # the law, its LuGre bristles stepped first; or the compliant hold
    t, w = s[0], s[2]
    ref = (1 - w) * r[: 3 * n] + w * r[3 * n :]
    q_d, dq_d, ddq_d = ref[:n], ref[n : 2 * n], ref[2 * n :]
    q_law, dq_law = found["q_law"], found["dq_law"]
    z, dt = part("z"), t - part("t_law")
    v = dq_law if measured_friction else dq_d
    laws = dict(lugre)
    z_new = ca.vertcat(*(laws[i].z_step(z[i], v[i], dt) if i in laws else z[i] for i in range(n)))
    tau_law, _, flags = law(*[q_law, dq_law, q_d, dq_d, ddq_d, z_new] + ([p_law] if p_law.numel() else []))
    law_ran = (1 - found["stopping"]) * (1 - found["holding"])
    out["z"] = ca.if_else(law_ran, z_new, z)
    out["t_law"] = ca.if_else(law_ran, t, part("t_law"))
    out["law_saturated"] = part("law_saturated") + law_ran * ca.mmax(flags)
    tau = ca.if_else(found["holding"], found["tau_hold"], tau_law)
    outputs = _finish(layout, y, r, s, c, m, out, found, tau)
    return ca.Function(
        f"cycle_{law.name()}", [y, r, s, m, p_law, p_est, c], list(outputs),
        ["y", "r", "s", "m", "p_law", "p_est", "c"], ["tau", "row", "m_next", "status"],
    )  # fmt: skip


def build_cycle_around(layout: CycleLayout, estimate: ca.Function | None, reaction: str, name: str) -> tuple[ca.Function, ca.Function]:
    """The cycle of a controller called from Python between two generated calls:

    - ``before(y, s, m, p_est, c) -> (found, m_mid)``: the estimate step, the collision check and the
      limit check; ``found`` holds, in the order of :data:`FOUND`, the estimated velocity and external
      torques, the compliant hold's torques and the flags (stopping, holding, breach, new detection);
    - ``after(y, r, s, m_mid, found, tau_controller, c) -> (tau, row, m_next, status)``: given the controller's
      command ``tau_controller`` (ignored while holding), the rest of the cycle, as :func:`build_cycle`'s.
    """
    n = layout.n
    y, r, s, c = _inputs(layout)
    m = ca.SX.sym("m", layout.size)
    p_est = _parameters("p_est", estimate)
    out, found = _estimate(layout, estimate, reaction, y, s, m, p_est, c)
    packed = ca.vertcat(*(found[key] for key, _ in FOUND))
    m_mid = ca.vertcat(*(out[key] for key in layout.memory))
    before = ca.Function(f"cycle_before_{name}", [y, s, m, p_est, c], [packed, m_mid], ["y", "s", "m", "p_est", "c"], ["found", "m_mid"])
    m_in, found_in, tau_in = ca.SX.sym("m_mid", layout.size), ca.SX.sym("found", packed.numel()), ca.SX.sym("tau", n)
    unpacked, at = {}, 0
    for key, per_joint in FOUND:
        size = n if per_joint else 1
        unpacked[key], at = found_in[at : at + size], at + size
    out = {key: layout.part(m_in, key) for key in layout.memory}
    tau = ca.if_else(unpacked["holding"], unpacked["tau_hold"], tau_in)
    after = ca.Function(
        f"cycle_after_{name}", [y, r, s, m_in, found_in, tau_in, c], list(_finish(layout, y, r, s, c, m_in, out, unpacked, tau)),
        ["y", "r", "s", "m_mid", "found", "tau_controller", "c"], ["tau", "row", "m_next", "status"],
    )  # fmt: skip
    return before, after
