"""The planners' default margins against ``mbctl run``: a plan made with the defaults is followed in lock-step
without a limit stop, while the same plan at the exact limits (margins 1) stops the run on its safety check."""

from __future__ import annotations

import json

import pytest

MOVE = "0,-1.6,1.6,-1.5,-1.57,0; 0.6,-0.7,0.4,-1.0,-1.2,0.6"  # 0.43 s with the default margins
FROM, TO = "0,-1.5,1.2,-1.2,-1.57,0", "0.5,-1.0,0.8,-1.0,-1.3,0.4"  # 0.19 s, minimum time
EXACT = ("--torque-scaling", "1", "--velocity-scaling", "1")


def _run(cli, config, trajectory, tmp_path) -> tuple[int, str]:
    """``mbctl run CONFIG --lockstep`` with the default law (computed torque): exit code and stop reason."""
    summary = tmp_path / f"{trajectory.stem}.json"
    r = cli("run", config, "--trajectory", trajectory, "--lockstep", "--log", tmp_path / f"{trajectory.stem}.npz", "--summary", summary)
    return r.code, json.loads(summary.read_text())["stop_reason"]


def test_default_timing_is_followed_by_run(cli, configs, tmp_path):
    """`trajectory optimal ur5` with its defaults, then `run ur5 --lockstep` (the shipped config, observer on):
    completed, exit 0. The timing at the exact limits stops the run on the velocity limit it rides, not on the
    observer (whose estimate once lagged a joint breaking away from rest: -7.4 N·m against 7)."""
    for name, extra in (("default", ()), ("exact", EXACT)):
        r = cli("trajectory", "optimal", "ur5", "--waypoints", MOVE, *extra, "--out", tmp_path / f"{name}.csv")
        assert r.code == 0, r.err
    assert _run(cli, "ur5", tmp_path / "default.csv", tmp_path) == (0, "completed")
    code, reason = _run(cli, "ur5", tmp_path / "exact.csv", tmp_path)
    assert code == 1 and reason.startswith("limit breach: dq."), reason


@pytest.mark.slow
def test_default_ocp_is_followed_by_run(cli, configs, tmp_path):
    """`trajectory ocp ur5` with its defaults, then `run ur5 --lockstep` (the shipped observer on): completed; at
    the exact limits the run stops on a velocity limit. On this 0.19 s minimum-time move from rest the observer
    read a false 12 N·m in the run's first 2 ms before its velocity step took the friction slope where a joint
    breaking away arrives (EstimationModel.velocity_increment): no detection now."""
    config = "ur5"
    for name, extra in (("default", ()), ("exact", EXACT)):
        r = cli("trajectory", "ocp", "ur5", "--from", FROM, "--to", TO, *extra, "--out", tmp_path / f"{name}.csv")
        assert r.code == 0, r.err
    code, reason = _run(cli, config, tmp_path / "default.csv", tmp_path)
    assert code == 0 and reason == "completed", reason
    code, reason = _run(cli, config, tmp_path / "exact.csv", tmp_path)
    assert code == 1 and reason.startswith("limit breach: dq."), reason
