"""Position-controlled servos (Dynamixel-type firmware): DC motor, the firmware's P loop, gearbox friction.

One model, used by the simulated plant (:class:`mbctl.dynamics.simulation.stepper.FrictionStepper`)
and by the identification from logs (:mod:`mbctl.identification.servo`). Quantities at the
servo's output shaft carry an ``s``; a gear of ``gear_ratio`` ``G`` between the output and
the joint gives ``theta_s = G q``, ``omega_s = G dq``, joint torque ``G tau_s`` and armature
``G^2 J_a`` at the joint. SI units throughout::

    e     = (goal_s - theta_s) * counts / (2 pi)                  position error (encoder counts)
    pwm   = clip(kp * e / divisor, -pwm_limit, pwm_limit)          the firmware's P loop (PWM units)
    V     = pwm / pwm_max * vin                                    motor voltage (V)
    i     = clip((V - kt * omega_s) / R, -i_max, i_max)            current (A); no clip without a limit
    tau_m = on * kt * i                                            motor torque at the output (N m)
    tau_f = -(level(omega_s) + mu * |tau_m|) * tanh(omega_s / eps) - fv * omega_s

``kt`` (N m/A, gear of the servo included) is also the back-EMF constant (V s/rad);
``on`` is 1 with the torque on, 0 with the motor off (no current). ``level`` is the dry
friction of the law (N m): ``fc`` (Coulomb–viscous), ``g(omega_s) = fc + (fs - fc)
exp(-(omega_s/vs)^2)`` (Stribeck); ``mu`` (``stribeck-load``) makes it grow with the
torque the gearbox transmits. ``eps`` = :data:`SMOOTHING`.

``lugre`` replaces the smoothed sign by a bristle deflection ``z`` (rad, at the output;
the servo's state, relaxed ``z = 0`` at the start)::

    dz/dt = omega_s - sigma0 |omega_s| z / g(omega_s)
    tau_f = -(sigma0 z + sigma1 dz/dt) - fv * omega_s

(``sigma0`` N m/rad, ``sigma1`` N m s/rad): below break-away the gearbox sticks as a
stiff spring instead of creeping; in steady sliding it is the Stribeck law.

Steps are semi-implicit: the damping ``c = d(-tau)/d omega = on kt^2/R (unclipped current)
+ fv + dry (1 - tanh^2(omega_s/eps))/eps`` (LuGre: ``+ fv + sigma1``) is taken implicitly
(:func:`servo_step`), which stays stable where back-EMF and friction are stiff; a LuGre
state first advances exactly at the step's starting speed (:func:`servo_z_step`).

Formulas evaluate on numpy values and on CasADi symbols (:mod:`mbctl.dynamics.backend`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from mbctl.config.actuator import SERVO_FRICTION_LAWS, ActuatorSpec
from mbctl.dynamics.backend import namespace
from mbctl.errors import ConfigError

if TYPE_CHECKING:
    from mbctl.dynamics.model.robot import RobotModel

__all__ = ["SERVO_LAWS", "SMOOTHING", "ServoActuator", "ServoFirmware", "robot_servos", "servo_actuator", "servo_step", "servo_torque", "servo_z_step"]

SMOOTHING = 0.02  # rad/s: eps of tanh(omega/eps), the regularised sign of the dry friction
# law -> the parameters the model needs: motor, armature, then the friction law's
SERVO_LAWS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {law: ("kt", "R", "armature", *names) for law, names in SERVO_FRICTION_LAWS.items()}
)


@dataclass(frozen=True)
class ServoFirmware:
    """What the servo's firmware and supply fix (``kp``, ``divisor``, PWM in firmware units).

    Attributes:
        kp: Position gain; divisor: ``pwm = kp * error_counts / divisor`` (XL330: 256 observed).
        vin: Supply voltage (V); pwm_limit, pwm_max: PWM limit and the PWM of 100 % duty (885).
        counts: Encoder counts per output revolution; current_limit: A, or None for none.
        gear_ratio: Output turns per joint turn.
    """

    kp: float
    vin: float
    divisor: float = 256.0
    pwm_limit: float = 885.0
    pwm_max: float = 885.0
    counts: float = 4096.0
    current_limit: float | None = None
    gear_ratio: float = 1.0

    def __post_init__(self) -> None:
        checks = {
            "kp": self.kp >= 0, "vin": self.vin > 0, "divisor": self.divisor > 0, "pwm_max": self.pwm_max > 0,
            "pwm_limit": 0 < self.pwm_limit <= self.pwm_max, "counts": self.counts > 0,
            "current_limit": self.current_limit is None or self.current_limit > 0, "gear_ratio": self.gear_ratio != 0,
        }
        for name, ok in checks.items():
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ConfigError(f"must be a finite number, got {value!r}", field=name)
            if not ok:
                rule = {"pwm_limit": "must be > 0 and <= pwm_max", "gear_ratio": "must not be 0", "kp": "must be >= 0"}.get(name, "must be > 0")
                raise ConfigError(f"{rule}, got {value!r}", field=name)


@dataclass(frozen=True)
class ServoActuator:
    """A servo: its firmware, its friction law and the parameters :data:`SERVO_LAWS` lists for it.

    Attributes:
        firmware: Firmware and supply.
        law: ``none``, ``coulomb-viscous``, ``stribeck``, ``stribeck-load`` or ``lugre``.
        parameters: ``kt`` (N m/A), ``R`` (ohm), ``armature`` (kg m^2, at the output) and
            the law's ``fc``, ``fs`` (N m), ``fv`` (N m s/rad), ``vs`` (rad/s), ``mu`` (1),
            ``sigma0`` (N m/rad), ``sigma1`` (N m s/rad).
    """

    firmware: ServoFirmware
    law: str = "none"
    parameters: Mapping[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.law not in SERVO_LAWS:
            raise ConfigError(f"unknown law {self.law!r} (expected one of: {', '.join(SERVO_LAWS)})", field="friction.law")
        missing = [n for n in SERVO_LAWS[self.law] if n not in self.parameters]
        if missing:
            raise ConfigError(f"missing parameter {missing[0]!r} of a {self.law} servo", field=missing[0])
        for name, value in self.parameters.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ConfigError(f"must be a finite number, got {value!r}", field=name)
            positive = name in ("kt", "R", "vs", "sigma0") or (name in ("fc", "fs") and self.law == "lugre")  # LuGre divides by g >= min(fc, fs)
            if (value <= 0) if positive else (value < 0):
                where = name if name in ("kt", "R", "armature") else f"friction.{name}"
                raise ConfigError(f"must be {'>' if positive else '>='} 0, got {value:g}", field=where)
        object.__setattr__(self, "parameters", MappingProxyType({n: float(self.parameters[n]) for n in SERVO_LAWS[self.law]}))

    def joint_armature(self) -> float:
        """Apparent rotor inertia at the joint, ``G^2 J_a`` (kg m^2)."""
        return self.firmware.gear_ratio**2 * self.parameters["armature"]

    @property
    def stateful(self) -> bool:
        """True when the friction law carries a bristle state (LuGre)."""
        return self.law == "lugre"

    def torque(self, q: Any, dq: Any, goal: Any, on: Any = 1.0, z: Any = 0.0) -> tuple[Any, Any]:
        """:func:`servo_torque` with this servo's parameters."""
        return servo_torque(self.firmware, self.law, self.parameters, q, dq, goal, on, z=z)

    def z_step(self, z: Any, dq: Any, h: float) -> Any:
        """:func:`servo_z_step` with this servo's parameters (``dq`` at the joint, rad/s)."""
        return servo_z_step(self.law, self.parameters, z, self.firmware.gear_ratio * dq, h)


