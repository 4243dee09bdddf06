"""Time targets: safe expression parsing with exact derivatives, quintic polylines."""

from __future__ import annotations

import math

import numpy as np
import pytest

from mbctl.dynamics.constraints.targets import (
    ExpressionTarget,
    QuinticPolyline,
    rectangle,
)
from mbctl.errors import ConfigError


def test_expression_value_and_derivatives_are_exact():
    """Seed 004's circle target and its first and second derivatives equal the closed form."""
    target = ExpressionTarget(["0.05*sin(0.4*pi*t)", "0.35 + 0.05*cos(0.4*pi*t)"])
    w = 0.4 * math.pi
    for t in (0.0, 0.37, 2.5, 9.99):
        g, dg, ddg = target(t)
        assert g == pytest.approx([0.05 * math.sin(w * t), 0.35 + 0.05 * math.cos(w * t)], abs=1e-15)
        assert dg == pytest.approx([0.05 * w * math.cos(w * t), -0.05 * w * math.sin(w * t)], abs=1e-15)
        assert ddg == pytest.approx([-0.05 * w**2 * math.sin(w * t), -0.05 * w**2 * math.cos(w * t)], abs=1e-15)


def test_every_whitelisted_function_differentiates_correctly():
    """Each allowed function's derivatives match central finite differences."""
    texts = [
        "tan(0.3*t)", "asin(0.2*t)", "acos(0.2*t)", "atan(t)", "atan2(t, 2)", "sinh(t)", "cosh(t)", "tanh(t)",
        "exp(-t)", "log(1 + t)", "sqrt(1 + t**2)", "abs(t - 5)", "min(t, 3)", "max(t, 0.5)", "-t**3/6 + +e*t", "2**t",
    ]
    target = ExpressionTarget(texts)
    t, h = 0.8, 1e-4
    g0, dg0, ddg0 = target(t)
    gp, dgp, _ = target(t + h)
    gm, dgm, _ = target(t - h)
    assert dg0 == pytest.approx((gp - gm) / (2 * h), rel=1e-6, abs=1e-9)
    assert ddg0 == pytest.approx((dgp - dgm) / (2 * h), rel=1e-6, abs=1e-7)
    assert g0[-2] == pytest.approx(-(t**3) / 6 + math.e * t)


def test_constant_expressions_are_recognised():
    """A target without t is evaluated once; its derivatives are zero."""
    target = ExpressionTarget(["0", "2*pi"])
    assert target.constant
    g, dg, ddg = target(123.0)
    assert list(g) == [0.0, 2 * math.pi] and not dg.any() and not ddg.any()
    assert not ExpressionTarget(["0.02*t"]).constant


@pytest.mark.parametrize(
    "text, reason",
    [
        ("__import__('os').system('true')", "not allowed"),
        ("t.__class__", "not allowed"),
        ("open('/etc/passwd')", "function 'open' is not allowed"),
        ("eval('1')", "function 'eval' is not allowed"),
        ("(lambda: 1)()", "not allowed"),
        ("[t, 1][0]", "not allowed"),
        ("t if t > 0 else 0", "not allowed"),
        ("t^2", "use ** for powers"),
        ("x + 1", "unknown name 'x'"),
        ("sin(t, 2)", "takes 1 positional argument"),
        ("sin(x=t)", "takes 1 positional argument"),
        ("'abc'", "is not a number"),
        ("True", "is not a number"),
        ("0.35 + cos(", "malformed expression"),
        ("", "malformed expression"),
        ("1e400", "not finite at t = 0"),
        ("log(t)", "not finite at t = 0"),
    ],
)
def test_unsafe_or_malformed_expressions_are_refused(text, reason):
    """Anything outside numbers, t, pi, e, arithmetic and the listed functions is a ConfigError."""
    with pytest.raises(ConfigError, match=None) as info:
        ExpressionTarget([text])
    assert reason in str(info.value)


def test_deeply_nested_expression_is_refused_not_crashing():
    """A pathological nesting depth gives an error, not a RecursionError."""
    with pytest.raises(ConfigError, match="nested|longer"):
        ExpressionTarget(["(" * 5000 + "t" + ")" * 5000])


def test_quintic_polyline_rests_at_points_and_is_smooth():
    """Rest-to-rest quintic: at the corners velocity and acceleration vanish; midpoints are halfway."""
    points = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 2.0]])
    path = QuinticPolyline(points, [1.0, 2.0], start=0.5)
    for t, p in ((0.0, points[0]), (0.5, points[0]), (1.5, points[1]), (3.5, points[2]), (9.0, points[2])):
        g, dg, ddg = path(t)
        assert g == pytest.approx(p) and dg == pytest.approx([0, 0]) and ddg == pytest.approx([0, 0], abs=1e-12)
    g, dg, _ = path(1.0)  # middle of the first segment: half way, peak speed 15/8 * distance / T
    assert g == pytest.approx([0.5, 0.0]) and dg == pytest.approx([15 / 8, 0.0])
    h = 1e-6
    for t in (0.9, 2.2, 3.1):
        gp, dgp, _ = path(t + h)
        gm, dgm, _ = path(t - h)
        _, dg, ddg = path(t)
        assert dg == pytest.approx((gp - gm) / (2 * h), rel=1e-6, abs=1e-9)
        assert ddg == pytest.approx((dgp - dgm) / (2 * h), rel=1e-6, abs=1e-6)


def test_rectangle_visits_every_corner_and_returns():
    """Seed 000's rectangle: corner to corner in edge_duration each, ending at the start."""
    corners = [[0.0, 0.0], [0.2, 0.0], [0.2, 0.1], [0.0, 0.1]]
    path = rectangle(corners, edge_duration=1.0, laps=2)
    for k in range(9):
        assert path(float(k))[0] == pytest.approx(corners[k % 4])
    assert path.times[-1] == pytest.approx(8.0)


@pytest.mark.parametrize(
    "make, field",
    [
        (lambda: QuinticPolyline([[0.0]], []), "points"),
        (lambda: QuinticPolyline([[0.0], [1.0]], [0.0]), "durations"),
        (lambda: rectangle([[0, 0], [1, 0]], 1.0), "corners"),
        (lambda: rectangle([[0, 0], [1, 0], [1, 1]], -1.0), "edge_duration"),
    ],
)
def test_bad_paths_name_the_field(make, field):
    with pytest.raises(ConfigError) as info:
        make()
    assert info.value.field == field
