"""``mbctl identify``: friction experiments on a joint (``run``) and fits of their logs (``fit``)."""

from __future__ import annotations

import argparse
import json
import math
import tempfile
from pathlib import Path

from mbctl.cli.arguments import add_bag_arguments, add_xacro_option, bag_options, budget, robot_config, xacro_args_of
from mbctl.cli.console import warn
from mbctl.errors import InputError
from mbctl.fileio import atomic_output, check_output
from mbctl.identification.fitting import STATIC_LAWS
from mbctl.identification.servo import LAWS as SERVO_LAWS
from mbctl.viz.figures import FORMATS

# Each step imports its own stack when it runs: fitting a log needs neither pinocchio
# nor the hardware layer.


def _floats(text: str) -> list[float]:
    try:
        return [float(x) for x in text.replace(";", ",").split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None


def _names(text: str) -> tuple[str, ...]:
    return tuple(x.strip() for x in text.split(",") if x.strip())


def add_arguments(p: argparse.ArgumentParser) -> None:
    isub = p.add_subparsers(dest="identify_command", required=True, metavar="STEP")

    r = isub.add_parser(
        "run",
        help="constant-speed (and presliding) experiments on one joint",
        description="Drive one joint through the constant-speed test (and, with --presliding, the presliding and "
        "break-away test) with host-side loops in torque mode; the other joints are held. Writes LOG.csv "
        "(t, q, dq, tau, dq_ref, tau_g) and PRE.csv (t, q, dq, tau, test). Plan: [identification] in the TOML.",
    )
    r.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name ([identification], [plant] or [drives])")
    add_xacro_option(r)
    r.add_argument("--joint", required=True, help="joint to test")
    r.add_argument("--plant", choices=("sim", "dynamixel"), default="sim", help="simulated plant (default) or Dynamixel drives")
    r.add_argument("--port", help="serial device of the Dynamixel bus (default: drives.port)")
    r.add_argument("--emulate", action="store_true", help="with --plant dynamixel: serve the bus from an emulator of the [plant] truth")
    r.add_argument("--lockstep", action="store_true", help="sim only: one plant period per cycle, as fast as possible")
    r.add_argument("--out", type=Path, help="constant-speed log to write (LOG.csv)")
    r.add_argument("--presliding", type=Path, help="also run the presliding / break-away test and write its log (PRE.csv)")
    r.add_argument("--log", type=Path, help="keep the loop's full log of the constant-speed test (.npz)")
    r.add_argument("--rate", type=float, help="loop rate in Hz (default identification.rate_hz, 1000)")
    r.add_argument("--speeds", type=_floats, help="explicit speeds, comma-separated (rad/s, m/s)")
    r.add_argument("--count", type=int, help="number of speeds of the grid")
    r.add_argument("--min-speed", type=float, help="slowest speed of the grid")
    r.add_argument("--max-speed", type=float, help="fastest speed of the grid")
    r.add_argument("--range", type=_floats, help="positions travelled, LO,HI (rad, m)")
    r.add_argument("--settle", type=float, help="hold at the ends of a leg, s")
    r.add_argument("--max-leg", type=float, help="longest constant-speed leg, s")
    r.add_argument("--randomize", action="store_true", default=None, help="shuffle the speed order (against thermal drift)")
    r.add_argument("--seed", type=int, help="seed of the shuffle")
    r.set_defaults(run=run_experiments)

    f = isub.add_parser(
        "fit",
        help="fit a friction law to a constant-speed log",
        description="Process LOG.csv (columns t, q, dq, tau; optional dq_ref, tau_g; SI units) into friction points and "
        "fit a law; with --presliding PRE.csv (t, q, dq, tau, test) also sigma0, sigma1 and the break-away torque. "
        "Prints the report and the [joints.<joint>.friction] table.",
    )
    f.add_argument("log", type=Path, help="constant-speed log (LOG.csv), or a ROS 2 bag of the joint's JointState messages")
    f.add_argument("--law", choices=STATIC_LAWS, required=True, help="law to fit")
    f.add_argument("--joint", required=True, help="name of the joint in the robot TOML (the table's name)")
    f.add_argument("--presliding", type=Path, help="presliding / break-away log (PRE.csv)")
    add_bag_arguments(f)
    f.add_argument("--delta", default="2", help="Stribeck exponent: a number (default 2) or 'free'")
    f.add_argument("--settle", type=float, default=0.2, help="transient dropped at the start of each segment, s (default 0.2; use the run's settle_s)")
    f.add_argument("--asymmetric", action="store_true", help="also fit each direction (needs a tau_g column)")
    f.add_argument("--sigma1", type=float, help="lugre: sigma1 to write if the log cannot determine it")
    f.add_argument("--config", type=robot_config, help="robot TOML file or bundled robot name: --out becomes a copy of it with the new friction")
    add_xacro_option(f)
    f.add_argument("--out", type=Path, help="TOML to write: the friction table, or with --config the robot copy (default: print)")
    f.add_argument("--force", action="store_true", help="overwrite an existing --out")
    f.add_argument("--summary", type=Path, help="JSON summary to write")
    f.add_argument("--plot", type=Path, help="figure of the fit (PNG, PDF, SVG)")
    f.set_defaults(run=fit_logs)

    s = isub.add_parser(
        "logs",
        help="fit a position-controlled servo (motor, firmware loop, friction) to logs of ordinary motions",
        description="Simulate each log open loop from its first sample with the logged goal positions as input and fit "
        "the motor, the armature and the friction law to the measured positions (least squares, exact Jacobian, "
        "several starts). LOG: a BAM-format JSON log (.json or .json.gz), the name of bundled logs "
        "(xl330-pendulum), optionally with @kp=N to keep those of one firmware gain, an mbctl run log (.npz) of "
        "a position-mode run, or a ROS 2 bag with measured (--topic) and goal (--goal-topic) JointState positions "
        "(both need --config and --joint: the bench and the firmware come from the robot). "
        "With --write-back, writes a copy of the robot TOML with the fitted [joints.<joint>.actuator]. Model and "
        "units: mbctl.dynamics.actuator, mbctl.identification.servo.",
    )
    s.add_argument("logs", nargs="+", metavar="LOG", help="logs to fit")
    s.add_argument("--validate", nargs="+", default=[], metavar="LOG", help="held-out logs: errors reported, not fitted")
    s.add_argument("--law", choices=tuple(SERVO_LAWS), default="stribeck-load", help="friction law (default stribeck-load)")
    s.add_argument("--starts", type=int, default=3, help="optimiser starts (default 3)")
    s.add_argument("--offset", action="store_true", help="also fit an encoder offset (rad)")
    s.add_argument("--stall", type=_names, default=("auto",), metavar="NAME[,NAME]",
                   help="also fit what bounds the torque at stall: current_limit (A), supply_resistance (ohm), torque_saturation (N m), "
                        "comma-separated; none; auto (default): torque_saturation, fitted where the logs ask for half the duty or "
                        "more in 1 %% of their samples, else held at the data sheet's value (if the logs name a known servo)")
    s.add_argument("--datasheet", choices=("auto", "none"), default="auto",
                   help="auto (default): where the logs name a known servo (XL330), hold R at its data sheet's stall resistance "
                        "(position logs cannot tell kt from R); none: fit R within its bounds")
    s.add_argument("--out", type=Path, help="fitted parameters and errors to write (.json)")
    s.add_argument("--plot", type=Path, help="measured against simulated position per log (.png, .pdf or .svg)")
    s.add_argument("--config", type=robot_config, help="robot TOML of the bench (one joint with a servo): for .npz logs and --write-back")
    add_xacro_option(s)
    s.add_argument("--joint", help="the servo's joint in --config")
    add_bag_arguments(s)
    s.add_argument("--goal-topic", default="/joint_commands", help="a bag's JointState topic of goal positions (default /joint_commands)")
    s.add_argument("--write-back", type=Path, metavar="COPY.toml", help="write a copy of --config with the fitted [joints.<joint>.actuator]")
    s.add_argument("--force", action="store_true", help="overwrite an existing --write-back file")
    s.set_defaults(run=fit_servo_logs)

    d = isub.add_parser(
        "dynamics",
        help="identify a whole arm's inertial parameters and joint friction from logs of its motion",
        description="Fit every body's inertial parameters (physically consistent: positive definite pseudo-inertia) and "
        "each joint's friction to logs of the arm's motion (CSV: t, q.<joint>, optional dq.<joint>, tau.<joint>; "
        "an mbctl run log .npz; or a ROS 2 bag of sensor_msgs/msg/JointState: directory, .mcap or .db3). The logs are resampled, filtered (zero phase) and differentiated first. Prints the "
        "fit against the unconstrained least squares; --write-back writes a copy of the robot with the identified "
        "[joints.<joint>.inertial], [joints.<joint>] armature and [joints.<joint>.friction]. Model: mbctl.identification.arm_fit.",
    )
    d.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name: its inertials are the prior")
    add_xacro_option(d)
    d.add_argument("logs", nargs="+", type=Path, metavar="LOG", help="logs to fit (.csv, .npz, or a ROS 2 bag)")
    d.add_argument("--validate", nargs="+", default=[], type=Path, metavar="LOG", help="held-out logs: errors reported, not fitted")
    d.add_argument("--holdout", type=float, metavar="FRACTION", help="keep the last FRACTION of each log back and report its errors (e.g. 0.3)")
    d.add_argument("--friction", choices=("coulomb-viscous", "stribeck", "none"), default="coulomb-viscous", help="friction law per joint (default coulomb-viscous)")
    d.add_argument("--regularisation", type=float, default=1e-2, help="weight of the pull toward the robot's own inertials (default 1e-2)")
    d.add_argument(
        "--offsets", choices=("none", "separable", "all"), default="none",
        help="constant torque-sensor biases to fit (reported, not written back): on no joint (default), on the joints where they "
        "are separable from gravity, or on all",
    )
    d.add_argument("--payload", action="store_true", help="identify only a payload on the last body; the rest of the arm keeps the robot's inertials")
    d.add_argument(
        "--armature", choices=("fit", "keep"),
        help="each joint's reflected rotor inertia: identify it (the default, but with --payload) or keep the robot's",
    )
    d.add_argument("--rate", type=float, default=1000.0, help="resampling rate, Hz (default 1000)")
    d.add_argument("--cutoff", type=float, default=20.0, help="low-pass of q, dq and tau, Hz (default 20)")
    d.add_argument(
        "--fit-cutoff", type=float, default=5.0,
        help="low-pass of the fit's regressor columns and torques alike, and of the acceleration of held-out logs, Hz (default 5)",
    )
    d.add_argument("--velocity", choices=("auto", "logged", "differentiated"), default="auto", help="dq: logged where present (auto, default) or the derivative of q")
    add_bag_arguments(d)
    d.add_argument("--out", type=Path, help="the fit to write (.json)")
    d.add_argument("--plot", type=Path, help="measured against predicted torques (.png, .pdf or .svg)")
    d.add_argument("--write-back", type=Path, metavar="COPY.toml", help="write a copy of the robot TOML with the identified inertials and friction")
    d.add_argument("--force", action="store_true", help="overwrite an existing --write-back file")
    d.set_defaults(run=fit_arm_logs)


# memory of one speed of a constant-speed plan and its timeline (bytes): the speed, its legs and holds as phase objects
PLAN_BYTES_PER_SPEED = 2048


def check_experiment_size(args: argparse.Namespace, robot, settings) -> None:
    """Refuse, before the plant opens, experiments whose logs would not fit the memory budget or the disk
    (the constant-speed timeline from the configured start; the presliding one)."""
    from mbctl.budget import check_disk, check_memory, format_count
    from mbctl.hardware.loop import run_footprint
    from mbctl.identification.experiments import presliding_timeline
    from mbctl.identification.plan import constant_speed_timeline

    duration = 0.0
    if args.out is not None:
        try:
            duration += constant_speed_timeline(settings.constant_speed, float(settings.start[robot.joint(args.joint).idx_v])).duration
        except ValueError:
            return  # a leg too short: the run says so, naming it
    if args.presliding is not None:
        duration += presliding_timeline(settings.presliding).duration
    given = [o for o, v in (("--rate", args.rate), ("--count", args.count), ("--speeds", args.speeds), ("--min-speed", args.min_speed), ("--max-speed", args.max_speed), ("--max-leg", args.max_leg), ("--settle", args.settle), ("--range", args.range)) if v is not None]
    where = {"field": "/".join(given)} if given else {"file": args.config, "field": "identification"}
    cycles, memory, disk = run_footprint(duration, settings.rate_hz, len(robot.actuated_names))
    what = f"the experiment log ({duration:.4g} s, {format_count(cycles)} cycles at {settings.rate_hz:g} Hz)"
    check_memory(memory, budget(args), what=what, **where)
    check_disk(disk, args.log if args.log is not None else args.out or args.presliding, what=what, **where)


def run_experiments(args: argparse.Namespace) -> int:
    from mbctl.cli.commands.run import format_run
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.hardware.session import SessionOptions, open_backend
    from mbctl.identification.config import identification_settings
    from mbctl.identification.experiments import ExperimentController, presliding_timeline, run_experiment
    from mbctl.identification.logs import write_constant_speed_log, write_presliding_log
    from mbctl.identification.plan import constant_speed_timeline

    if args.out is None and args.presliding is None:
        raise InputError("nothing to do: give --out LOG.csv and/or --presliding PRE.csv", field="--out")
    for path in (args.out, args.presliding):
        if path is not None:
            check_output(path, (".csv",))
    if args.log is not None:
        check_output(args.log, (".npz",))
    if args.lockstep and args.plant != "sim":
        raise InputError("lock-step needs the simulated plant", field="--lockstep")
    if args.rate is not None and not (math.isfinite(args.rate) and args.rate > 0):
        raise InputError(f"must be a finite number > 0, got {args.rate!r}", field="--rate")
    if args.range is not None and len(args.range) != 2:
        raise InputError("needs two numbers LO,HI", field="--range")
    if args.count is not None:  # the plan itself first: a speed is a few phase objects before any cycle
        from mbctl.budget import check_memory

        check_memory(args.count * PLAN_BYTES_PER_SPEED, budget(args), what=f"the plan ({args.count} speeds)", field="--count")
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    if args.joint not in robot.joint_names:
        raise InputError(f"no joint {args.joint!r} (joints: {', '.join(robot.joint_names)})", field="--joint")
    overrides = {
        "rate_hz": args.rate, "speeds": args.speeds, "count": args.count, "min_speed": args.min_speed,
        "max_speed": args.max_speed, "range": args.range, "settle_s": args.settle, "max_leg_s": args.max_leg,
        "randomize": args.randomize, "seed": args.seed,
    }
    settings = identification_settings(robot, args.joint, overrides)
    if args.out is not None and settings.constant_speed is None:
        raise InputError(settings.constant_speed_problem, file=args.config, field="identification")
    if args.presliding is not None and settings.presliding is None:
        raise InputError(settings.presliding_problem, file=args.config, field="identification")
    q0 = settings.start
    check_experiment_size(args, robot, settings)
    options = SessionOptions(plant=args.plant, rate_hz=settings.rate_hz, lockstep=args.lockstep, port=args.port, emulate=args.emulate)
    k = robot.actuated_names.index(args.joint)
    paced = not (args.plant == "sim" and args.lockstep)
    status = 0
    with tempfile.TemporaryDirectory() as tmp:
        if args.out is not None:
            plan = settings.constant_speed
            npz = args.log if args.log is not None else Path(tmp) / "constant_speed.npz"
            with open_backend(robot, options, q0) as backend:
                # the plan starts where the joint is (a transit takes it to the range)
                timeline = constant_speed_timeline(plan, float(backend.read().q[k]))
                print(f"constant-speed test of {args.joint}: {len(plan.speeds)} speeds {min(plan.speeds):.4g} .. {max(plan.speeds):.4g}, "
                      f"range {plan.range[0]:.4g} .. {plan.range[1]:.4g}, {timeline.duration:.1f} s at {settings.rate_hz:g} Hz", flush=True)
                controller = ExperimentController(robot, args.joint, timeline, settings.gains)
                run = run_experiment(backend, robot, controller, rate_hz=settings.rate_hz, paced=paced, npz_path=npz, kind="constant-speed")
            print(format_run(run.summary))
            write_constant_speed_log(args.out, run.constant_speed)
            print(f"wrote {args.out} ({len(run.constant_speed.t)} samples)")
            status |= run.summary.stop_reason != "completed"
        if args.presliding is not None and not status:
            plan = settings.presliding
            timeline = presliding_timeline(plan)
            print(f"presliding test of {args.joint}: expected break-away {plan.breakaway:.4g}, cycle to {plan.amplitude:g}x, "
                  f"steps of {plan.step:g}x, ramps at {', '.join(f'{r:g}' for r in plan.ramp_rates)}x/s, {timeline.duration:.1f} s", flush=True)
            controller = ExperimentController(robot, args.joint, timeline, settings.gains, plan)
            with open_backend(robot, options, q0) as backend:
                run = run_experiment(backend, robot, controller, rate_hz=settings.rate_hz, paced=paced, npz_path=Path(tmp) / "presliding.npz", kind="presliding")
            print(format_run(run.summary))
            for note in run.notes:
                warn(note)
            write_presliding_log(args.presliding, run.presliding)
            print(f"wrote {args.presliding} ({len(run.presliding.t)} samples)")
            status |= run.summary.stop_reason != "completed"
    return int(status)


def fit_logs(args: argparse.Namespace) -> int:
    from mbctl.identification.logs import read_constant_speed_log, read_presliding_log
    from mbctl.identification.pipeline import identify
    from mbctl.identification.report import format_report, friction_table, result_json, write_friction_file, write_robot_copy

    if args.delta == "free":
        delta = None
    else:
        try:
            delta = float(args.delta)
        except ValueError:
            raise InputError(f"must be a number or 'free', got {args.delta!r}", field="--delta") from None
        if not delta > 0:
            raise InputError("must be > 0", field="--delta")
    if args.law != "stribeck" and delta != 2.0:
        raise InputError(f"applies to the stribeck law only (lugre's steady state has delta = 2), not {args.law}", field="--delta")
    if args.out is not None:
        check_output(args.out, (".toml",))
        if args.out.exists() and not args.force:
            raise InputError("exists; choose another file or pass --force", file=args.out)
        if args.config is not None and args.out.resolve() == args.config.resolve():
            raise InputError("will not overwrite the robot's own TOML; write the copy elsewhere", file=args.out)
    if args.summary is not None:
        check_output(args.summary, (".json",))
    if args.plot is not None:
        check_output(args.plot, FORMATS)
    if args.sigma1 is not None and not args.sigma1 >= 0:
        raise InputError("must be >= 0", field="--sigma1")
    if args.config is not None:
        from mbctl.dynamics.model.robot import load_robot

        robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    else:
        robot = None
    if robot is not None and args.joint not in robot.joint_names:
        raise InputError(f"no joint {args.joint!r} in the robot (joints: {', '.join(robot.joint_names)})", file=args.config, field="--joint")
    log = read_constant_speed_log(args.log, args.joint, bag_options(args))
    pre = read_presliding_log(args.presliding) if args.presliding is not None else None
    result = identify(log, args.joint, args.law, delta=delta, settle_s=args.settle, asymmetric=args.asymmetric, presliding=pre, sigma1=args.sigma1)
    print(format_report(result))
    table = friction_table(args.joint, result.law, comment=f"identified by mbctl identify fit from {args.log.name} ({result.fit.law.name} fit, {len(result.processed.points)} speeds)")
    if args.out is None:
        pass  # printed last, below
    elif args.config is not None:
        for message in write_robot_copy(args.config, args.out, args.joint, result.law, force=args.force):
            warn(message)
        print(f"wrote {args.out} (copy of {args.config} with the identified friction of {args.joint})")
    else:
        write_friction_file(args.out, table, force=args.force)
        print(f"wrote {args.out}")
    if args.summary is not None:
        with atomic_output(args.summary) as tmp:
            tmp.write_text(json.dumps(result_json(result), indent=2) + "\n")
        print(f"wrote {args.summary}")
    if args.plot is not None:
        from mbctl.viz.fits import plot_identification

        plot_identification(result, args.plot, title=f"{args.joint}: {result.law.name} from {args.log.name}")
        print(f"wrote {args.plot}")
    if args.out is None:
        print()
        print(table, end="")
    return 0


def fit_servo_logs(args: argparse.Namespace) -> int:
    from mbctl.dynamics.actuator import STALL_PARAMETERS
    from mbctl.identification.report import servo_fit_lines
    from mbctl.identification.servo import PARAMETERS, fit_servo, stall_choice
    from mbctl.identification.servo_datasheet import datasheet_of
    from mbctl.identification.servo_log import read_servo_logs
    from mbctl.rosbag import is_bag

    for path, kinds in ((args.out, (".json",)), (args.plot, FORMATS), (args.write_back, (".toml",))):
        if path:
            check_output(path, kinds)
    if args.starts < 1:
        raise InputError(f"must be >= 1, got {args.starts}", field="--starts")
    if (args.config is None) != (args.joint is None):
        raise InputError("--config and --joint go together", field="--joint" if args.config is not None else "--config")
    if args.write_back is not None:
        if args.config is None:
            raise InputError("needs --config and --joint (the robot TOML to copy and the servo's joint)", field="--write-back")
        from mbctl.identification.report import check_copy_target

        check_copy_target(args.config, args.write_back, args.force)
    robot = bench = None
    if args.config is not None:
        from mbctl.dynamics.model.robot import load_robot
        from mbctl.identification.servo import bench_model

        robot = load_robot(args.config, xacro_args=xacro_args_of(args))
        if args.joint not in robot.joint_names:
            raise InputError(f"no joint {args.joint!r} in the robot (joints: {', '.join(robot.joint_names)})", file=args.config, field="--joint")
        if any(t.endswith(".npz") or is_bag(t) for t in [*args.logs, *args.validate]):
            bench = bench_model(robot, args.joint)
    bag = bag_options(args)
    logs = read_servo_logs(args.logs, "LOG", bench, args.joint, bag, args.goal_topic)
    held_out = read_servo_logs(args.validate, "--validate", bench, args.joint, bag, args.goal_topic)
    sheet = datasheet_of([log.motor for log in logs]) if args.datasheet == "auto" else None
    stall, bounds, why = stall_choice(args.stall, logs, sheet)
    fit = fit_servo(logs, args.law, validate=held_out, starts=args.starts, fit_offset=args.offset, stall=stall, bounds=bounds, datasheet=sheet)
    print(f"{args.law}: {len(logs)} logs fitted in {fit.wall_s:.1f} s ({fit.starts} starts, {fit.evaluations} simulations of all logs)")
    for line in servo_fit_lines(fit, why, sheet, bounds):
        print(line)
    if args.out:
        report = {
            "law": fit.law,
            "parameters": fit.parameters,
            "standard_errors": fit.standard_errors,
            "units": {n: PARAMETERS[n][3] for n in fit.parameters},
            "mean_abs_error_rad": {"fitted": fit.train_mae, "held_out": fit.validation_mae},
            "starts": fit.starts,
            "wall_s": fit.wall_s,
            "share_at_current_limit": fit.limited,
            "unidentified": fit.unidentified,
            "stall": why,
            "datasheet": None if sheet is None else {"name": sheet.name, "R_held_ohm": sheet.resistance, "kt_range": list(sheet.torque_constant_range)},
        }
        with atomic_output(args.out) as tmp:
            tmp.write_text(json.dumps(report, indent=2) + "\n")
    if args.plot:
        from mbctl.viz.fits import plot_servo_fit

        plot_servo_fit(fit, [*logs, *held_out], args.plot)
    if robot is not None:
        from mbctl.identification.report import actuator_table, servo_table_values, write_servo_robot_copy

        values = servo_table_values(robot, args.joint, fit.parameters, logs[0].model.firmware)
        friction = {k: v for k, v in fit.parameters.items() if k not in ("kt", "R", "armature", "offset", *STALL_PARAMETERS)}
        if "offset" in fit.parameters:
            warn("the encoder offset is not part of the actuator table (set the drive's zero_count)")
        if args.write_back is not None:
            write_servo_robot_copy(args.config, args.write_back, args.joint, values, fit.law, friction, force=args.force)
        else:
            print()
            print(actuator_table(args.joint, values, fit.law, friction, comment=f"identified by mbctl identify logs ({fit.law}, {len(logs)} logs)"), end="")
    written = [str(p) for p in (args.out, args.plot, args.write_back) if p]
    if written:
        print(f"wrote {', '.join(written)}")
    return 0


def fit_arm_logs(args: argparse.Namespace) -> int:
    import dataclasses

    import numpy as np

    from mbctl.budget import check_memory, check_read
    from mbctl.cli.arguments import budget
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.errors import DataError
    from mbctl.identification.arm_fit import ArmFitSettings, fit_arm, predict_torques
    from mbctl.identification.arm_log import Conditioning, condition_log, read_arm_log
    from mbctl.identification.arm_report import arm_fit_json, format_arm_fit, write_arm_robot_copy
    from mbctl.identification.report import check_copy_target

    for path, kinds in ((args.out, (".json",)), (args.plot, FORMATS), (args.write_back, (".toml",))):
        if path:
            check_output(path, kinds)
    if args.write_back is not None:
        check_copy_target(args.config, args.write_back, args.force)
    if args.holdout is not None and not 0 < args.holdout < 1:
        raise InputError(f"must be between 0 and 1, got {args.holdout:g}", field="--holdout")
    try:
        # the fit filters its columns and torques itself (parallel filtering), so its logs keep
        # the acceleration at the cutoff of q, dq and tau; predictions smooth it at --fit-cutoff
        predict = Conditioning(rate_hz=args.rate, cutoff_hz=args.cutoff, acceleration_cutoff_hz=args.fit_cutoff, velocity=args.velocity)
        how = Conditioning(rate_hz=args.rate, cutoff_hz=args.cutoff, acceleration_cutoff_hz=args.cutoff, velocity=args.velocity)
        settings = ArmFitSettings(
            friction=args.friction, regularisation=args.regularisation, parallel_cutoff_hz=args.fit_cutoff, offsets=args.offsets,
            armature=None if args.armature is None else args.armature == "fit",
        )
    except DataError as exc:
        option = {"rate_hz": "--rate", "cutoff_hz": "--cutoff", "acceleration_cutoff_hz": "--fit-cutoff", "regularisation": "--regularisation",
                  "parallel_cutoff_hz": "--fit-cutoff"}
        raise InputError(exc.reason, field=option.get(exc.field or "", exc.field)) from None
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    if args.payload:
        last = max(robot.joints, key=lambda j: j.id).name
        settings = dataclasses.replace(settings, free_bodies=(last,), payload=True)
    joints = robot.joint_names
    memory = budget(args)
    for path in [*args.logs, *args.validate]:
        check_read(path, memory, field="LOG")
    bag = bag_options(args)
    raws = [read_arm_log(path, joints, bag=bag, spec=robot.spec) for path in args.logs]
    # the fit holds the regressor with its filtered copies: samples x joints x (10 per body + friction) doubles, ~4 times
    samples = sum((raw.t.max() - raw.t.min()) * args.rate for raw in raws)
    check_memory(samples * robot.nv * (10 * robot.model.njoints + 4 * robot.nv) * 8 * 4, memory, what=f"the fit ({samples:.4g} samples at --rate)", field="LOG")
    fitted, held_out = [], []
    for path, raw in zip(args.logs, raws):
        log = condition_log(raw, how)
        if args.holdout is not None:
            log = log.split(1 - args.holdout)[0]
            held_out.append((f"{path.name} (last {args.holdout:.0%})", condition_log(raw, predict).split(1 - args.holdout)[1]))
        fitted.append(log)
    held_out += [(path.name, condition_log(read_arm_log(path, joints, bag=bag, spec=robot.spec), predict)) for path in args.validate]
    for note in dict.fromkeys(n for log in fitted for n in log.notes):
        print(note)
    fit = fit_arm(robot, fitted, settings)
    print(format_arm_fit(fit))
    validation = {}
    for name, log in held_out:
        errors = {
            "consistent": predict_torques(robot, fit.theta, fit.friction, log, armature=fit.armature_by_joint) - log.tau,
            **({"consistent + offsets": predict_torques(robot, fit.theta, fit.friction, log, fit.offsets, armature=fit.armature_by_joint) - log.tau}
               if settings.offsets != "none" else {}),
            "prior": predict_torques(robot, fit.theta_prior, {j.name: j.friction.law if j.friction else None for j in robot.joints}, log) - log.tau,
        }
        validation[name] = {k: np.sqrt(np.mean(e**2, axis=0)).tolist() for k, e in errors.items()}
        print(f"held out: {name}, {len(log)} samples; RMS torque error per joint (N·m, N):")
        for label, rms in validation[name].items():
            print(f"  {label + (' (the robot as given)' if label == 'prior' else ''):<26}" + "".join(f"{x:>8.3g}" for x in rms))
    if args.out:
        with atomic_output(args.out) as tmp:
            tmp.write_text(json.dumps(arm_fit_json(fit, validation), indent=2))
    if args.plot:
        from mbctl.viz.fits import plot_arm_fit

        plot_arm_fit(robot, fit, fitted + [log for _, log in held_out], args.plot)
    if args.write_back:
        write_arm_robot_copy(args.config, args.write_back, fit, args.logs, force=args.force)
    written = [p for p in (args.out, args.plot, args.write_back) if p]
    if written:
        print(f"wrote {', '.join(str(p) for p in written)}")
    return 0
