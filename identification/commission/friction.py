"""Friction experiments: each joint in turn, inside the envelope, the others held; a law fitted per joint.

This is ``mbctl identify run`` + ``mbctl identify fit`` on every joint in turn, with the plan fitted
to the envelope: the same controller (:class:`~mbctl.identification.experiments.ExperimentController`:
PID on position along the plan plus the nominal model's feed-forward, the other joints held where
they are) and the same processing and fit (:func:`~mbctl.identification.pipeline.identify`). The plan
per joint (:func:`~mbctl.identification.config.identification_settings` with these overrides):

- the robot's ``[identification]`` table where it plans the joint (range, speeds, legs, gains,
  presliding), overridden by the command line, and otherwise :data:`SWEEP_DEFAULTS`; so a robot
  whose table plans ``identify run`` gets the same experiment here (at the command's rate);
- range: ``q0 ± sweep`` of the tested joint, moved inward where it would leave the envelope, and
  shortened to 90 % of the envelope's range where that is narrower (a table's range that leaves
  the envelope stops the step);
- speeds: ``count`` log-spaced around the Stribeck velocity from 0.1 ``vs`` up to what the range
  and ``max_leg_s`` allow, below the envelope's speed;
- after the last leg a quintic transit back to ``q0`` and a hold: the next joint starts where the
  previous one did;
- the loops: :class:`~mbctl.identification.experiments.ExperimentController` with ``coupled=True``,
  its PD through the nominal mass matrix, so that the held joints hold at long periods (4 ms) as
  well as at 1 ms; the bandwidth at most :func:`~mbctl.identification.commission.context.max_bandwidth`
  of the rate, and a default one (the 10 Hz of :data:`SWEEP_DEFAULTS`) at most the well-damped
  :data:`~mbctl.identification.commission.context.DAMPED_LOOP_PHASE` of it (6 Hz at 250 Hz), with a
  line saying so.

Every sweep is planned, and checked against the robot's keep-out from the start pose, before the
commissioning moves the arm (:func:`plan_sweeps`); each is checked again from where the arm is when
it runs.

Results per joint: the fitted law with standard errors and confidence intervals (Student's t), the
processed points, and the fitted curve with its pointwise 95 % band (delta method) for the report.
"""

from __future__ import annotations

import dataclasses
import math
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.ctrl.keepout import check_keepout
from mbctl.dynamics.friction.laws import CoulombViscous, LuGre, Stribeck
from mbctl.errors import DataError, InputError
from mbctl.hardware.session import open_backend
from mbctl.identification.commission.context import DAMPED_LOOP_PHASE, MAX_LOOP_PHASE, Commission, StepStopped, max_bandwidth
from mbctl.identification.commission.runs import summary_json
from mbctl.identification.config import IdentificationSettings, identification_settings
from mbctl.identification.experiments import ExperimentController, presliding_timeline, run_experiment
from mbctl.identification.logs import write_constant_speed_log, write_presliding_log
from mbctl.identification.pipeline import identify
from mbctl.identification.plan import Phase, Timeline, constant_speed_timeline
from mbctl.identification.report import result_json

__all__ = ["Sweep", "check_sweeps", "friction", "law_of", "plan_sweeps", "sweep_motion", "sweep_timeline"]


