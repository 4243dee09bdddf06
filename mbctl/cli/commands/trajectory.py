"""``mbctl trajectory``: generate trajectory CSVs (quintic rest-to-rest, constant acceleration, the
motion a config's constraints prescribe, excitation, the time-optimal timing of a path, or an
optimal point-to-point motion)."""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import numpy as np

from mbctl.budget import check_disk, check_memory, format_count
from mbctl.cli.arguments import add_xacro_option, budget, robot_config, xacro_args_of
from mbctl.cli.console import warn
from mbctl.ctrl.constrained_path import trajectory_from_constraints
from mbctl.ctrl.keepout import check_trajectory
from mbctl.ctrl.trajectory import (
    Trajectory,
    constant_acceleration,
    csv_bytes,
    limit_violations,
    quintic_rest_to_rest,
    sample_count,
    trajectory_bytes,
    write_trajectory,
)
from mbctl.dynamics.model.robot import RobotModel, load_robot
from mbctl.dynamics.simulation.setup import (
    build_dynamics,
    initial_state,
    simulation_setup,
)
from mbctl.errors import InputError, MbctlError
from mbctl.fileio import check_output
from mbctl.viz.feedforward import plot_trajectory
from mbctl.viz.figures import FORMATS


def parse_numbers(text: str, option: str) -> np.ndarray:
    """``"1, 2.5"`` -> array; rows separated by ``;`` give a 2-D array."""
    try:
        rows = [[float(x) for x in row.split(",")] for row in text.split(";") if row.strip()]
    except ValueError:
        raise InputError(f"expected comma-separated numbers, got {text!r}", field=option) from None
    if not rows or len({len(r) for r in rows}) != 1:
        raise InputError(f"expected rows of equally many numbers, got {text!r}", field=option)
    arr = np.array(rows)
    if not np.isfinite(arr).all():
        raise InputError("values must be finite", field=option)
    return arr if len(rows) > 1 else arr[0]


