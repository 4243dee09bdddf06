"""Position-controlled servos identified from logs of ordinary motions, by simulation error.

Model of a hobby servo (Dynamixel-type firmware) in its own position mode, driving a
one-joint bench: a pendulum of point mass ``m`` (kg) at length ``l`` (m), angle ``theta``
(rad) from hanging down, counter-clockwise positive. The servo (DC motor with back-EMF,
the firmware's clipped P loop, armature, gearbox friction) is the shared model of
:mod:`mbctl.dynamics.actuator`, the one the simulated plant uses; here it drives::

    (m l^2 + J_a) domega/dt = tau_servo(theta, omega, goal(, z)) - m g l sin(theta)

stepped semi-implicitly (:func:`mbctl.dynamics.actuator.servo_step`; with LuGre friction the
bristle deflection ``z`` is a third state, relaxed at the first sample). The logged goal is
held between samples (zero-order hold, as the firmware gets it).

The parameters are fitted to the measured positions of whole logs, each simulated open
loop from its first sample: least squares with the exact Jacobian of the simulation
(CasADi, generated C), bounded, from several starts. Standard errors come from the
Gauss–Newton covariance ``s^2 (J^T J)^-1``; consecutive residuals are correlated, so they
understate the real uncertainty (compare fits on separate logs).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.dynamics.actuator import SERVO_LAWS, STALL_PARAMETERS, ServoActuator, ServoFirmware, servo_step
from mbctl.errors import DataError, InputError
from mbctl.hardware.runlog import log_table

if TYPE_CHECKING:
    import casadi as ca

    from mbctl.dynamics.model.robot import RobotModel

# casadi and the code generator load when a model is built, so that the
# command line (which lists LAWS) starts without them

__all__ = [
    "LAWS",
    "PARAMETERS",
    "ServoFit",
    "bench_model",
    "ServoLog",
    "ServoModel",
    "fit_servo",
    "read_run_log",
    "read_servo_log",
    "residual_function",
    "simulate_actuator",
    "simulate_servo",
    "simulated_current",
]

GRAVITY = 9.81  # m/s^2

# name -> (lower bound, upper bound, first start, unit); kt, R, armature ranges as BAM searches them
PARAMETERS: dict[str, tuple[float, float, float, str]] = {
    "kt": (0.1, 3.0, 0.8, "N m/A"),
    "R": (2.0, 5.0, 3.5, "ohm"),
    "armature": (1e-4, 0.05, 0.005, "kg m^2"),
    "fc": (0.0, 1.0, 0.05, "N m"),
    "fv": (0.0, 1.0, 0.05, "N m s/rad"),
    "fs": (0.0, 1.5, 0.1, "N m"),
    "vs": (0.01, 3.0, 0.2, "rad/s"),
    "mu": (0.0, 1.0, 0.05, "1"),
    "sigma0": (1.0, 5000.0, 200.0, "N m/rad"),
    "sigma1": (0.0, 5.0, 0.2, "N m s/rad"),
    "current_limit": (0.3, 5.0, 1.0, "A"),
    "supply_resistance": (0.0, 2.0, 0.3, "ohm"),
    "torque_saturation": (0.2, 50.0, 2.5, "N m"),
    "offset": (-0.05, 0.05, 0.0, "rad"),
}
# the fraction of a fit's samples at its current limit below which the logs do not show the limit
LIMIT_SEEN = 0.01
LUGRE_MIN_FC = 1e-4  # N m: LuGre's lower bound of fc (g(omega) > 0 at every speed)
# the laws of the shared servo model, with friction to fit
LAWS: dict[str, tuple[str, ...]] = {law: names for law, names in SERVO_LAWS.items() if law != "none"}


@dataclass(frozen=True)
class ServoModel:
    """The bench and the servo's firmware (SI units; ``kp`` in firmware units).

    Attributes:
        mass: Pendulum point mass (kg).
        length: Its distance from the axis (m).
        firmware: The servo's firmware and supply, of the shared servo model: the duty is
            ``pwm = clip(kp * e / divisor, +-pwm_limit)`` (``e`` the error in encoder counts),
            the voltage ``V = pwm / pwm_max * vin``, the current at most ``current_limit`` (A)
            (XL330: pwm_limit = pwm_max = 885, divisor 256 as observed).
    """

    mass: float
    length: float
    firmware: ServoFirmware


def bench_model(robot: RobotModel, joint: str) -> ServoModel:
    """The bench of a one-joint robot whose joint has a servo (``[joints.<joint>.actuator]``):
    the pendulum of the same inertia ``I`` (kg m^2, without the servo's armature) and gravity
    moment ``G`` (``g(q) = G sin q``, N m), ``l = I g / G``, ``m = G / (g l)``; the firmware of
    the servo's table. ``q = 0`` must hang down.

    Raises:
        ConfigError: Naming the file and field, if the robot is not such a bench.
    """
    import pinocchio as pin

    from mbctl.dynamics.actuator import robot_servos
    from mbctl.errors import ConfigError

    servos = robot_servos(robot)
    if joint not in servos:
        raise ConfigError(f"joint {joint!r} has no servo (expected a [joints.{joint}.actuator] table)", file=robot.source, field=f"joints.{joint}.actuator")
    if robot.nv != 1:
        raise ConfigError(f"a servo bench has one joint; {robot.name} has {robot.nv}", file=robot.source, field="joints")
    firmware = servos[joint].firmware
    if firmware.gear_ratio != 1:
        raise ConfigError("a servo bench drives its joint directly (gear_ratio 1)", file=robot.source, field=f"joints.{joint}.actuator.gear_ratio")
    data = robot.create_data()
    inertia = float(pin.crba(robot.model, data, robot.configuration(np.zeros(1)))[0, 0])
    moments = [float(pin.computeGeneralizedGravity(robot.model, data, robot.configuration(np.array([a])))[0]) for a in (0.0, math.pi / 2)]
    if abs(moments[0]) > 1e-9 * max(1.0, abs(moments[1])) or not moments[1] > 0:
        raise ConfigError("a servo bench is a pendulum hanging down at q = 0 (gravity moment G sin q, G > 0)", file=robot.source, field="urdf")
    length = inertia * GRAVITY / moments[1]
    return ServoModel(mass=moments[1] / (GRAVITY * length), length=length, firmware=firmware)


@dataclass(frozen=True)
class ServoLog:
    """One logged motion: times (s), measured and goal positions (rad), the bench and firmware,
    and whether torque was on at each sample (off: the motor carries no current; default on)."""

    name: str
    t: np.ndarray
    position: np.ndarray
    goal: np.ndarray
    model: ServoModel
    enabled: np.ndarray | None = None


def read_servo_log(path: str | Path) -> ServoLog:
    """A log in BAM's JSON format (``.json`` or ``.json.gz``): ``mass``, ``length``, ``kp``,
    ``vin`` and ``entries`` of ``timestamp``, ``position``, ``goal_position`` and, optionally,
    ``torque_enable``.

    Raises:
        InputError: Naming the file and the field, for a missing or bad value.
    """
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            doc = json.load(f)
    except (OSError, ValueError, EOFError) as exc:
        raise InputError(f"cannot read the log ({exc})", file=path) from None
    if not isinstance(doc, dict):
        raise InputError("expected a JSON object", file=path)
    numbers = {}
    for key in ("mass", "length", "kp", "vin"):
        value = doc.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value <= 0:
            raise InputError(f"needs a positive number, got {value!r}", file=path, field=key)
        numbers[key] = float(value)
    entries = doc.get("entries")
    if not isinstance(entries, list) or len(entries) < 10:
        raise InputError("needs a list of at least 10 samples", file=path, field="entries")
    columns = {}
    for key in ("timestamp", "position", "goal_position"):
        try:
            columns[key] = np.array([float(e[key]) for e in entries])
        except (KeyError, TypeError, ValueError):
            raise InputError("every sample needs a number here", file=path, field=f"entries.{key}") from None
        if not np.isfinite(columns[key]).all():
            raise InputError("must be finite", file=path, field=f"entries.{key}")
    t = columns["timestamp"]
    dt = np.diff(t)
    if not (dt > 0).all() or np.ptp(dt) > 1e-6 * max(1.0, dt.mean()) + 1e-9:
        raise InputError("samples must be at a constant, increasing time step", file=path, field="entries.timestamp")
    model = ServoModel(mass=numbers["mass"], length=numbers["length"], firmware=ServoFirmware(kp=numbers["kp"], vin=numbers["vin"]))
    name = path.name.removesuffix(".gz").removesuffix(".json")
    enabled = np.array([bool(e.get("torque_enable", True)) for e in entries])
    return ServoLog(name=name, t=t - t[0], position=columns["position"], goal=columns["goal_position"], model=model, enabled=enabled)


def read_run_log(path: str | Path, joint: str, model: ServoModel) -> ServoLog:
    """A servo log from an mbctl run log (NPZ, :mod:`mbctl.hardware.runlog`) of a position-mode
    run (:func:`mbctl.hardware.replay.replay_positions`): ``t``, the measured ``q.<joint>`` and
    the goal sent after each measurement, ``q_ref.<joint>`` (rad; NaN: torque off until the
    next row); the bench and firmware are ``model``'s. Rows whose read failed (``read_ok`` 0) are dropped; samples not at a
    constant step are resampled to their median step (positions linearly, goals held).

    Raises:
        DataError: Naming the file and the column, for a missing or non-finite column or
            fewer than 10 samples.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            columns, data = log_table(npz)
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"cannot read the run log ({exc})", file=path) from None
    picked = {}
    for key in ("t", f"q.{joint}", f"q_ref.{joint}"):
        if key not in columns:
            raise DataError(f"missing column (joint {joint!r}?)", file=path, field=key)
        picked[key] = data[:, columns.index(key)]
    if "read_ok" in columns:
        keep = data[:, columns.index("read_ok")] == 1
        picked = {k: v[keep] for k, v in picked.items()}
    for key, values in picked.items():
        if not (np.isfinite(values) | (key.startswith("q_ref.") & np.isnan(values))).all():
            raise DataError("must be finite", file=path, field=key)
    t, position, goal = picked["t"], picked[f"q.{joint}"], picked[f"q_ref.{joint}"]
    enabled = np.isfinite(goal)
    goal = np.where(enabled, goal, position)  # a motor that is off follows no goal
    if len(t) < 10 or not (np.diff(t) > 0).all():
        raise DataError("needs at least 10 samples at increasing times", file=path, field="t")
    dt = np.diff(t)
    step = float(np.median(dt))
    if np.ptp(dt) > 1e-6 * step:
        grid = t[0] + step * np.arange(int(np.floor((t[-1] - t[0]) / step + 1e-9)) + 1)
        position = np.interp(grid, t, position)
        held = np.searchsorted(t, grid, side="right") - 1  # the goal in force at each grid time
        goal, enabled, t = goal[held], enabled[held], grid
    return ServoLog(name=path.name.removesuffix(".npz"), t=t - t[0], position=position, goal=goal, model=model, enabled=enabled)


