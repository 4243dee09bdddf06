"""Physical checks of a robot description: impossible bodies and joints are refused at load time.

pinocchio builds a model from any URDF that parses, including bodies no material
can have; MuJoCo and Drake refuse them, and so does mbctl. :func:`check_urdf`
reads the URDF's own numbers (so an error names the link or joint and the XML
field); :func:`check_model` checks the assembled model (after the TOML overlay):

- a link's mass is finite and >= 0 (a link without ``<inertial>`` is a massless frame);
- its rotational inertia (kg·m², about the centre of mass) is finite, positive
  semi-definite (zero for a point mass), and its principal moments satisfy the
  triangle inequalities ``I1 + I2 >= I3`` (``I1 + I2 - I3 = 2∫z² dm >= 0`` for any
  mass distribution), both to a relative tolerance of :data:`TOLERANCE` of the
  largest moment;
- origins are finite, joint axes finite unit vectors;
- limits: ``lower <= upper`` (finite), effort and velocity >= 0 (0: no limit, as
  URDF files use it);
- the joint-space mass matrix ``M(q0)`` is positive definite (every DOF moves some
  mass or armature), at the neutral configuration: this is where massless links are
  judged, after pinocchio has merged links joined by fixed joints.

Legal but suspicious values are warned about (:class:`SuspiciousModelWarning`): an
inertia without mass, a body over 1,000 times heavier than its parent or child, and
a radius of gyration ``sqrt(I_max / m)`` below 0.1 mm.
"""

from __future__ import annotations

import math
import warnings
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pinocchio as pin

from mbctl.errors import ConfigError

__all__ = ["TOLERANCE", "SuspiciousModelWarning", "check_model", "check_urdf"]

TOLERANCE = 1e-6
"""Relative slack of the inertia checks (rounded values of thin rods and plates sit on the bounds)."""

_NEGLIGIBLE_KGM2 = 1e-12  # below any real body's moment: round-off of zeros
_HEAVY_RATIO = 1e3
_MIN_GYRATION_M = 1e-4


class SuspiciousModelWarning(UserWarning):
    """A legal value that is probably a typo (units, a missing digit)."""


def _numbers(element: ET.Element, attribute: str, count: int, default: str | None, file: Path, where: str) -> np.ndarray:
    text = element.get(attribute, default)
    if text is None:
        raise ConfigError(f"{where}: {attribute} is missing", file=file)
    try:
        values = np.array([float(x) for x in text.split()], dtype=float)
    except ValueError:
        raise ConfigError(f"{where}: {attribute} = {text!r} is not {count} number(s)", file=file) from None
    if values.shape != (count,):
        raise ConfigError(f"{where}: {attribute} = {text!r} needs {count} number(s)", file=file)
    if not np.isfinite(values).all():
        raise ConfigError(f"{where}: {attribute} = {text!r} must be finite", file=file)
    return values


def _check_origin(parent: ET.Element, file: Path, where: str) -> None:
    origin = parent.find("origin")
    if origin is not None:
        _numbers(origin, "xyz", 3, "0 0 0", file, f"{where} origin")
        _numbers(origin, "rpy", 3, "0 0 0", file, f"{where} origin")


def _check_inertial(link: ET.Element, file: Path) -> tuple[float, np.ndarray]:
    """Mass (kg) and inertia matrix (kg·m²) of a link, checked."""
    name = link.get("name", "?")
    where = f"link {name}"
    inertial = link.find("inertial")
    if inertial is None:
        return 0.0, np.zeros((3, 3))
    _check_origin(inertial, file, f"{where} inertial")
    mass_element = inertial.find("mass")
    mass = 0.0 if mass_element is None else float(_numbers(mass_element, "value", 1, None, file, f"{where} mass")[0])
    if mass < 0:
        raise ConfigError(f"{where}: mass = {mass:g} kg must be >= 0", file=file)
    element = inertial.find("inertia")
    inertia = np.zeros((3, 3))
    if element is not None:
        moments = {key: float(_numbers(element, key, 1, "0", file, f"{where} inertia")[0]) for key in ("ixx", "ixy", "ixz", "iyy", "iyz", "izz")}
        inertia = np.array(
            [
                [moments["ixx"], moments["ixy"], moments["ixz"]],
                [moments["ixy"], moments["iyy"], moments["iyz"]],
                [moments["ixz"], moments["iyz"], moments["izz"]],
            ]
        )
    principal = np.linalg.eigvalsh(inertia)
    slack = max(TOLERANCE * max(abs(principal[2]), abs(principal[0])), _NEGLIGIBLE_KGM2)
    if principal[0] < -slack:
        raise ConfigError(
            f"{where}: inertia is not positive semi-definite (principal moments {', '.join(f'{x:.4g}' for x in principal)} kg m^2)", file=file
        )
    if mass == 0 and principal[2] > 0:
        warnings.warn(f"{file}: {where}: inertia without mass (mass 0 kg)", SuspiciousModelWarning, stacklevel=4)
    if principal[0] + principal[1] < principal[2] - slack:
        raise ConfigError(
            f"{where}: principal moments {principal[0]:.4g}, {principal[1]:.4g}, {principal[2]:.4g} kg m^2 violate the triangle inequality "
            f"(I1 + I2 >= I3 for any mass distribution)",
            file=file,
        )
    return mass, inertia