def add_arguments(p: argparse.ArgumentParser) -> None:
    kinds = p.add_subparsers(dest="kind", required=True, metavar="KIND")

    def common(k: argparse.ArgumentParser, plot_help: str = "also plot q, dq, ddq (.png, .pdf or .svg)") -> None:
        k.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name (gives joint names and limits)")
        add_xacro_option(k)
        k.add_argument("--rate", type=float, default=1000.0, help="sampling rate in Hz (default 1000)")
        k.add_argument("--out", type=Path, required=True, help="trajectory CSV to write")
        k.add_argument("--plot", type=Path, help=plot_help)
        k.set_defaults(run=run)

    q = kinds.add_parser("quintic", help="rest-to-rest quintic moves through joint waypoints")
    common(q)
    q.add_argument("--waypoints", required=True, help='joint positions in rad or m, one row per waypoint: "0,0; 0.5,1.0"')
    q.add_argument("--durations", required=True, help='segment durations in s: "1.5,2"')

    a = kinds.add_parser("accel", help="constant acceleration from rest (the five-axis tree motion)")
    common(a)
    a.add_argument("--acceleration", required=True, help="rad/s² or m/s²: one value for all joints, or one per joint")
    a.add_argument("--duration", type=float, required=True, help="s")
    a.add_argument("--q0", help="start positions (rad or m), one per joint (default: zeros)")

    c = kinds.add_parser(
        "constraints",
        help="the motion the config's [[constraints]] prescribe (closed loops plus programmed paths fixing every DOF)",
    )
    common(c)
    c.add_argument("--duration", type=float, help="s (default: simulation.duration)")

    e = kinds.add_parser(
        "excitation",
        help="periodic Fourier-series motion for identifying the arm, optimised for the regressor's condition number",
    )
    common(e)
    e.set_defaults(run=run_excitation)
    e.add_argument("--harmonics", type=int, required=True, help="harmonics of the base frequency per joint (>= 2)")
    period = e.add_mutually_exclusive_group(required=True)
    period.add_argument("--period", type=float, help="period T in s (base frequency 1/T)")
    period.add_argument("--base-frequency", type=float, help="base frequency in Hz (period 1/f)")
    e.add_argument("--joints", help="comma-separated joints to excite (default: every actuated joint; the others are held mid-range)")
    e.add_argument("--about", metavar="JOINT=Q,...", help="design about this pose, rad or m (joints not named: mid-range), within ranges narrowed until clear of the robot's [keepout] (default: mid-range)")
    e.add_argument("--periods", type=int, default=1, help="periods written, each from rest to rest (default 1)")
    e.add_argument("--acceleration", help="|ddq| limit in rad/s² or m/s²: one value, or one per joint (default 10)")
    e.add_argument("--speed", type=float, default=2.0, help="|dq| limit in rad/s or m/s for joints without a velocity limit (default 2)")
    e.add_argument("--margin", type=float, default=0.1, help="fraction of every limit left free, headroom for tracking errors (default 0.1)")
    e.add_argument("--grid", type=int, help="samples per period in the objective (default max(40, 12 x harmonics))")
    e.add_argument("--seed", type=int, default=0, help="seed of the random starts (default 0)")
    e.add_argument("--starts", type=int, default=1, help="random starts to optimise from, the best kept (default 1)")
    e.add_argument("--max-iterations", type=int, default=200, help="optimiser iterations per round (default 200)")
    e.add_argument(
        "--no-friction", dest="friction", action="store_false",
        help="condition number of the rigid-body base regressor alone (default: with each joint's viscous, Coulomb and offset columns)",
    )


    o = kinds.add_parser(
        "optimal",
        help="time-optimal timing of a joint path under torque (with the friction model), velocity, acceleration and jerk limits",
    )
    common(o, plot_help="also plot the timing (.png, .pdf or .svg): the path speed against the largest speed each kind of limit "
           "allows, and every drive's torque as a fraction of its limit")  # fmt: skip
    o.set_defaults(run=run_optimal)
    source = o.add_mutually_exclusive_group(required=True)
    source.add_argument("--waypoints", help='joint positions in rad or m, one row per waypoint, a cubic spline through them: "0,0; 0.5,1.0"')
    source.add_argument("--path", type=Path, help="CSV of path samples: s, q.<joint>... (interpolated by a cubic spline)")
    source.add_argument(
        "--from-constraints", action="store_true",
        help="the route the config's [[constraints]] trace over simulation.duration (closed loops and programmed paths; "
        "redundant drives share the torques as unknowns of the timing)",
    )  # fmt: skip
    o.add_argument(
        "--joints",
        help="closed chains: the independent coordinates the waypoints or the path file give (as many as the chain has DOF); "
        "the others are assembled on the loops, from simulation.initial",
    )  # fmt: skip
    o.add_argument("--grid", type=int, help="grid intervals along the path (default 1000; 250 with --jerk, whose nonlinear program grows with it)")
    margins(o, "timing")
    o.add_argument("--friction", choices=("full", "coulomb", "none"), default="full",
                   help="friction respected in the torque limits: the robot's whole model (default), Coulomb only, or none")  # fmt: skip
    for name, unit in (("velocity-limit", "rad/s, m/s"), ("acceleration-limit", "rad/s², m/s²"), ("torque-limit", "N·m, N"), ("jerk", "rad/s³, m/s³")):
        default = "overrides the run's limit; the scaling scales it" if name in ("velocity-limit", "torque-limit") else "default: none"
        o.add_argument(f"--{name}", help=f"{unit}: one value for every joint or joint=value,... ({default})")
    o.add_argument("--solver", choices=("reachability", "highs"), default="reachability", help="linear solves: TOPP-RA passes (default) or HiGHS LP")

    p2p = kinds.add_parser(
        "ocp", help="point-to-point motion, rest to rest, optimal (minimum time or effort) under the full model and every limit",
    )  # fmt: skip
    common(p2p)
    p2p.set_defaults(run=run_ocp)
    p2p.add_argument("--from", dest="start", required=True, help="start positions (rad or m), one per joint")
    p2p.add_argument("--to", dest="end", required=True, help="end positions (rad or m), one per joint")
    p2p.add_argument("--objective", choices=("time", "energy"), default="time", help="minimum time (default) or minimum effort ∫ Σ tau² dt")
    p2p.add_argument("--duration", type=float, help="s (with --objective energy)")
    p2p.add_argument("--knots", type=int, default=40, help="shooting intervals (default 40)")
    margins(p2p, "motion", move=True)
    p2p.add_argument(
        "--best-effort", type=Path, metavar="CSV",
        help="when the solver stops without a motion (nothing goes to --out then), write its last iterate here, in the trajectory "
        "format for inspection: it need not reach --to, and its speeds need not match its positions",
    )  # fmt: skip