def _name(*parts: str) -> str:
    """A CasADi function name (letters, digits, single underscores) from ``parts``."""
    text = "_".join("".join(c if c.isalnum() else "_" for c in part) for part in parts)
    while "__" in text:
        text = text.replace("__", "_")
    return text.strip("_")


def _states(law: str) -> int:
    """Simulation states of ``law``: ``theta``, ``omega`` and, for LuGre, the bristle ``z``."""
    return 3 if law == "lugre" else 2


def _names(law: str, stall: Sequence[str] = ()) -> tuple[str, ...]:
    """The model's parameters in fit order: the law's (:data:`LAWS`), then the stall's fitted ones."""
    return (*LAWS[law], *stall)


def _step(law: str, model: ServoModel, h: float, stall: Sequence[str] = ()) -> ca.Function:
    """``(x = [theta, omega(, z)], [goal, on, p...]) -> x'``: one semi-implicit step of ``h`` seconds
    (``on`` 1 with torque on, 0 with the motor off) of :func:`mbctl.dynamics.actuator.servo_step`;
    ``p`` the parameters of :func:`_names` (``stall``'s replace the firmware's values)."""
    import casadi as ca

    names = _names(law, stall)
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
    p, offset = ca.MX.sym("p", len(_names(law, stall))), ca.MX.sym("offset")
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

    names = _names(law, stall)
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
    p = [parameters[name] for name in _names(law, stall)]
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


