"""Servo identification's records: the bench a servo drives and the logs of its motions.

The bench is a pendulum of point mass ``m`` (kg) at length ``l`` (m), angle ``theta`` (rad)
from hanging down, driven directly by a servo whose firmware (Dynamixel-type position mode)
is :class:`mbctl.dynamics.actuator.ServoFirmware`. Logs come in BAM's JSON format
(:func:`read_servo_log`), as mbctl run logs of position-mode runs (:func:`read_run_log`) or
as ROS 2 bags with measured and goal positions (:func:`read_bag_servo_log`);
the model that simulates them is :mod:`mbctl.identification.servo_model`, the fit
:mod:`mbctl.identification.servo`.
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from mbctl.bundled import bundled_servo_logs
from mbctl.dynamics.actuator import ServoFirmware
from mbctl.errors import ConfigError, DataError, InputError
from mbctl.hardware.runlog import log_table
from mbctl.rosbag import BagOptions, is_bag, read_joint_states

if TYPE_CHECKING:
    from mbctl.dynamics.model.robot import RobotModel

__all__ = ["GRAVITY", "ServoLog", "ServoModel", "bench_model", "read_bag_servo_log", "read_run_log", "read_servo_log", "read_servo_logs"]

GRAVITY = 9.81  # m/s^2


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
    whether torque was on at each sample (off: the motor carries no current; default on) and
    the servo the log names (:func:`mbctl.identification.servo_datasheet.datasheet_of`)."""

    name: str
    t: np.ndarray
    position: np.ndarray
    goal: np.ndarray
    model: ServoModel
    enabled: np.ndarray | None = None
    motor: str | None = None  # the servo's model as the log names it (BAM's ``motor``, e.g. "xl330")


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
    motor = doc.get("motor") if isinstance(doc.get("motor"), str) else None
    return ServoLog(name=name, t=t - t[0], position=columns["position"], goal=columns["goal_position"], model=model, enabled=enabled, motor=motor)


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
    return _even_log(path, "t", picked["t"], picked[f"q.{joint}"], picked[f"q_ref.{joint}"], model)


def _even_log(path: Path, field: str, t: np.ndarray, position: np.ndarray, goal: np.ndarray, model: ServoModel) -> ServoLog:
    """The log of measurements ``position`` at ``t`` (s) and the goals sent after them (NaN: torque
    off), at a constant step: uneven samples are resampled to their median step (positions
    linearly, goals held)."""
    enabled = np.isfinite(goal)
    goal = np.where(enabled, goal, position)  # a motor that is off follows no goal
    if len(t) < 10 or not (np.diff(t) > 0).all():
        raise DataError("needs at least 10 samples at increasing times", file=path, field=field)
    dt = np.diff(t)
    step = float(np.median(dt))
    if np.ptp(dt) > 1e-6 * step:
        grid = t[0] + step * np.arange(int(np.floor((t[-1] - t[0]) / step + 1e-9)) + 1)
        position = np.interp(grid, t, position)
        held = np.searchsorted(t, grid, side="right") - 1  # the goal in force at each grid time
        goal, enabled, t = goal[held], enabled[held], grid
    return ServoLog(name=path.name.removesuffix(".npz"), t=t - t[0], position=position, goal=goal, model=model, enabled=enabled)


def read_bag_servo_log(path: str | Path, joint: str, model: ServoModel, bag: BagOptions = BagOptions(), goal_topic: str = "/joint_commands") -> ServoLog:
    """A servo log from a ROS 2 bag (:mod:`mbctl.rosbag`): the measured position of ``joint``
    from the JointState topic of ``bag`` and the goal position from the JointState topic
    ``goal_topic`` (the last goal at or before each measurement; measurements before the first
    goal are dropped); the bench and firmware are ``model``'s.

    Raises:
        DataError: Naming the bag and topic, as :func:`mbctl.rosbag.read_joint_states` does, or
            for fewer than 10 samples.
    """
    path = Path(path)
    states = read_joint_states(path, [joint], bag)
    goals = read_joint_states(path, [joint], BagOptions(topic=goal_topic, stamps=bag.stamps))
    t = states.t + (states.start_ns - goals.start_ns) * 1e-9  # both on the goals' clock
    held = np.searchsorted(goals.t, t, side="right") - 1
    keep = held >= 0
    return _even_log(path, states.topic, t[keep], states.q[keep, 0], goals.q[held[keep], 0], model)


def read_servo_logs(
    tokens: Sequence[str], field: str, bench: ServoModel | None = None, joint: str | None = None, bag: BagOptions = BagOptions(), goal_topic: str = "/joint_commands"
) -> list[ServoLog]:
    """Servo logs named by ``tokens``: files (BAM JSON; run logs .npz and ROS 2 bags with the ``bench``
    model of ``joint``), or bundled bench names with an optional ``@kp=N`` filter (``xl330-pendulum@kp=400``).

    Raises:
        InputError: Naming the file, or ``field`` (the option that gave the tokens) for an unknown
            bundled name or a bad filter.
    """
    logs = []
    for token in tokens:
        if Path(token).exists() and (token.endswith(".npz") or is_bag(token)):
            if bench is None:
                raise InputError("a run log (.npz) or a bag needs --config and --joint (the bench and its servo)", file=token)
            logs.append(read_run_log(token, joint, bench) if token.endswith(".npz") else read_bag_servo_log(token, joint, bench, bag, goal_topic))
            continue
        if Path(token).is_file():
            logs.append(read_servo_log(token))
            continue
        name, _, selector = token.partition("@")
        try:
            found = [read_servo_log(p) for p in bundled_servo_logs(name)]
        except ConfigError as exc:
            raise InputError(exc.reason, field=field) from None
        if selector:
            key, _, value = selector.partition("=")
            if key != "kp":
                raise InputError(f"unknown selector {selector!r} (expected kp=N)", field=field)
            try:
                kp = float(value)
            except ValueError:
                raise InputError(f"expected kp=N, got {selector!r}", field=field) from None
            found = [log for log in found if log.model.firmware.kp == kp]
            if not found:
                raise InputError(f"no bundled log of {name} has kp = {value}", field=field)
        logs.extend(found)
    return logs
