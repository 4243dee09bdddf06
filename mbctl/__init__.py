"""mbctl: model-based control of robot arms and a real-time interface to their drives.

One robot description (URDF + TOML overlay) serves every workflow::

    import mbctl
    robot = mbctl.load_robot("scara")                       # a bundled robot, or a path
    waypoints = [[0.0, 0.0, 0.0, 0.0], [0.5, 0.3, -0.2, 0.01]]     # rad, rad, rad, m
    traj = mbctl.quintic_rest_to_rest(waypoints, [2.0], 100.0, robot.joint_names)
    ff = mbctl.feedforward(robot, traj)                     # torques with friction, N·m / N

The layers are subpackages: :mod:`mbctl.dynamics` (models, friction, constraints,
flexibility, simulation), :mod:`mbctl.ctrl` (controllers, trajectories, code
generation), :mod:`mbctl.hardware` (drives, simulated plant, real-time loop),
:mod:`mbctl.identification` (friction experiments and fits), :mod:`mbctl.study`
(parameter studies), :mod:`mbctl.viz` (plots, animations and a live view of the
results) and :mod:`mbctl.cli`, each importing only those before it.
The names below are imported on first use, so ``import mbctl`` stays cheap.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from mbctl.lazy import lazy_exports

__version__ = "0.1.0"

# public name -> module that defines it
_API = {
    "MbctlError": "mbctl.errors",
    "ConfigError": "mbctl.errors",
    "DataError": "mbctl.errors",
    "RobotSpec": "mbctl.config.robot",
    "read_robot_spec": "mbctl.config.robot",
    "load_robot": "mbctl.dynamics.model.robot",
    "build_robot": "mbctl.dynamics.model.robot",
    "RobotModel": "mbctl.dynamics.model.robot",
    "inverse_dynamics": "mbctl.dynamics.inverse",
    "simulate": "mbctl.dynamics.simulation.integrate",
    "SimulationResult": "mbctl.dynamics.simulation.integrate",
    "simulate_setup": "mbctl.dynamics.simulation.setup",
    "Trajectory": "mbctl.ctrl.trajectory",
    "quintic_rest_to_rest": "mbctl.ctrl.trajectory",
    "read_trajectory": "mbctl.ctrl.trajectory",
    "optimal_timing": "mbctl.ctrl.timing.solve",
    "spline_path": "mbctl.ctrl.timing.path",
    "timing_limits": "mbctl.ctrl.timing.limits",
    "design_excitation": "mbctl.ctrl.excitation",
    "Excitation": "mbctl.ctrl.excitation",
    "feedforward": "mbctl.ctrl.feedforward",
    "FeedforwardResult": "mbctl.ctrl.feedforward",
    "build_controller": "mbctl.ctrl.controllers",
    "run_session": "mbctl.hardware.session",
    "SessionOptions": "mbctl.hardware.session",
    "RunSummary": "mbctl.hardware.loop",
    "fit_friction": "mbctl.identification.fitting",
    "FrictionFit": "mbctl.identification.fitting",
}

__all__ = ["__version__", *_API]

if TYPE_CHECKING:
    from mbctl.config.robot import RobotSpec, read_robot_spec
    from mbctl.ctrl.controllers import build_controller
    from mbctl.ctrl.excitation import Excitation, design_excitation
    from mbctl.ctrl.feedforward import FeedforwardResult, feedforward
    from mbctl.ctrl.timing.limits import timing_limits
    from mbctl.ctrl.timing.path import spline_path
    from mbctl.ctrl.timing.solve import optimal_timing
    from mbctl.ctrl.trajectory import Trajectory, quintic_rest_to_rest, read_trajectory
    from mbctl.dynamics.inverse import inverse_dynamics
    from mbctl.dynamics.model.robot import RobotModel, build_robot, load_robot
    from mbctl.dynamics.simulation.integrate import SimulationResult, simulate
    from mbctl.dynamics.simulation.setup import simulate_setup
    from mbctl.errors import ConfigError, DataError, MbctlError
    from mbctl.hardware.loop import RunSummary
    from mbctl.hardware.session import SessionOptions, run_session
    from mbctl.identification.fitting import FrictionFit, fit_friction


__getattr__, __dir__ = lazy_exports(__name__, _API)
