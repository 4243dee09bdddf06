"""Position-controlled servos (Dynamixel-type firmware): DC motor, the firmware's P loop, gearbox friction.

One model, used by the simulated plant (:class:`mbctl.dynamics.simulation.stepper.FrictionStepper`)
and by the identification from logs (:mod:`mbctl.identification.servo`). Quantities at the
servo's output shaft carry an ``s``; a gear of ``gear_ratio`` ``G`` between the output and
the joint gives ``theta_s = G q``, ``omega_s = G dq``, joint torque ``G tau_s`` and armature
``G^2 J_a`` at the joint. SI units throughout::

    e     = (goal_s - theta_s) * counts / (2 pi)                  position error (encoder counts)
    pwm   = clip(kp * e / divisor, -pwm_limit, pwm_limit)          the firmware's P loop (PWM units)
    d     = pwm / pwm_max                                          duty (1)
    V     = d * (vin - Rs * d * i)                                 motor voltage (V): the supply sags
    i     = clip((d * vin - kt * omega_s) / (R + Rs d^2), -i_max, i_max)   current (A), V = R i + kt omega_s solved for i
    tau_m = on * kt i / (1 + |kt i| / tau_sat)                     motor torque at the output (N m)
    tau_f = -(level(omega_s) + mu * |tau_m|) * tanh(omega_s / eps) - fv * omega_s

The supply (``vin`` open-circuit, internal resistance ``Rs`` = ``supply_resistance``, ohm,
cables included) feeds the H-bridge, which draws ``d i`` from it: the bus sags to
``vin - Rs d i`` under load and the motor sees ``d`` times that, as if its winding had
``R + Rs d^2``. ``i_max`` is the firmware's ``current_limit`` (A; none by default). Together
they bound the current at stall (``omega_s = 0``) to ``min(d vin / (R + Rs d^2), i_max)`` (at
most ``vin / (2 sqrt(R Rs))``, at ``d = sqrt(R / Rs)``). ``tau_sat`` (``torque_saturation``,
N m; none by default) bends the torque per ampere as the torque grows, as the XL330's data
sheet shows (0.378, 0.354, 0.345 N m/A at stall at 3.7, 5 and 6 V, with the stall
resistance V/I at 3.3–3.45 ohm at all three: a torque constant falling with the load, in the
motor or the gearbox). So::

    tau_stall(d) = sat(kt * min(d vin / (R + Rs d^2), i_max)),   sat(x) = x / (1 + |x| / tau_sat)

and at full duty the torque–speed curve ``sat(kt (vin - kt omega_s) / (R + Rs))``, with the
current clipped at ``i_max``. A gain ``kp`` only sets how large an error reaches a duty: the
servo stalls where the load needs more than ``tau_stall``.

``kt`` (N m/A, gear of the servo included) is also the back-EMF constant (V s/rad);
``on`` is 1 with the torque on, 0 with the motor off (no current). ``level`` is the dry
friction of the law (N m): ``fc`` (Coulomb–viscous), ``g(omega_s) = fc + (fs - fc)
exp(-(omega_s/vs)^2)`` (Stribeck); ``mu`` (``stribeck-load``) makes it grow with the
torque the gearbox transmits. ``eps`` is ``friction_smoothing`` (rad/s, :data:`SMOOTHING` by
default): the speed below which the dry friction fades; a stalled servo creeps at a speed of its
order where the real gearbox sticks.

``lugre`` replaces the smoothed sign by a bristle deflection ``z`` (rad, at the output;
the servo's state, relaxed ``z = 0`` at the start)::

    dz/dt = omega_s - sigma0 |omega_s| z / g(omega_s)
    tau_f = -(sigma0 z + sigma1 dz/dt) - fv * omega_s

(``sigma0`` N m/rad, ``sigma1`` N m s/rad): below break-away the gearbox sticks as a
stiff spring instead of creeping; in steady sliding it is the Stribeck law.

Steps are semi-implicit: the damping ``c = d(-tau)/d omega = on kt^2/(R + Rs d^2) sat'(kt i) (unclipped current)
+ fv + dry (1 - tanh^2(omega_s/eps))/eps`` with ``sat'(x) = 1/(1 + |x|/tau_sat)^2`` (LuGre: ``+ fv + sigma1``) is taken implicitly
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

from mbctl.config.actuator import OPTIONAL, SERVO_FRICTION_LAWS, ActuatorSpec
from mbctl.dynamics.backend import namespace
from mbctl.dynamics.friction.laws import lugre_force, lugre_rate, lugre_z_step, smoothed_dry, smoothed_dry_slope, stribeck_level
from mbctl.errors import ConfigError

if TYPE_CHECKING:
    from mbctl.dynamics.model.robot import RobotModel

__all__ = [
    "FIRMWARE_OPTIONAL",
    "SERVO_LAWS",
    "SMOOTHING",
    "STALL_PARAMETERS",
    "ServoActuator",
    "ServoFirmware",
    "robot_servos",
    "servo_actuator",
    "servo_current",
    "servo_step",
    "servo_torque",
    "servo_z_step",
    "stall_torque",
]

# the optional firmware and supply fields of the table, as ServoFirmware names them
FIRMWARE_OPTIONAL = tuple(k for k in OPTIONAL if k != "armature")
# parameters of the stall that a fit may give as numbers or symbols in p instead of the firmware's
STALL_PARAMETERS = ("current_limit", "supply_resistance", "torque_saturation")
SMOOTHING = 0.02  # rad/s: eps of tanh(omega/eps), the regularised sign of the dry friction
# law -> the parameters the model needs: motor, armature, then the friction law's
SERVO_LAWS: Mapping[str, tuple[str, ...]] = MappingProxyType({law: ("kt", "R", "armature", *names) for law, names in SERVO_FRICTION_LAWS.items()})


@dataclass(frozen=True)
class ServoFirmware:
    """What the servo's firmware, supply, motor and gearbox fix (``kp``, ``divisor``, PWM in firmware units).

    Attributes:
        kp: Position gain; divisor: ``pwm = kp * error_counts / divisor`` (XL330: 256 observed).
        vin: Supply voltage (V); pwm_limit, pwm_max: PWM limit and the PWM of 100 % duty (885).
        counts: Encoder counts per output revolution; current_limit: A, or None for none.
        gear_ratio: Output turns per joint turn.
        supply_resistance: Internal resistance of the supply as the servo sees it (ohm, cables
            included; 0: a stiff supply).
        torque_saturation: ``tau_sat`` of the motor torque ``kt i / (1 + |kt i| / tau_sat)`` (N m
            at the output), or None for a torque proportional to the current.
        friction_smoothing: ``eps`` (rad/s) of the regularised sign ``tanh(omega_s / eps)`` of the
            gearbox's dry friction (not LuGre's).
    """

    kp: float
    vin: float
    divisor: float = 256.0
    pwm_limit: float = 885.0
    pwm_max: float = 885.0
    counts: float = 4096.0
    current_limit: float | None = None
    gear_ratio: float = 1.0
    supply_resistance: float = 0.0
    torque_saturation: float | None = None
    friction_smoothing: float = SMOOTHING

    def __post_init__(self) -> None:
        checks = {
            "kp": self.kp >= 0,
            "vin": self.vin > 0,
            "divisor": self.divisor > 0,
            "pwm_max": self.pwm_max > 0,
            "pwm_limit": 0 < self.pwm_limit <= self.pwm_max,
            "counts": self.counts > 0,
            "current_limit": self.current_limit is None or self.current_limit > 0,
            "gear_ratio": self.gear_ratio != 0,
            "supply_resistance": self.supply_resistance >= 0,
            "torque_saturation": self.torque_saturation is None or self.torque_saturation > 0,
            "friction_smoothing": self.friction_smoothing > 0,
        }
        for name, ok in checks.items():
            value = getattr(self, name)
            if value is not None and not (isinstance(value, (int, float)) and math.isfinite(value)):
                raise ConfigError(f"must be a finite number, got {value!r}", field=name)
            if not ok:
                rule = {
                    "pwm_limit": "must be > 0 and <= pwm_max",
                    "gear_ratio": "must not be 0",
                    "kp": "must be >= 0",
                    "supply_resistance": "must be >= 0",
                }.get(name, "must be > 0")
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
        firmware = ServoFirmware(kp=v["kp"], vin=v["vin"], **{k: v[k] for k in FIRMWARE_OPTIONAL if k in v})
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
    """``g(omega) = fc + (fs - fc) exp(-(omega/vs)^2)`` (N m), :func:`~mbctl.dynamics.friction.laws.stribeck_level`."""
    return stribeck_level(ns, omega, p["fc"], p["fs"], p["vs"])


def servo_z_step(law: str, p: Mapping[str, Any], z: Any, omega: Any, h: Any) -> Any:
    """The bristle deflection (rad, at the output) ``h`` seconds on at the output speed
    ``omega`` (rad/s): exact at constant speed, ``z_ss + (z - z_ss) exp(-sigma0 |omega| h / g)``
    with ``z_ss = sgn(omega) g / sigma0``. Laws without a state return ``z`` unchanged."""
    if law != "lugre":
        return z
    ns = namespace(z, omega, h, *p.values())
    return lugre_z_step(ns, z, omega, h, p["sigma0"], _stribeck(p, omega, ns))


def _stall_values(firmware: ServoFirmware, p: Mapping[str, Any]) -> tuple[Any, Any]:
    """The current limit (A, or None) and supply resistance (ohm): ``p``'s if given, else the firmware's."""
    return p.get("current_limit", firmware.current_limit), p.get("supply_resistance", firmware.supply_resistance)


def _motor_torque(firmware: ServoFirmware, p: Mapping[str, Any], current: Any, ns: Any) -> tuple[Any, Any]:
    """The motor torque at the output (N m) for ``current`` (A) and its slope against ``kt i``
    (1): ``tau_m = kt i / (1 + |kt i| / tau_sat)``, slope ``1 / (1 + |kt i| / tau_sat)^2``
    (``tau_sat`` = ``torque_saturation``, N m; none: ``kt i`` and 1)."""
    saturation = p.get("torque_saturation", firmware.torque_saturation)
    linear = p["kt"] * current
    if saturation is None:
        return linear, 1.0
    scale = 1.0 / (1.0 + ns.abs(linear) / saturation)
    return linear * scale, scale**2


def servo_current(firmware: ServoFirmware, p: Mapping[str, Any], error: Any, omega: Any, *, ns: Any = None) -> tuple[Any, Any]:
    """The motor current (A) and its back-EMF damping ``-kt d i/d omega`` (N m s/rad, at the output)
    for the position ``error`` (rad) and speed ``omega`` (rad/s) at the output:
    ``i = clip((d vin - kt omega) / (R + Rs d^2), +-i_max)``, ``d = clip(kp e / divisor, +-pwm_limit) / pwm_max``
    (see the module); the damping is ``kt^2 / (R + Rs d^2)``, 0 while the current is limited.
    """
    ns = ns if ns is not None else namespace(error, omega, *p.values())
    limit, rs = _stall_values(firmware, p)
    counts = error * (firmware.counts / (2 * math.pi))
    pwm = ns.minimum(ns.maximum(firmware.kp * counts / firmware.divisor, -firmware.pwm_limit), firmware.pwm_limit)
    duty = pwm / firmware.pwm_max
    resistance = p["R"] + rs * duty**2
    # d vin as pwm (vin / pwm_max): with Rs = 0 the arithmetic, and so a fit's path, is the stiff-supply model's
    current = (pwm * (firmware.vin / firmware.pwm_max) - p["kt"] * omega) / resistance
    emf_damping = p["kt"] ** 2 / resistance
    if limit is not None:
        emf_damping = emf_damping * ns.where(ns.abs(current) < limit, 1.0, 0.0)
        current = ns.minimum(ns.maximum(current, -limit), limit)
    return current, emf_damping


def stall_torque(firmware: ServoFirmware, p: Mapping[str, Any], error: Any) -> Any:
    """The motor torque at rest (N m, at the output, friction aside) for a position ``error``
    (rad, at the output): ``sat(kt * clip(d vin / (R + Rs d^2), +-i_max))`` (see the module), the
    largest torque the servo holds with that error; with a current limit, ``sat(kt i_max)``
    bounds it at any gain."""
    ns = namespace(error, *p.values())
    return _motor_torque(firmware, p, servo_current(firmware, p, error, 0.0 * error, ns=ns)[0], ns)[0]


def servo_torque(
    firmware: ServoFirmware, law: str, p: Mapping[str, Any], q: Any, dq: Any, goal: Any, on: Any = 1.0, *, z: Any = 0.0, smoothing: float | None = None
) -> tuple[Any, Any]:
    """The servo's torque on the joint (N m) and its damping ``-d tau/d dq`` (N m s/rad), see the module.

    ``q``, ``dq``, ``goal`` at the joint (rad, rad/s, rad); ``p`` holds the parameters of
    ``law`` (numbers or CasADi symbols; ``current_limit``, ``supply_resistance`` and
    ``torque_saturation`` in ``p`` replace the firmware's); ``on`` 1 with torque on, 0 off; ``z`` the LuGre bristle
    deflection (rad, at the output; other laws ignore it); ``smoothing`` (rad/s) replaces the
    firmware's ``friction_smoothing``.
    """
    smoothing = firmware.friction_smoothing if smoothing is None else smoothing
    ns = namespace(q, dq, goal, on, z, *p.values())
    g = firmware.gear_ratio
    omega = g * dq
    current, emf_damping = servo_current(firmware, p, g * (goal - q), omega, ns=ns)
    tau_m, slope = _motor_torque(firmware, p, current, ns)
    tau_m, emf_damping = on * tau_m, emf_damping * slope
    if law == "none":
        return g * tau_m, g**2 * on * emf_damping
    if law == "lugre":
        rate = lugre_rate(ns, omega, z, p["sigma0"], _stribeck(p, omega, ns))
        tau = tau_m - lugre_force(z, rate, p["sigma0"], p["sigma1"]) - p["fv"] * omega
        return g * tau, g**2 * (on * emf_damping + p["fv"] + p["sigma1"])
    level = _stribeck(p, omega, ns) if "fs" in p else p["fc"]
    dry = level + (p["mu"] * ns.abs(tau_m) if "mu" in p else 0.0)
    tau = tau_m - smoothed_dry(ns, dry, omega, smoothing) - p["fv"] * omega
    damping = on * emf_damping + p["fv"] + smoothed_dry_slope(ns, dry, omega, smoothing)
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
