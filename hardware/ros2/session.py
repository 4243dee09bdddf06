"""``mbctl run --bus ros2``: the ROS 2 backend a session opens, and ``mbctl emulate --bus ros2`` in a
child process for ``--emulate``.

An emulated arm gets a DDS domain of its own, whatever ``ROS_DOMAIN_ID`` says: one of
:data:`EMULATED_DOMAINS` that no other mbctl process on this machine holds (a lock file per domain,
held for the run) and that is not ``ROS_DOMAIN_ID``; and discovery on this machine only
(``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` for the child), so that two emulated runs on one
machine, or one beside a real robot, do not meet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import os
import random
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pinocchio as pin

from mbctl.config.ros2 import Ros2Spec, check_topic
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError
from mbctl.hardware.interface import CommandMode
from mbctl.hardware.ros2.backend import Ros2Joints, check_command_joints
from mbctl.hardware.ros2.manager import EMULATED_HOLDING_CONTROLLER
from mbctl.hardware.ros2.runtime import domain_id_from_env
from mbctl.hardware.session import child_process, emulate_command

__all__ = ["EMULATED_DOMAINS", "emulated_domain", "model_gravity", "ros2_backend", "ros2_emulator_process", "session_spec"]

MARK = " on ROS domain "
EMULATED_DOMAINS = range(100, 140)  # below the test fixtures' 140..229 (tests/ros2_domains.py) and above their 1..99


def session_spec(robot: RobotModel, joint_states: str | None, command: str | None) -> Ros2Spec:
    """The robot's ``[ros2]`` (defaults without one) with ``--joint-states`` / ``--command-topic``.

    Raises:
        InputError: Naming the option, for a name that is no ROS 2 topic name.
    """
    spec = robot.spec.ros2 if robot.spec is not None and robot.spec.ros2 is not None else Ros2Spec(file=robot.source)
    for option, value, example in (("--joint-states", joint_states, "/joint_states"), ("--command-topic", command, spec.command)):
        reason = check_topic(value, example) if value is not None else ""
        if reason:
            raise InputError(reason, field=option)
    changes = {k: v for k, v in (("joint_states", joint_states), ("command", command)) if v is not None}
    return dataclasses.replace(spec, **changes) if changes else spec


def model_gravity(robot: RobotModel) -> Callable[[np.ndarray], np.ndarray]:
    """``g(q)``: the model's gravity torque on the actuated joints (N·m) at their positions ``q`` (rad,
    m; other DOF at 0), for an arm that compensates gravity itself."""
    data = robot.create_data()
    B = robot.actuation_matrix
    idx = [robot.joint(n).idx_v for n in robot.actuated_names]
    q = np.zeros(robot.nv)

    def gravity(q_actuated: np.ndarray) -> np.ndarray:
        q[idx] = q_actuated
        return B.T @ pin.computeGeneralizedGravity(robot.model, data, robot.configuration(q))

    return gravity


@contextlib.contextmanager
def ros2_backend(robot: RobotModel, options: Any, q0: np.ndarray, mode: CommandMode) -> Iterator[Ros2Joints]:
    """The opened ROS 2 backend of a session (``options``: :class:`mbctl.hardware.session.SessionOptions`),
    with ``mbctl emulate --bus ros2`` in its own process first where ``options.emulate`` asks."""
    spec = session_spec(robot, getattr(options, "joint_states", None), getattr(options, "command_topic", None))
    period_s = 1.0 / options.rate_hz
    # paced: the receiving threads one below the loop's priority, like a paced plant's process
    priority = None if options.lockstep or options.realtime_priority is None else options.realtime_priority - 1
    gravity = model_gravity(robot) if spec.gravity_compensated else None
    common = dict(period_s=period_s, mode=mode, lockstep=options.lockstep, realtime_priority=priority, gravity=gravity)
    if not options.emulate:
        domain_id_from_env()  # a bad ROS_DOMAIN_ID: one line before anything opens
        with Ros2Joints(robot.actuated_names, spec, **common) as joints:
            yield joints
        return
    check_command_joints(robot.actuated_names, spec)  # before an emulator starts
    if spec.holding_controller is None:  # the emulator's controller manager has one: hand over to it
        spec = dataclasses.replace(spec, holding_controller=EMULATED_HOLDING_CONTROLLER)
    actuated_q0 = [float(q0[robot.joint(n).idx_v]) for n in robot.actuated_names]
    extra = ("--realtime-priority", str(priority)) if priority is not None else ()
    with ros2_emulator_process(robot, spec, actuated_q0, period_s, options.lockstep, extra) as domain:
        with Ros2Joints(robot.actuated_names, spec, domain_id=domain, **common) as joints:
            yield joints


@contextlib.contextmanager
def emulated_domain() -> Iterator[int]:
    """A DDS domain of :data:`EMULATED_DOMAINS` for an emulated arm, held (a lock file) until the block ends.

    Raises:
        InputError: Every one is held by other mbctl processes.
    """
    try:
        user = domain_id_from_env()
    except InputError:
        user = None  # not used here: the emulated arm has its own domain whatever it says
    folder = Path(tempfile.gettempdir())
    candidates = [d for d in EMULATED_DOMAINS if d != user]
    random.shuffle(candidates)
    for domain in candidates:
        with open(folder / f"mbctl-ros2-domain-{domain}.lock", "a+") as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue
            try:
                yield domain
            finally:
                fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
            return
    raise InputError(f"every DDS domain of {EMULATED_DOMAINS.start}..{EMULATED_DOMAINS.stop - 1} is held by another emulated run on this machine", field="--emulate")


@contextlib.contextmanager
def ros2_emulator_process(robot: RobotModel, spec: Ros2Spec, q0: list[float], period_s: float, lockstep: bool, extra: tuple[str, ...] = ()) -> Iterator[int]:
    """``mbctl emulate ROBOT --bus ros2`` in a child process on a domain of its own; yields the domain
    id once it serves. Paced, it runs in real time at the rate ``1 / period_s`` with the effort and the
    gravity compensation ``spec`` says.

    Raises:
        HardwareError: The emulator did not start (its last error line).
    """
    cmd = emulate_command(robot, q0) + ["--bus", "ros2", "--joint-states", spec.joint_states]
    cmd += ["--lockstep-period", f"{period_s:.17g}"] if lockstep else ["--rate", f"{1.0 / period_s:.17g}"]
    if spec.command_interface in ("effort", "position"):
        cmd += ["--command-topic", spec.command]
    if spec.gravity_compensated:
        cmd += ["--gravity-compensated"]
    if spec.effort == "joint-torque-sensor":
        cmd += ["--effort", "joint-torque-sensor"]
    with emulated_domain() as domain:
        env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")}
        with child_process([*cmd, *extra], MARK, "the ROS 2 emulator", env):
            yield domain
