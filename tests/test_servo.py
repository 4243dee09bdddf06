"""Servo identification from logs of ordinary motions: the actuator model, the fit on a
simulated bench with known parameters, and the command on the bundled real logs."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest

from mbctl.bundled import bundled_servo_logs
from mbctl.dynamics.actuator import ServoFirmware
from mbctl.errors import InputError
from mbctl.identification.servo import ServoLog, ServoModel, fit_servo, read_servo_log, simulate_servo

BENCH = ServoModel(mass=0.49, length=0.1, firmware=ServoFirmware(kp=400.0, vin=7.4))
TRUE = {"kt": 0.35, "R": 3.5, "armature": 0.002, "fc": 0.03, "fv": 0.01, "fs": 0.06, "vs": 0.3}


def bench_log(goal, model=BENCH, parameters=TRUE, law="stribeck", noise=0.0, seed=0, name="sim", off_after=None) -> ServoLog:
    """A log of the simulated bench: positions quantised to the encoder's 4096 counts, plus
    noise (rad); torque off from ``off_after`` seconds on, if given."""
    t = np.arange(len(goal)) * 0.005
    enabled = None if off_after is None else t < off_after
    base = ServoLog(name=name, t=t, position=np.zeros(len(t)), goal=goal, model=model, enabled=enabled)
    theta = simulate_servo(base, law, parameters)
    step = 2 * np.pi / model.firmware.counts
    measured = np.round(theta / step) * step + np.random.default_rng(seed).normal(0.0, noise, len(t))
    return ServoLog(name=name, t=t, position=measured, goal=goal, model=model, enabled=enabled)


def goals(seconds: float = 4.0) -> list[np.ndarray]:
    t = np.arange(0, seconds, 0.005)
    return [1.2 * np.sin(1.5 * t) * np.sin(0.4 * t), 1.4 * np.sign(np.sin(1.1 * t)) * (t > 0.3), 0.8 * np.sin(3.0 * t**1.3)]


def test_a_simulated_bench_is_recovered_within_its_intervals():
    """Three motions of a bench with known Stribeck parameters, quantised and noisy (1 mrad),
    one ending with the torque off (as the real lift-and-drop log): every parameter comes
    back within four standard errors, and the held-out motion is simulated to the noise level."""
    logs = [bench_log(g, noise=1e-3, seed=k, name=f"m{k}", off_after=2.5 if k == 1 else None) for k, g in enumerate(goals())]
    fit = fit_servo(logs[:2], "stribeck", validate=logs[2:], starts=2)
    for name, value in TRUE.items():
        assert abs(fit.parameters[name] - value) <= 4 * fit.standard_errors[name] + 1e-3 * value, (name, fit.parameters[name], fit.standard_errors[name])
    assert max(fit.validation_mae.values()) < 3e-3  # rad: noise 1 mrad, quantisation 1.5 mrad steps


def test_a_lugre_bench_is_recovered_within_its_intervals():
    """The same three motions with LuGre gearbox friction (bristle stiffness 50 N m/rad, damping
    0.3 N m s/rad): the fit, whose simulation carries the bristle state, brings every parameter,
    the presliding ones included, back within four standard errors."""
    true = {**TRUE, "sigma0": 50.0, "sigma1": 0.3}
    logs = [bench_log(g, parameters=true, law="lugre", noise=1e-3, seed=k, name=f"m{k}", off_after=2.5 if k == 1 else None) for k, g in enumerate(goals())]
    fit = fit_servo(logs[:2], "lugre", validate=logs[2:], starts=2)
    for name, value in true.items():
        assert np.isfinite(fit.standard_errors[name]), name
        assert abs(fit.parameters[name] - value) <= 4 * fit.standard_errors[name] + 1e-3 * value, (name, fit.parameters[name], fit.standard_errors[name])
    assert max(fit.validation_mae.values()) < 3e-3


def test_the_fit_is_stable_under_noise_and_quantisation():
    """Two noise draws give parameters that agree within their standard errors (four of them)."""
    fits = [fit_servo([bench_log(g, noise=2e-3, seed=10 * s + k, off_after=2.5 if k == 1 else None) for k, g in enumerate(goals()[:2])], "stribeck", starts=1) for s in (1, 2)]
    for name in TRUE:
        spread = abs(fits[0].parameters[name] - fits[1].parameters[name])
        assert spread <= 4 * np.hypot(fits[0].standard_errors[name], fits[1].standard_errors[name]) + 1e-3 * TRUE[name], name


def test_the_firmware_loop_saturates():
    """A 1.5 rad step: at kp 400 and at kp 4000 the duty is clipped to 1 while the error is
    large, so the first 60 ms are the same motion; an unclipped kp 4000 would be ten times stronger."""
    step = np.full(400, 1.5)
    runs = {kp: bench_log(step, ServoModel(0.49, 0.1, ServoFirmware(kp=kp, vin=7.4))).position for kp in (400.0, 4000.0)}
    assert np.array_equal(runs[400.0][:12], runs[4000.0][:12]) and runs[400.0][11] > 0.01
    assert not np.allclose(runs[400.0][100:], runs[4000.0][100:], atol=1e-3)  # they differ once the error is small


def test_without_a_torque_off_log_back_emf_and_viscous_friction_are_not_separated():
    """Both damp as omega: with the torque always on, kt, R and fv are reported as not
    determined (infinite standard errors) while kt/R and kt^2/R + fv come out right."""
    fit = fit_servo([bench_log(g, name=f"m{k}") for k, g in enumerate(goals()[:2])], "stribeck", starts=1)
    p, e = fit.parameters, fit.standard_errors
    assert np.isinf(e["kt"]) and np.isinf(e["fv"]) and np.isfinite(e["armature"])
    assert p["kt"] / p["R"] == pytest.approx(TRUE["kt"] / TRUE["R"], rel=1e-3)
    assert p["kt"] ** 2 / p["R"] + p["fv"] == pytest.approx(TRUE["kt"] ** 2 / TRUE["R"] + TRUE["fv"], rel=1e-2)


def test_torque_off_lets_the_pendulum_swing_down():
    """With torque off the motor carries no current: the raised pendulum falls, swings through
    the bottom to the other side, and comes to rest near 0 (friction holds it within a few degrees)."""
    t = np.arange(0, 3, 0.005)
    base = ServoLog(name="drop", t=t, position=np.zeros(len(t)), goal=np.full(len(t), 1.0), model=BENCH, enabled=t < 1.0)
    theta = simulate_servo(base, "coulomb-viscous", {k: TRUE[k] for k in ("kt", "R", "armature", "fc", "fv")})
    assert theta[190] > 0.5 and theta[200:].min() < -0.2 and np.abs(theta[-100:]).max() < 0.05


def test_real_logs_are_simulated_closely_by_a_fitted_model():
    """Two real XL330 logs (kp 100): a Coulomb–viscous fit simulates them open loop over 6 s
    within 50 mrad mean absolute error (the published parameter sets reach 51–66 mrad)."""
    logs = [read_servo_log(p) for p in bundled_servo_logs("xl330-pendulum")]
    chosen = [log for log in logs if log.model.firmware.kp == 100 and log.name.endswith(("10h28m10", "10h28m32"))]
    fit = fit_servo(chosen, "coulomb-viscous", starts=1)
    assert np.mean(list(fit.train_mae.values())) < 0.05
    assert 0.1 <= fit.parameters["kt"] <= 3.0 and 2.0 <= fit.parameters["R"] <= 5.0


def test_identify_logs_command(cli, tmp_path):
    out, plot = tmp_path / "servo.json", tmp_path / "servo.png"
    r = cli("identify", "logs", "xl330-pendulum@kp=100", "--validate", "xl330-pendulum@kp=400", "--law", "coulomb-viscous", "--starts", "1", "--out", out, "--plot", plot)
    assert r.code == 0, r.err
    report = json.loads(out.read_text())
    # the default stall model: the kp 100 logs never ask for half the duty, so the XL330 data sheet's
    # saturation is held, as is its stall resistance
    assert set(report["parameters"]) == {"kt", "R", "armature", "fc", "fv", "torque_saturation"} and len(report["mean_abs_error_rad"]["held_out"]) == 4
    assert report["standard_errors"]["R"] == report["standard_errors"]["torque_saturation"] == 0.0 and "stall: torque_saturation held" in r.out
    assert plot.stat().st_size > 10_000 and "held out mean" in r.out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["nowhere"], ["LOG", "nowhere", "xl330-pendulum"]),
        (["xl330-pendulum@kp=7"], ["LOG", "kp = 7"]),
        (["xl330-pendulum@speed=1"], ["LOG", "selector"]),
        (["xl330-pendulum", "--starts", "0"], ["--starts"]),
        (["xl330-pendulum@kp=100", "--stall", "kd"], ["--stall", "kd", "current_limit"]),
        (["xl330-pendulum@kp=100", "--stall", "auto,torque_saturation"], ["--stall", "stand alone"]),
        (["{bad}"], ["bad.json", "kp"]),
    ],
)
def test_bad_log_input_is_one_line(cli, tmp_path, args, words):
    bad = tmp_path / "bad.json"
    with open(bad, "w") as f:
        json.dump({"mass": 0.49, "length": 0.1, "vin": 7.4, "entries": []}, f)
    r = cli("identify", "logs", *[a.format(bad=bad) for a in args])
    lines = r.err.strip().splitlines()
    assert r.code == 2 and len(lines) == 1 and all(w in lines[0] for w in words), r.err


def test_bundled_logs_are_the_shared_ones_with_their_notice():
    paths = bundled_servo_logs("xl330-pendulum")
    assert len(paths) == 8 and (paths[0].parent / "NOTICE.md").read_text().count("Apache-2.0") == 1
    with gzip.open(paths[0], "rt") as f:
        doc = json.load(f)
    assert doc["kp"] in (100, 400) and len(doc["entries"]) >= 1200


STALL_TRUE = {"kt": 0.3, "R": 2.5, "armature": 0.002, "fc": 0.02, "fv": 0.02, "current_limit": 1.2}


def stall_goals(peak: float) -> list[np.ndarray]:
    """An up-and-down motion to ``peak`` (rad) and back part way, and a swing (6 s each)."""
    t = np.arange(0, 6.0, 0.005)
    return [peak * np.sin(np.pi * t / 7.0) ** 2, 0.35 * peak * np.sin(2.0 * t)]


def test_a_known_current_limit_is_recovered_where_the_servo_stalls():
    """A bench whose servo stalls below its goal at a 1.2 A current limit (the up-and-down motion
    asks for 1.6 rad; it stays below kt i_max = m g l sin(theta), 0.85 rad): the fit of the limit
    with the motor and friction recovers the stall torque kt i_max within 0.2 %, the damping at
    speed fv + kt^2/R within 0.5 % and every value within 3 % (positions on 1.5 mrad encoder
    steps; fv and kt^2/R both damp), from the samples at the limit."""
    logs = [bench_log(g, parameters=STALL_TRUE, law="coulomb-viscous", name=f"stall{k}") for k, g in enumerate(stall_goals(1.6))]
    assert 0.8 < logs[0].position.max() < np.arcsin(0.3 * 1.2 / (0.49 * 9.81 * 0.1))
    fit = fit_servo(logs, "coulomb-viscous", stall=("current_limit",), starts=2)
    p = fit.parameters
    assert p["kt"] * p["current_limit"] == pytest.approx(0.3 * 1.2, rel=0.002)
    assert p["fv"] + p["kt"] ** 2 / p["R"] == pytest.approx(0.02 + 0.3**2 / 2.5, rel=0.005)
    for name, value in STALL_TRUE.items():
        assert p[name] == pytest.approx(value, rel=0.03), name
    assert fit.limited["stall0"] > 0.2 and not fit.unidentified


def test_a_current_limit_the_logs_never_reach_is_reported_unidentified():
    """The same bench on motions that never need 1.2 A: the limit is not fitted but reported with
    the largest current as its lower bound, and the other parameters are recovered as without it."""
    logs = [bench_log(g, parameters=STALL_TRUE, law="coulomb-viscous", name=f"low{k}") for k, g in enumerate(stall_goals(0.5))]
    fit = fit_servo(logs, "coulomb-viscous", stall=("current_limit",), starts=2)
    assert "current_limit" not in fit.parameters and fit.standard_errors["current_limit"] == float("inf")
    assert 0.1 < fit.unidentified["current_limit"] < 1.2
    assert fit.parameters["fc"] == pytest.approx(STALL_TRUE["fc"], rel=0.05) and fit.parameters["kt"] / fit.parameters["R"] == pytest.approx(0.3 / 2.5, rel=0.02)


SATURATION_TRUE = {"kt": 0.3, "R": 2.5, "armature": 0.002, "fc": 0.02, "fv": 0.02, "torque_saturation": 0.6}


def test_a_known_torque_saturation_is_recovered_where_the_servo_stalls():
    """A bench whose motor torque saturates (``kt i / (1 + |kt i| / 0.6 N m)``) and whose servo
    stalls below its goal (the up-and-down motion asks for 1.6 rad; even the saturated torque at
    full duty, 0.36 N m, holds the weight below 0.85 rad): the fit of the saturation with the motor and
    friction recovers every value within 3 % and within four standard errors, and the simulated
    stall angle within 2 mrad of the measured one (positions on 1.5 mrad encoder steps)."""
    logs = [bench_log(g, parameters=SATURATION_TRUE, law="coulomb-viscous", name=f"sat{k}") for k, g in enumerate(stall_goals(1.6))]
    full = 0.3 * 7.4 / 2.5
    assert logs[0].position.max() < np.arcsin(full / (1 + full / 0.6) / (0.49 * 9.81 * 0.1)) + 2e-3
    fit = fit_servo(logs, "coulomb-viscous", stall=("torque_saturation",), starts=2)
    for name, value in SATURATION_TRUE.items():
        assert fit.parameters[name] == pytest.approx(value, rel=0.03), name
        assert abs(fit.parameters[name] - value) <= 4 * fit.standard_errors[name] + 1e-3 * value, (name, fit.parameters[name], fit.standard_errors[name])
    assert fit.simulated(logs[0]).max() == pytest.approx(logs[0].position.max(), abs=2e-3)


def test_an_unknown_stall_parameter_is_refused():
    """``stall`` names only current_limit, supply_resistance and torque_saturation; a valid name is accepted."""
    log = bench_log(goals()[0])
    with pytest.raises(InputError) as info:
        fit_servo([log], "coulomb-viscous", stall=("kd",), starts=1)
    assert info.value.field == "--stall"
    assert "supply_resistance" in fit_servo([log], "coulomb-viscous", stall=("supply_resistance",), starts=1).parameters


def test_equal_bounds_hold_a_parameter_fixed():
    """``bounds`` with equal ends keeps a parameter at that value (standard error 0) while the others
    are fitted; a bound of a parameter the fit does not have is refused, naming it."""
    logs = [bench_log(g, parameters={k: TRUE[k] for k in ("kt", "R", "armature")} | {"fc": 0.03, "fv": 0.01}, law="coulomb-viscous") for g in goals()[:2]]
    fit = fit_servo(logs, "coulomb-viscous", starts=1, bounds={"R": (3.5, 3.5)})
    assert fit.parameters["R"] == 3.5 and fit.standard_errors["R"] == 0.0
    assert fit.parameters["kt"] == pytest.approx(0.35, rel=0.01) and 0 < fit.standard_errors["kt"] < 0.01
    with pytest.raises(InputError, match="mu"):
        fit_servo(logs, "coulomb-viscous", starts=1, bounds={"mu": (0.0, 0.1)})


def test_a_current_limit_held_by_equal_bounds_is_kept_though_never_reached():
    """A limit given as a value (equal bounds), not fitted, stays in the fit's parameters with
    standard error 0 even where no sample reaches it (a fitted one would be dropped as unidentified)."""
    logs = [bench_log(g, parameters=STALL_TRUE, law="coulomb-viscous", name=f"low{k}") for k, g in enumerate(stall_goals(0.5))]
    fit = fit_servo(logs, "coulomb-viscous", stall=("current_limit",), starts=1, bounds={"current_limit": (1.2, 1.2)})
    assert fit.parameters["current_limit"] == 1.2 and fit.standard_errors["current_limit"] == 0.0 and not fit.unidentified
    assert max(fit.limited.values()) == 0.0