def margins(p: argparse.ArgumentParser, what: str, *, move: bool = False) -> None:
    """``--torque-scaling`` and ``--velocity-scaling``: their defaults leave the run's feedback room
    (ctrl.limits; ``move``: a minimum-time move's, which leaves more speed). A margin, in every mbctl
    command, is the part of a limit kept free (``commission --torque-margin``, ``excitation --margin``):
    the old ``--torque-margin`` and ``--velocity-margin`` here, the part used, are one-line errors."""
    from mbctl.ctrl.limits import PLANNING_MOVE_VELOCITY_MARGIN, PLANNING_VELOCITY_MARGIN
    from mbctl.ctrl.limits import PLANNING_TORQUE_MARGIN as TORQUE

    SPEED = PLANNING_MOVE_VELOCITY_MARGIN if move else PLANNING_VELOCITY_MARGIN

    p.add_argument("--torque-scaling", dest="torque_margin", type=float, default=TORQUE,
                   help=f"fraction of every torque limit the {what} may use, in (0, 1] (default {TORQUE:g}: the rest is left for the "
                   "feedback of mbctl run, whose limits are planned to: [control] effort, else the joint's)")  # fmt: skip
    p.add_argument("--velocity-scaling", dest="velocity_margin", type=float, default=SPEED,
                   help=f"fraction of every velocity limit the {what} may use, in (0, 1] (default {SPEED:g}: mbctl run stops at the "
                   "limit itself, and tracking overshoots a profile that rides it)")  # fmt: skip
    for old, new in (("--torque-margin", "--torque-scaling"), ("--velocity-margin", "--velocity-scaling")):
        p.add_argument(old, action=Renamed, new=new, help=argparse.SUPPRESS)


class Renamed(argparse.Action):
    """An option's old spelling: a one-line error (exit 2) naming the new one."""

    def __init__(self, option_strings: list[str], dest: str, new: str, **kwargs: object):
        super().__init__(option_strings, dest, **kwargs)
        self.new = new

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: object, option_string: str | None = None) -> None:
        raise InputError(f"is {self.new} here ({self.new} {values} uses that fraction of each limit); a margin, in every mbctl command, "
                         f"is the fraction kept free", field=option_string)


SCALING = {"torque_margin": "--torque-scaling", "velocity_margin": "--velocity-scaling"}
"""The library's names of the scalings -> their options."""


def check_size(args: argparse.Namespace, duration: float, joints: int, field: str) -> None:
    """Refuse, before sampling, a trajectory that would not fit the memory budget or its CSV the disk."""
    if not math.isfinite(args.rate):
        raise InputError(f"must be a finite number of Hz, got {args.rate!r}", field="--rate")
    if not (duration > 0 and args.rate > 0):
        return  # not a size: the generator says what is wrong
    samples = sample_count(duration, args.rate)
    what = f"the trajectory ({format_count(samples)} samples at {args.rate:g} Hz)"
    check_memory(trajectory_bytes(samples, joints), budget(args), what=what, field=field)
    check_disk(csv_bytes(samples, joints), args.out, what=what, field=field)


