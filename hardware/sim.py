"""Simulated plant: the truth model of a robot behind the joint interface, with sensor models.

The plant integrates the *truth* model, which may differ from the controller's —
another friction law, a payload — with :class:`mbctl.dynamics.simulation.stepper.FrictionStepper`
substeps, and measures it like real drives would: quantised encoders, estimated
velocity, noisy effort, a latency of whole control periods, drive torque limits.

Timing: lock-step. Every :meth:`SimPlant.write` advances the plant by one control
period; deterministic for a given seed, as fast as the machine allows. A plant that
follows the wall clock runs this one in its own process
(:class:`mbctl.hardware.plant_process.PlantProcess`).

The ``[plant]`` table of the robot TOML sets all this (:mod:`mbctl.config.plant`).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque

import numpy as np
import pinocchio as pin

from mbctl.config.canopen import CanopenSpec
from mbctl.config.drives import DrivesSpec
from mbctl.config.plant import DEFAULT_ENCODER_COUNTS, PayloadSpec, PlantConfig, PlantSpec, SensorModel
from mbctl.dynamics.codegen import CompiledFunction
from mbctl.dynamics.external import ExternalWrench
from mbctl.dynamics.model.overlay import joint_friction
from mbctl.dynamics.model.per_joint import check_joint_names
from mbctl.dynamics.model.robot import RobotModel
from mbctl.dynamics.simulation.compiled import plant_stepper
from mbctl.dynamics.simulation.stepper import FrictionStepper, PlantState
from mbctl.errors import ConfigError
from mbctl.hardware.interface import (
    CommandMode,
    JointCommand,
    JointInterface,
    JointState,
)

__all__ = ["PlantConfig", "SensorModel", "SimPlant", "TruthPlant", "drive_encoder_counts", "encoder_resolution", "sensing_description", "truth_model"]


def truth_model(robot: RobotModel, spec: PlantSpec | None = None) -> tuple[RobotModel, PlantConfig]:
    """The plant's robot (truth friction, payload) and settings, from ``spec`` (default: the robot's ``[plant]``).

    Raises:
        ConfigError: Naming the file and field, for an unknown joint or payload frame.
    """
    if spec is None:
        spec = robot.spec.plant if robot.spec is not None else None
    if spec is None:
        return robot, _with_drive_encoders(robot, PlantConfig())
    check_joint_names(robot, spec.friction, file=spec.file, field="plant.joints")
    counts = spec.config.sensors.encoder_counts
    if isinstance(counts, dict):
        check_joint_names(robot, counts, file=spec.file, field="plant.encoder_counts")
    contact = spec.config.contact
    if contact is not None and not robot.model.existFrame(contact.frame):
        raise ConfigError(f"no frame {contact.frame!r} in the model", file=spec.file, field="plant.contact.frame")
    truth = robot.with_friction({name: None if f is None else joint_friction(f) for name, f in spec.friction.items()}) if spec.friction else robot
    if spec.payload is not None:
        truth = _with_payload(truth, spec.payload, spec.file)
    return truth, _with_drive_encoders(robot, spec.config)


def drive_encoder_counts(robot: RobotModel) -> dict[str, float]:
    """Counts per joint revolution (per metre for prismatic joints) of the robot's drives, by joint:
    the motor encoder's counts per motor turn times the gear ratio (CiA 402 drives), the servo's
    4096 counts per turn times its gearing (Dynamixel); a prismatic joint's drive turn is 2 pi m of
    travel in the drives' unit conversion. Empty without a drive table."""
    drives = robot.spec.drives if robot.spec is not None else None
    if isinstance(drives, CanopenSpec):
        per_turn = {name: d.counts_per_rev * d.gear_ratio for name, d in drives.drives.items()}
    elif isinstance(drives, DrivesSpec):
        per_turn = {name: 4096.0 * d.gear_ratio for name, d in drives.servos.items()}
    else:
        return {}
    return {name: c if robot.joint(name).kind == "revolute" else c / (2 * math.pi) for name, c in per_turn.items()}


