"""``mbctl commission``: commission an arm in one command, on the arm itself.

Steps, each kept in ``DIR/<step>/`` (``result.json`` when it finished, ``step.log``, its run logs):

1. ``preflight``: the envelope (limits with the margins), the rate and the start pose (``--start`` or
   ``[identification] start``: there is no default), a hold test at the start pose with the nominal
   model's computed torque (stops beyond ``--hold-drift``), the drives and sensing;
2. ``friction``: each joint in turn, the constant-speed sweep (and ``--presliding``) of
   ``identify run`` inside the envelope, the others held; a law fitted per joint with intervals;
3. ``excitation``: a Fourier trajectory optimised for the base parameters inside the envelope, run
   closed loop with the nominal model;
4. ``identify``: the inertial parameters from that log, the measured friction held fixed;
5. ``verify``: a validation trajectory run with computed torque on the nominal and on the identified
   model; the identified robot is written to ``DIR/<robot>_commissioned.toml`` only if it is better;
6. ``report``: ``DIR/report.json`` and ``DIR/report.html`` with its figures.

Every planned motion is checked against the robot's ``[keepout]`` before it runs (the start pose and
the sweeps before anything moves). ``--from STEP`` resumes: the earlier steps' results are read from
DIR, and refused if another robot file, backend, rate, envelope or start pose shaped them; a run's
earlier files from STEP on are moved into ``DIR/superseded/<n>/`` first. A safety stop or Ctrl-C
leaves the arm torque off (the loop's own exit path), keeps the finished steps and prints the command
that resumes. Exit codes: 0 done (adopted or not), 1 a step stopped, 2 bad input, 130 interrupted.
Library: :mod:`mbctl.identification.commission`.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from mbctl.cli.arguments import add_xacro_option, robot_config, xacro_args_of
from mbctl.errors import InputError

STEPS = ("preflight", "friction", "excitation", "identify", "verify", "report")  # mbctl.identification.commission.STEPS
BUSES = ("dynamixel", "canopen", "ros2", "franka")  # as mbctl run's --bus


def joint_values(text: str | None, option: str) -> dict[str, float]:
    """``"JOINT=VALUE,..."`` -> {joint: value}, in the order given.

    Raises:
        InputError: Naming ``option``, for an item that is not ``JOINT=NUMBER`` or a joint given twice.
    """
    out: dict[str, float] = {}
    for item in (x.strip() for x in (text or "").split(",") if x.strip()):
        name, sep, value = (part.strip() for part in item.partition("="))
        try:
            number = float(value)
        except ValueError:
            sep = ""
        if not sep or not name:
            raise InputError(f"expected JOINT=VALUE[,JOINT=VALUE], got {item!r}", field=option)
        if name in out:
            raise InputError(f"{name} is given twice ({out[name]:g} and {number:g})", field=option)
        out[name] = number
    return out


def joint_list(text: str | None, option: str) -> tuple[str, ...] | None:
    """``"a,b"`` -> ("a", "b"); None for no option.

    Raises:
        InputError: Naming ``option``, for an empty list or a joint given twice.
    """
    if text is None:
        return None
    names = tuple(n.strip() for n in text.split(",") if n.strip())
    if not names:
        raise InputError("expected JOINT[,JOINT...]", field=option)
    twice = next((n for i, n in enumerate(names) if n in names[:i]), None)
    if twice is not None:
        raise InputError(f"{twice} is given twice", field=option)
    return names


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML file or bundled robot name (the nominal model; [plant] or [drives])")
    add_xacro_option(p)
    p.add_argument("--out", type=Path, required=True, help="folder for every step's logs and results, the report and the adopted robot")
    p.add_argument("--from", dest="start", choices=STEPS, default=STEPS[0], help="resume from this step (the earlier ones' results are read from --out)")
    b = p.add_argument_group("backend (as mbctl run)")
    b.add_argument("--bus", choices=BUSES, help="joint drives on this bus (default: the simulated plant of the robot's [plant] truth)")
    b.add_argument("--plant", choices=("sim", *BUSES), default="sim", help="the older spelling: sim is no --bus, the others --bus")
    b.add_argument("--emulate", action="store_true", help="serve the bus from an emulator of the [plant] truth (dynamixel, canopen, ros2; franka: franky-sim, its own MuJoCo model)")
    b.add_argument("--lockstep", action="store_true", help="simulated plant or emulated bus: one plant period per cycle, as fast as possible")
    b.add_argument("--port", help="dynamixel: serial device (default: drives.port)")
    b.add_argument("--interface", help="canopen: python-can interface (default: drives.interface; emulated: virtual)")
    b.add_argument("--channel", help="canopen: the interface's channel (default: drives.channel)")
    b.add_argument("--robot-ip", help="franka: the robot's FCI address (default: [franka] address)")
    b.add_argument("--rate", type=float, help="control rate in Hz (default: [identification] rate_hz; else, canopen, the highest of 1000, 500, 250, ... Hz the bus carries; else 1000)")
    b.add_argument("--no-realtime", action="store_true", help="paced runs: do not ask for SCHED_FIFO priority")
    e = p.add_argument_group("envelope and pre-flight")
    e.add_argument("--position-margin", type=float, default=0.1, help="fraction of each joint's half range kept free at both ends (default 0.1)")
    e.add_argument("--velocity-margin", type=float, default=0.2, help="fraction of each speed limit kept free (default 0.2)")
    e.add_argument("--torque-margin", type=float, default=0.2, help="fraction of each torque limit kept free (default 0.2)")
    e.add_argument("--start", dest="start_pose", metavar="JOINT=Q,...", help="start pose (rad, m); joints not named: [identification] start, else 0 (the middle of the envelope where 0 is outside). Needed unless the robot's TOML has [identification] start")
    e.add_argument("--hold-time", type=float, default=1.0, help="hold test length, s (default 1)")
    e.add_argument("--hold-drift", type=float, default=0.02, help="largest drift the hold test accepts, rad or m (default 0.02)")
    e.add_argument("--detect-collisions", action="store_true", help="keep [control.collision]'s reaction (default: the observer only logs: it reads the nominal model's errors as external torques)")
    f = p.add_argument_group("friction experiments")
    f.add_argument("--joints", help="joints whose friction is measured, comma-separated (default: all)")
    f.add_argument("--friction-law", choices=("stribeck", "coulomb-viscous", "lugre"), default="stribeck", help="law fitted per joint (default stribeck, delta 2)")
    f.add_argument("--presliding", action="store_true", help="also the presliding / break-away test (needed by lugre)")
    f.add_argument("--speeds", type=int, help="speeds per sweep (default: [identification] count, else 10)")
    f.add_argument("--max-leg", type=float, help="longest constant-speed leg, s (default: [identification] max_leg_s, else 2)")
    f.add_argument("--sweep", type=float, help="half the range each sweep travels, rad or m (default: [identification] range, else 0.5 about the start)")
    f.add_argument("--settle", type=float, help="hold at each leg's ends, s (default: [identification] settle_s, else 0.2)")
    f.add_argument("--stribeck-velocity", type=float, default=0.05, help="for the speed grid where a joint's law has none, rad/s (default 0.05)")
    f.add_argument("--bandwidth", metavar="JOINT=HZ,...", help="of the sweeps' position loops by joint, Hz (default: [identification] bandwidth_hz, else 10; at most 0.4 rate / 2 pi)")
    x = p.add_argument_group("excitation and identification")
    x.add_argument("--harmonics", type=int, default=4, help="harmonics per joint (default 4)")
    x.add_argument("--period", type=float, default=10.0, help="excitation period, s (default 10; the validation's is 0.8 of it)")
    x.add_argument("--seed", type=int, default=0, help="seed of the excitation's start (the validation's is seed + 1)")
    x.add_argument("--regularisation", type=float, default=1e-2, help="pull of the arm fit toward the nominal inertials (default 0.01)")
    x.add_argument("--moving-speed", type=float, default=0.1, help="verification: torque prediction judged where a joint moves at least this fast, rad/s (default 0.1)")
    p.set_defaults(run=run)


# option -> (args attribute, default); the resume command repeats the ones given
_OPTIONS = {
    "--bus": ("bus", None), "--emulate": ("emulate", False), "--lockstep": ("lockstep", False), "--port": ("port", None),
    "--interface": ("interface", None), "--channel": ("channel", None), "--robot-ip": ("robot_ip", None), "--rate": ("rate", None), "--no-realtime": ("no_realtime", False),
    "--position-margin": ("position_margin", 0.1), "--velocity-margin": ("velocity_margin", 0.2), "--torque-margin": ("torque_margin", 0.2),
    "--hold-time": ("hold_time", 1.0), "--hold-drift": ("hold_drift", 0.02), "--detect-collisions": ("detect_collisions", False),
    "--joints": ("joints", None), "--friction-law": ("friction_law", "stribeck"), "--presliding": ("presliding", False), "--speeds": ("speeds", None),
    "--max-leg": ("max_leg", None), "--sweep": ("sweep", None), "--settle": ("settle", None), "--stribeck-velocity": ("stribeck_velocity", 0.05), 
    "--harmonics": ("harmonics", 4), "--period": ("period", 10.0), "--seed": ("seed", 0), "--regularisation": ("regularisation", 1e-2), "--moving-speed": ("moving_speed", 0.1),
}


def resume_command(args: argparse.Namespace, step: str) -> str:
    """The command line that resumes from ``step``: the robot, ``--out``, every option given, ``--from STEP``."""
    words = ["mbctl", "commission", str(args.config), "--out", str(args.out)]
    for xacro in getattr(args, "xacro_arg", None) or ():
        words += ["--xacro-arg", xacro]
    for option, given in (("--start", joint_values(args.start_pose, "--start")), ("--bandwidth", joint_values(args.bandwidth, "--bandwidth"))):
        if given:
            words += [option, ",".join(f"{k}={v!r}" for k, v in given.items())]  # repr: the shortest digits that give the same float
    for option, (attr, default) in _OPTIONS.items():
        value = getattr(args, attr)
        if value == default:
            continue
        words += [option] if isinstance(value, bool) else [option, repr(value) if isinstance(value, float) else str(value)]
    return shlex.join([*words, "--from", step])


def run(args: argparse.Namespace) -> int:
    from mbctl.cli.console import warn
    from mbctl.dynamics.model.robot import load_robot
    from mbctl.fileio import check_output_dir
    from mbctl.hardware.session import SessionOptions
    from mbctl.identification.commission import Commission, CommissionSettings, Margins, StepStopped, run_commission
    from mbctl.identification.commission.rate import default_rate
    from mbctl.viz.commission import draw_report

    check_output_dir(args.out)
    if args.bus and args.plant not in ("sim", args.bus):
        raise InputError(f"--plant {args.plant} and --bus {args.bus} contradict each other", field="--bus")
    args.bus = args.bus or (None if args.plant == "sim" else args.plant)  # one spelling from here on (and in the resume command)
    args.plant = "sim"
    if args.bus is None and args.emulate:
        raise InputError("only for --bus dynamixel, canopen, ros2 or franka", field="--emulate")
    if args.bus != "canopen" and (args.interface or args.channel):
        raise InputError("only for --bus canopen", field="--interface" if args.interface else "--channel")
    if args.bus != "franka" and args.robot_ip:
        raise InputError("only for --bus franka", field="--robot-ip")
    if args.rate is not None and not (args.rate > 0 and args.rate < float("inf")):
        raise InputError(f"must be a finite number > 0, got {args.rate!r}", field="--rate")
    settings = CommissionSettings(
        margins=Margins(position=args.position_margin, velocity=args.velocity_margin, torque=args.torque_margin),
        start=joint_values(args.start_pose, "--start"), hold_s=args.hold_time, hold_drift=args.hold_drift,
        friction_law=args.friction_law, presliding=args.presliding, friction_joints=joint_list(args.joints, "--joints"),
        speeds=args.speeds, max_leg_s=args.max_leg, sweep=args.sweep, settle_s=args.settle, stribeck_velocity=args.stribeck_velocity,
        bandwidth_hz=joint_values(args.bandwidth, "--bandwidth"),
        harmonics=args.harmonics, period_s=args.period, seed=args.seed, regularisation=args.regularisation, moving_speed=args.moving_speed, detect_collisions=args.detect_collisions,
    )
    robot = load_robot(args.config, xacro_args=xacro_args_of(args))
    rate, rate_source = (args.rate, "--rate") if args.rate is not None else default_rate(robot, args.bus)
    options = SessionOptions(
        plant=args.bus or "sim", rate_hz=rate, lockstep=args.lockstep, port=args.port, interface=args.interface, channel=args.channel,
        robot_address=args.robot_ip, emulate=args.emulate, realtime_priority=None if args.no_realtime else SessionOptions.realtime_priority,
    )
    commission = Commission(robot, options, settings, args.out, progress=lambda line: print(f"commission: {line}", file=sys.stderr, flush=True), rate_source=rate_source)
    commission.q0  # noqa: B018  (a bad --start is refused before anything runs)
    try:
        results = run_commission(commission, args.start, draw=draw_report)
    except StepStopped as exc:
        warn(f"{exc.step} stopped: the steps before it are kept in {args.out}; resume with: {resume_command(args, exc.step)}")
        raise
    except KeyboardInterrupt as exc:
        # the first step without a result: a signal may land between two steps as well as in one
        step = next((s for s in STEPS[STEPS.index(args.start):] if not (args.out / s / "result.json").is_file()), STEPS[-1])
        raise type(exc)(f"{step} stopped with torque off; the steps before it are kept in {args.out}; resume with: {resume_command(args, step)}") from None
    verify = results["verify"]
    for name, row in verify["joints"].items():
        print(f"{name:<22} torque rms {row['torque_rms_nominal']:.4g} -> {row['torque_rms_identified']:.4g} N·m, "
              f"tracking rms {row['tracking_rms_nominal']:.3g} -> {row['tracking_rms_identified']:.3g} rad")
    print(verify["verdict"])
    report = args.out / "report.html"
    print(f"arm time {sum(r.get('arm_time_s', 0.0) for r in results.values()):.1f} s; report {report}")
    if verify["adopted"]:
        print(f"use it: mbctl run {args.out / verify['robot']} --trajectory TRAJECTORY.csv --log run.npz --summary run.json")
    return 0
