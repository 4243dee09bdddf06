"""Variants of one robot description, simulated and compared (the flexible-manipulator study's eight variants).

A robot TOML with a flexible base (``[base] support = "flexible"``), flexible links
(``[flexible.<link>]``) and joint friction describes up to eight variants: support
rigid/flexible x links rigid/flexible x joints frictionless/with the configured friction.
The rigid choices simply ignore the flexible tables (:func:`mbctl.dynamics.model.robot.load_robot`
with ``rigid_base`` / ``rigid_links``); "frictionless" drops every friction law.
Every variant runs the same ``[[constraints]]`` and ``[simulation]``.

Per run the comparison quantities are (SI units):

- the tool path: the first ``frame_position`` constraint's frame, ``target + Phi``;
- the coordinates of the mechanism's joints (driven and passive; elastic ones excluded);
- joint force magnitudes ``|f_j|`` (N): the force part of the reaction wrench every
  such joint transmits (RNEA along the run, :func:`mbctl.dynamics.constraints.reactions.joint_reactions`);
- their RMS over the run, ``sqrt(1/t_k * integral F^2 dt)`` (trapezoidal rule), and the
  RMS of their fluctuation about the run's mean (the weight a joint carries dominates
  ``|f|``; vibrations show in the fluctuation);
- drive forces: the programmed-constraint force on the actuated joints (N·m, N) and
  their RMS;
- the violation ``max_i |Phi_i|`` (m).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from mbctl.config.simulation import SimulationSpec
from mbctl.dynamics.constraints.kinds import FramePosition
from mbctl.dynamics.constraints.reactions import joint_reactions
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.dynamics.simulation.integrate import Progress, SimulationResult
from mbctl.dynamics.simulation.pilot import RunTimeEstimate, estimate_run_time
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulate_setup,
    simulation_setup,
)
from mbctl.errors import ConfigError

__all__ = ["Variant", "VariantRun", "available_variants", "estimate_variant", "load_variant", "rms", "rms_table", "run_variant"]


@dataclass(frozen=True)
class Variant:
    """One combination of support, links and friction.

    Attributes:
        support: "rigid" or "flexible" base.
        links: "rigid" or "flexible" links.
        friction: "none" (frictionless) or "config" (the laws of the TOML).
    """

    support: str
    links: str
    friction: str

    def __post_init__(self) -> None:
        for field, value, allowed in (
            ("support", self.support, ("rigid", "flexible")),
            ("links", self.links, ("rigid", "flexible")),
            ("friction", self.friction, ("none", "config")),
        ):
            if value not in allowed:
                raise ConfigError(f"unknown {field} {value!r} (expected {', '.join(allowed)})", field=field)

    @property
    def name(self) -> str:
        """``<support>-<links>-<friction>``, e.g. ``flexible-rigid-friction`` (file and key name)."""
        return f"{self.support}-{self.links}-{'friction' if self.friction == 'config' else 'frictionless'}"

    @property
    def label(self) -> str:
        """Legend text, e.g. ``base flexible, link rigid, friction``."""
        return f"base {self.support}, link {self.links}, {'friction' if self.friction == 'config' else 'frictionless'}"

    @classmethod
    def parse(cls, name: str, field: str | None = None) -> Variant:
        """The variant called ``name`` (see :attr:`name`); ``field`` names where it came from.

        Raises:
            ConfigError: For a malformed name.
        """
        parts = name.split("-")
        structure = ("rigid", "flexible")
        if len(parts) != 3 or parts[0] not in structure or parts[1] not in structure or parts[2] not in ("friction", "frictionless"):
            raise ConfigError(
                f"unknown variant {name!r} (expected <rigid|flexible>-<rigid|flexible>-<friction|frictionless>)", field=field
            )
        return cls(parts[0], parts[1], "config" if parts[2] == "friction" else "none")


def available_variants(robot: RobotModel) -> list[Variant]:
    """Every variant the description supports, rigid first (a robot loaded with all its
    flexibility): flexible choices only where the TOML has them, friction only if some
    joint has a law."""
    supports = ["rigid", "flexible"] if robot.flexible_base is not None else ["rigid"]
    links = ["rigid", "flexible"] if robot.rfe_links else ["rigid"]
    frictions = ["none", "config"] if any(j.friction for j in robot.joints) else ["none"]
    return [Variant(s, lk, f) for s in supports for lk in links for f in frictions]


def load_variant(path: str | Path, variant: Variant) -> RobotModel:
    """The robot of ``path`` as ``variant`` says.

    Raises:
        ConfigError: If a flexible choice has no table in the file.
    """
    robot = load_robot(path, rigid_base=variant.support == "rigid", rigid_links=variant.links == "rigid")
    if variant.support == "flexible" and robot.flexible_base is None:
        raise ConfigError('variant needs a flexible base: [base] support = "flexible" with supports', file=path, field="base")
    if variant.links == "flexible" and not robot.rfe_links:
        raise ConfigError("variant needs a flexible link: a [flexible.<link>] table", file=path, field="flexible")
    if variant.friction == "none":
        robot = robot.with_friction({j.name: None for j in robot.joints})
    return robot


def _time_mean(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``1/(t[-1] - t[0]) * integral x dt`` along axis 0 (trapezoidal rule)."""
    w = np.diff(t).reshape((-1,) + (1,) * (np.ndim(x) - 1))
    return np.sum(0.5 * (x[1:] + x[:-1]) * w, axis=0) / (t[-1] - t[0])


