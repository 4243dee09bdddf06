"""The simulated servo bench of servo identification, and its simulation errors with their Jacobian.

The servo (DC motor with back-EMF, the firmware's clipped P loop, armature, gearbox
friction) is the shared model of :mod:`mbctl.dynamics.actuator`, the one the simulated
plant uses; here it drives the bench pendulum of :mod:`mbctl.identification.servo_log`::

    (m l^2 + J_a) domega/dt = tau_servo(theta, omega, goal(, z)) - m g l sin(theta)

stepped semi-implicitly (:func:`mbctl.dynamics.actuator.servo_step`; with LuGre friction the
bristle deflection ``z`` is a third state, relaxed at the first sample). The logged goal is
held between samples (zero-order hold, as the firmware gets it). A log is simulated open
loop from its first sample (CasADi, generated C); :func:`residual_function` gives the
simulation errors and their exact Jacobian (forward sensitivities) to the fit of
:mod:`mbctl.identification.servo`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from mbctl.dynamics.actuator import SERVO_LAWS, STALL_PARAMETERS, ServoActuator, servo_step
from mbctl.identification.servo_log import GRAVITY, ServoLog, ServoModel

if TYPE_CHECKING:
    import casadi as ca

# casadi and the code generator load when a model is built, so that the
# command line (which lists LAWS) starts without them

__all__ = ["LAWS", "parameter_names", "residual_function", "simulate_actuator", "simulate_servo", "simulated_current"]

# the laws of the shared servo model, with friction to fit
LAWS: dict[str, tuple[str, ...]] = {law: names for law, names in SERVO_LAWS.items() if law != "none"}


def _name(*parts: str) -> str:
    """A CasADi function name (letters, digits, single underscores) from ``parts``."""
    text = "_".join("".join(c if c.isalnum() else "_" for c in part) for part in parts)
    while "__" in text:
        text = text.replace("__", "_")
    return text.strip("_")


def _states(law: str) -> int:
    """Simulation states of ``law``: ``theta``, ``omega`` and, for LuGre, the bristle ``z``."""
    return 3 if law == "lugre" else 2


def parameter_names(law: str, stall: Sequence[str] = ()) -> tuple[str, ...]:
    """The model's parameters in fit order: the law's (:data:`LAWS`), then the stall's fitted ones."""
    return (*LAWS[law], *stall)


def _step(law: str, model: ServoModel, h: float, stall: Sequence[str] = ()) -> ca.Function:
    """``(x = [theta, omega(, z)], [goal, on, p...]) -> x'``: one semi-implicit step of ``h`` seconds
    (``on`` 1 with torque on, 0 with the motor off) of :func:`mbctl.dynamics.actuator.servo_step`;
    ``p`` the parameters of :func:`parameter_names` (``stall``'s replace the firmware's values)."""
    import casadi as ca

    names = parameter_names(law, stall)
    x, u = ca.SX.sym("x", _states(law)), ca.SX.sym("u", 2 + len(names))
    theta, omega, goal, on = x[0], x[1], u[0], u[1]
    p = dict(zip(names, ca.vertsplit(u[2:])))
    theta_next, omega_next, z_next = servo_step(
        model.firmware,
        law,
        p,
        theta,
        omega,
        goal,
        on,
        inertia=model.mass * model.length**2,
        load=-model.mass * GRAVITY * model.length * ca.sin(theta),
        h=h,
        z=x[2] if law == "lugre" else 0.0,
    )
    return ca.Function("servo_step", [x, u], [ca.vertcat(theta_next, omega_next, *([z_next] if law == "lugre" else []))])


def _initial(law: str, log: ServoLog) -> np.ndarray:
    """The simulation's start: the first measured position, at rest, bristles relaxed."""
    return np.concatenate([[log.position[0]], np.zeros(_states(law) - 1)])


