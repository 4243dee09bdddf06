"""``mbctl plot``: overlay the drive torques of several torque CSVs, one panel per joint."""

from __future__ import annotations

import argparse
from pathlib import Path

from mbctl.cli.plots import FORMATS, plot_torque_tables
from mbctl.errors import InputError
from mbctl.fileio import check_output, read_csv


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("tables", type=Path, nargs="+", help="torque CSVs written by mbctl feedforward")
    p.add_argument("--labels", help="comma-separated legend labels (default: file names)")
    p.add_argument("--title", default="drive torques", help="figure title")
    p.add_argument("--out", type=Path, required=True, help="figure to write (.png, .pdf or .svg)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    check_output(args.out, FORMATS)
    labels = args.labels.split(",") if args.labels else [p.stem for p in args.tables]
    if len(labels) != len(args.tables):
        raise InputError(f"{len(labels)} labels for {len(args.tables)} files", field="--labels")
    plot_torque_tables([read_csv(p) for p in args.tables], labels, args.out, args.title)
    print(f"wrote {args.out}")
    return 0