def rms(t: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``sqrt(1/(t[-1] - t[0]) * integral x^2 dt)`` along axis 0 (trapezoidal rule)."""
    t = np.asarray(t, dtype=float)
    x = np.asarray(x, dtype=float)
    if t[-1] - t[0] <= 0:
        return np.abs(x[0])
    return np.sqrt(_time_mean(t, x**2))


@dataclass(frozen=True, eq=False)
class VariantRun:
    """One simulated variant and its comparison quantities.

    Attributes:
        variant: Which one.
        robot: Its model.
        result: The full simulation.
        joints: The mechanism's joint names, elastic ones excluded (columns of the per-joint arrays).
        q: (N, joints) coordinates of the mechanism's joints, driven and passive (rad, m).
        tool: (N, k) tool coordinates of the first frame-position constraint (m), or None.
        tool_target: (N, k) its target, or None.
        tool_axes: Axis names of ``tool``.
        joint_force: (N, joints) reaction force magnitudes ``|f|`` (N).
        drive_force: (N, joints) programmed-constraint force on these joints (N·m, N; zero on passive ones unless the program needs it).
        violation: (N,) ``max |Phi|`` over position rows (m, rad).
        wall_time_s: Simulation wall time (s), reactions excluded.
    """

    variant: Variant
    robot: RobotModel
    result: SimulationResult
    joints: tuple[str, ...]
    q: np.ndarray
    tool: np.ndarray | None
    tool_target: np.ndarray | None
    tool_axes: tuple[str, ...]
    joint_force: np.ndarray
    drive_force: np.ndarray
    violation: np.ndarray
    wall_time_s: float

    @property
    def joint_force_rms(self) -> np.ndarray:
        """RMS of ``|f|`` per actuated joint (N)."""
        return rms(self.result.t, self.joint_force)

    @property
    def joint_force_fluctuation_rms(self) -> np.ndarray:
        """RMS of ``|f|`` minus its time mean, per actuated joint (N)."""
        t = self.result.t
        mean = _time_mean(t, self.joint_force)
        return rms(t, self.joint_force - mean)

    @property
    def drive_force_rms(self) -> np.ndarray:
        """RMS of the drive force per actuated joint (N·m, N)."""
        return rms(self.result.t, self.drive_force)


def _variant_system(path: str | Path, variant: Variant, setup: SimulationSpec | None, overrides: dict) -> tuple:
    """``(robot, setup, system, q0, dq0)`` of a variant's run."""
    robot = load_variant(path, variant)
    setup = dataclasses.replace(setup or simulation_setup(robot), **overrides)
    if setup.solver == "nullspace":
        raise ConfigError("the joint forces need multipliers; use solver lagrange or udwadia-kalaba", file=path, field="simulation.solver")
    system = build_dynamics(robot, setup)
    q0, dq0 = initial_state(robot, setup, system)
    return robot, setup, system, q0, dq0


def estimate_variant(path: str | Path, variant: Variant, *, setup: SimulationSpec | None = None, **overrides) -> RunTimeEstimate | None:
    """The wall time :func:`run_variant` will take with these arguments, from a pilot of its first steps
    (:func:`mbctl.dynamics.simulation.pilot.estimate_run_time`)."""
    _, setup, system, q0, dq0 = _variant_system(path, variant, setup, overrides)
    return estimate_run_time(system, q0, dq0, setup)


def run_variant(
    path: str | Path,
    variant: Variant,
    *,
    setup: SimulationSpec | None = None,
    progress: Progress | None = None,
    **overrides,
) -> VariantRun:
    """Simulate ``variant`` of the robot at ``path`` as its ``[simulation]`` says.

    Args:
        setup: Simulation settings (default: the file's), then ``overrides`` of its
            fields (``integrator``, ``step``, ``duration`` ...).
        progress: Passed to :func:`mbctl.dynamics.simulation.integrate.simulate`.
    """
    robot, setup, system, q0, dq0 = _variant_system(path, variant, setup, overrides)
    start = time.perf_counter()
    result = simulate_setup(system, q0, dq0, setup, progress=progress)
    wall = time.perf_counter() - start
    shown = [j for j in robot.joints if j.name not in robot.elastic_names]  # drives and passive joints (a closed loop's)
    reactions = joint_reactions(system, result.t, result.q, result.dq, result.ddq, result.lam)
    rows = [robot.joints.index(j) for j in shown]
    joint_force = np.linalg.norm(reactions.joint_wrench[:, rows, :3], axis=2)
    idx = [j.idx_v for j in shown]
    tool = next((c for c in system.constraints if isinstance(c, FramePosition)), None)
    if tool is not None:
        sl = system.constraints.slices[tool.name]
        tool_target = result.target[:, sl]
        tool_xyz = tool_target + result.phi[:, sl]
        axes = tuple(r.rsplit(".", 1)[-1] for r in system.rows[sl])
    else:
        tool_target = tool_xyz = None
        axes = ()
    return VariantRun(
        variant=variant,
        robot=robot,
        result=result,
        joints=tuple(j.name for j in shown),
        q=result.q[:, idx],
        tool=tool_xyz,
        tool_target=tool_target,
        tool_axes=axes,
        joint_force=joint_force,
        drive_force=result.tau_programmed[:, idx],
        violation=result.violation(),
        wall_time_s=wall,
    )


def rms_table(runs: Sequence[VariantRun]) -> dict:
    """JSON-ready table: per variant, per actuated joint, RMS of the joint force (N), of its
    fluctuation about the mean (N) and of the drive force (N·m, N), plus the violation's initial, maximum after 1 s and final
    values and the wall time."""
    table = {}
    for run in runs:
        t = run.result.t
        late = t >= t[0] + 1.0
        table[run.variant.name] = {
            "label": run.variant.label,
            "joint_force_rms_N": {n: float(v) for n, v in zip(run.joints, run.joint_force_rms)},
            "joint_force_fluctuation_rms_N": {n: float(v) for n, v in zip(run.joints, run.joint_force_fluctuation_rms)},
            "drive_force_rms": {n: float(v) for n, v in zip(run.joints, run.drive_force_rms)},
            "violation_initial": float(run.violation[0]),
            "violation_max_after_1s": float(run.violation[late].max()) if late.any() else None,
            "violation_final": float(run.violation[-1]),
            "integrator": run.result.integrator,
            "steps": run.result.steps,
            "wall_time_s": run.wall_time_s,
        }
    return table