def friction(c: Commission, results: dict[str, dict]) -> dict:
    """The ``friction`` step (module docstring); returns its JSON result."""
    s = c.settings
    folder = c.step_dir("friction")
    out: dict[str, dict] = {}
    arm_time = 0.0
    sweeps = plan_sweeps(c)
    for n, (joint, sweep) in enumerate(sweeps.items(), 1):
        settings, plan = sweep.settings, sweep.settings.constant_speed
        k = c.robot.actuated_names.index(joint)
        if sweep.note:
            c.say(f"friction {joint}: {sweep.note}")
        with open_backend(c.run_robot, c.options, c.q0) as backend:
            here = float(backend.read().q[k])
            timeline = sweep_timeline(sweep, here)
            check_keepout(c.robot, *sweep_motion(c, joint, timeline, c.options.rate_hz), f"the friction sweep of {joint}")
            c.say(f"friction {joint} ({n}/{len(sweeps)}): {len(plan.speeds)} speeds {min(plan.speeds):.3g} .. {max(plan.speeds):.3g}, "
                  f"range {plan.range[0]:.4g} .. {plan.range[1]:.4g}, {timeline.duration:.1f} s of arm time")
            controller = ExperimentController(c.run_robot, joint, timeline, settings.gains, coupled=True)
            run = run_experiment(backend, c.run_robot, controller, rate_hz=c.options.rate_hz, paced=c.paced, npz_path=folder / f"{joint}.npz", kind="constant-speed")
        arm_time += run.summary.duration_s
        c.check_run("friction", f"the constant-speed sweep of {joint}", run.summary)
        log_path = folder / f"{joint}.csv"
        write_constant_speed_log(log_path, run.constant_speed)
        pre_log = None
        if s.presliding:
            if settings.presliding is None:
                raise StepStopped("friction", f"{joint}: no presliding plan: {settings.presliding_problem}")
            pre_timeline = presliding_timeline(settings.presliding)
            c.say(f"presliding {joint}: expected break-away {settings.presliding.breakaway:.4g}, {pre_timeline.duration:.1f} s of arm time")
            controller = ExperimentController(c.run_robot, joint, pre_timeline, settings.gains, settings.presliding, coupled=True)
            with open_backend(c.run_robot, c.options, c.q0) as backend, tempfile.TemporaryDirectory() as tmp:
                pre = run_experiment(backend, c.run_robot, controller, rate_hz=c.options.rate_hz, paced=c.paced, npz_path=Path(tmp) / "pre.npz", kind="presliding")
            arm_time += pre.summary.duration_s
            c.check_run("friction", f"the presliding test of {joint}", pre.summary)
            for note in pre.notes:
                c.say(f"presliding {joint}: {note}")
            write_presliding_log(folder / f"{joint}_presliding.csv", pre.presliding)
            pre_log = dataclasses.replace(pre.presliding, source=folder / f"{joint}_presliding.csv")
        log = dataclasses.replace(run.constant_speed, source=log_path)
        try:
            result = identify(log, joint, s.friction_law, delta=2.0, settle_s=plan.settle_s, presliding=pre_log)
        except (DataError, InputError) as exc:
            raise StepStopped("friction", f"the fit of {joint} failed: {exc}") from None
        values = result.law.parameters()
        ci = result.fit.ci
        c.say(f"friction {joint}: {result.law.name} " + ", ".join(
            f"{key} {v:.4g}" + (f" [{ci[key][0]:.4g}, {ci[key][1]:.4g}]" if key in ci else "") for key, v in values.items() if key != "delta"))
        pts = result.processed.points
        v = np.geomspace(pts.speed.min() / 1.5, pts.speed.max() * 1.5, 120)
        out[joint] = {
            **result_json(result),
            "log": log_path.name,
            "run": summary_json(run.summary),
            "bandwidth_hz": settings.gains.bandwidth_hz,
            "curve": {"speed": v.tolist(), "friction": result.fit.predict(v).tolist(), "band": result.fit.band(v).tolist(), "confidence": result.fit.confidence},
            "nominal": None if c.robot.joint(joint).friction is None else {"law": c.robot.joint(joint).friction.law.name, **c.robot.joint(joint).friction.law.parameters()},
        }
    return {"law": s.friction_law, "joints": out, "arm_time_s": arm_time}


@dataclass(frozen=True)
class Sweep:
    """One joint's planned friction experiment.

    Attributes:
        settings: ``identify run``'s plans for the joint (the constant-speed one is set).
        note: What the plan changed from what was asked, in words, or "".
    """

    settings: IdentificationSettings
    note: str = ""


def plan_sweeps(c: Commission) -> dict[str, Sweep]:
    """Every swept joint's plan (module docstring), by joint, in the order they run.

    Raises:
        InputError: For a plan that cannot run (naming the field or option at fault).
    """
    return {joint: _sweep(c, joint) for joint in c.settings.friction_joints or c.robot.actuated_names}


def check_sweeps(c: Commission) -> None:
    """Every sweep, from the start pose, against the robot's keep-out (:mod:`mbctl.ctrl.keepout`).

    Raises:
        KeepoutError: Naming the sweep, the frame, the time and the height.
    """
    for joint, sweep in plan_sweeps(c).items():
        here = float(c.q0[c.robot.joint(joint).idx_v])
        check_keepout(c.robot, *sweep_motion(c, joint, sweep_timeline(sweep, here), c.options.rate_hz), f"the friction sweep of {joint}")


def sweep_timeline(sweep: Sweep, here: float) -> Timeline:
    """The sweep's phases from ``here`` (rad, m), ending back there."""
    plan = sweep.settings.constant_speed
    return _back_to(constant_speed_timeline(plan, here), here, plan.transit_speed, plan.acceleration)


def sweep_motion(c: Commission, joint: str, timeline: Timeline, rate_hz: float) -> tuple[np.ndarray, np.ndarray]:
    """Sample times (s) and every DOF's positions (rad, m) of a sweep at ``rate_hz``: the joint along
    the timeline's reference, the others at the start pose."""
    t = np.arange(int(math.floor(timeline.duration * rate_hz)) + 1) / rate_hz
    x, _, _ = timeline.reference(t)
    good = np.isfinite(x)
    x = x[np.maximum.accumulate(np.where(good, np.arange(len(x)), 0))]  # a hold without a position keeps the last one
    x = np.where(np.isfinite(x), x, float(c.q0[c.robot.joint(joint).idx_v]))
    q = np.tile(c.q0, (len(t), 1))
    q[:, c.robot.joint(joint).idx_v] = x
    return t, q


SWEEP_DEFAULTS = {"count": 10, "max_leg_s": 2.0, "settle_s": 0.2}
"""The plan where neither the command line nor the robot's ``[identification]`` gives one (with a range of
the start ± 0.5 rad or m): short legs keep the arm time small."""
SWEEP_HALF_RANGE = 0.5


