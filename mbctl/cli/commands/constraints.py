"""``mbctl constraints``: the constraint analysis of a robot description at its initial state.

Builds the ``[[constraints]]`` of the robot TOML, takes the initial state of
``[simulation]`` (assembled when it says so) and reports the rows per constraint, the
ranks of the holonomic, velocity-level and all rows, the degree of redundancy, the
mobility and, per constraint and tree joint, whether its reaction is uniquely
determined (:func:`mbctl.dynamics.constraints.analysis.analyse_constraints`). ``--json``
writes the same as JSON.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from mbctl.cli.arguments import add_xacro_option, robot_config, xacro_args_of
from mbctl.errors import InputError


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name")
    add_xacro_option(p)
    p.add_argument("--json", type=Path, help="also write the analysis as JSON")
    p.add_argument("--rtol", type=float, help="relative rank tolerance (default: simulation.rank_tolerance)")
    p.add_argument("--joints", action="store_true", help="also list every tree joint's reaction")
    p.set_defaults(run=run)


def format_analysis(a, joints: bool = False) -> str:
    """The lines ``mbctl constraints`` prints for a :class:`ConstraintAnalysis`."""
    lines = [
        f"{a.robot}: {a.coordinates} coordinates, {a.rows} constraint rows at t = {a.t:g} s",
        f"  holonomic rows {a.holonomic_rows} (rank {a.holonomic_rank}), velocity-level rows {a.velocity_rows} "
        f"(rank {a.velocity_rank}), all rows rank {a.rank}",
        f"  redundancy {a.redundancy}, mobility {a.mobility} (without programmed rows {a.mechanism_mobility})"
        + (f"; dependent rows (QR with pivoting): {', '.join(a.dependent_rows)}" if a.dependent_rows else ""),
        f"  {'constraint':<18}{'kind':<24}{'level':<10}{'rows':>5}{'rank':>6}  reaction",
    ]
    level = {2: "position", 1: "velocity", 0: "-"}
    for e in a.constraints:
        kind = e.kind + (" (prog.)" if e.programmed else "")
        lines.append(f"  {e.name:<18}{kind:<24}{level[e.level]:<10}{len(e.rows):>5}{e.rank:>6}  {'unique' if e.unique else 'NOT unique'}")
    if joints:
        lines.append(f"  {'tree joint':<18}reaction")
        lines += [f"  {e.name:<18}{'unique' if e.unique else 'NOT unique'}" for e in a.joints]
    else:
        bad = [e.name for e in a.joints if not e.unique]
        lines.append(f"  tree joints ({len(a.joints)}): " + ("all reactions unique" if not bad else "reactions NOT unique in " + ", ".join(bad)))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from mbctl.dynamics.constraints.analysis import analyse_constraints
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.dynamics.simulation.setup import build_dynamics, initial_state, simulation_setup
    from mbctl.fileio import atomic_output, check_output

    if args.json:
        check_output(args.json, (".json",))
    if args.rtol is not None and not (math.isfinite(args.rtol) and 0 < args.rtol < 1):
        raise InputError(f"must be between 0 and 1, got {args.rtol!r}", field="--rtol")
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    setup = simulation_setup(robot)
    system = build_dynamics(robot, setup)
    q0, _ = initial_state(robot, setup, system)
    analysis = analyse_constraints(system, q0, 0.0, rtol=args.rtol if args.rtol is not None else setup.rank_tolerance)
    print(format_analysis(analysis, joints=args.joints))
    if args.json:
        data = {"config": str(args.config), **analysis.to_dict()}
        with atomic_output(args.json) as tmp:
            tmp.write_text(json.dumps(data, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