@dataclass(frozen=True)
class ServoFit:
    """A fitted servo model.

    Attributes:
        law: Friction law; parameters, standard_errors: by name (units in :data:`PARAMETERS`).
        train_mae, validation_mae: Mean absolute position error per log (rad).
        starts: Starts tried; cost: final half sum of squared errors (rad^2);
        evaluations: simulations of all logs (with or without sensitivities); wall_s: fit time (s); substeps: integration
        steps per log sample of the simulations.
        limited: For a fitted ``current_limit``: per fitted log, the fraction of its samples
            with the simulated current at the limit (where the limit is identified).
        unidentified: Stall parameters the logs did not show, with what they tell of them: a
            ``current_limit`` reached in fewer than :data:`LIMIT_SEEN` of the samples is left
            out of ``parameters`` (the firmware's applies) and given here as the largest
            simulated current (A), a lower bound.
    """

    law: str
    parameters: dict[str, float]
    standard_errors: dict[str, float]
    train_mae: dict[str, float]
    validation_mae: dict[str, float] = field(default_factory=dict)
    starts: int = 1
    cost: float = math.nan
    evaluations: int = 0
    wall_s: float = 0.0
    substeps: int = 5
    limited: dict[str, float] = field(default_factory=dict)
    unidentified: dict[str, float] = field(default_factory=dict)

    def simulated(self, log: ServoLog) -> np.ndarray:
        """The log's positions as this model simulates them (rad)."""
        return simulate_servo(log, self.law, self.parameters, substeps=self.substeps)


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
    names = _names(law, stall)
    z = ca.MX.sym("z", len(names) + (1 if fit_offset else 0))
    offset = z[-1] if fit_offset else 0.0
    if jacobian:
        runs = [_sensitivities(law, log, substeps, fit_offset, stall)(z) for log in logs]
        r = ca.vertcat(*(theta - ca.DM(log.position) for (theta, _), log in zip(runs, logs)))
        outputs = [r, ca.vertcat(*(dtheta for _, dtheta in runs))]
    else:
        outputs = [ca.vertcat(*(_trajectory(law, log, substeps, stall)(z[: len(names)], offset) - ca.DM(log.position) for log in logs))]
    return compile_function(ca.Function(_name("servo_fit" if jacobian else "servo_error", law, *stall, str(len(logs))), [z], outputs))


