"""Array namespaces, so one formula evaluates on numpy arrays and on CasADi symbols.

The friction laws and joint-load models are written against the small set of
operations below. :func:`namespace` picks the CasADi set as soon as one argument is
a CasADi type, so a law evaluates a whole trajectory at once with numpy and builds
an expression graph for a controller with CasADi, from the same source line.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import casadi as ca
import numpy as np

__all__ = ["namespace", "NUMPY", "CASADI"]

NUMPY = SimpleNamespace(
    name="numpy",
    exp=np.exp,
    abs=np.abs,
    sign=np.sign,
    sqrt=np.sqrt,
    maximum=np.maximum,
    where=np.where,
    component=lambda x, i: np.asarray(x)[..., i],
)

CASADI = SimpleNamespace(
    name="casadi",
    exp=ca.exp,
    abs=ca.fabs,
    sign=ca.sign,
    sqrt=ca.sqrt,
    maximum=ca.fmax,
    where=ca.if_else,
    component=lambda x, i: x[i],
)

_CASADI_TYPES = (ca.SX, ca.MX, ca.DM)


def namespace(*values: Any) -> SimpleNamespace:
    """Return :data:`CASADI` if any value is a CasADi SX/MX/DM, else :data:`NUMPY`."""
    return CASADI if any(isinstance(v, _CASADI_TYPES) for v in values) else NUMPY
