"""``mbctl run --bus ros2``: the ROS 2 backend a session opens, and ``mbctl emulate --bus ros2`` in a
child process for ``--emulate``.

An emulated arm gets a DDS domain of its own (``ROS_DOMAIN_ID`` where set, else a random one in
100..199) and discovery on this machine only (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` for the
child), so that two emulated runs on one machine, or one beside a real robot, do not meet.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from mbctl.config.ros2 import Ros2Spec
from mbctl.dynamics.model.robot import RobotModel
from mbctl.hardware.interface import CommandMode
from mbctl.hardware.ros2.backend import Ros2Joints, check_command_joints
from mbctl.hardware.ros2.emulator import EMULATED_HOLDING_CONTROLLER
from mbctl.hardware.session import child_process, emulate_command

__all__ = ["ros2_backend", "ros2_emulator_process", "session_spec"]

MARK = " on ROS domain "


def session_spec(robot: RobotModel, joint_states: str | None, command: str | None) -> Ros2Spec:
    """The robot's ``[ros2]`` (defaults without one) with ``--joint-states`` / ``--command-topic``."""
    spec = robot.spec.ros2 if robot.spec is not None and robot.spec.ros2 is not None else Ros2Spec(file=robot.source)
    changes = {k: v for k, v in (("joint_states", joint_states), ("command", command)) if v is not None}
    return dataclasses.replace(spec, **changes) if changes else spec


@contextlib.contextmanager
def ros2_backend(robot: RobotModel, options: Any, q0: np.ndarray, mode: CommandMode) -> Iterator[Ros2Joints]:
    """The opened ROS 2 backend of a session (``options``: :class:`mbctl.hardware.session.SessionOptions`),
    with ``mbctl emulate --bus ros2`` in its own process first where ``options.emulate`` asks."""
    spec = session_spec(robot, getattr(options, "joint_states", None), getattr(options, "command_topic", None))
    period_s = 1.0 / options.rate_hz
    # paced: the receiving threads one below the loop's priority, like a paced plant's process
    priority = None if options.lockstep or options.realtime_priority is None else options.realtime_priority - 1
    if not options.emulate:
        with Ros2Joints(robot.actuated_names, spec, period_s=period_s, mode=mode, lockstep=options.lockstep, realtime_priority=priority) as joints:
            yield joints
        return
    check_command_joints(robot.actuated_names, spec)  # before an emulator starts
    if spec.holding_controller is None:  # the emulator's controller manager has one: hand over to it
        spec = dataclasses.replace(spec, holding_controller=EMULATED_HOLDING_CONTROLLER)
    actuated_q0 = [float(q0[robot.joint(n).idx_v]) for n in robot.actuated_names]
    extra = ("--realtime-priority", str(priority)) if priority is not None else ()
    with ros2_emulator_process(robot, spec, actuated_q0, period_s, options.lockstep, extra) as domain:
        with Ros2Joints(robot.actuated_names, spec, period_s=period_s, mode=mode, lockstep=options.lockstep, domain_id=domain, realtime_priority=priority) as joints:
            yield joints


def _domain() -> int:
    env = os.environ.get("ROS_DOMAIN_ID", "").strip()
    return int(env) if env.isdigit() else random.randrange(100, 200)


@contextlib.contextmanager
def ros2_emulator_process(robot: RobotModel, spec: Ros2Spec, q0: list[float], period_s: float, lockstep: bool, extra: tuple[str, ...] = ()) -> Iterator[int]:
    """``mbctl emulate ROBOT --bus ros2`` in a child process; yields its DDS domain id once it serves.

    Raises:
        HardwareError: The emulator did not start (its last error line).
    """
    domain = _domain()
    cmd = emulate_command(robot, q0) + ["--bus", "ros2", "--joint-states", spec.joint_states]
    cmd += ["--lockstep-period", f"{period_s:.17g}"] if lockstep else ["--period", f"{period_s:.17g}"]
    if spec.command_interface in ("effort", "position"):
        cmd += ["--command-topic", spec.command]
    env = {**os.environ, "ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ.get("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")}
    with child_process([*cmd, *extra], MARK, "the ROS 2 emulator", env):
        yield domain
