"""The commissioning report's content: every step's result in one JSON document, and the command that
uses the adopted model. :mod:`mbctl.viz.commission` draws it as HTML with its figures."""

from __future__ import annotations

from mbctl.identification.commission.context import Commission
from mbctl.identification.commission.runs import arm_time

__all__ = ["report_data"]


def report_data(c: Commission, results: dict[str, dict]) -> dict:
    """``report.json``: the robot, the backend, each step's result, the verdict, the times and the
    command to use the adopted model (or why there is none)."""
    verify = results.get("verify", {})
    adopted = verify.get("robot")
    if adopted:
        use = f"mbctl run {c.out / adopted} --trajectory TRAJECTORY.csv --log run.npz --summary run.json"
    else:
        use = f"none: the identified model was not better on the validation run; keep {c.robot.source}"
    return {
        "robot": c.robot.name,
        "config": str(c.robot.source),
        "backend": results.get("preflight", {}).get("backend", {}),
        "steps": results,
        "verdict": verify.get("verdict", ""),
        "adopted": bool(adopted),
        "use": use,
        "arm_time_s": arm_time(results),
        "wall_s": {step: r.get("wall_s", 0.0) for step, r in results.items()},
    }