def servo_actuator(spec: ActuatorSpec) -> ServoActuator:
    """The servo a ``[joints.<name>.actuator]`` spec describes.

    Raises:
        ConfigError: For values out of their physical range, located in the spec's file and table.
    """
    v = spec.values
    try:
        firmware = ServoFirmware(
            kp=v["kp"], vin=v["vin"], **{k: v[k] for k in ("divisor", "pwm_limit", "pwm_max", "counts", "current_limit", "gear_ratio") if k in v}
        )
        return ServoActuator(firmware, spec.law, {"kt": v["kt"], "R": v["R"], "armature": v.get("armature", 0.0), **spec.friction})
    except ConfigError as exc:
        raise exc.located(file=spec.file, prefix=spec.field) from None


def robot_servos(robot: RobotModel) -> dict[str, ServoActuator]:
    """The servos of the robot's joints, by joint name (its ``[joints.<name>.actuator]`` tables).

    Raises:
        ConfigError: For a servo on a passive or prismatic joint, or values out of range,
            naming the file and table.
    """
    if robot.spec is None:
        return {}
    servos = {}
    for name, joint_spec in robot.spec.joints.items():
        spec = joint_spec.actuator
        if spec is None:
            continue
        joint = robot.joint(name)
        if not joint.actuated or joint.kind != "revolute":
            raise ConfigError("a servo drives an actuated revolute joint", file=spec.file, field=spec.field)
        servos[name] = servo_actuator(spec)
    return servos


