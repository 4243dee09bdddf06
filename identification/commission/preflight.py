"""Pre-flight: the envelope, the rate and the start pose, a hold test at the start pose, the drives and sensing.

The hold test runs the computed-torque law of the *nominal* model (its gravity compensation
``g(q0)`` and the ``[control.computed-torque]`` gains) on a constant reference ``q0`` for
``hold_s`` seconds. It runs on a copy of the robot whose position range is the envelope narrowed
to ``q0 ± hold_drift``: the loop's own limit check stops it, torque off, the moment a joint drifts
further (a wrong sign, a gravity model far off, a drive that does not move as commanded).

Drives stay where they were left, and a run starts within 0.05 rad of its trajectory's start: an
arm between ``hold_drift`` and 0.05 rad off the start pose would start the hold test outside its
narrowed range and stop it on the first cycle. So an arm off the start pose by more than 1 mrad is
first moved there (:meth:`~mbctl.identification.commission.context.Commission.bring_to_start`, a
quintic at half the speed limits, checked against the keep-out), then held.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.hardware.session import run_session
from mbctl.identification.commission.context import Commission, StepStopped
from mbctl.identification.commission.envelope import start_origin
from mbctl.identification.commission.runs import actuated, drift_of, summary_json

__all__ = ["preflight"]


def preflight(c: Commission, results: dict[str, dict]) -> dict:
    """The ``preflight`` step (module docstring); returns its JSON result."""
    s = c.settings
    env = c.envelope
    names = c.robot.actuated_names
    for i, name in enumerate(names):
        c.say(f"envelope {name}: {env.lower[i]:.4g} .. {env.upper[i]:.4g}, |dq| <= {env.velocity[i]:.4g}, |tau| <= {env.torque[i]:.4g}")
    control = c.robot.spec.control if c.robot.spec is not None else None
    if control is None or control.computed_torque is None:
        c.say("no [control.computed-torque] gains: computed torque runs with kp 400 1/s², kd 40 1/s (20 rad/s, critically damped)")
    q0 = c.q0
    c.say(f"rate {c.options.rate_hz:g} Hz ({c.rate_source})")
    c.say("start pose " + ", ".join(f"{n} {q0[c.robot.joint(n).idx_v]:.6g}" for n in c.robot.joint_names) + f" (from {start_origin(c.robot, s.start)})")
    c.bring_to_start("preflight")
    hold = _hold_robot(c)
    traj = quintic_rest_to_rest(np.vstack([q0, q0]), [s.hold_s], c.options.rate_hz, c.robot.joint_names)
    log = c.step_dir("preflight") / "hold.npz"
    c.say(f"hold test: computed torque (nominal model) at the start pose for {s.hold_s:g} s, drift bound {s.hold_drift:g}")
    summary = run_session(hold, traj, dataclasses.replace(c.options, law="computed-torque"), log)
    drift = drift_of(log, names, actuated(c.robot, q0))
    result = {
        "envelope": env.to_json(),
        "start": {n: float(q0[c.robot.joint(n).idx_v]) for n in c.robot.joint_names},
        "start_from": start_origin(c.robot, s.start),
        "hold": {"seconds": s.hold_s, "bound": s.hold_drift, "max_drift": dict(zip(names, drift)), "summary": summary_json(summary)},
        "arm_time_s": summary.duration_s,
        "backend": {"plant": c.options.plant, "emulate": c.options.emulate, "lockstep": c.options.lockstep, "rate_hz": c.options.rate_hz, "rate_from": c.rate_source,
                    "drives": _drives(c), "sensing": summary.sensing, "estimation": summary.estimation},
    }
    c.say(f"hold test: {summary.stop_reason}; largest drift " + ", ".join(f"{n} {d:.3g}" for n, d in zip(names, drift)))
    c.say(f"sensing: {summary.sensing}")
    if not summary.completed:
        raise StepStopped("preflight", f"the hold test stopped ({summary.stop_reason}); the drift bound is {s.hold_drift:g}, torque is off")
    return result


def _hold_robot(c: Commission):
    """The enveloped robot with each actuated joint's range narrowed to ``q0 ± hold_drift``."""
    robot = c.run_robot
    joints = []
    for j in robot.joints:
        if j.actuated:
            x = float(c.q0[j.idx_v])
            lim = dataclasses.replace(j.limits, lower=max(j.limits.lower, x - c.settings.hold_drift), upper=min(j.limits.upper, x + c.settings.hold_drift))
            j = dataclasses.replace(j, limits=lim)
        joints.append(j)
    return dataclasses.replace(robot, joints=tuple(joints))


def _drives(c: Commission) -> str:
    """The drives in words: the bus and its nodes, or the simulated plant."""
    if c.options.plant == "sim":
        return "simulated plant (the robot's [plant] truth)"
    drives = c.robot.spec.drives if c.robot.spec is not None else None
    what = {"dynamixel": "Dynamixel servos", "canopen": "CiA 402 drives on CANopen", "ros2": "ros2_control arm"}.get(c.options.plant, c.options.plant)
    table = getattr(drives, "drives", None) or getattr(drives, "servos", None) or {}
    nodes = ", ".join(f"{name} (id {getattr(d, 'node_id', getattr(d, 'id', '?'))})" for name, d in table.items())
    return what + (" (emulated)" if c.options.emulate else "") + (f": {nodes}" if nodes else "")
