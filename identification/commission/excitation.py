"""Excitation: a Fourier trajectory optimised for the base parameters inside the envelope, run closed
loop with the nominal model's computed torque and logged.

The design is ``mbctl trajectory excitation`` (:func:`mbctl.ctrl.excitation.design_excitation`) on the
enveloped robot, so its position, speed and torque limits are the envelope's (less the design's own
10 % headroom for tracking errors). On a robot with a keep-out it is designed about the start pose and
its ranges narrowed until it stays clear of the keep-out
(:func:`mbctl.ctrl.keepout_excitation.excitation_clear_of_keepout`). Quintic transits take the arm
from the start pose to the trajectory's start and back
(:func:`~mbctl.identification.commission.runs.via_start`); the whole run, transits included, is
checked against the keep-out before it runs, logged and fitted.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from mbctl.ctrl.excitation import design_excitation
from mbctl.ctrl.keepout import KeepoutError
from mbctl.ctrl.keepout_excitation import excitation_clear_of_keepout
from mbctl.ctrl.trajectory import Trajectory, write_trajectory
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import DataError, InputError
from mbctl.hardware.session import run_session
from mbctl.identification.commission.context import Commission, StepStopped
from mbctl.identification.commission.runs import summary_json, via_start

__all__ = ["excitation", "design"]


def design(c: Commission, step: str, seed: int, period_s: float) -> tuple[Trajectory, dict]:
    """An excitation of every actuated joint inside the envelope, with transits from and back to ``q0``;
    and its diagnostics."""
    s = c.settings
    last = [0]

    def progress(done: int, total: int) -> None:
        if done >= last[0] + 50:
            last[0] = done
            c.say(f"{step}: designing, {done}/{total} iterations")

    def one(robot: RobotModel):
        return design_excitation(robot, harmonics=s.harmonics, period=period_s, rate_hz=c.options.rate_hz, seed=seed, progress=progress)

    keepout = c.robot.spec.keepout if c.robot.spec is not None else None
    try:
        clear = excitation_clear_of_keepout(c.run_robot, one, c.q0 if keepout is not None else None, motion=f"the {'validation' if step == 'verify' else 'excitation'}",
                                            progress=lambda line: c.say(f"{step}: {line}"))
    except KeepoutError as exc:
        raise StepStopped(step, f"no excitation clear of the keep-out: {exc}") from None
    except (InputError, DataError) as exc:
        raise StepStopped(step, f"no excitation inside the envelope: {exc}") from None
    result = clear.excitation
    speed = np.array([j.limits.velocity if np.isfinite(j.limits.velocity) else 1.0 for j in c.run_robot.joints])
    traj = via_start(c.run_robot, c.q0, result.trajectory, speed, c.options.rate_hz)
    info = {
        "harmonics": s.harmonics, "period_s": period_s, "seed": seed, "designs": clear.attempts,
        "half_range": {n: float(clear.half_range[c.robot.joint(n).idx_v]) for n in c.robot.actuated_names},
        "condition_initial": result.condition_initial, "condition": result.condition, "usage": result.usage,
        "converged": result.converged, "duration_s": traj.duration,
    }
    c.say(f"{step}: {s.harmonics} harmonics, period {period_s:g} s, condition number {result.condition_initial:.4g} -> {result.condition:.4g}; "
          f"limits used " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in result.usage.items()))
    return traj, info


def excitation(c: Commission, results: dict[str, dict]) -> dict:
    """The ``excitation`` step (module docstring); returns its JSON result."""
    folder = c.step_dir("excitation")
    traj, info = design(c, "excitation", c.settings.seed, c.settings.period_s)
    write_trajectory(folder / "trajectory.csv", traj)
    c.check_keepout("excitation", traj, "the excitation")
    c.bring_to_start("excitation")
    c.say(f"excitation: running {traj.duration:.1f} s closed loop (computed torque, nominal model)")
    summary = run_session(c.run_robot, traj, dataclasses.replace(c.options, law="computed-torque"), folder / "run.npz")
    c.check_run("excitation", "the excitation run", summary)
    c.say(f"excitation: {summary.stop_reason}; tracking rms " + ", ".join(f"{j} {v:.3g}" for j, v in summary.tracking_rms.items()))
    return {"design": info, "trajectory": "trajectory.csv", "log": "run.npz", "run": summary_json(summary), "arm_time_s": summary.duration_s}