def _standard_errors(J: np.ndarray, cost: float, rcond: float = 1e-9) -> list[float]:
    """Gauss–Newton standard errors ``sqrt(diag(s^2 (J^T J)^-1))``, ``s^2 = 2 cost/(n - p)``.

    Directions the logs do not determine (singular values of the column-scaled ``J``
    below ``rcond`` of the largest) make the parameters they involve infinitely
    uncertain: e.g. back-EMF ``kt^2/R`` and viscous ``fv`` both damp as ``omega``
    unless some log has the torque off.
    """
    scale = np.linalg.norm(J, axis=0)
    scale[scale == 0] = 1.0
    _, sv, Vt = np.linalg.svd(J / scale, full_matrices=False)
    s2 = 2 * cost / max(1, J.shape[0] - J.shape[1])
    kept = sv > rcond * sv[0]
    cov = (Vt[kept].T / sv[kept] ** 2) @ Vt[kept] * s2 / np.outer(scale, scale)
    lost = np.zeros(J.shape[1], dtype=bool)
    for v in Vt[~kept]:
        lost |= np.abs(v) > 0.1
    return [math.inf if lost[i] else float(math.sqrt(max(cov[i, i], 0.0))) for i in range(J.shape[1])]


@dataclass(frozen=True)
class _Solution:
    x: np.ndarray
    cost: float
    residual: np.ndarray
    jac: np.ndarray