def check_excitation_size(args: argparse.Namespace, robot: RobotModel, period: float, period_option: str) -> None:
    """Refuse, before the design starts, an excitation whose trajectory (``--periods`` x ``--period`` x
    ``--rate`` samples) or optimisation would not fit the memory budget.

    The optimisation has ``N = n (2 L - 1) + 1`` variables for ``n`` excited joints and ``L`` harmonics,
    and about ``G (2 nv + 6 n)`` limit constraints on a grid of ``G`` samples per period: SLSQP's
    work space and the constraint Jacobians hold about ``3 N^2 + 4 N G (2 nv + 6 n)`` doubles.
    """
    if period > 0 and isinstance(args.periods, int) and args.periods >= 1:
        field = period_option if args.periods == 1 else f"{period_option} x --periods"
        check_size(args, period * args.periods, robot.nv, field)
    harmonics = args.harmonics
    grid = max(40, 12 * harmonics) if args.grid is None else args.grid
    if harmonics < 2 or grid < 1:
        return  # not a size: the design says what is wrong
    joints = len(args.joints.split(",")) if args.joints else len(robot.actuated_names)
    variables = joints * (2.0 * harmonics - 1.0) + 1.0
    solver, limits = 8.0 * 3.0 * variables**2, 8.0 * 4.0 * variables * grid * (2 * robot.nv + 6 * joints)
    field = "--grid" if args.grid is not None and limits > solver else "--harmonics"
    what = f"the optimisation ({format_count(variables)} variables, {format_count(grid)} samples per period)"
    check_memory(solver + limits, budget(args), what=what, field=field)


def from_constraints(args: argparse.Namespace, robot: RobotModel) -> Trajectory:
    """Sample the constrained motion; the start is ``simulation.initial`` (assembled)."""
    setup = simulation_setup(robot)
    duration = setup.duration if args.duration is None else args.duration
    if not duration > 0 or not args.rate > 0:
        raise InputError("--duration and --rate must be > 0")
    check_size(args, duration, robot.nv, "--duration" if args.duration is not None else "simulation.duration")
    dynamics = build_dynamics(robot, setup)
    q0, _ = initial_state(robot, setup, dynamics)
    t = np.linspace(0.0, duration, int(np.ceil(duration * args.rate - 1e-9)) + 1)
    return trajectory_from_constraints(dynamics, t, q0)


def build(args: argparse.Namespace, names: tuple[str, ...]) -> Trajectory:
    n = len(names)
    if args.kind == "quintic":
        waypoints = np.atleast_2d(parse_numbers(args.waypoints, "--waypoints"))
        if waypoints.shape[1] != n:
            raise InputError(f"each waypoint needs {n} values ({', '.join(names)})", field="--waypoints")
        durations = np.atleast_1d(parse_numbers(args.durations, "--durations"))
        check_size(args, float(durations.sum()) if (durations > 0).all() else 0.0, n, "--durations")
        return quintic_rest_to_rest(waypoints, durations, args.rate, names)
    acc = np.atleast_1d(parse_numbers(args.acceleration, "--acceleration"))
    acc = np.full(n, acc[0]) if acc.size == 1 else acc
    q0 = np.zeros(n) if args.q0 is None else np.atleast_1d(parse_numbers(args.q0, "--q0"))
    if acc.shape != (n,) or q0.shape != (n,):
        raise InputError(f"--acceleration and --q0 need 1 or {n} values ({', '.join(names)})")
    check_size(args, args.duration, n, "--duration")
    return constant_acceleration(q0, acc, args.duration, args.rate, names)


def run(args: argparse.Namespace) -> int:
    check_output(args.out)
    if args.plot:
        check_output(args.plot, FORMATS)
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    traj = from_constraints(args, robot) if args.kind == "constraints" else build(args, robot.joint_names)
    for message in limit_violations(robot, traj):
        warn(message)
    check_trajectory(robot, traj, f"the {args.kind} trajectory")
    write_trajectory(args.out, traj)
    if args.plot:
        plot_trajectory(traj, args.plot, title=f"{robot.name}: {args.kind} trajectory")
    print(f"wrote {args.out}: {len(traj)} samples over {traj.duration:.3f} s")
    return 0


