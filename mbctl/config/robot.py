"""The whole robot description: :class:`RobotSpec`, read once from a TOML file by :func:`read_robot_spec`.

```toml
urdf = "scara.urdf"                 # relative to this file, or "example-robot-data:ur5", or a xacro file
gravity = [0.0, 0.0, -9.81]         # m/s², optional (default: the URDF/pinocchio default)
locked = { finger1 = 0.0 }          # optional: joints held at a position (rad or m), removed from the model
[joints.j1]                         # see mbctl.config.joints
[flexible.upper_arm]                # see mbctl.config.flexible
[base]                              # see mbctl.config.base
[xacro]                             # optional: arguments of a xacro description, e.g. prefix = "left_"
```

A ``.urdf.xacro`` / ``.xacro`` description is expanded to URDF (:mod:`mbctl.xacro_files`) with the
``[xacro]`` arguments (strings; numbers and booleans as xacro writes them) and those given to
:func:`read_robot_spec`, which win.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from mbctl.bundled import bundled_config, bundled_names, resolve_config, resolve_urdf
from mbctl.config.actuation import ActuationSpec, parse_actuation
from mbctl.config.base import BaseSupport, parse_base
from mbctl.config.canopen import CanopenSpec
from mbctl.config.control import ControlSpec, parse_control
from mbctl.config.drives import DrivesSpec, parse_drives
from mbctl.config.flexible import FlexibleSpec, parse_flexible
from mbctl.config.franka import FrankaSpec, parse_franka
from mbctl.config.identification import IdentificationSpec, parse_identification
from mbctl.config.joints import JointSpec, parse_joint
from mbctl.config.keepout import KeepoutSpec, parse_keepout
from mbctl.config.plant import PlantSpec, parse_plant
from mbctl.config.ros2 import Ros2Spec, parse_ros2
from mbctl.config.simulation import ConstraintSpec, SimulationSpec, parse_constraints, parse_simulation
from mbctl.errors import ConfigError
from mbctl.tomlfields import Table, read_toml
from mbctl.xacro_files import XACRO_OPTION, Origin, is_xacro, urdf_of

__all__ = ["ROBOT_KEYS", "RobotSpec", "locking_variants", "read_robot_spec", "robot_spec_from_table"]

ROBOT_KEYS = (
    "urdf", "gravity", "locked", "joints", "control", "constraints", "simulation", "plant", "drives", "actuation", "identification",
    "flexible", "base", "xacro", "ros2", "keepout", "franka",
)


@dataclass(frozen=True)
class RobotSpec:
    """A robot description, parsed (SI units).

    Attributes:
        urdf: The URDF file (an existing path; a xacro description's expansion).
        name: Robot name (the TOML file's stem).
        source: The TOML file, or None for a spec built in Python.
        gravity: Gravity in the world frame (m/s²), or None for the URDF/pinocchio default.
        locked: Joints held at a fixed position (rad or m) by name: removed from the model,
            their bodies merged into the body they hang from (a gripper that stays shut).
        joints: Overrides by URDF joint name.
        flexible: Flexible links (rigid finite elements, or floating-frame FEM beams).
        base: The base support, or None for a rigid base.
        control: Controller gains and limits, or None.
        actuation: Drives and torque sharing, or None for the joints marked actuated.
        plant: The simulated plant's truth and sensors, or None (the model itself, default sensors).
        drives: The Dynamixel bus or the CANopen drives, or None.
        identification: Friction experiment plans, or None (defaults).
        constraints: Programmed and closed-loop constraints, in declaration order.
        simulation: How to simulate, or None (defaults).
        xacro: The xacro file ``urdf`` was expanded from, or None for a URDF.
        xacro_args: The arguments it was expanded with (name -> value).
        ros2: A live arm's ROS 2 topics and controllers, or None (the defaults).
        keepout: Where no checked frame may go (a floor, boxes), checked on planned motions; None: nowhere.
        franka: A Franka arm's FCI connection (libfranka), or None (the defaults).
    """

    urdf: Path
    name: str = "robot"
    source: Path | None = None
    gravity: tuple[float, float, float] | None = None
    locked: Mapping[str, float] = dataclasses.field(default_factory=dict)
    joints: Mapping[str, JointSpec] = dataclasses.field(default_factory=dict)
    flexible: tuple[FlexibleSpec, ...] = ()
    base: BaseSupport | None = None
    control: ControlSpec | None = None
    actuation: ActuationSpec | None = None
    plant: PlantSpec | None = None
    drives: DrivesSpec | CanopenSpec | None = None
    identification: IdentificationSpec | None = None
    constraints: tuple[ConstraintSpec, ...] = ()
    simulation: SimulationSpec | None = None
    xacro: Path | None = None
    xacro_args: Mapping[str, str] = dataclasses.field(default_factory=dict)
    ros2: Ros2Spec | None = None
    keepout: KeepoutSpec | None = None
    franka: FrankaSpec | None = None


def read_robot_spec(config: str | Path, *, xacro_args: Mapping[str, str] | None = None) -> RobotSpec:
    """Read a robot description (a TOML path, or a bundled robot's name) into a :class:`RobotSpec`.

    Args:
        xacro_args: Arguments of a xacro description (``--xacro-arg``), over the TOML's ``[xacro]``.

    Raises:
        ConfigError: Naming the file and the dotted field, for a missing or malformed
            file, an unknown field, law or model, or a value out of range.
    """
    return robot_spec_from_table(read_toml(resolve_config(config)), xacro_args=xacro_args)


def _xacro_args(root: Table, given: Mapping[str, str] | None) -> tuple[dict[str, str], dict[str, Origin]]:
    """The ``[xacro]`` table's arguments as xacro strings, then ``given`` (``--xacro-arg``) over them;
    and where each was given (for the error refusing one the description does not know)."""
    args: dict[str, str] = {}
    origin: dict[str, Origin] = {}
    if "xacro" in root:
        table = root.table("xacro")
        for name in table.keys():
            value = table.get(name)
            if isinstance(value, bool):
                args[name] = "true" if value else "false"
            elif isinstance(value, (str, int, float)):
                args[name] = str(value)
            else:
                raise table.error(name, f"a xacro argument is a string, number or boolean, got {type(value).__name__}")
            origin[name] = (root.file, f"xacro.{name}")
    for name in given or {}:
        origin[name] = (None, f"{XACRO_OPTION} {name}")
    return {**args, **(given or {})}, origin


def robot_spec_from_table(root: Table, *, xacro_args: Mapping[str, str] | None = None) -> RobotSpec:
    """A :class:`RobotSpec` from a parsed robot TOML document (``root.file``: its file, for
    errors, relative URDF paths and the robot's name), e.g. a copy that a study edited.

    Raises:
        ConfigError: As :func:`read_robot_spec`.
    """
    path = root.file
    root.only(ROBOT_KEYS)
    gravity = None
    if "gravity" in root:
        gx, gy, gz = root.vector("gravity", 3)
        gravity = (float(gx), float(gy), float(gz))
    locked = {}
    if "locked" in root:
        lt = root.table("locked")
        locked = {name: lt.number(name) for name in lt.keys()}
    joints = {name: parse_joint(t) for name, t in root.table("joints").tables()} if "joints" in root else {}
    flexible = tuple(parse_flexible(t, link) for link, t in root.table("flexible").tables()) if "flexible" in root else ()
    description = resolve_urdf(root.string("urdf"), path.parent, file=path)
    args, origin = _xacro_args(root, xacro_args)
    if args and not is_xacro(description):
        raise ConfigError(f"xacro arguments ({', '.join(sorted(args))}) for a description that is not a xacro file ({description.name})",
                          file=path, field="xacro" if "xacro" in root else "urdf")
    return RobotSpec(
        urdf=urdf_of(description, args, origin),
        name=path.stem,
        source=path,
        gravity=gravity,
        locked=locked,
        joints=joints,
        flexible=flexible,
        base=parse_base(root.table("base")) if "base" in root else None,
        control=parse_control(root.table("control")) if "control" in root else None,
        actuation=parse_actuation(root.table("actuation")) if "actuation" in root else None,
        plant=parse_plant(root.table("plant")) if "plant" in root else None,
        drives=parse_drives(root.table("drives")) if "drives" in root else None,
        identification=parse_identification(root.table("identification")) if "identification" in root else None,
        constraints=parse_constraints(root),
        simulation=parse_simulation(root.table("simulation")) if "simulation" in root else None,
        xacro=description if is_xacro(description) else None,
        xacro_args=args,
        ros2=parse_ros2(root.table("ros2")) if "ros2" in root else None,
        keepout=parse_keepout(root.table("keepout")) if "keepout" in root else None,
        franka=parse_franka(root.table("franka")) if "franka" in root else None,
    )


def locking_variants(spec: RobotSpec, joints: Sequence[str]) -> tuple[str, ...]:
    """The bundled robots that are ``spec``'s robot (the same URDF) with every one of ``joints`` locked,
    e.g. ``("panda_arm",)`` for the Panda and its two finger joints: the model to use for a log
    without those joints' columns. Bundled files that do not read are skipped (a hint, not a check)."""
    found = []
    for name in bundled_names():
        try:
            other = read_robot_spec(bundled_config(name))
        except ConfigError:
            continue
        if other.urdf.resolve() == spec.urdf.resolve() and set(joints) <= set(other.locked) and other.source.resolve() != spec.source.resolve():
            found.append(name)
    return tuple(found)
