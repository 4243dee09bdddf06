"""Joint-space control laws as expressions, and compiled once per structure with the robot's numbers as inputs.

:func:`joint_space_demand` writes each law's demand once, for the numeric laws of
:func:`mbctl.ctrl.controllers.build_controller` and the parametric ones below.

:meth:`mbctl.ctrl.controllers.Controller.compile` of a joint-space law generates the law with
one more input ``p``: the robot's inertial parameters and rotor inertias, its joints' friction
and load-model coefficients (the order of
:func:`mbctl.dynamics.simulation.structure.parametrize_robot`), then the gains ``kp``, ``kd``
per DOF and the finite saturation levels (N·m, N). The C is compiled once per structure (the
kinematic tree, law kinds, control law, friction velocity, which DOF saturate) in a thread and
bound to each controller's values, so a study whose runs change masses, friction or gains
compiles its law once.
"""

from __future__ import annotations

import threading

import casadi as ca
import numpy as np

from mbctl.ctrl.settings import ControlSettings
from mbctl.ctrl.signature import INPUTS, OUTPUTS, saturate
from mbctl.dynamics.codegen import CompiledFunction, compile_function
from mbctl.dynamics.simulation.structure import ParameterVector, parametrize_robot, robot_key, twin
from mbctl.dynamics.symbolic import SymbolicDynamics

__all__ = ["compile_law", "gains_of", "joint_space_demand", "law_function", "law_parameters", "law_values"]

_LAWS_KEPT = 16  # structures kept per thread
_compiled = threading.local()


def gains_of(law: str, settings: ControlSettings) -> tuple[np.ndarray | None, np.ndarray | None]:
    """``(kp, kd)`` of a joint-space law (None for feed-forward).

    Raises:
        ConfigError: If the ``[control]`` table does not give them.
    """
    if law == "feedforward":
        return None, None
    g = settings.require("computed-torque" if law == "computed-torque" else "pd")
    return np.asarray(g.kp, dtype=float), np.asarray(g.kd, dtype=float)


def joint_space_demand(law: str, sd: SymbolicDynamics, friction_velocity: str, kp, kd, q, dq, q_d, dq_d, ddq_d, z) -> ca.SX:
    """``tau_demand`` of a joint-space law (see :mod:`mbctl.ctrl.controllers`) as an SX
    expression; the gains ``kp``, ``kd`` (per DOF) may be numbers or symbols."""
    e, de = q_d - q, dq_d - dq
    if law == "feedforward":
        return sd.inverse_dynamics_of(q_d, dq_d, ddq_d, z)[0]
    if law == "computed-torque":
        a = ddq_d + kd * de + kp * e
        if friction_velocity == "measured":
            return sd.inverse_dynamics_of(q, dq, a, z)[0]
        _, rigid, _, _, load = sd.inverse_dynamics_of(q, dq, a, z)
        return rigid + sd.friction_of(dq_d, ddq_d, z, load)
    if law == "pd-gravity":
        return kp * e + kd * de + sd.gravity_of(q)
    return sd.inverse_dynamics_of(q_d, dq_d, ddq_d, z)[0] + kp * e + kd * de


def law_parameters(controller, vec: ParameterVector):
    """The law's parameters in ``vec``: ``(dynamics, kp, kd, levels)``, the symbolic dynamics
    built on them and the gains and saturation levels as ``vec``'s entries (lists per DOF)."""
    robot, settings = controller.robot, controller.settings
    params = parametrize_robot(robot, (), vec)
    friction = {}
    for j in robot.joints:
        if j.friction is not None:
            law = twin(j.friction.law, f"{j.name}.friction", vec)
            load = None if j.friction.load is None else twin(j.friction.load, f"{j.name}.friction.load", vec)
            friction[j.idx_v] = (law, load)
    sd = SymbolicDynamics(robot, bodies=params.bodies, armature=params.armature, friction=friction)
    names = robot.joint_names
    kp, kd = gains_of(controller.law, settings)
    gains = [None if g is None else ca.vertcat(*(vec.scalar(f"{n}.{label}", v) for n, v in zip(names, g))) for label, g in (("kp", kp), ("kd", kd))]
    levels = [vec.scalar(f"{n}.saturation", v) if np.isfinite(v) else v for n, v in zip(names, settings.effort)]
    return sd, gains[0], gains[1], levels


def law_function(controller) -> ca.Function:
    """``(q, dq, q_d, dq_d, ddq_d, z, p) -> (tau, tau_demand, saturated)``."""
    vec = ParameterVector(symbolic=True)
    sd, kp, kd, levels = law_parameters(controller, vec)
    args = [ca.SX.sym(name, controller.robot.nv) for name in INPUTS]
    demand = joint_space_demand(controller.law, sd, controller.settings.friction_velocity, kp, kd, *args)
    tau, flags = saturate(demand, controller.settings.effort, levels)
    name = f"{controller.law.replace('-', '_')}_{controller.robot.ident}"
    return ca.Function(name, [*args, vec.symbols], [tau, demand, flags], [*INPUTS, "p"], list(OUTPUTS))


def law_values(controller) -> tuple[np.ndarray, str]:
    """``(p, key)``: the values of :func:`law_function`'s last input for ``controller`` and the key
    of the law's structure (what a generated function built from it is cached by)."""
    vec = ParameterVector(symbolic=False)
    law_parameters(controller, vec)
    robot = controller.robot
    kinds = [(j.idx_v, type(j.friction.law).__name__, type(j.friction.load).__name__) for j in robot.joints if j.friction is not None]
    saturating = tuple(bool(np.isfinite(v)) for v in controller.settings.effort)
    return vec.array, robot_key(robot, controller.law, controller.settings.friction_velocity, kinds, saturating, vec.names)


def compile_law(controller, *, cache=None) -> CompiledFunction:
    """The joint-space law of ``controller`` (a :class:`mbctl.ctrl.controllers.Controller`) in C,
    its parameters bound: called as ``controller.function`` is (see the module docstring)."""
    values, structure = law_values(controller)
    key = (structure, None if cache is None else str(cache))
    laws = getattr(_compiled, "by_key", None)
    if laws is None:
        laws = _compiled.by_key = {}
    if key in laws:
        return laws[key].instance().bind(values)
    laws[key] = compiled = compile_function(law_function(controller), cache=cache)
    while len(laws) > _LAWS_KEPT:
        laws.pop(next(iter(laws)))
    return compiled.bind(values)
