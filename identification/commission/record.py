"""What shaped each step's result, kept in its ``result.json``, so that results of different robots or
choices never mix.

Every step's result carries ``"shaped_by"``: the robot file's SHA-256 and the options that shaped it
(by their command-line names; the start pose resolved to every joint's value, the rate to the one
used). Resuming (``--from STEP``) compares each earlier step's record of what shapes every step
(:data:`COMMON`: the robot file and its xacro arguments, the backend and rate, the margins, the start
pose) with the command's own and refuses the first difference in one line: another robot's folder,
other margins than the stored pre-flight's. An earlier step's own choices (its hold time, friction
law, excitation seed) are kept in its record but not compared: the steps that run now do not depend
on them. A result without a record (an older mbctl's) is refused too.

A run into a folder that holds results moves the earlier files of the steps it will redo (their
folders, the report and its figures, the adopted robot) into ``DIR/superseded/<n>/`` before it
starts, so that a stopped run never leaves a file of another run beside its own: an earlier
``verify/step.log`` saying "adopted" beside a folder without the adopted robot, say. Moved, not
deleted: on an arm those logs took arm time to make.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from mbctl.errors import InputError
from mbctl.identification.commission.context import STEPS, Commission

__all__ = ["COMMON", "STEP_OPTIONS", "check_record", "move_aside", "record"]

COMMON = ("robot", "--xacro-arg", "--bus", "--emulate", "--rate", "--position-margin", "--velocity-margin", "--torque-margin", "--start", "--detect-collisions")
"""What shapes every step: the robot, the backend and rate, the envelope, the start pose."""
STEP_OPTIONS = {
    "preflight": (*COMMON, "--hold-time", "--hold-drift"),
    "friction": (*COMMON, "--joints", "--friction-law", "--presliding", "--speeds", "--max-leg", "--sweep", "--settle", "--stribeck-velocity", "--bandwidth"),
    "excitation": (*COMMON, "--harmonics", "--period", "--seed"),
    "identify": (*COMMON, "--regularisation"),
    "verify": (*COMMON, "--harmonics", "--period", "--seed", "--moving-speed"),
    "report": COMMON,
}
REPORT_FILES = ("report.json", "report.html", "friction.png", "base_parameters.png", "validation.png")
"""The report's files at the top of ``DIR`` (:mod:`mbctl.viz.commission` draws the figures)."""
SUPERSEDED = "superseded"


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def shaping(c: Commission) -> dict[str, object]:
    """Every option of :data:`STEP_OPTIONS`, as this commissioning has it (JSON values)."""
    s, o = c.settings, c.options
    return {
        "robot": {"sha256": _sha256(c.robot.source), "file": str(c.robot.source)},
        "--xacro-arg": dict(sorted(c.robot.spec.xacro_args.items())) if c.robot.spec is not None else {},
        "--bus": None if o.plant == "sim" else o.plant, "--emulate": o.emulate, "--rate": o.rate_hz,
        "--position-margin": s.margins.position, "--velocity-margin": s.margins.velocity, "--torque-margin": s.margins.torque,
        "--start": {n: float(c.q0[c.robot.joint(n).idx_v]) for n in c.robot.joint_names}, "--detect-collisions": s.detect_collisions,
        "--hold-time": s.hold_s, "--hold-drift": s.hold_drift,
        "--joints": None if s.friction_joints is None else list(s.friction_joints), "--friction-law": s.friction_law, "--presliding": s.presliding,
        "--speeds": s.speeds, "--max-leg": s.max_leg_s, "--sweep": s.sweep, "--settle": s.settle_s, "--stribeck-velocity": s.stribeck_velocity,
        "--bandwidth": dict(s.bandwidth_hz),
        "--harmonics": s.harmonics, "--period": s.period_s, "--seed": s.seed, "--regularisation": s.regularisation, "--moving-speed": s.moving_speed,
    }


def record(c: Commission, step: str) -> dict[str, object]:
    """The ``shaped_by`` entry of ``step``'s result."""
    mine = shaping(c)
    return {key: mine[key] for key in STEP_OPTIONS[step]}


def check_record(c: Commission, step: str, result: dict, path: Path) -> None:
    """Refuse an earlier step's result (``path``) that other choices shaped.

    Raises:
        InputError: Naming the result file and the first option that differs.
    """
    stored = result.get("shaped_by")
    if not isinstance(stored, dict):
        raise InputError("has no record of the robot and options that shaped it (an older mbctl's); run without --from to start over", file=path)
    mine = shaping(c)
    for key in COMMON:
        theirs, ours = stored.get(key), mine[key]
        if key == "robot":
            if not isinstance(theirs, dict) or theirs.get("sha256") != ours["sha256"]:
                other = theirs.get("file") if isinstance(theirs, dict) else "an unknown file"
                raise InputError(f"the {step} step ran on another robot file ({other}) than {ours['file']}: use another --out, or run without --from", file=path)
        elif theirs != ours:
            raise InputError(f"the {step} step ran with {key} {_words(theirs)}, this command gives {_words(ours)}: give the same, or run --from {step}", file=path)


def _words(value: object) -> str:
    if value is None:
        return "(none)"
    if isinstance(value, dict):
        return ",".join(f"{k}={v!r}" for k, v in value.items()) or "(none)"
    if isinstance(value, list):
        return ",".join(map(str, value))
    return repr(value) if isinstance(value, float) else str(value)


def move_aside(c: Commission, start: str) -> Path | None:
    """Move the files of an earlier run that this one redoes (from ``start`` on, the report, the
    adopted robot) into ``DIR/superseded/<n>/``; returns that folder, or None if there were none."""
    out = c.out
    found = [out / step for step in STEPS[STEPS.index(start):] if (out / step).exists()]
    found += [out / name for name in REPORT_FILES if (out / name).exists()]
    found += sorted(out.glob("*_commissioned.toml"))
    if not found:
        return None
    n = 1
    while (out / SUPERSEDED / str(n)).exists():
        n += 1
    target = out / SUPERSEDED / str(n)
    target.mkdir(parents=True)
    for path in found:
        os.replace(path, target / path.name)
    return target
