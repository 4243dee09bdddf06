"""Time targets of programmed constraints: expression strings in ``t`` and built-in paths.

A target is a vector function of time ``g(t)`` (k components) that returns its value
and its first and second time derivatives, which the acceleration-level constraint
equation needs exactly (``gamma`` contains ``g''(t)``).

**Expressions.** ``"0.35 + 0.05*cos(0.4*pi*t)"`` is parsed with :mod:`ast` and only a
whitelist of nodes is accepted — numbers, the names ``t``, ``pi`` and ``e``, the
operators ``+ - * / **`` and unary ``+ -``, and calls of the functions in
:data:`FUNCTIONS` — so no user text is ever executed. The tree is rebuilt as a
CasADi expression, differentiated symbolically twice and compiled into one CasADi
``Function`` per target (built once, called at every evaluation).

**Paths.** :class:`QuinticPolyline` moves through points, stopping at each, with the
rest-to-rest quintic ``p(s) = 10 s^3 - 15 s^4 + 6 s^5`` on every segment (the flexible-manipulator study's
rectangle traced corner to corner is :func:`rectangle`).
"""

from __future__ import annotations

import ast
import bisect
import math
from collections.abc import Callable, Sequence
from typing import Protocol

import casadi as ca
import numpy as np

from mbctl.errors import ConfigError

__all__ = [
    "FUNCTIONS",
    "CONSTANTS",
    "Target",
    "ExpressionTarget",
    "QuinticPolyline",
    "parse_expression",
    "rectangle",
]

#: Functions an expression may call, with their number of arguments.
FUNCTIONS: dict[str, tuple[Callable[..., ca.SX], int]] = {
    "sin": (ca.sin, 1),
    "cos": (ca.cos, 1),
    "tan": (ca.tan, 1),
    "asin": (ca.asin, 1),
    "acos": (ca.acos, 1),
    "atan": (ca.atan, 1),
    "atan2": (ca.atan2, 2),
    "sinh": (ca.sinh, 1),
    "cosh": (ca.cosh, 1),
    "tanh": (ca.tanh, 1),
    "exp": (ca.exp, 1),
    "log": (ca.log, 1),
    "sqrt": (ca.sqrt, 1),
    "abs": (ca.fabs, 1),
    "min": (ca.fmin, 2),
    "max": (ca.fmax, 2),
}

#: Named constants an expression may use besides ``t``.
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_BINARY = {
    ast.Add: lambda a, b: a + b,
    ast.Sub: lambda a, b: a - b,
    ast.Mult: lambda a, b: a * b,
    ast.Div: lambda a, b: a / b,
    ast.Pow: lambda a, b: a**b,
}
_MAX_LENGTH = 2000


