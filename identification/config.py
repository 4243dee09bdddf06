"""Experiment plans of ``mbctl identify run``: a robot's ``[identification]`` spec for one joint.

The TOML is described in :mod:`mbctl.config.identification`; command-line options
override it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mbctl.dynamics.friction.laws import CoulombViscous, LuGre, Stribeck
from mbctl.dynamics.model.per_joint import check_joint_names
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import ConfigError, InputError
from mbctl.identification.experiments import prior_slip_distance
from mbctl.identification.plan import (
    ConstantSpeedPlan,
    ControlGains,
    PreslidingPlan,
    constant_speed_timeline,
    speed_grid,
)

__all__ = ["IdentificationSettings", "identification_settings"]

@dataclass(frozen=True)
class IdentificationSettings:
    """Everything ``identify run`` needs for one joint.

    Attributes:
        rate_hz: Loop rate (Hz).
        gains: Host-side loop scaling.
        start: Simulated plant's initial DOF positions (rad, m).
        constant_speed: The constant-speed plan.
        presliding: The presliding plan, or None if no break-away torque is known.
        presliding_problem: Why there is no presliding plan.
    """

    rate_hz: float
    gains: ControlGains
    start: np.ndarray
    constant_speed: ConstantSpeedPlan | None
    presliding: PreslidingPlan | None
    constant_speed_problem: str = ""
    presliding_problem: str = ""


def _number(fields: dict, key: str, default: float | None) -> float | None:
    return float(fields[key][0]) if key in fields else default


def identification_settings(robot: RobotModel, joint: str, overrides: dict[str, object] | None = None) -> IdentificationSettings:
    """Plans for ``joint`` from ``[identification]`` and command-line ``overrides`` (same keys).

    Raises:
        ConfigError: For a bad field (file and dotted name).
        InputError: For a plan that cannot run (range outside the limits, a speed above
            the velocity limit, a leg too short for its speed).
    """
    j = robot.joint(joint)
    if not all(x.actuated for x in robot.joints):
        raise ConfigError("identification needs every joint actuated (the joints not tested are held by their drives)", file=robot.source)
    spec = robot.spec.identification if robot.spec is not None else None
    fields = spec.fields(joint) if spec is not None else {}
    file = spec.file if spec is not None else robot.source
    if spec is not None:
        check_joint_names(robot, spec.joints, file=file, field="identification.joints")
    ov = {k: v for k, v in (overrides or {}).items() if v is not None}
    unit_small = 1.0 if j.kind == "revolute" else 0.1

    rate = float(ov.get("rate_hz", _number(fields, "rate_hz", 1000.0)))
    gains = ControlGains(
        bandwidth_hz=_number(fields, "bandwidth_hz", 10.0),
        damping=_number(fields, "damping", 1.0),
        integral=_number(fields, "integral", 0.3),
    )
    start = np.zeros(robot.nv)
    if "start" in fields:
        values, where = fields["start"]
        check_joint_names(robot, values, file=file, field=where)
        for name, value in values.items():
            start[robot.joint(name).idx_v] = value

    law = j.friction.law if j.friction else None
    lo_lim, hi_lim = j.limits.lower, j.limits.upper
    vlim = j.limits.velocity

    # -- constant speed ---------------------------------------------------------------------
    problem = ""
    plan = None
    if "range" in ov:
        rng_ = tuple(float(x) for x in ov["range"])  # type: ignore[union-attr]
        field_range = "--range"
    elif "range" in fields:
        rng_, field_range = fields["range"]
    else:
        mid = 0.5 * (lo_lim + hi_lim) if math.isfinite(lo_lim) and math.isfinite(hi_lim) else 0.0
        half = min(0.25 * (hi_lim - lo_lim), 0.5 * unit_small) if math.isfinite(hi_lim - lo_lim) else 0.5 * unit_small
        rng_ = (mid - half, mid + half)
        field_range = "range"
    if not rng_[0] < rng_[1]:
        raise InputError(f"range {rng_[0]:g}..{rng_[1]:g} must be increasing", file=file, field=field_range)
    if rng_[0] < lo_lim or rng_[1] > hi_lim:
        raise InputError(f"range {rng_[0]:g}..{rng_[1]:g} leaves the joint's position limits {lo_lim:g}..{hi_lim:g}", file=file, field=field_range)

    vs_prior = law.vs if isinstance(law, (Stribeck, LuGre)) else None
    vs = ov.get("stribeck_velocity", _number(fields, "stribeck_velocity", vs_prior))
    speeds_field = "--speeds" if "speeds" in ov else (fields["speeds"][1] if "speeds" in fields else "speeds")
    if "speeds" in ov:
        speeds = np.array(ov["speeds"], dtype=float)
    elif "speeds" in fields:
        speeds = np.array(fields["speeds"][0], dtype=float)
    else:
        speeds = None
    if speeds is None and vs is None:
        problem = (f"no speeds: set identification.stribeck_velocity (the expected Stribeck velocity of {joint}) "
                   "or identification.speeds, or give --speeds; the joint's friction law has no vs")
    else:
        if speeds is None:
            count = int(ov.get("count", _number(fields, "count", 25)))
            if count < 2:
                # the option when it came from the command line, else the file's field
                count_field = "--count" if "count" in ov else (fields["count"][1] if "count" in fields else "count")
                raise InputError("must be >= 2", file=file, field=count_field)
            # fast enough for the Stribeck curve's tail, slow enough to cruise 2*settle_s + 0.1 s
            # over 75 % of the range (the default acceleration takes 20 %; a margin)
            settle = float(ov.get("settle_s", _number(fields, "settle_s", 0.2)))
            vmax_default = min(40 * vs, 0.75 * (rng_[1] - rng_[0]) / (2 * settle + 0.1))
            if math.isfinite(vlim):
                vmax_default = min(vmax_default, 0.8 * vlim)
            v_min = float(ov.get("min_speed", _number(fields, "min_speed", 0.1 * vs)))
            v_max = float(ov.get("max_speed", _number(fields, "max_speed", vmax_default)))
            if not v_min < v_max:
                raise InputError(f"min_speed {v_min:g} must be below max_speed {v_max:g}", file=file, field="min_speed")
            speeds = speed_grid(v_min, v_max, count, float(vs))
        if len(speeds) == 0 or not np.all(speeds > 0):
            raise InputError("speeds must be > 0", file=file, field=speeds_field)
        if math.isfinite(vlim) and speeds.max() > vlim:
            raise InputError(f"speed {speeds.max():g} exceeds the joint's velocity limit {vlim:g}", file=file, field=speeds_field)
        length = rng_[1] - rng_[0]
        accel = ov.get("acceleration", _number(fields, "acceleration", speeds.max() ** 2 / (0.2 * length)))
        order = np.sort(speeds)
        randomize = bool(ov["randomize"]) if "randomize" in ov else bool(fields["randomize"][0]) if "randomize" in fields else False
        if randomize:
            seed = int(ov.get("seed", _number(fields, "seed", 0.0)))
            order = np.random.default_rng(seed).permutation(order)
        plan = ConstantSpeedPlan(
            joint=joint,
            speeds=tuple(float(v) for v in order),
            range=(float(rng_[0]), float(rng_[1])),
            settle_s=float(ov.get("settle_s", _number(fields, "settle_s", 0.2))),
            acceleration=float(accel),
            max_leg_s=float(ov.get("max_leg_s", _number(fields, "max_leg_s", 20.0))),
            transit_speed=float(ov.get("transit_speed", _number(fields, "transit_speed", 0.5 * float(speeds.max())))),
        )
        try:
            constant_speed_timeline(plan, float(start[j.idx_v]))
        except ValueError as exc:
            raise InputError(str(exc), file=file, field=field_range) from None

    # -- presliding ------------------------------------------------------------------------
    prior_break = None
    if isinstance(law, (Stribeck, LuGre)):
        prior_break = law.fs
    elif isinstance(law, CoulombViscous) and law.fc > 0:
        prior_break = law.fc
    brk = ov.get("breakaway", _number(fields, "breakaway", prior_break))
    pre = None
    pre_problem = ""
    if brk is None:
        pre_problem = f"no expected break-away torque: set identification.breakaway for {joint} (its friction law gives none)"
    else:
        rates = np.array(fields["ramp_rates"][0] if "ramp_rates" in fields else (0.25, 0.5, 1.0))
        pre = PreslidingPlan(
            joint=joint,
            breakaway=float(brk),
            amplitude=_number(fields, "presliding_amplitude", 0.5),
            cycle_s=_number(fields, "cycle_s", 4.0),
            step=_number(fields, "step", 0.1),
            step_s=_number(fields, "step_s", 0.5),
            ramp_rates=tuple(float(r) for r in rates),
            max_torque=_number(fields, "max_torque", 2.0),
            slip_distance=_number(fields, "slip_distance", prior_slip_distance(robot, joint, float(brk))),
            hold_s=_number(fields, "hold_s", 1.0),
        )
        if pre.amplitude >= 1 or pre.step >= 1:
            pre_problem = "presliding_amplitude and step must stay below 1 (fractions of the break-away torque)"
            pre = None
    return IdentificationSettings(
        rate_hz=rate, gains=gains, start=start, constant_speed=plan, presliding=pre,
        constant_speed_problem=problem, presliding_problem=pre_problem,
    )