def _sweep(c: Commission, joint: str) -> Sweep:
    """``identify run``'s plan for ``joint`` (module docstring): the command line's choices, else the robot's
    ``[identification]`` ones, else :data:`SWEEP_DEFAULTS`; the range fitted to the envelope, the loop
    bandwidth to the rate."""
    s = c.settings
    ident = c.robot.spec.identification if c.robot.spec is not None else None
    fields = ident.fields(joint) if ident is not None else {}
    overrides: dict[str, object] = {"rate_hz": c.options.rate_hz}
    for key, given in (("count", s.speeds), ("max_leg_s", s.max_leg_s), ("settle_s", s.settle_s)):
        if given is not None or key not in fields:
            overrides[key] = given if given is not None else SWEEP_DEFAULTS[key]
    if s.sweep is not None or "range" not in fields:
        i = c.envelope.joint_names.index(joint)
        lo, hi = float(c.envelope.lower[i]), float(c.envelope.upper[i])
        wanted = s.sweep if s.sweep is not None else SWEEP_HALF_RANGE
        here = float(c.q0[c.robot.joint(joint).idx_v])
        half = min(wanted, 0.45 * (hi - lo)) if math.isfinite(hi - lo) else wanted
        centre = float(np.clip(here, lo + half, hi - half)) if math.isfinite(hi - lo) else here
        overrides["range"] = (centre - half, centre + half)
    law = c.robot.joint(joint).friction.law if c.robot.joint(joint).friction is not None else None
    if not isinstance(law, (Stribeck, LuGre)) and "stribeck_velocity" not in fields and "speeds" not in fields:
        overrides["stribeck_velocity"] = s.stribeck_velocity
    if s.presliding and not isinstance(law, (Stribeck, LuGre, CoulombViscous)) and "breakaway" not in fields:
        torque = float(c.envelope.torque[c.envelope.joint_names.index(joint)])
        overrides["breakaway"] = 0.05 * torque if math.isfinite(torque) else 1.0
    try:
        settings = identification_settings(c.run_robot, joint, overrides)
    except InputError as exc:
        raise type(exc)(f"the friction sweep of {joint} does not fit the envelope: {exc.reason}", file=exc.file, field=exc.field) from None
    if settings.constant_speed is None:
        raise InputError(f"the friction sweep of {joint}: {settings.constant_speed_problem}", file=c.robot.source, field="identification")
    bandwidth, note, top = settings.gains.bandwidth_hz, "", max_bandwidth(c.options.rate_hz)
    if joint in s.bandwidth_hz:
        bandwidth = s.bandwidth_hz[joint]  # checked against the rate with the settings
    elif bandwidth > top and "bandwidth_hz" in fields:
        raise InputError(f"{bandwidth:g} Hz is more than a loop at {c.options.rate_hz:g} Hz holds (at most {top:.3g} Hz: 2 pi f / rate <= {MAX_LOOP_PHASE:g})",
                         file=ident.file, field=fields["bandwidth_hz"][1])
    elif "bandwidth_hz" not in fields and bandwidth > (damped := max_bandwidth(c.options.rate_hz, DAMPED_LOOP_PHASE)):
        bandwidth, note = damped, (f"loop bandwidth {damped:.3g} Hz, well damped at {c.options.rate_hz:g} Hz with a drive's delay "
                                   f"(instead of {settings.gains.bandwidth_hz:g} Hz; --bandwidth up to {top:.3g} Hz)")
    return Sweep(dataclasses.replace(settings, gains=dataclasses.replace(settings.gains, bandwidth_hz=bandwidth)), note)


def _back_to(timeline: Timeline, q: float, speed: float, acceleration: float) -> Timeline:
    """``timeline`` followed by a quintic transit back to ``q`` (rad, m) and a hold of 0.2 s."""
    last = timeline.phases[-1]
    t, end = last.t1, last.q1
    d = abs(end - q)
    # quintic: peak speed 1.875 d / T, peak acceleration 5.7735 d / T² (as identify run's own transits)
    T = max(0.2, 1.875 * d / speed, math.sqrt(5.7735 * d / acceleration))
    back = Phase("transit", t, t + T, end, q)
    return Timeline(timeline.phases + (back, Phase("hold", t + T, t + T + 0.2, q, q)))


def law_of(entry: dict) -> CoulombViscous | Stribeck | LuGre:
    """The friction law of one joint's JSON result."""
    p = dict(entry["parameters"])
    name = entry["law"]
    if name == "coulomb-viscous":
        return CoulombViscous(fc=p["fc"], fv=p["fv"])
    if name == "stribeck":
        return Stribeck(fc=p["fc"], fs=p["fs"], vs=p["vs"], fv=p["fv"], delta=p.get("delta", 2.0))
    return LuGre(fc=p["fc"], fs=p["fs"], vs=p["vs"], fv=p["fv"], sigma0=p["sigma0"], sigma1=p["sigma1"])