def run_excitation(args: argparse.Namespace) -> int:
    """``mbctl trajectory excitation``: design, check against the limits, write."""
    import time

    from mbctl.cli.console import ProgressPrinter
    from mbctl.ctrl.excitation import design_excitation
    from mbctl.ctrl.keepout_excitation import excitation_clear_of_keepout

    check_output(args.out)
    if args.plot:
        check_output(args.plot, FORMATS)
    if args.base_frequency is not None and not (math.isfinite(args.base_frequency) and args.base_frequency > 0):
        raise InputError(f"must be a finite number > 0 Hz, got {args.base_frequency}", field="--base-frequency")
    period = 1.0 / args.base_frequency if args.base_frequency is not None else args.period
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    check_excitation_size(args, robot, period, "--base-frequency" if args.base_frequency is not None else "--period")
    joints = None if args.joints is None else [n.strip() for n in args.joints.split(",") if n.strip()]
    acceleration = None if args.acceleration is None else np.atleast_1d(parse_numbers(args.acceleration, "--acceleration"))
    if acceleration is not None and acceleration.size not in (1, robot.nv):
        raise InputError(f"needs 1 or {robot.nv} values ({', '.join(robot.joint_names)})", field="--acceleration")
    about = None
    if args.about is not None:
        given = joint_values(args.about, robot, "--about")
        for name in given:
            if name not in robot.joint_names:
                raise InputError(f"no joint {name!r} in robot {robot.name} (joints: {', '.join(robot.joint_names)})", field="--about")
        about = np.array([given.get(j.name, 0.5 * (j.limits.lower + j.limits.upper) if math.isfinite(j.limits.lower + j.limits.upper) else 0.0) for j in robot.joints])
    start = time.perf_counter()
    try:
        result = excitation_clear_of_keepout(robot, lambda r: design_excitation(
            r, harmonics=args.harmonics, period=period, joints=joints, rate_hz=args.rate, periods=args.periods,
            grid=args.grid, acceleration=acceleration, speed=args.speed, margin=args.margin, friction=args.friction,
            seed=args.seed, starts=args.starts, max_iterations=args.max_iterations,
            progress=ProgressPrinter("excitation", min_total=1, unit="iterations"),
        ), about, motion="the excitation trajectory", progress=warn).excitation
    except InputError as exc:
        if exc.field is None or exc.file is not None or exc.field == "limits":
            raise
        raise InputError(exc.reason, field=f"--{exc.field.replace('_', '-')}") from None
    wall = time.perf_counter() - start
    traj = result.trajectory
    print(
        f"{robot.name}: {len(result.joint_names)} joints excited, {result.harmonics} harmonics, period {result.period:.4g} s: "
        f"condition number {result.condition_initial:.4g} (random start) -> {result.condition:.4g} "
        f"in {result.iterations} iterations, {result.rounds} round(s){f', best of {result.starts} starts' if result.starts > 1 else ''}, {wall:.1f} s"
    )
    print("  limits used: " + ", ".join(f"{kind} {100 * used:.0f} %" for kind, used in result.usage.items()))
    if result.held:
        print("  held: " + ", ".join(f"{name} = {value:.4g}" for name, value in result.held.items()))
    if not result.converged:
        warn(f"the optimiser stopped before converging ({result.message}); the trajectory keeps to the limits")
    write_trajectory(args.out, traj)
    if args.plot:
        plot_trajectory(traj, args.plot, title=f"{robot.name}: excitation, condition number {result.condition:.3g}")
    print(f"wrote {args.out}: {len(traj)} samples over {traj.duration:.3f} s")
    return 0


def joint_values(text: str | None, robot: RobotModel, option: str) -> dict[str, float] | None:
    """``"2.0"`` (every joint) or ``"j1=2,j3=1.5"`` -> {joint: value}; None for no option."""
    if text is None:
        return None
    if "=" not in text:
        return dict.fromkeys(robot.joint_names, float(parse_numbers(text, option).ravel()[0]))
    out = {}
    for item in filter(None, (x.strip() for x in text.split(","))):
        name, _, value = item.partition("=")
        try:
            out[name.strip()] = float(value)
        except ValueError:
            raise InputError(f"expected joint=value, got {item!r}", field=option) from None
    return out