def _trajectory(law: str, log: ServoLog, substeps: int, stall: Sequence[str] = ()) -> ca.Function:
    """``(p, offset) -> theta`` (n,): the log simulated open loop from its first sample; the
    encoder ``offset`` (rad) is added to every simulated position (measured = true + offset)."""
    import casadi as ca

    dt = float(log.t[1] - log.t[0])
    step = _step(law, log.model, dt / substeps, stall)
    n = len(log.t) - 1
    many = step.mapaccum("servo_run", n * substeps)
    p, offset = ca.MX.sym("p", len(parameter_names(law, stall))), ca.MX.sym("offset")
    goals = ca.DM(np.repeat(log.goal[:-1], substeps)).T
    on = np.ones(n) if log.enabled is None else log.enabled[:-1].astype(float)
    x0 = ca.DM(_initial(law, log))
    shift = ca.vertcat(offset, ca.DM.zeros(_states(law) - 1))
    inputs = ca.vertcat(goals - offset, ca.DM(np.repeat(on, substeps)).T, ca.repmat(p, 1, n * substeps))
    states = many(x0 - shift, inputs)
    theta = ca.horzcat(x0[0] - offset, states[0, substeps - 1 :: substeps]).T + offset
    return ca.Function(_name("servo", law, *stall, log.name), [p, offset], [theta])


def _sensitivities(law: str, log: ServoLog, substeps: int, fit_offset: bool, stall: Sequence[str] = ()) -> ca.Function:
    """``z -> (theta, dtheta/dz)``: :func:`_trajectory` with its forward sensitivities, propagated
    with the state in one step function (``S' = (dx'/dx) S + dx'/dz``), so the simulation's
    shared terms are computed once per step for all parameters (a LuGre bristle state is one
    more row of ``x`` and ``S``)."""
    import casadi as ca

    names = parameter_names(law, stall)
    nx = _states(law)
    nz = len(names) + (1 if fit_offset else 0)
    dt = float(log.t[1] - log.t[0])
    step = _step(law, log.model, dt / substeps, stall)
    x, S, u = ca.SX.sym("x", nx), ca.SX.sym("S", nx, nz), ca.SX.sym("u", 2 + len(names))
    x_next = step(x, u)
    B = ca.jacobian(x_next, u[2:])
    if fit_offset:  # the offset enters as the goal minus the offset
        B = ca.horzcat(B, -ca.jacobian(x_next, u[0]))
    S_next = ca.mtimes(ca.jacobian(x_next, x), S) + B
    augmented = ca.Function("servo_sens_step", [ca.vertcat(x, ca.vec(S)), u], [ca.vertcat(x_next, ca.vec(S_next))])
    n = len(log.t) - 1
    many = augmented.mapaccum("servo_sens_run", n * substeps)
    z = ca.MX.sym("z", nz)
    offset = z[-1] if fit_offset else 0.0
    goals = ca.DM(np.repeat(log.goal[:-1], substeps)).T
    on = np.ones(n) if log.enabled is None else log.enabled[:-1].astype(float)
    inputs = ca.vertcat(goals - offset, ca.DM(np.repeat(on, substeps)).T, ca.repmat(z[: len(names)], 1, n * substeps))
    S0 = np.zeros((nx, nz))
    if fit_offset:
        S0[0, -1] = -1.0  # the true start is the first measurement minus the offset
    x0 = ca.vertcat(log.position[0] - offset, ca.DM.zeros(nx - 1))
    states = many(ca.vertcat(x0, ca.DM(S0.reshape(-1, order="F"))), inputs)[:, substeps - 1 :: substeps]
    theta = ca.horzcat(x0[0], states[0, :]).T + offset
    dtheta = ca.horzcat(ca.DM(S0[0:1, :].T), states[nx::nx, :]).T  # S[0, j] is row nx + j nx (column-major)
    if fit_offset:
        dtheta = ca.horzcat(dtheta[:, :-1], dtheta[:, -1] + 1.0)
    return ca.Function(_name("servo_sens", law, *stall, log.name), [z], [theta, dtheta])


