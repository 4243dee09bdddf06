"""Whole-arm identification from the excitation log, friction of the friction step held fixed.

**Friction is a fixed prior.** The friction step measured each joint's law on dedicated
constant-speed sweeps, far more precisely than an excitation run can (its speeds pass through zero
and change all the time). So the arm fit does not refit friction: it subtracts the measured laws
(``F_j(dq, sgn)``, the steady state; the nominal law for a joint the friction step left out) from
the logged torques and identifies the inertial parameters from the rest::

    tau_kj - F_j(dq_kj) = Y_kj(q, dq, ddq) theta + e_kj

with :func:`mbctl.identification.arm_fit.fit_arm` (``friction = "none"``): resampled and filtered as
``identify dynamics`` does, physically consistent, pulled toward the nominal inertials by
``regularisation``. The candidate robot (``identify/candidate.toml``) is a copy of the robot's TOML
with the identified inertials and the measured friction; it is written back beside the report only
if the verification finds it better.
"""

from __future__ import annotations

import dataclasses

from mbctl.dynamics.friction.laws import motion_direction
from mbctl.errors import DataError
from mbctl.identification.arm_fit import ArmFitSettings, fit_arm
from mbctl.identification.arm_log import Conditioning, condition_log, read_arm_log
from mbctl.identification.arm_report import arm_fit_json, write_arm_robot_copy
from mbctl.identification.commission.context import Commission, StepStopped
from mbctl.identification.commission.friction import law_of

__all__ = ["identify_arm", "CANDIDATE"]

CANDIDATE = "candidate.toml"


def identify_arm(c: Commission, results: dict[str, dict]) -> dict:
    """The ``identify`` step (module docstring); returns its JSON result."""
    folder = c.step_dir("identify")
    log_path = c.out / "excitation" / results["excitation"]["log"]
    measured = {j: law_of(entry) for j, entry in results["friction"]["joints"].items()}
    laws = {j.name: measured.get(j.name, j.friction.law if j.friction is not None else None) for j in c.robot.joints}
    try:
        raw = read_arm_log(log_path, c.robot.joint_names, spec=c.robot.spec)
        log = condition_log(raw, Conditioning())
    except DataError as exc:
        raise StepStopped("identify", f"cannot use the excitation log: {exc}") from None
    tau = log.tau.copy()
    for col, name in enumerate(log.joint_names):
        if laws.get(name) is not None:
            tau[:, col] -= laws[name].steady(log.dq[:, col], motion_direction(log.dq[:, col], log.ddq[:, col]))
    c.say(f"identify: {len(log)} samples of {log_path.name}; friction of the friction step subtracted; fitting the inertials")
    fit = fit_arm(c.robot, [dataclasses.replace(log, tau=tau)], ArmFitSettings(friction="none", regularisation=c.settings.regularisation))
    fit = dataclasses.replace(fit, friction={name: law for name, law in laws.items() if name in fit.joint_names})
    write_arm_robot_copy(c.robot.source, folder / CANDIDATE, fit, [log_path], force=True)
    moved = sorted(fit.changes, key=lambda ch: -abs(ch.mass - ch.mass_prior))
    for ch in moved[:3]:
        c.say(f"identify: {ch.body} mass {ch.mass_prior:.4g} -> {ch.mass:.4g} kg, centre of mass moved {1e3 * ch.com_shift:.3g} mm")
    c.say(f"identify: {len(fit.base)} base parameters, condition number {fit.condition_number:.4g}, IPOPT {fit.solver_status}")
    return {"candidate": CANDIDATE, "friction": "fixed from the friction step (subtracted; not refitted)", "fit": arm_fit_json(fit),
            "base_parameters_nominal": fit.beta_prior.tolist()}