def _with_drive_encoders(robot: RobotModel, config: PlantConfig) -> PlantConfig:
    """The plant's encoders: ``[plant] encoder_counts`` where given (one number: every joint), else
    the drive table's, else :data:`DEFAULT_ENCODER_COUNTS`."""
    sensors = config.sensors
    given = sensors.encoder_counts
    if given is not None and not isinstance(given, dict):
        return config
    counts = drive_encoder_counts(robot)
    if not counts:
        return config
    source = "drive table (motor counts x gear)" if given is None else "[plant] encoder_counts, else the drive table"
    sensors = dataclasses.replace(sensors, encoder_counts={**counts, **(given or {})}, encoder_source=source)
    return dataclasses.replace(config, sensors=sensors)


def encoder_resolution(truth: RobotModel, names: list[str], counts: int | dict | None) -> np.ndarray:
    """Position quantum per joint (rad, m; 0: exact): a revolution (a metre) over its counts."""
    out = np.zeros(len(names))
    for k, name in enumerate(names):
        c = counts.get(name, DEFAULT_ENCODER_COUNTS) if isinstance(counts, dict) else counts
        c = DEFAULT_ENCODER_COUNTS if c is None else c
        out[k] = (2 * math.pi if truth.joint(name).kind == "revolute" else 1.0) / c if c else 0.0
    return out


def sensing_description(config: PlantConfig, names: list[str], resolution: np.ndarray) -> str:
    """One line on how the plant is measured: encoder resolution per joint and its source, and
    the velocity it reports (for the run summary)."""
    s = config.sensors
    if not resolution.any():
        position = "exact positions"
    else:
        source = s.encoder_source or ("[plant] encoder_counts" if s.encoder_counts is not None else f"default {DEFAULT_ENCODER_COUNTS} counts/rev")
        each = f"{resolution[0]:.3g} on every joint" if np.all(resolution == resolution[0]) else ", ".join(f"{n} {r:.3g}" for n, r in zip(names, resolution))
        position = f"encoders ({each}, rad or m per count; {source})"
    if s.velocity == "exact":
        velocity = "exact velocity"
    else:
        velocity = f"velocity: difference of encoder positions, first-order low-pass {s.velocity_cutoff_hz:g} Hz"
    return f"plant: {position}; {velocity}"


def _with_payload(robot: RobotModel, payload: PayloadSpec, file) -> RobotModel:
    if not robot.model.existFrame(payload.frame):
        raise ConfigError(f"no frame {payload.frame!r} in the model", file=file, field="plant.payload.frame")
    model = pin.Model(robot.model)
    f = model.frames[model.getFrameId(payload.frame)]
    placement = f.placement * pin.SE3(np.eye(3), np.array(payload.com))
    # a point mass at the payload's centre, expressed in the supporting joint's frame
    model.inertias[f.parentJoint] = model.inertias[f.parentJoint] + placement.act(pin.Inertia(payload.mass, np.zeros(3), np.zeros((3, 3))))
    return dataclasses.replace(robot, model=model)