def _levenberg_marquardt(error, with_jacobian, z0: np.ndarray, lower: np.ndarray, upper: np.ndarray, *, max_iterations: int, ftol: float = 1e-5) -> _Solution:
    """Bounded Levenberg–Marquardt on ``0.5 |r(z)|^2``: steps ``(J^T J + lam D) dz = -J^T r``
    (``D`` the diagonal of ``J^T J``) on the parameters not held at a bound by the gradient,
    projected onto the bounds; ``lam`` shrinks after a step that lowers the cost and grows
    until one does. Stops when a step lowers the cost by less than ``ftol`` of it.
    Works on the 8 x 8 normal equations: no factorisation of the long Jacobian."""
    z = np.clip(z0, lower, upper)
    r, J = (np.asarray(a) for a in with_jacobian(z))
    r = r.ravel()
    cost = 0.5 * float(r @ r)
    if not np.isfinite(cost) or not np.isfinite(J).all():
        raise np.linalg.LinAlgError("non-finite simulation at the start")
    lam = 1e-3
    for _ in range(max_iterations):
        g, H = J.T @ r, J.T @ J
        d = np.sqrt(np.diag(H))
        d[d == 0] = 1.0
        free = ~(((z <= lower) & (g > 0)) | ((z >= upper) & (g < 0)))
        improved = False
        while lam < 1e12:
            A = H[np.ix_(free, free)] / np.outer(d[free], d[free]) + lam * np.eye(int(free.sum()))
            step = np.zeros_like(z)
            step[free] = -np.linalg.solve(A, g[free] / d[free]) / d[free]
            trial = np.clip(z + step, lower, upper)
            r_trial = np.asarray(error(trial)[0]).ravel()
            cost_trial = 0.5 * float(r_trial @ r_trial)
            if np.isfinite(cost_trial) and cost_trial < cost:
                improved = True
                break
            lam *= 4.0
        if not improved:
            break
        # a cautious update: the simulation error is rough in (fs, vs), and bolder damping
        # updates (Nielsen's) were seen to end in a degenerate Stribeck basin (fs -> 0)
        decrease = cost - cost_trial
        z, lam = trial, max(lam / 3.0, 1e-12)
        r, J = (np.asarray(a) for a in with_jacobian(z))
        r = r.ravel()
        cost = 0.5 * float(r @ r)
        if decrease <= ftol * cost:
            break
    return _Solution(x=z, cost=cost, residual=r, jac=J)


