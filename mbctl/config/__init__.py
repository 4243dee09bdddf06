"""Typed specs of a robot description, parsed once from TOML (ground floor).

:func:`read_robot_spec` reads a robot TOML (a path or a bundled name) once and returns a
frozen :class:`RobotSpec`; every parse error names the file and the dotted field.
Physics code builds its objects from specs (``mbctl.dynamics.model.robot.build_robot``)
and never reads TOML; a Python user builds the same specs without any file.

Converted so far: the URDF, gravity, ``[joints]`` (limits, armature, friction and its
load model), ``[flexible.<link>]`` and ``[base]``. The other sections (constraints,
simulation, control, actuation, plant, drives, identification) are still parsed by
their layers from :attr:`RobotSpec.document`.
"""

from mbctl.config.base import BaseSupport, SupportPoint, parse_base
from mbctl.config.flexible import RFESpec, parse_flexible
from mbctl.config.joints import FrictionSpec, JointSpec, LoadSpec, parse_friction, parse_joint
from mbctl.config.robot import ROBOT_KEYS, RobotSpec, read_robot_spec

__all__ = [
    "BaseSupport",
    "FrictionSpec",
    "JointSpec",
    "LoadSpec",
    "RFESpec",
    "ROBOT_KEYS",
    "RobotSpec",
    "SupportPoint",
    "parse_base",
    "parse_flexible",
    "parse_friction",
    "parse_joint",
    "read_robot_spec",
]
