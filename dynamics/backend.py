"""Array namespaces, so one formula evaluates on numpy arrays and on CasADi symbols.

The friction laws and joint-load models are written against the small set of
operations below. :func:`namespace` picks the CasADi set as soon as one argument is
a CasADi type, so a law evaluates a whole trajectory at once with numpy and builds
an expression graph for a controller with CasADi, from the same source line.
:data:`SCALAR` does the same on plain Python floats, for the interpreted simulation's
per-joint loops, where numpy's per-call overhead on scalars would dominate.
"""

from __future__ import annotations

import functools
import math
import sys
from types import SimpleNamespace
from typing import Any

import numpy as np

__all__ = ["namespace", "NUMPY", "SCALAR", "casadi_namespace"]

NUMPY = SimpleNamespace(
    name="numpy",
    exp=np.exp,
    abs=np.abs,
    sign=np.sign,
    sqrt=np.sqrt,
    maximum=np.maximum,
    minimum=np.minimum,
    tanh=np.tanh,
    sin=np.sin,
    where=np.where,
    # along the last axis of stacked vectors, the length-1 axis kept so that it broadcasts back
    rowdot=lambda a, b: (a * b).sum(axis=-1, keepdims=True),
    component=lambda x, i: np.asarray(x)[..., i],
)


def _sign(x: float) -> float:
    """``sgn(x)`` as ``np.sign``: 0 at 0, NaN for NaN."""
    return 1.0 if x > 0 else -1.0 if x < 0 else 0.0 * x


# Python floats (one joint at a time): the same results as NUMPY on 0-d values
SCALAR = SimpleNamespace(
    name="scalar",
    exp=math.exp,
    abs=abs,
    sign=_sign,
    sqrt=math.sqrt,
    maximum=max,
    minimum=min,
    tanh=math.tanh,
    sin=math.sin,
    where=lambda c, a, b: a if c else b,
    component=lambda x, i: x[i],
)


@functools.cache
def casadi_namespace() -> SimpleNamespace:
    """The CasADi set (imports casadi on first use)."""
    import casadi as ca

    return SimpleNamespace(
        name="casadi",
        exp=ca.exp,
        abs=ca.fabs,
        sign=ca.sign,
        sqrt=ca.sqrt,
        maximum=ca.fmax,
        minimum=ca.fmin,
        tanh=ca.tanh,
        sin=ca.sin,
        where=ca.if_else,
        rowdot=ca.dot,  # of two column vectors
        component=lambda x, i: x[i],
    )


def namespace(*values: Any) -> SimpleNamespace:
    """Return the CasADi set if any value is a CasADi SX/MX/DM, else :data:`NUMPY`.

    Without casadi imported no value can be a CasADi type, so numpy-only work (a friction
    fit) never loads it.
    """
    ca = sys.modules.get("casadi")
    if ca is not None and any(isinstance(v, (ca.SX, ca.MX, ca.DM)) for v in values):
        return casadi_namespace()
    return NUMPY
