"""The steps in order, each one's result kept in its folder, and resuming from any of them.

``DIR/<step>/result.json`` is a step's result, written (atomically) only when it finished;
``DIR/<step>/step.log`` its progress lines, written whether it finished or not. Before anything
moves, running from a step

1. reads the results of the steps before it (a missing one is an error naming it) and refuses one
   that another robot or other options shaped (:mod:`~mbctl.identification.commission.record`);
2. checks what it can plan without the arm: the start pose and, if the friction step is to run,
   every sweep, against the envelope and the robot's keep-out (:mod:`mbctl.ctrl.keepout`);
3. moves the files of an earlier run that it redoes (the step's folder and every later one's, the
   report, the adopted robot) into ``DIR/superseded/<n>/``, so that nothing of an earlier attempt
   is mistaken for a result of this run, nor left beside it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from mbctl.ctrl.keepout import check_keepout
from mbctl.errors import InputError
from mbctl.fileio import atomic_output
from mbctl.identification.commission.context import STEPS, Commission, StepStopped, read_json, write_json
from mbctl.identification.commission.excitation import excitation
from mbctl.identification.commission.friction import check_sweeps, friction
from mbctl.identification.commission.identify import identify_arm
from mbctl.identification.commission.preflight import preflight
from mbctl.identification.commission.record import check_record, move_aside, record
from mbctl.identification.commission.report import report_data
from mbctl.identification.commission.verify import verify

__all__ = ["run_commission", "result_path", "Draw"]

Draw = Callable[[Path, dict], list[Path]]
"""Draws the report: ``(DIR, report) -> files written`` (``report.html`` and its figures)."""


def result_path(out: Path, step: str) -> Path:
    return out / step / "result.json"


def _earlier(c: Commission, start: str) -> dict[str, dict]:
    results = {}
    for step in STEPS[: STEPS.index(start)]:
        path = result_path(c.out, step)
        if not path.is_file():
            raise InputError(f"missing: the {step} step has not finished; run --from {step} (or an earlier step)", file=path)
        results[step] = read_json(path)
        check_record(c, step, results[step], path)
    return results


def _check_plans(c: Commission, start: str) -> None:
    """What can be checked before the arm moves: the start pose in the keep-out, and every sweep if
    the friction step is to run (:func:`~mbctl.identification.commission.friction.check_sweeps`)."""
    check_keepout(c.robot, np.zeros(1), c.q0[None, :], "the start pose")
    if STEPS.index(start) <= STEPS.index("friction"):
        check_sweeps(c)


def run_commission(c: Commission, start: str = STEPS[0], draw: Draw | None = None, on_step: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Run the steps from ``start`` to the report; returns every step's result.

    Args:
        draw: Draws the report's HTML and figures (None: ``report.json`` only).
        on_step: Called with each step's name as it starts.

    Raises:
        InputError: For an unknown step, a missing earlier result or one that other choices shaped,
            a start or sweep that leaves the envelope or enters the keep-out (before anything runs).
        StepStopped: When a step could not finish (the earlier ones are kept).
        KeyboardInterrupt: Interrupted (the loop has left torque off; the earlier steps are kept).
    """
    if start not in STEPS:
        raise InputError(f"must be one of {', '.join(STEPS)}, got {start!r}", field="--from")
    results = _earlier(c, start)
    _check_plans(c, start)
    c.out.mkdir(parents=True, exist_ok=True)
    moved = move_aside(c, start)
    if moved is not None:
        c.progress(f"the earlier run's files from the {start} step on are in {moved}")
    actions = {"preflight": preflight, "friction": friction, "excitation": excitation, "identify": identify_arm, "verify": verify}
    for step in STEPS[STEPS.index(start):]:
        c.lines = []
        if on_step is not None:
            on_step(step)
        began = time.perf_counter()
        try:
            if step == "report":
                result = _report(c, results, draw)
            else:
                result = actions[step](c, results)
        except (StepStopped, KeyboardInterrupt) as exc:
            c.lines.append(f"stopped: {exc or 'interrupted'}")
            raise
        finally:
            _write_lines(c.step_dir(step) / "step.log", c.lines)
        result["wall_s"] = time.perf_counter() - began
        result["shaped_by"] = record(c, step)
        write_json(result_path(c.out, step), result)
        results[step] = result
    return results


def _report(c: Commission, results: dict[str, dict], draw: Draw | None) -> dict:
    report = report_data(c, results)
    write_json(c.out / "report.json", report)
    files = [c.out / "report.json"] + (draw(c.out, report) if draw is not None else [])
    c.say(f"report: {report['verdict'] or 'no verdict'}")
    return {"files": [str(p.relative_to(c.out)) for p in files], "arm_time_s": 0.0}


def _write_lines(path: Path, lines: list[str]) -> None:
    with atomic_output(path) as tmp:
        tmp.write_text("".join(f"{line}\n" for line in lines))