class Target(Protocol):
    """A vector function of time with exact first and second derivatives."""

    size: int

    def __call__(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(g(t), g'(t), g''(t))``, each of shape (size,), at time ``t`` (s)."""
        ...


def parse_expression(text: str, t: ca.SX) -> ca.SX:
    """Turn an expression string in ``t`` into a CasADi expression of the symbol ``t``.

    Raises:
        ConfigError: (without file or field; the caller places it) for a syntax
            error, an unknown name or function, or any construct outside the whitelist.
    """
    if not isinstance(text, str):
        raise ConfigError(f"must be an expression string in t, got {text!r}")
    if len(text) > _MAX_LENGTH:
        raise ConfigError(f"expression longer than {_MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ConfigError(f"malformed expression {text!r}: {exc.msg}") from None
    except (RecursionError, MemoryError, ValueError):
        raise ConfigError(f"malformed expression {text!r}: too deeply nested or invalid") from None
    try:
        return _build(tree.body, t, text)
    except RecursionError:
        raise ConfigError(f"malformed expression {text!r}: too deeply nested") from None


def _build(node: ast.AST, t: ca.SX, text: str) -> ca.SX:
    def bad(reason: str) -> ConfigError:
        return ConfigError(f"malformed expression {text!r}: {reason}")

    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise bad(f"{node.value!r} is not a number")
        return ca.SX(float(node.value))  # floats only: no unbounded Python integer powers
    if isinstance(node, ast.Name):
        if node.id == "t":
            return t
        if node.id in CONSTANTS:
            return ca.SX(CONSTANTS[node.id])
        raise bad(f"unknown name {node.id!r} (use t, {', '.join(CONSTANTS)} and functions {', '.join(FUNCTIONS)})")
    if isinstance(node, ast.BinOp):
        op = _BINARY.get(type(node.op))
        if op is None:
            hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
            raise bad(f"operator {type(node.op).__name__} is not allowed{hint}")
        return op(_build(node.left, t, text), _build(node.right, t, text))
    if isinstance(node, ast.UnaryOp):
        if isinstance(node.op, ast.USub):
            return -_build(node.operand, t, text)
        if isinstance(node.op, ast.UAdd):
            return _build(node.operand, t, text)
        raise bad(f"operator {type(node.op).__name__} is not allowed")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            name = node.func.id if isinstance(node.func, ast.Name) else ast.unparse(node.func)
            raise bad(f"function {name!r} is not allowed (allowed: {', '.join(FUNCTIONS)})")
        fn, arity = FUNCTIONS[node.func.id]
        if node.keywords or len(node.args) != arity:
            raise bad(f"{node.func.id}() takes {arity} positional argument{'s' if arity > 1 else ''}")
        return fn(*(_build(a, t, text) for a in node.args))
    raise bad(f"{type(node).__name__} is not allowed (numbers, t, pi, e, + - * / ** and functions only)")


class ExpressionTarget:
    """Target given by expression strings, one per component; derivatives are symbolic.

    Args:
        expressions: One expression in ``t`` (seconds) per component.

    Raises:
        ConfigError: For a malformed expression (``field`` is its index) or one that
            is not finite at ``t = 0``.
    """

    def __init__(self, expressions: Sequence[str]):
        self.expressions = tuple(expressions)
        self.size = len(self.expressions)
        t = ca.SX.sym("t")
        exprs = []
        for i, text in enumerate(self.expressions):
            try:
                exprs.append(parse_expression(text, t))
            except ConfigError as exc:
                raise exc.located(prefix=f"[{i}]" if self.size > 1 else None) from None
        g = ca.vertcat(*exprs)
        dg = ca.jacobian(g, t)
        ddg = ca.jacobian(dg, t)
        self.constant = not any(ca.depends_on(g[i], t) for i in range(self.size))
        # dense: the buffer below is read as 3 x size, and a derivative that is zero by structure
        # (a constant component) would otherwise be left out and shift the others
        self._fn = ca.Function("target", [t], [ca.densify(ca.vertcat(g, dg, ddg))])
        # CasADi's buffer interface evaluates without Python-side argument conversion (~0.3 us a call)
        self._arg = np.zeros(1)
        self._res = np.zeros(3 * self.size)
        self._buffer, self._trigger = self._fn.buffer()
        self._buffer.set_arg(0, memoryview(self._arg))
        self._buffer.set_res(0, memoryview(self._res))
        self._constant_value = self._evaluate(0.0) if self.constant else None
        value = self._constant_value if self.constant else self._evaluate(0.0)
        for i in range(self.size):
            if not np.all(np.isfinite(value[:, i])):
                where = f"[{i}]" if self.size > 1 else None
                raise ConfigError(f"expression {self.expressions[i]!r} is not finite at t = 0", field=where)

    def _evaluate(self, t: float) -> np.ndarray:
        self._arg[0] = t
        self._trigger()
        return self._res.reshape(3, self.size).copy()

    def __call__(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        out = self._constant_value if self.constant else self._evaluate(t)
        return out[0], out[1], out[2]

    def __repr__(self) -> str:
        return f"ExpressionTarget({list(self.expressions)!r})"


class QuinticPolyline:
    """Rest-to-rest quintic moves through points, stopping at each (the flexible-manipulator study's paths).

    On segment ``i`` (duration ``T_i``, from ``P_i`` to ``P_{i+1}``) with
    ``s = (t - t_i)/T_i`` and ``p(s) = 10 s^3 - 15 s^4 + 6 s^5``:
    ``g = P_i + (P_{i+1} - P_i) p(s)``; velocity and acceleration vanish at every
    point. Before ``start`` the target rests at the first point, after the last
    segment at the last one.

    Args:
        points: (K, k) points, K >= 2 (m or rad, per component).
        durations: K - 1 segment durations (s), each > 0.
        start: Time at which the first segment starts (s).
    """

    def __init__(self, points: np.ndarray, durations: Sequence[float], start: float = 0.0):
        points = np.atleast_2d(np.asarray(points, dtype=float))
        durations = np.asarray(durations, dtype=float)
        if points.shape[0] < 2:
            raise ConfigError(f"need at least 2 points, got {points.shape[0]}", field="points")
        if not np.isfinite(points).all():
            raise ConfigError("points must be finite", field="points")
        if durations.shape != (points.shape[0] - 1,) or not np.all(durations > 0) or not np.isfinite(durations).all():
            raise ConfigError(f"need {points.shape[0] - 1} finite durations, each > 0", field="durations")
        self.points = points
        self.durations = durations
        self.size = points.shape[1]
        self.times = float(start) + np.concatenate([[0.0], np.cumsum(durations)])
        self._times = self.times.tolist()
        self._zero = np.zeros(self.size)

    def __call__(self, t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        if t <= self._times[0]:
            return self.points[0].copy(), self._zero.copy(), self._zero.copy()
        if t >= self._times[-1]:
            return self.points[-1].copy(), self._zero.copy(), self._zero.copy()
        i = bisect.bisect_right(self._times, t) - 1
        T = self.durations[i]
        s = (t - self._times[i]) / T
        delta = self.points[i + 1] - self.points[i]
        p = s**3 * (10 - 15 * s + 6 * s**2)
        dp = 30 * s**2 * (1 - s) ** 2
        ddp = 60 * s * (1 - s) * (1 - 2 * s)
        return self.points[i] + delta * p, delta * (dp / T), delta * (ddp / T**2)


def rectangle(corners: np.ndarray, edge_duration: float, start: float = 0.0, laps: int = 1) -> QuinticPolyline:
    """Trace the closed polygon through ``corners`` (e.g. a rectangle ABCD), corner to corner.

    Each edge takes ``edge_duration`` seconds with a rest-to-rest quintic, stopping at
    every corner; the path ends back at the first corner after ``laps`` laps.
    """
    corners = np.atleast_2d(np.asarray(corners, dtype=float))
    if corners.shape[0] < 3:
        raise ConfigError(f"need at least 3 corners, got {corners.shape[0]}", field="corners")
    if not (edge_duration > 0 and math.isfinite(edge_duration)):
        raise ConfigError("must be > 0", field="edge_duration")
    if laps < 1:
        raise ConfigError("must be >= 1", field="laps")
    points = np.vstack([np.tile(corners, (laps, 1)), corners[:1]])
    return QuinticPolyline(points, [edge_duration] * (len(points) - 1), start)