def run_optimal(args: argparse.Namespace) -> int:
    """``mbctl trajectory optimal``: solve, check at the output rate, write, report."""
    from mbctl.ctrl.limits import check_positions
    from mbctl.ctrl.timing import optimal_timing, read_path, spline_path, timing_limits
    from mbctl.viz.timing import plot_timing

    check_output(args.out)
    if args.plot:
        check_output(args.plot, FORMATS)
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    if args.grid is None:
        args.grid = 250 if args.jerk is not None else 1000
    if not 2 <= args.grid <= 100_000:
        raise InputError(f"must be in [2, 100000], got {args.grid}", field="--grid")
    try:
        limits = timing_limits(
            robot, torque_margin=args.torque_margin, velocity_margin=args.velocity_margin, friction=args.friction,
            **{key: joint_values(getattr(args, attr), robot, f"--{attr.replace('_', '-')}")
               for key, attr in (("velocity", "velocity_limit"), ("acceleration", "acceleration_limit"), ("torque", "torque_limit"), ("jerk", "jerk"))},
        )  # fmt: skip
    except InputError as exc:
        if exc.field in ("velocity", "acceleration", "torque", "jerk", "torque_margin", "velocity_margin"):
            option = {"velocity": "--velocity-limit", "acceleration": "--acceleration-limit", "torque": "--torque-limit", **SCALING}.get(exc.field, f"--{exc.field}")
            raise InputError(exc.reason, field=option) from None
        raise
    closed = not all(j.actuated for j in robot.joints)
    if args.joints is not None and not closed:
        raise InputError("names independent coordinates of closed chains; give every joint of a serial arm", field="--joints")
    names = robot.joint_names if args.joints is None else tuple(n.strip() for n in args.joints.split(",") if n.strip())
    for name in names:
        if name not in robot.joint_names:
            raise InputError(f"no joint {name!r} in robot {robot.name} (joints: {', '.join(robot.joint_names)})", field="--joints")
    if args.waypoints is not None:
        waypoints = np.atleast_2d(parse_numbers(args.waypoints, "--waypoints"))
        if waypoints.shape[1] != len(names) or waypoints.shape[0] < 2:
            raise InputError(f"needs at least 2 rows of {len(names)} values ({', '.join(names)})", field="--waypoints")
        check_positions(robot, waypoints, names, pose="at waypoint {}", field="--waypoints")
        path = spline_path(waypoints, names)
    elif args.from_constraints:
        from mbctl.ctrl.timing.programmed import path_from_constraints

        path = path_from_constraints(robot)
    else:
        path = read_path(args.path, names)
    if args.joints is not None:
        from mbctl.ctrl.timing.programmed import initial_guess, path_on_loops

        try:
            path = path_on_loops(robot, path, initial_guess(robot))
        except InputError as exc:
            raise InputError(exc.reason, field=f"--{exc.field}") from None
    try:
        result = optimal_timing(robot, path, limits, grid=args.grid, rate_hz=args.rate, solver="highs" if closed else args.solver)
    except InputError as exc:
        if exc.file is None and exc.field in ("rate", "grid"):
            raise InputError(exc.reason, field=f"--{exc.field}") from None
        if exc.file is None and exc.field == "path":  # the path as given: the option or file it came from
            source = {"file": args.path} if args.path is not None else {"field": "--waypoints" if args.waypoints is not None else "--from-constraints"}
            raise type(exc)(exc.reason, **source) from None
        raise
    check_trajectory(robot, result.trajectory, "the optimal trajectory")
    write_trajectory(args.out, result.trajectory)
    if args.plot:
        plot_timing(result, args.plot, title=f"{robot.name}: time-optimal timing")
    print(
        f"{robot.name}: {result.duration:.4f} s along the path ({args.grid} grid intervals, friction {args.friction}, "
        f"torque scaling {args.torque_margin:g}, velocity scaling {args.velocity_margin:g}), computed in {result.solve_time:.2f} s "
        f"({result.iterations} solves, {result.refinements} refinements)"
    )
    print("  active limits: " + ", ".join(f"{k} {100 * v:.0f} %" for k, v in result.active_fractions().items()))
    if closed:
        print("  drive torques distributed by the timing's LP (checked: the least-loaded distribution at every sample)")
    print(f"  worst |value| / limit at {args.rate:g} Hz: " + ", ".join(f"{k} {v:.4f}" for k, v in result.ratios.items()))
    if args.friction != "full":
        print("  under the full friction model: " + ", ".join(f"{k} {v:.4f}" for k, v in result.ratios_full.items()))
    if limits.jerk is not None:
        print("  peak jerk: " + ", ".join(f"{n} {v:.4g}" for n, v in zip(robot.joint_names, result.peak_jerk)))
    print(f"wrote {args.out}: {len(result.trajectory)} samples over {result.trajectory.duration:.3f} s")
    if not result.held:
        warn(f"degraded: {result.message}; the trajectory exceeds a limit by more than {100 * result.tolerance:g} %")
        return 3
    return 0