def simulate_servo(log: ServoLog, law: str, parameters: dict[str, float], *, substeps: int = 5) -> np.ndarray:
    """Positions (rad) of ``log`` simulated open loop with ``parameters`` (of ``law``, plus
    an optional ``offset`` and the stall's ``current_limit``, ``supply_resistance`` and
    ``torque_saturation``, which replace the log's firmware values), from its first sample, the goals as input."""
    stall = tuple(n for n in STALL_PARAMETERS if n in parameters)
    f = _trajectory(law, log, substeps, stall)
    p = [parameters[name] for name in parameter_names(law, stall)]
    return np.asarray(f(p, parameters.get("offset", 0.0))).ravel()


def simulate_actuator(log: ServoLog, servo: ServoActuator, *, substeps: int = 5) -> np.ndarray:
    """Positions (rad) of ``log`` simulated open loop with a robot's servo (as its
    ``[joints.<name>.actuator]`` table gives it, :func:`mbctl.dynamics.actuator.robot_servos`):
    the servo's motor, armature, friction law, stall (``current_limit``, ``supply_resistance``,
    ``torque_saturation``) and ``friction_smoothing``, with the log's own firmware loop (``kp``,
    ``vin``, ...) and bench. A model fitted at one gain is judged so on logs of another."""
    carried = {n: getattr(servo.firmware, n) for n in (*STALL_PARAMETERS, "friction_smoothing")}
    model = dataclasses.replace(log.model, firmware=dataclasses.replace(log.model.firmware, **carried))
    return simulate_servo(dataclasses.replace(log, model=model), servo.law, dict(servo.parameters), substeps=substeps)


def simulated_current(log: ServoLog, law: str, parameters: dict[str, float], *, substeps: int = 5) -> np.ndarray:
    """The motor current (A) along ``log`` simulated with ``parameters``, from the simulated
    positions and their central-difference speeds (:func:`mbctl.dynamics.actuator.servo_current`;
    0 with the torque off)."""
    from mbctl.dynamics.actuator import servo_current

    theta = simulate_servo(log, law, parameters, substeps=substeps) - parameters.get("offset", 0.0)
    omega = np.gradient(theta, log.t)
    p = {n: parameters[n] for n in ("kt", "R", *STALL_PARAMETERS) if n in parameters}
    current, _ = servo_current(log.model.firmware, p, log.goal - parameters.get("offset", 0.0) - theta, omega)
    return current * (1.0 if log.enabled is None else log.enabled)


def residual_function(law: str, logs: Sequence[ServoLog], *, fit_offset: bool = False, substeps: int = 5, jacobian: bool = True, stall: Sequence[str] = ()):
    """Compiled ``z -> (r, dr/dz)`` (or ``z -> r``): the stacked simulation errors (rad) of every
    log, ``z`` the parameters of ``law`` in :data:`LAWS` order, then the fitted ``stall``
    parameters (:data:`mbctl.dynamics.actuator.STALL_PARAMETERS`), then the offset; the
    Jacobian from forward sensitivities (:func:`_sensitivities`)."""
    import casadi as ca

    from mbctl.dynamics.codegen import compile_function

    stall = tuple(stall)
    names = parameter_names(law, stall)
    z = ca.MX.sym("z", len(names) + (1 if fit_offset else 0))
    offset = z[-1] if fit_offset else 0.0
    if jacobian:
        runs = [_sensitivities(law, log, substeps, fit_offset, stall)(z) for log in logs]
        r = ca.vertcat(*(theta - ca.DM(log.position) for (theta, _), log in zip(runs, logs)))
        outputs = [r, ca.vertcat(*(dtheta for _, dtheta in runs))]
    else:
        outputs = [ca.vertcat(*(_trajectory(law, log, substeps, stall)(z[: len(names)], offset) - ca.DM(log.position) for log in logs))]
    return compile_function(ca.Function(_name("servo_fit" if jacobian else "servo_error", law, *stall, str(len(logs))), [z], outputs))
