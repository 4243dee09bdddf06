"""``mbctl flexfeed``: rigid-model drive torques fed forward, open loop, into flexible FEM levers.

For a planar closed chain with ``[flexible.<link>] method = "fem"`` levers, a programmed
end-effector path and ``[actuation]`` (``configs/rrr3_flexible.toml``): the rigid motion
and its drive torques in every distribution mode asked for, each fed into the flexible
model; writes the figures (:data:`mbctl.viz.variants.FLEXFEED_PLOTS`) and ``flexfeed.json``
(RMS and peak per mode, the stiff-limit check, the FEM/RFE cross-check, wall times) into
``--out-dir``. See :mod:`mbctl.ctrl.flexible_feedforward`.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

from mbctl.cli.arguments import add_time_limit, add_xacro_option, check_estimate, robot_config, xacro_args_of
from mbctl.config.actuation import MODES
from mbctl.errors import InputError

STEP = 1e-4  # s: the default ROS2 step


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("config", type=robot_config, help="robot TOML or bundled name with FEM levers, loops, a path and [actuation] (e.g. rrr3_flexible)")
    add_xacro_option(p)
    p.add_argument("--out-dir", type=Path, required=True, help="directory for the PNG and JSON files (created if missing; its parent must exist)")
    p.add_argument("--modes", help="comma-separated distribution modes (default: the 3-RRR study's three)")
    p.add_argument("--duration", type=float, help="s (default: simulation.duration)")
    p.add_argument("--integrator", choices=("ros2", "radau"), default="ros2", help="stiff integrator of the flexible model (default ros2)")
    p.add_argument("--rate", type=float, default=10000.0, help="sampling rate of the rigid motion and torques, and of the records (Hz, default 10000)")
    p.add_argument("--step", type=float, default=STEP, help="ros2 step (s, default 1e-4)")
    p.add_argument("--rtol", type=float, default=1e-6, help="radau relative tolerance (default 1e-6)")
    p.add_argument("--rfe-elements", type=int, default=8, help="RFE segments per lever for the cross-check; 0: no cross-check (default 8)")
    p.add_argument("--no-stiff-check", action="store_true", help="skip the stiff-limit run (moduli x 1e4)")
    add_time_limit(p)
    p.set_defaults(run=run)


def _line(mode: str, entry: dict, links: list[str]) -> str:
    ee = entry["ee_error_m"]
    tips = "  ".join(f"{entry['tip'][k]['transverse_m']['rms'] * 1e3:8.4f}" for k in links)
    return f"  {mode:<20}{ee['rms'] * 1e3:10.4f}{ee['peak'] * 1e3:10.4f}  {tips}{entry['wall_s']:9.2f}"


# memory of one recorded sample of one run, at least (bytes): the rigid motion and torques of the
# mechanism's joints and the FEM model's state and outputs, about 128 doubles
RECORD_BYTES = 1024


def check_records_size(args: argparse.Namespace, spec, modes: int) -> None:
    """Refuse, before the rigid part runs, records of ``--duration`` x ``--rate`` samples for every mode,
    the cross-check and the stiff-limit run that would exceed the memory budget."""
    from mbctl.budget import check_memory, format_count
    from mbctl.cli.arguments import budget

    duration = args.duration if args.duration is not None else spec.simulation.duration if spec.simulation else None
    if duration is None or not duration > 0:
        return  # the run says what is missing
    product = duration * args.rate
    samples = math.ceil(product) + 1.0 if math.isfinite(product) else math.inf
    runs = modes + 1 + (args.rfe_elements > 0) + (not args.no_stiff_check)  # the rigid motion too
    field = "--duration" if args.duration is not None else "--rate"
    check_memory(samples * runs * RECORD_BYTES, budget(args), what=f"{runs} records of {format_count(samples)} samples", field=field)


def run(args: argparse.Namespace) -> int:
    from mbctl.config.robot import read_robot_spec
    from mbctl.ctrl.flexible_feedforward import STUDY_MODES, estimate_flexible_runs, flexible_feedforward, summary_table
    from mbctl.fileio import atomic_output, check_output_dir
    from mbctl.viz.variants import plot_flexfeed

    check_output_dir(args.out_dir)  # created once the runs are done: a failed run leaves nothing behind
    modes = list(STUDY_MODES) if args.modes is None else [m.strip() for m in args.modes.split(",") if m.strip()]
    bad = [m for m in modes if m not in MODES]
    if bad or not modes:
        raise InputError(f"unknown mode {bad[0] if bad else ''!r} (expected some of: {', '.join(MODES)})", field="--modes")
    for value, option in ((args.step, "--step"), (args.duration, "--duration"), (args.rtol, "--rtol"), (args.rate, "--rate")):
        if value is not None and not (math.isfinite(value) and value > 0):
            raise InputError(f"must be > 0, got {value!r}", field=option)
    if args.rfe_elements < 0:
        raise InputError(f"must be >= 0, got {args.rfe_elements}", field="--rfe-elements")
    spec = read_robot_spec(args.config, xacro_args=xacro_args_of(args))
    check_records_size(args, spec, len(modes))
    if args.integrator == "ros2":  # radau's steps are its own: no estimate
        runs = len(modes) + (args.rfe_elements > 0) + (not args.no_stiff_check)
        field = "--duration" if args.duration is not None and args.step == STEP else "--step"
        check_estimate(args, estimate_flexible_runs(spec, runs=runs, duration=args.duration, step=args.step), what=f"{runs} flexible runs", field=field)
    result = flexible_feedforward(
        spec,
        modes=modes,
        duration=args.duration,
        rate=args.rate,
        integrator=args.integrator,
        step=args.step,
        rtol=args.rtol,
        rfe_elements=args.rfe_elements or None,
        rfe_mode="min-internal-force" if "min-internal-force" in modes else modes[0],
        stiff_check=not args.no_stiff_check,
        progress=lambda text: print(text, flush=True),
    )
    table = summary_table(result)
    table["config"] = str(args.config)
    args.out_dir.mkdir(exist_ok=True)
    written = plot_flexfeed(result, args.out_dir)
    path = args.out_dir / "flexfeed.json"
    with atomic_output(path) as tmp:
        tmp.write_text(json.dumps(table, indent=2) + "\n")
    written.append(path)
    links = list(result.links)
    freqs = ", ".join(f"{f:.1f}" for f in result.frequencies)
    print(f"{result.name}: lowest modes with the drives locked {freqs} Hz; rigid part {result.rigid_s:.2f} s")
    print(f"  {'mode':<20}{'rms |e|':>10}{'peak |e|':>10}  " + "  ".join(f"{'rms v ' + k[-1]:>8}" for k in links) + f"{'wall':>9}")
    for mode, entry in table["modes"].items():
        print(_line(mode, entry, links))
    print("  (end-effector error |e| and rms tip deflection v of each flexible lever in mm; wall time of the run in s)")
    if math.isfinite(result.stiff_error):
        print(f"stiff limit (E x {result.stiff_factor:g}): peak end-effector error {result.stiff_error * 1e3:.3g} mm")
    if "rfe_check" in table:
        c = table["rfe_check"]
        diff = "; ".join(f"{k} {c['tip_transverse_difference_m'][k]['rms'] * 1e3:.3g} mm" for k in links)
        print(
            f"RFE cross-check ({c['elements']} segments/lever, mode {c['mode']}, {c['wall_s']:.2f} s): rms |e| "
            f"{c['ee_error_m']['rms'] * 1e3:.4f} mm; rms tip-deflection difference FEM - RFE: {diff}; rms |e_FEM - e_RFE| "
            f"{c['ee_error_difference_m']['rms'] * 1e3:.3g} mm"
        )
    print(f"wrote {', '.join(str(p) for p in written)}")
    return 0