def fit_servo(
    logs: Sequence[ServoLog],
    law: str = "stribeck-load",
    *,
    validate: Sequence[ServoLog] = (),
    starts: int = 3,
    fit_offset: bool = False,
    substeps: int = 5,
    seed: int = 0,
    stall: Sequence[str] = (),
    bounds: Mapping[str, tuple[float, float]] | None = None,
) -> ServoFit:
    """Fit the servo model of ``law`` to the measured positions of ``logs``.

    Starts: the first from the middle guesses of :data:`PARAMETERS` (for ``lugre``, before it,
    the parameters of a Stribeck fit of the same logs with the bristles' guesses), the others drawn
    log-uniformly (uniformly for the offset) within the bounds with ``seed``; each is solved
    by :func:`_levenberg_marquardt` and the best final cost is kept. (A cheaper first pass
    with one integration step per sample was tried: its minima lie in other basins.)

    ``stall`` names the stall parameters to fit as well (``current_limit``, A;
    ``supply_resistance``, ohm; ``torque_saturation``, N m; see :mod:`mbctl.dynamics.actuator`); the others are the logs'
    firmware values. A fitted limit the simulated currents reach in fewer than
    :data:`LIMIT_SEEN` of the samples is not shown by the logs: the fit is repeated without it
    and :attr:`ServoFit.unidentified` gives the largest current as its lower bound (a limit
    held by equal bounds is kept).
    ``bounds`` replaces the :data:`PARAMETERS` bounds of the named parameters; equal bounds
    hold one fixed (standard error 0).

    Raises:
        InputError: For an unknown law, stall parameter or bound, or no logs.
        DataError: If no start converges to finite values.
    """
    if law not in LAWS:
        raise InputError(f"unknown law {law!r} (expected one of: {', '.join(LAWS)})", field="--law")
    if not logs:
        raise InputError("no logs to fit", field="logs")
    stall = tuple(dict.fromkeys(stall))
    unknown = [n for n in stall if n not in STALL_PARAMETERS]
    if unknown:
        raise InputError(f"unknown stall parameter {unknown[0]!r} (expected: {', '.join(STALL_PARAMETERS)})", field="--stall")
    start_time = time.perf_counter()
    names = _names(law, stall) + (("offset",) if fit_offset else ())
    span = {n: PARAMETERS[n][:2] for n in names} | dict(bounds or {})
    if not set(span) <= set(names) or not all(lo <= hi for lo, hi in span.values()):
        bad = next(n for n, (lo, hi) in span.items() if n not in names or lo > hi)
        raise InputError(f"bounds of {bad!r}: not a fitted parameter, or lower above upper", field="bounds")
    lower = np.array([span[n][0] for n in names], dtype=float)
    upper = np.array([span[n][1] for n in names], dtype=float)
    if law == "lugre":  # its state equation divides by g(omega), which tends to fc at speed
        lower[list(names).index("fc")] = LUGRE_MIN_FC
    evaluations = [0]

    rng = np.random.default_rng(seed)
    guesses = [np.array([PARAMETERS[n][2] for n in names])]
    if law == "lugre":
        # LuGre's steady state is the Stribeck law: its fit (cheaper, smoother) is the first
        # start, with the bristles' first guesses; from the generic start alone the fit of
        # the real XL330 logs ended at the bounds (fc, fs at their largest, sigma0 at its least)
        stribeck = fit_servo(
            logs,
            "stribeck",
            starts=starts,
            fit_offset=fit_offset,
            substeps=substeps,
            seed=seed,
            stall=stall,
            bounds={n: b for n, b in (bounds or {}).items() if n in _names("stribeck", stall) or n == "offset"},
        )
        evaluations[0] += stribeck.evaluations
        guesses.insert(0, np.array([stribeck.parameters.get(n, PARAMETERS[n][2]) for n in names]))
    for _ in range(starts - 1):
        positive = lower > 0
        g = rng.uniform(lower, upper)
        g[positive] = np.exp(rng.uniform(np.log(lower[positive]), np.log(upper[positive])))
        guesses.append(g)
    # a step rejected by the damping needs the residual only: two functions
    error = residual_function(law, logs, fit_offset=fit_offset, substeps=substeps, jacobian=False, stall=stall)
    with_jacobian = residual_function(law, logs, fit_offset=fit_offset, substeps=substeps, stall=stall)

    def counted_error(z):
        evaluations[0] += 1
        return error(z)

    def counted_jacobian(z):
        evaluations[0] += 1
        return with_jacobian(z)

    best = None
    for guess in guesses:
        try:
            res = _levenberg_marquardt(counted_error, counted_jacobian, guess, lower, upper, max_iterations=100)
        except (ValueError, np.linalg.LinAlgError):
            continue
        if np.isfinite(res.cost) and (best is None or res.cost < best.cost):
            best = res
    if best is None:
        raise DataError("the servo model could not be fitted from any start (non-finite simulation)")
    parameters = {n: float(v) for n, v in zip(names, best.x)}
    free = lower < upper  # equal bounds hold a parameter fixed: it has no error of its own
    errors = dict.fromkeys(names, 0.0) | dict(zip([n for n, f in zip(names, free) if f], _standard_errors(best.jac[:, free], best.cost)))

    limited = {}
    if "current_limit" in stall:
        currents = [np.abs(simulated_current(log, law, parameters, substeps=substeps)) for log in logs]
        limit = parameters["current_limit"]
        limited = {log.name: float((c >= limit * (1 - 1e-6)).mean()) for log, c in zip(logs, currents)}
        held = span["current_limit"][0] == span["current_limit"][1]  # a given value, not fitted: kept whether reached or not
        if not held and np.mean(np.concatenate(currents) >= limit * (1 - 1e-6)) < LIMIT_SEEN:
            # logs that never reach the limit do not show it (no gradient: it stays where a
            # start put it, and a barely touched limit bends the other parameters): fitted
            # again without it, so the firmware's value applies; the largest current is a lower bound
            rest = fit_servo(
                logs,
                law,
                validate=validate,
                starts=starts,
                fit_offset=fit_offset,
                substeps=substeps,
                seed=seed,
                stall=[n for n in stall if n != "current_limit"],
                bounds={n: b for n, b in (bounds or {}).items() if n != "current_limit"},
            )
            return dataclasses.replace(
                rest,
                standard_errors={**rest.standard_errors, "current_limit": math.inf},
                limited=limited,
                unidentified={"current_limit": float(max(c.max() for c in currents))},
                evaluations=rest.evaluations + evaluations[0],
                wall_s=time.perf_counter() - start_time,
            )

    def mae(log: ServoLog) -> float:
        return float(np.abs(simulate_servo(log, law, parameters, substeps=substeps) - log.position).mean())

    return ServoFit(
        substeps=substeps,
        law=law,
        parameters=parameters,
        standard_errors=errors,
        train_mae={log.name: float(np.abs(part).mean()) for log, part in zip(logs, np.split(best.residual, np.cumsum([len(log.t) for log in logs])[:-1]))},
        validation_mae={log.name: mae(log) for log in validate},
        starts=len(guesses),
        cost=float(best.cost),
        evaluations=evaluations[0],
        wall_s=time.perf_counter() - start_time,
        limited=limited,
    )
