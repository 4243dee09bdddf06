"""The steps in order, each one's result kept in its folder, and resuming from any of them.

``DIR/<step>/result.json`` is a step's result, written (atomically) only when it finished;
``DIR/<step>/step.log`` its progress lines, written whether it finished or not. Running from a step
reads the results of the steps before it (a missing one is an error naming it) and removes those of
the step and every later one, the adopted robot and the report before it starts, so that nothing of
an earlier attempt is mistaken for a result of this run.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from mbctl.errors import InputError
from mbctl.fileio import atomic_output
from mbctl.identification.commission.context import STEPS, Commission, StepStopped, read_json, write_json
from mbctl.identification.commission.excitation import excitation
from mbctl.identification.commission.friction import friction
from mbctl.identification.commission.identify import identify_arm
from mbctl.identification.commission.preflight import preflight
from mbctl.identification.commission.report import report_data
from mbctl.identification.commission.verify import adopted_path, verify

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
    return results


def run_commission(c: Commission, start: str = STEPS[0], draw: Draw | None = None, on_step: Callable[[str], None] | None = None) -> dict[str, dict]:
    """Run the steps from ``start`` to the report; returns every step's result.

    Args:
        draw: Draws the report's HTML and figures (None: ``report.json`` only).
        on_step: Called with each step's name as it starts.

    Raises:
        InputError: For an unknown step or a missing earlier result (before anything runs).
        StepStopped: When a step could not finish (the earlier ones are kept).
        KeyboardInterrupt: Interrupted (the loop has left torque off; the earlier steps are kept).
    """
    if start not in STEPS:
        raise InputError(f"must be one of {', '.join(STEPS)}, got {start!r}", field="--from")
    c.out.mkdir(parents=True, exist_ok=True)
    results = _earlier(c, start)
    for step in STEPS[STEPS.index(start):]:
        result_path(c.out, step).unlink(missing_ok=True)
    # an earlier attempt's verdict and report describe results that are gone now
    for stale in (adopted_path(c), c.out / "report.json", c.out / "report.html"):
        stale.unlink(missing_ok=True)
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