class TruthPlant:
    """The truth model's dynamics, driven by actuator efforts (the emulator's plant).

    Steps are those of :class:`~mbctl.dynamics.simulation.stepper.FrictionStepper`, run in
    generated C (:func:`mbctl.dynamics.simulation.compiled.plant_stepper`, the same
    arithmetic) unless ``compiled`` is False. A joint with a servo
    (``[joints.<name>.actuator]``) is driven by its goal position (:meth:`step`'s
    ``goal``) through the servo's firmware loop and motor.

    Args:
        truth: Robot simulated.
        max_step_s: Longest integration step (s); longer advances are split.
        q0: Initial DOF positions (rad, m); default zeros.
        compiled: Use the compiled steps (False: the interpreted stepper).
        period_s: The advance a caller makes most (s), e.g. its control period: compiled
            as one call of all its steps.
    """

    def __init__(
        self,
        truth: RobotModel,
        max_step_s: float = 2.5e-4,
        q0: np.ndarray | None = None,
        *,
        compiled: bool = True,
        period_s: float | None = None,
    ):
        self.truth = truth
        self.max_step_s = max_step_s
        self.stepper = FrictionStepper(truth)
        self._B = truth.actuation_matrix
        self._actuated = np.array([truth.joint(n).idx_v for n in truth.actuated_names], dtype=int)
        # positions of the servo joints among the actuated ones (the order of goal arrays)
        self.servo_slots = tuple(truth.actuated_names.index(n) for n in self.stepper.servo_names)
        self.servo_models = self.stepper.servos
        q0 = np.zeros(truth.nv) if q0 is None else np.asarray(q0, dtype=float)
        if q0.shape != (truth.nv,):
            raise ValueError(f"initial positions need {truth.nv} values (one per DOF of {truth.name}), got shape {q0.shape}")
        self.full = self.stepper.initial(q0)
        self.steps = 0
        # built here, not at the first step: a first compile takes seconds, which would
        # miss a paced plant's or an emulator's first deadlines
        self._compiled: dict[int, CompiledFunction] = {}
        if compiled:
            v_smooth = self.stepper.friction.smoothing
            for n in {1, 1 if period_s is None else self._steps(period_s)}:
                self._compiled[n] = plant_stepper(truth, n, v_smooth=v_smooth)

    def _steps(self, dt: float) -> int:
        return max(1, math.ceil(dt / self.max_step_s - 1e-9))

    def step(self, tau: np.ndarray, dt: float, goal: np.ndarray | None = None, external: np.ndarray | None = None) -> None:
        """Advance ``dt`` seconds holding actuator efforts ``tau`` (N·m, N), the servos' goal
        positions ``goal`` (rad, one per actuated joint, read at :attr:`servo_slots`; NaN or
        None: that servo's motor is off) and an external generalized force ``external`` (N·m,
        N per DOF; :class:`~mbctl.dynamics.external.ExternalWrench`)."""
        steps = self._steps(dt)
        h = dt / steps
        generalized = self._B @ tau if external is None else self._B @ tau + external
        goals = None
        if self.servo_slots:
            goals = np.full(len(self.servo_slots), np.nan) if goal is None else np.asarray(goal, dtype=float)[list(self.servo_slots)]
        if self._compiled:
            f = self._compiled.get(steps)
            state = (self.full.q, self.full.dq, self.full.s)
            # servos: the goal, and 1 with torque on, 0 off (a NaN goal)
            extra = () if goals is None else (np.nan_to_num(goals, nan=0.0), np.isfinite(goals).astype(float))
            if f is not None:
                state = f(*state, generalized, h, *extra)
            else:
                for _ in range(steps):
                    state = self._compiled[1](*state, generalized, h, *extra)
            self.full = PlantState(*state)
        else:
            for _ in range(steps):
                self.full = self.stepper.step(self.full, generalized, h, goals)
        self.steps += steps

    def brake(self) -> None:
        """Holding brakes on every joint: the arm stops where it is (every velocity zero); the
        caller stops stepping while they hold."""
        self.full = PlantState(self.full.q, np.zeros_like(self.full.dq), self.full.s)

    def state(self) -> tuple[np.ndarray, np.ndarray]:
        """Positions and velocities of the actuated joints."""
        return self.full.q[self._actuated].copy(), self.full.dq[self._actuated].copy()


