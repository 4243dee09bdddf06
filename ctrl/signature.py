"""The signature every control law shares, and the explicit saturation they all end with.

``(q, dq, q_d, dq_d, ddq_d, z) -> (tau, tau_demand, saturated)``; see
:mod:`mbctl.ctrl.controllers` for what each argument means.
"""

from __future__ import annotations

import casadi as ca
import numpy as np

__all__ = ["INPUTS", "OUTPUTS", "saturate"]

INPUTS = ("q", "dq", "q_d", "dq_d", "ddq_d", "z")
OUTPUTS = ("tau", "tau_demand", "saturated")


def saturate(demand: ca.SX, limits: np.ndarray, levels=None) -> tuple[ca.SX, ca.SX]:
    """``tau = clip(demand, -limit, limit)`` per DOF and the flags ``|demand| > limit`` (1.0/0.0).

    An infinite limit leaves the DOF unclipped and never flagged. ``levels`` (per DOF, e.g.
    symbols) replaces the finite limits' values.
    """
    tau, flags = [], []
    for k, limit in enumerate(limits):
        if np.isinf(limit):
            tau.append(demand[k])
            flags.append(ca.SX(0.0))
        else:
            level = float(limit) if levels is None else levels[k]
            tau.append(ca.fmin(ca.fmax(demand[k], -level), level))
            flags.append(ca.fabs(demand[k]) > level)
    return ca.vertcat(*tau), ca.vertcat(*flags)
