"""The servo's data sheet in servo fits: its stall resistance and saturation, the stall model chosen
by the logs' duty, and R held where position logs cannot tell it from kt."""

from __future__ import annotations

import gzip
import json

import numpy as np
import pytest
from test_servo import BENCH, TRUE, bench_log, goals

from mbctl.bundled import bundled_servo_logs
from mbctl.identification.servo import SATURATION_DUTY, default_stall, duty_share, fit_servo, read_servo_log
from mbctl.identification.servo_datasheet import DATASHEETS, datasheet_of

XL330 = DATASHEETS["xl330"]


@pytest.fixture(scope="module")
def logs():
    return [read_servo_log(p) for p in bundled_servo_logs("xl330-pendulum")]


def test_the_xl330_sheet_gives_its_stall_resistance_and_bend():
    """R is the mean of V/I at the three stall points (3.33, 3.40, 3.45 ohm); the saturation curve
    passes within 1 % of each stall torque; kt's range runs from the least torque per ampere at stall
    (0.6 / 1.74) to the slope at small current."""
    assert XL330.resistance == pytest.approx(np.mean([3.7 / 1.11, 5.0 / 1.47, 6.0 / 1.74]), rel=1e-12)
    c, tau_sat = XL330.saturation()
    i = np.array(XL330.stall_current)
    np.testing.assert_allclose(c * i / (1 + c * i / tau_sat), XL330.stall_torque, rtol=0.01)
    low, high = XL330.torque_constant_range
    assert low == pytest.approx(0.6 / 1.74) and high == pytest.approx(c) and c > max(t / a for t, a in zip(XL330.stall_torque, i))


def test_the_logs_name_their_servo(logs):
    assert datasheet_of([log.motor for log in logs]) is XL330
    assert datasheet_of([None]) is None and datasheet_of(["xl330", "mx28"]) is None


def test_the_duty_share_is_the_firmwares_own_pwm(logs):
    """The share of samples asking for half the duty, from the measured error, against the firmware's
    PWM the logs record in their 'load' column (signed 16 bit, limit 885): within 1 point per gain."""
    for kp in (100.0, 400.0):
        chosen = [log for log in logs if log.model.firmware.kp == kp]
        pwm = []
        for path in bundled_servo_logs("xl330-pendulum"):
            with gzip.open(path, "rt") as f:
                doc = json.load(f)
            if doc["kp"] == kp:
                load = np.array([e["load"] for e in doc["entries"] if e.get("torque_enable", True)], dtype=float)
                pwm.append(np.abs(np.where(load > 32767, load - 65536, load)) / 885)
        assert duty_share(chosen, SATURATION_DUTY) == pytest.approx(np.mean(np.concatenate(pwm) >= SATURATION_DUTY), abs=0.01)


def test_the_stall_model_follows_the_duty_the_logs_reach(logs):
    """kp 400 (40 % of the samples above half the duty): torque_saturation fitted; kp 100 (none): held
    at the data sheet's value; without a data sheet: left out."""
    kp400 = [log for log in logs if log.model.firmware.kp == 400]
    kp100 = [log for log in logs if log.model.firmware.kp == 100]
    assert default_stall(kp400, XL330)[:2] == (("torque_saturation",), {})
    tau_sat = XL330.saturation()[1]
    assert default_stall(kp100, XL330)[:2] == (("torque_saturation",), {"torque_saturation": (tau_sat, tau_sat)})
    assert default_stall(kp100, None)[:2] == ((), {})


def test_a_data_sheet_holds_r_and_kt_comes_back():
    """A simulated bench whose R is the data sheet's: fitted with the sheet, R is held there exactly
    (standard error 0) and kt comes back within 1 %."""
    true = {**TRUE, "R": XL330.resistance}
    runs = [bench_log(g, model=BENCH, parameters=true, noise=1e-3, seed=k, name=f"m{k}", off_after=2.5 if k == 1 else None) for k, g in enumerate(goals()[:2])]
    fit = fit_servo(runs, "stribeck", starts=1, datasheet=XL330)
    assert fit.parameters["R"] == XL330.resistance and fit.standard_errors["R"] == 0.0
    assert fit.parameters["kt"] == pytest.approx(true["kt"], rel=0.01)