class SimPlant(JointInterface):
    """The truth model behind the joint interface, with sensors.

    Takes torque commands; position commands too when every actuated joint has a servo
    (``[joints.<name>.actuator]``): the goals go to the servos' firmware loops.

    Args:
        truth: Robot simulated (its actuated joints are served, in order).
        period_s: Control period (s): one lock-step advance, and the sensor sampling.
        config: Sensor model, substeps, seed.
        q0: Initial DOF positions (rad, m); default zeros.
        compiled: Step in generated C (False: the interpreted stepper, the same arithmetic,
            without a compile for a model seen once).
    """

    sample_clock = True  # measurements carry the plant time they were sampled at
    effort_source = "the torque the simulated plant applied ([plant] effort noise added)"

    def __init__(
        self,
        truth: RobotModel,
        period_s: float,
        config: PlantConfig | None = None,
        *,
        q0: np.ndarray | None = None,
        compiled: bool = True,
    ):
        self.truth = truth
        self.compiled = compiled
        self.joint_names = truth.actuated_names
        self.period_s = period_s
        self.config = config or PlantConfig()
        self._q0 = q0
        self._limits = np.array([truth.joint(n).limits.effort for n in self.joint_names])
        self._resolution = encoder_resolution(truth, list(self.joint_names), self.config.sensors.encoder_counts)
        contact = self.config.contact
        self._contact = None if contact is None else ExternalWrench(truth, contact.frame, contact.force, contact.torque, contact.start_s, contact.duration_s)
        self.saturated = 0
        self._reset()

    def _reset(self) -> None:
        self.plant = TruthPlant(self.truth, self.period_s / self.config.substeps, self._q0, period_s=self.period_s, compiled=self.compiled)
        self.t = 0.0
        self._tau = np.zeros(len(self.joint_names))
        self._goal: np.ndarray | None = None
        self._enabled = False
        self._rng = np.random.default_rng(self.config.seed)
        self._history: deque[JointState] = deque(maxlen=self.config.sensors.latency_cycles + 1)
        self._v_filtered = np.zeros(len(self.joint_names))
        self._q_last: np.ndarray | None = None
        self._measure()

    @property
    def sensing(self) -> str:
        """How the plant is measured, in one line (:func:`sensing_description`)."""
        return sensing_description(self.config, list(self.joint_names), self._resolution)

    def _advance_one_period(self) -> None:
        goal = self._goal if self._enabled else None
        external = None
        if self._contact is not None and self._contact.active(self.t):
            external = self._contact.generalized(self.plant.full.q)
        self.plant.step(self._tau if self._enabled else np.zeros_like(self._tau), self.period_s, goal, external)
        self.t += self.period_s
        self._measure()

    def _measure(self) -> None:
        s = self.config.sensors
        q, dq = self.plant.state()
        quantum = np.where(self._resolution > 0, self._resolution, 1.0)
        q_meas = np.where(self._resolution > 0, np.round(q / quantum) * quantum, q)
        if s.velocity == "exact" or self._q_last is None:
            self._v_filtered = dq
        else:
            raw = (q_meas - self._q_last) / self.period_s
            a = 1.0 - math.exp(-2 * math.pi * s.velocity_cutoff_hz * self.period_s)
            self._v_filtered = self._v_filtered + a * (raw - self._v_filtered)
        self._q_last = q_meas
        effort = self._tau if self._enabled else np.zeros_like(self._tau)
        if s.effort_noise:
            effort = effort + self._rng.normal(0.0, s.effort_noise, effort.shape)
        self._history.append(JointState(t=self.t, q=q_meas, dq=self._v_filtered.copy(), effort=effort))

    # -- JointInterface ------------------------------------------------------------------------
    def open(self) -> None:
        self._reset()

    def close(self) -> None:
        pass

    def enable(self) -> None:
        self._tau = np.zeros(len(self.joint_names))
        self._goal = None
        self._enabled = True

    def disable(self) -> None:
        self._enabled = False
        self._tau = np.zeros(len(self.joint_names))
        self._goal = None

    def read(self) -> JointState:
        """The measurement ``latency_cycles`` periods old."""
        return self._history[0]

    def write(self, command: JointCommand) -> None:
        """Apply drive torques, limited to the joints' effort limits (counted in ``saturated``),
        or goal positions (rad) of servo joints; then advance one period."""
        if command.mode is CommandMode.POSITION and len(self.plant.servo_slots) == len(self.joint_names):
            self._goal = np.array(command.value, dtype=float)
            self._tau = np.zeros(len(self.joint_names))
            self._advance_one_period()
            return
        if command.mode is not CommandMode.TORQUE:
            raise ValueError(f"the simulated plant takes torque commands (position commands when every joint has a servo), got {command.mode.value}")
        self._goal = None
        tau = np.asarray(command.value, dtype=float)
        self.saturated += int((np.abs(tau) > self._limits).sum())
        self._tau = np.clip(tau, -self._limits, self._limits)
        self._advance_one_period()