def _stribeck(p: Mapping[str, Any], omega: Any, ns: Any) -> Any:
    """``g(omega) = fc + (fs - fc) exp(-(omega/vs)^2)`` (N m)."""
    return p["fc"] + (p["fs"] - p["fc"]) * ns.exp(-((omega / p["vs"]) ** 2))


def servo_z_step(law: str, p: Mapping[str, Any], z: Any, omega: Any, h: Any) -> Any:
    """The bristle deflection (rad, at the output) ``h`` seconds on at the output speed
    ``omega`` (rad/s): exact at constant speed, ``z_ss + (z - z_ss) exp(-sigma0 |omega| h / g)``
    with ``z_ss = sgn(omega) g / sigma0``. Laws without a state return ``z`` unchanged."""
    if law != "lugre":
        return z
    ns = namespace(z, omega, h, *p.values())
    g = _stribeck(p, omega, ns)
    z_ss = ns.sign(omega) * g / p["sigma0"]
    return z_ss + (z - z_ss) * ns.exp(-p["sigma0"] * ns.abs(omega) * h / g)


def servo_torque(
    firmware: ServoFirmware, law: str, p: Mapping[str, Any], q: Any, dq: Any, goal: Any, on: Any = 1.0, *, z: Any = 0.0, smoothing: float = SMOOTHING
) -> tuple[Any, Any]:
    """The servo's torque on the joint (N m) and its damping ``-d tau/d dq`` (N m s/rad), see the module.

    ``q``, ``dq``, ``goal`` at the joint (rad, rad/s, rad); ``p`` holds the parameters of
    ``law`` (numbers or CasADi symbols); ``on`` 1 with torque on, 0 off; ``z`` the LuGre
    bristle deflection (rad, at the output; other laws ignore it).
    """
    ns = namespace(q, dq, goal, on, z, *p.values())
    g = firmware.gear_ratio
    theta, omega = g * q, g * dq
    error = (g * goal - theta) * (firmware.counts / (2 * math.pi))
    pwm = ns.minimum(ns.maximum(firmware.kp * error / firmware.divisor, -firmware.pwm_limit), firmware.pwm_limit)
    volts = pwm * (firmware.vin / firmware.pwm_max)
    current = (volts - p["kt"] * omega) / p["R"]
    emf_damping = p["kt"] ** 2 / p["R"]
    if firmware.current_limit is not None:
        limit = firmware.current_limit
        emf_damping = emf_damping * ns.where(ns.abs(current) < limit, 1.0, 0.0)
        current = ns.minimum(ns.maximum(current, -limit), limit)
    tau_m = on * p["kt"] * current
    if law == "none":
        return g * tau_m, g**2 * on * emf_damping
    if law == "lugre":
        rate = omega - p["sigma0"] * ns.abs(omega) * z / _stribeck(p, omega, ns)
        tau = tau_m - (p["sigma0"] * z + p["sigma1"] * rate) - p["fv"] * omega
        return g * tau, g**2 * (on * emf_damping + p["fv"] + p["sigma1"])
    level = p["fc"] + (_stribeck(p, omega, ns) - p["fc"] if "fs" in p else 0.0)
    dry = level + (p["mu"] * ns.abs(tau_m) if "mu" in p else 0.0)
    sign = ns.tanh(omega / smoothing)
    tau = tau_m - dry * sign - p["fv"] * omega
    damping = on * emf_damping + p["fv"] + dry * (1 - sign**2) / smoothing
    return g * tau, g**2 * damping


def servo_step(
    firmware: ServoFirmware, law: str, p: Mapping[str, Any], q: Any, dq: Any, goal: Any, on: Any, *, inertia: Any, load: Any, h: float, z: Any = 0.0
) -> tuple[Any, Any, Any]:
    """One semi-implicit step of ``h`` seconds of a joint driven by the servo alone:
    ``z' = servo_z_step(z)``, ``dq' = dq + h (tau(z') + load) / (inertia + G^2 J_a + h c)``,
    ``q' = q + h dq'``; returns ``(q', dq', z')``.

    ``inertia`` (kg m^2) is the joint's own, without the servo's armature; ``load`` (N m) the
    other torques on it (gravity: ``-m g l sin q`` for a pendulum), held over the step; ``z``
    the LuGre bristle deflection (rad, at the output; passed through by other laws).
    """
    z_next = servo_z_step(law, p, z, firmware.gear_ratio * dq, h)
    tau, damping = servo_torque(firmware, law, p, q, dq, goal, on, z=z_next)
    dq_next = dq + h * (tau + load) / (inertia + firmware.gear_ratio**2 * p["armature"] + h * damping)
    return q + h * dq_next, dq_next, z_next