def run_ocp(args: argparse.Namespace) -> int:
    """``mbctl trajectory ocp``: solve, check by feed-forward at the output rate, write, report."""
    from mbctl.cli.console import ProgressPrinter
    from mbctl.ctrl.optimal import solve_point_to_point

    check_output(args.out)
    if args.plot:
        check_output(args.plot, FORMATS)
    if args.best_effort is not None:
        check_output(args.best_effort)
        if args.best_effort.resolve() == args.out.resolve():
            raise InputError("must not be --out: a result goes there only when it is a motion", field="--best-effort")
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    q0, q1 = (np.atleast_1d(parse_numbers(text, option)) for text, option in ((args.start, "--from"), (args.end, "--to")))
    if args.duration is not None:
        check_size(args, args.duration, robot.nv, "--duration")
    progress = ProgressPrinter("ocp", min_total=1, unit="solves")
    try:
        result = solve_point_to_point(
            robot, q0, q1, objective=args.objective, duration=args.duration, knots=args.knots, rate_hz=args.rate,
            torque_margin=args.torque_margin, velocity_margin=args.velocity_margin, progress=progress,
        )  # fmt: skip
    except InputError as exc:
        if exc.file is None and exc.field in ("from", "to", "duration", "knots", "rate", "objective", "torque_margin", "velocity_margin"):
            raise type(exc)(exc.reason, field=SCALING.get(exc.field, f"--{exc.field}")) from None
        raise
    finally:
        progress.end()  # fewer solves than at most: the next line is a line of its own
    sol = result.solution
    if not sol.success:
        kept = ""
        if args.best_effort is not None:
            write_trajectory(args.best_effort, result.trajectory)
            kept = f"; its last iterate is in {args.best_effort}"
        raise MbctlError(f"no motion found: {_failure(robot, result, q1)}; nothing written to {args.out}{kept}")
    check_trajectory(robot, result.trajectory, "the ocp trajectory")
    write_trajectory(args.out, result.trajectory)
    if args.plot:
        plot_trajectory(result.trajectory, args.plot, title=f"{robot.name}: {args.objective}-optimal point to point")
    print(
        f"{robot.name}: {args.objective}-optimal, {sol.duration:.4f} s, cost {sol.cost:.6g} ({args.knots} intervals, "
        f"torque scaling {args.torque_margin:g}, velocity scaling {args.velocity_margin:g}, "
        f"{result.rounds} solve(s), {sol.iterations} IPOPT iterations in the last, {result.solve_time:.2f} s)"
    )
    print(f"  worst |value| / limit at {args.rate:g} Hz (feed-forward, full model): " + ", ".join(f"{k} {v:.4f}" for k, v in result.worst.items()))
    print(f"wrote {args.out}: {len(result.trajectory)} samples over {result.trajectory.duration:.3f} s")
    if not result.held:
        warn(f"degraded: a limit is exceeded by more than {100 * result.tolerance:g} % between the knots")
        return 3
    return 0


def _failure(robot: RobotModel, result, q1: np.ndarray) -> str:  # noqa: ANN001  (a PointToPoint)
    """Why a solve gave no motion: IPOPT's status, and how far its last iterate is from one (where its
    motion, integrated from the start, ends against ``q1``; the largest torque it asks against the limits)."""
    sol = result.solution
    miss = np.abs(result.trajectory.q[-1] - q1)
    k = int(np.argmax(miss))
    unit = "m" if robot.joints[k].kind == "prismatic" else "rad"
    torque = result.worst["torque"]
    return (
        f"IPOPT stopped at {sol.status} after {sol.iterations} iterations; its last iterate's motion ends {miss[k]:.3g} {unit} from --to "
        f"at {robot.joint_names[k]} and asks {torque:.3g} times a torque limit{' (the limits may be out of reach)' if torque > 1 else ''}"
    )