def _check_joint(joint: ET.Element, file: Path) -> None:
    name = joint.get("name", "?")
    kind = joint.get("type", "")
    where = f"joint {name}"
    _check_origin(joint, file, where)
    if kind in ("fixed", "floating", "planar"):
        return
    axis_element = joint.find("axis")
    if axis_element is not None:
        axis = _numbers(axis_element, "xyz", 3, "1 0 0", file, f"{where} axis")
        norm = float(np.linalg.norm(axis))
        if abs(norm - 1.0) > 1e-6:
            raise ConfigError(f"{where}: axis xyz has length {norm:.6g}; give a unit vector", file=file)
    limit = joint.find("limit")
    if limit is None:
        return
    for key in ("effort", "velocity"):
        if limit.get(key) is not None:
            value = float(_numbers(limit, key, 1, None, file, f"{where} limit")[0])
            if value < 0:
                raise ConfigError(f"{where}: limit {key} = {value:g} must be >= 0 (0: no limit)", file=file)
    if kind in ("revolute", "prismatic"):
        lower = float(_numbers(limit, "lower", 1, "0", file, f"{where} limit")[0])
        upper = float(_numbers(limit, "upper", 1, "0", file, f"{where} limit")[0])
        if lower > upper:
            raise ConfigError(f"{where}: limit lower = {lower:g} is above upper = {upper:g}", file=file)


def check_urdf(path: Path) -> None:
    """Refuse a URDF whose links or joints are physically impossible (see the module docstring).

    Raises:
        ConfigError: Naming the file, the link or joint, and the field.
    """
    try:
        root = ET.parse(path).getroot()
    except (ET.ParseError, OSError):
        return  # the URDF parser reports malformed files with its own message
    masses: dict[str, float] = {}
    for link in root.iter("link"):
        mass, inertia = _check_inertial(link, path)
        masses[link.get("name", "?")] = mass
        largest = np.linalg.eigvalsh(inertia)[2]
        if mass > 0 and largest > 0 and math.sqrt(largest / mass) < _MIN_GYRATION_M:
            warnings.warn(
                f"{path}: link {link.get('name')}: inertia implies a radius of gyration below 0.1 mm for {mass:g} kg (units?)", SuspiciousModelWarning, stacklevel=3
            )
    for joint in root.iter("joint"):
        _check_joint(joint, path)
        parent, child = joint.find("parent"), joint.find("child")
        if parent is None or child is None:
            continue
        a, b = masses.get(parent.get("link", ""), 0.0), masses.get(child.get("link", ""), 0.0)
        if a > 0 and b > 0 and max(a, b) > _HEAVY_RATIO * min(a, b):
            warnings.warn(
                f"{path}: joint {joint.get('name')}: link masses {a:g} and {b:g} kg differ by more than {_HEAVY_RATIO:g}x (units?)",
                SuspiciousModelWarning,
                stacklevel=3,
            )


def check_model(model: pin.Model, dof_names: list[str], *, file: Path | None = None) -> None:
    """Refuse a model whose mass matrix is not positive definite at the neutral configuration.

    Args:
        model: The assembled model (URDF, RFE links, flexible base, armature).
        dof_names: A name per velocity DOF, for the message.

    Raises:
        ConfigError: Naming the DOF that moves no mass.
    """
    M = pin.crba(model, model.createData(), pin.neutral(model))
    M = np.triu(M) + np.triu(M, 1).T
    values, vectors = np.linalg.eigh(M)
    scale = max(float(np.abs(np.diag(M)).max()), 1e-300)
    if values[0] > 1e-12 * scale and np.isfinite(values).all():
        return
    worst = dof_names[int(np.abs(vectors[:, 0]).argmax())]
    raise ConfigError(
        f"the mass matrix is singular at the neutral configuration (smallest eigenvalue {values[0]:.3g}): DOF {worst} moves no mass or inertia; "
        f"give its child link an <inertial> or the joint an armature",
        file=file,
    )
