"""The Franka backend of a session (``mbctl run ROBOT --bus franka``): the robot's ``[franka]`` table,
the command line's address, and franky-sim in its own process with ``--emulate``."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pinocchio as pin

from mbctl.config.franka import FrankaSpec
from mbctl.dynamics.model.robot import RobotModel
from mbctl.errors import InputError
from mbctl.hardware.franka.arm import STANDARD_GRAVITY, FrankaArm
from mbctl.hardware.franka.simulator import franky_sim_process

__all__ = ["FCI_RATE_HZ", "check_options", "franka_backend", "franka_spec", "model_gravity"]

FCI_RATE_HZ = 1000.0  # FCI's cycle: one state, one command per millisecond


def model_gravity(robot: RobotModel) -> Callable[[np.ndarray], np.ndarray]:
    """``g(q)``: mbctl's gravity torques (N·m) on the actuated joints at their positions ``q`` (rad; other DOF at 0)."""
    data = robot.create_data()
    index = np.array([robot.joint(n).idx_v for n in robot.actuated_names], dtype=int)
    q_full = np.zeros(robot.nv)

    def gravity(q: np.ndarray) -> np.ndarray:
        q_full[index] = q
        return pin.computeGeneralizedGravity(robot.model, data, robot.configuration(q_full))[index].copy()

    return gravity


def franka_spec(robot: RobotModel, address: str | None = None) -> FrankaSpec:
    """The robot's ``[franka]`` table (the defaults without one), its address replaced by ``address``."""
    spec = robot.spec.franka if robot.spec is not None and robot.spec.franka is not None else FrankaSpec(file=robot.source)
    return dataclasses.replace(spec, address=address) if address else spec


def check_options(options: Any) -> None:
    """A Franka runs paced at FCI's 1 kHz, in torque control.

    Raises:
        InputError: Naming the option (``--lockstep``, ``--rate``, ``--controller``).
    """
    if options.lockstep:
        raise InputError("a Franka (and franky-sim) runs on its own clock at 1 kHz: no lock-step", field="--lockstep")
    if options.rate_hz != FCI_RATE_HZ:
        raise InputError(f"FCI exchanges a state and a command every millisecond: the rate is {FCI_RATE_HZ:g} Hz, got {options.rate_hz:g}", field="--rate")
    if options.law == "position":
        raise InputError("a Franka over FCI takes torque commands here (torque control); choose a torque law", field="--controller")


@contextlib.contextmanager
def franka_backend(robot: RobotModel, options: Any, q0: np.ndarray) -> Iterator[FrankaArm]:
    """The opened Franka arm of ``options`` (a :class:`~mbctl.hardware.session.SessionOptions`): at the
    ``[franka]`` address or ``options.robot_address``; with ``options.emulate``, franky-sim started at ``q0``
    (DOF positions, rad) on a loopback address of its own.

    Raises:
        InputError: Lock-step, a rate other than FCI's 1 kHz, or a robot without seven actuated joints.
    """
    check_options(options)
    spec = franka_spec(robot, options.robot_address)
    gravity_vector = robot.spec.gravity if robot.spec is not None and robot.spec.gravity is not None else STANDARD_GRAVITY
    arm_args = dict(mbctl_gravity=model_gravity(robot), gravity_vector=gravity_vector, period_s=1.0 / FCI_RATE_HZ)
    if not options.emulate:
        with FrankaArm(robot.actuated_names, spec, **arm_args) as arm:
            yield arm
        return
    actuated_q0 = [float(q0[robot.joint(n).idx_v]) for n in robot.actuated_names]
    with franky_sim_process(actuated_q0, options.robot_address) as sim:
        with FrankaArm(robot.actuated_names, dataclasses.replace(spec, address=sim.address, server="franky-sim"), **arm_args) as arm:
            yield arm
