"""Typed specs of a robot description, parsed once from TOML (ground floor).

:func:`read_robot_spec` reads a robot TOML (a path or a bundled name) once and returns a
frozen :class:`RobotSpec` holding one spec per section; every parse error names the
file and the dotted field. Physics, control and hardware code build their objects
from specs (``mbctl.dynamics.model.robot.build_robot`` and the layers' builders) and
never read TOML; a Python user builds the same specs without any file.
"""

from mbctl.config.actuation import ActuationSpec
from mbctl.config.base import BaseSupport, SupportPoint
from mbctl.config.control import ControlSpec, GainsSpec, NullspaceSpec, TaskSpaceSpec
from mbctl.config.drives import DrivesSpec, ServoSpec
from mbctl.config.flexible import RFESpec
from mbctl.config.identification import IdentificationSpec
from mbctl.config.joints import FrictionSpec, JointSpec, LoadSpec
from mbctl.config.plant import PayloadSpec, PlantConfig, PlantSpec, SensorModel
from mbctl.config.robot import ROBOT_KEYS, RobotSpec, read_robot_spec
from mbctl.config.simulation import Baumgarte, ConstraintSpec, PathSpec, SimulationSpec, SingularityPolicy

__all__ = [
    "ROBOT_KEYS",
    "ActuationSpec",
    "BaseSupport",
    "Baumgarte",
    "ConstraintSpec",
    "ControlSpec",
    "DrivesSpec",
    "FrictionSpec",
    "GainsSpec",
    "IdentificationSpec",
    "JointSpec",
    "LoadSpec",
    "NullspaceSpec",
    "PathSpec",
    "PayloadSpec",
    "PlantConfig",
    "PlantSpec",
    "RFESpec",
    "RobotSpec",
    "SensorModel",
    "ServoSpec",
    "SimulationSpec",
    "SingularityPolicy",
    "SupportPoint",
    "TaskSpaceSpec",
    "read_robot_spec",
]
