"""A study's runs as robot descriptions: its overrides merged in, a run's values written in, parsed.

Each run's robot is exactly the study's robot file with the run's numbers typed in
(:func:`sample_spec`): the values go into a copy of the parsed description
(:attr:`mbctl.config.study.StudySpec.document`, overrides merged by :func:`merge_tables`) at
their dotted paths, and the copy is parsed with the robot's own checks.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from mbctl.bundled import resolve_config
from mbctl.config.robot import RobotSpec, robot_spec_from_table
from mbctl.errors import ConfigError
from mbctl.tomlfields import Table

if TYPE_CHECKING:
    from mbctl.config.study import StudySpec

__all__ = ["apply_values", "check_paths", "merge_tables", "sample_spec"]


def merge_tables(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``base`` with ``extra`` merged in: tables merged key by key, other values replaced;
    a table that names a ``law`` replaces the old table whole (a law's parameters belong to it)."""
    out = copy.deepcopy(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict) and "law" not in value:
            out[key] = merge_tables(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def _parent(document: dict[str, Any], path: str) -> tuple[Any, str | int]:
    """The container holding ``path``'s last key, and that key (KeyError if absent)."""
    node: Any = document
    parts = path.split(".")
    for part in parts[:-1]:
        node = node[int(part)] if isinstance(node, list) else node[part]
    last = parts[-1]
    return node, (int(last) if isinstance(node, list) else last)


def check_paths(study: StudySpec) -> None:
    """Every varied path names a number in the robot description (with the study's overrides).

    Raises:
        ConfigError: Naming the study file and ``parameters.<path>``.
    """
    for p in study.parameters:
        try:
            node, key = _parent(study.document, p.path)
            value = node[key]
        except (KeyError, IndexError, ValueError, TypeError):
            raise ConfigError(f"no such field in {study.robot.name} (nor in the study's overrides)", file=study.source, field=study.field(p.path)) from None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ConfigError(f"is not a number in {study.robot.name} (got {value!r})", file=study.source, field=study.field(p.path))


def apply_values(document: dict[str, Any], values: dict[str, float]) -> dict[str, Any]:
    """A copy of ``document`` with each dotted path set to its value."""
    out = copy.deepcopy(document)
    for path, value in values.items():
        node, key = _parent(out, path)
        node[key] = float(value)
    return out


def sample_spec(study: StudySpec, values: dict[str, float]) -> RobotSpec:
    """The robot spec of one run: ``values`` written into the description and parsed.

    Raises:
        ConfigError: From the robot's own checks, naming the robot file and field.
    """
    robot = study.robot
    if not robot.exists() and study.robot_name is not None:  # a worker elsewhere: its own copy of the bundled robot
        robot = resolve_config(study.robot_name)
    return robot_spec_from_table(Table(apply_values(study.document, values), robot, ""))
