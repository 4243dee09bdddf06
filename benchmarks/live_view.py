"""Overruns of the paced 1 kHz loop without and with the live view open, in one run.

Computed torque on the SCARA's simulated plant (its own process), quintic there-and-back
motions, paced at ``--rate`` for ``--seconds`` per run, in this order:

- ``no view``: the loop alone;
- ``view``: a :class:`~mbctl.viz.live.LiveView` following the run's log (its process and its
  MeshCat server up, redrawing at 30 Hz, no browser);
- ``view + browser`` (where Chromium and playwright are installed): the same with headless
  Chromium rendering the page (software WebGL: the heaviest case, a browser on the same machine).

The overrun policy is relaxed (no stop) so every run counts its overruns to the end. Prints
overruns, period-error p99 and compute p99 per run, each view run's overruns against the
no-view run of the same invocation (ratio; target: no more overruns with the view), and the
CPU time the view process and its MeshCat server took, as a share of one core over the run. Run
``--repeat 2`` to see how much the figures move between identical runs on a loaded machine.

Run: python benchmarks/live_view.py [--seconds 10] [--repeat 1] [--no-browser]
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from mbctl.ctrl.trajectory import quintic_rest_to_rest
from mbctl.dynamics.model.robot import load_robot
from mbctl.hardware.overrun import OverrunPolicy
from mbctl.hardware.session import SessionOptions, run_session
from mbctl.viz.live import LiveView

MOTION = [[0.0, 0.0, 0.0, 0.0], [0.8, 1.2, -0.6, 0.05], [-0.5, 0.9, 1.0, -0.05]]  # rad, m; 1.5 s per segment


def tree_cpu_s(pid: int) -> float:
    """CPU time (user + system, s) of process ``pid`` and its descendants so far (Linux /proc)."""
    parents, times = {}, {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
            times[int(stat.parent.name)] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    tree, grew = {pid}, True
    while grew:
        more = {p for p, parent in parents.items() if parent in tree} - tree
        tree |= more
        grew = bool(more)
    return sum(times.get(p, 0.0) for p in tree)


@contextlib.contextmanager
def viewer(robot, log: Path, mode: str) -> Iterator[list[float]]:
    """The live view of ``mode`` ("no view", "view", "view + browser") open around the block; yields
    a list that holds, after the block, the CPU time (s) the view and its server spent in it."""
    used: list[float] = []
    if mode == "no view":
        yield used
        return
    with LiveView(robot, log=log) as view:
        before = tree_cpu_s(view.pid)
        try:
            if mode == "view":
                yield used
                return
            yield from _with_browser(view, used)
        finally:
            used.append(tree_cpu_s(view.pid) - before)


def _with_browser(view: LiveView, used: list[float]) -> Iterator[list[float]]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=shutil.which("chromium") or shutil.which("chromium-browser"), args=["--no-sandbox"])
        try:
            browser.new_page().goto(view.url)
            yield used
        finally:
            browser.close()


def versus(overruns: int, base: int) -> str:
    """``overruns`` against the no-view run's ``base`` (a ratio, or the difference when ``base`` is 0)."""
    if base:
        return f"{overruns / base:.2f}x"
    return "same (0)" if overruns == 0 else f"+{overruns}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each run (s)")
    parser.add_argument("--rate", type=float, default=1000.0, help="loop rate (Hz)")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of the runs")
    parser.add_argument("--no-browser", action="store_true", help="leave out the run with headless Chromium")
    args = parser.parse_args()

    modes = ["no view", "view"]
    if not args.no_browser and (shutil.which("chromium") or shutil.which("chromium-browser")):
        with contextlib.suppress(ImportError):
            import playwright.sync_api  # noqa: F401

            modes.append("view + browser")
    robot = load_robot("scara")
    motion = np.array(MOTION)
    repeats = int(np.ceil(args.seconds / (1.5 * len(motion))))
    waypoints = np.vstack([motion] * repeats + [motion[:1]])
    traj = quintic_rest_to_rest(waypoints, [1.5] * (len(waypoints) - 1), args.rate, robot.joint_names)
    options = SessionOptions(rate_hz=args.rate, duration_s=args.seconds, overrun=OverrunPolicy(max_fraction=1.0, max_consecutive=0))
    print(f"paced loop, scara, computed torque, {args.rate:g} Hz, {args.seconds:g} s per run; {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.2f}")
    print(f"{'round':<7}{'mode':<16}{'overruns':>16}{'|err| p99 us':>14}{'compute p99 us':>16}{'vs no view':>12}{'view CPU':>10}  scheduling / stop")
    totals = dict.fromkeys(modes, 0)
    with tempfile.TemporaryDirectory() as tmp:
        for round_ in range(1, args.repeat + 1):
            base = None
            for mode in modes:
                log = Path(tmp) / f"{round_}-{mode.replace(' ', '')}.npz"
                with viewer(robot, log, mode) as view_cpu:
                    s = run_session(robot, traj, options, log)
                base = s.overruns if base is None else base
                totals[mode] += s.overruns
                cpu = f"{100 * view_cpu[0] / args.seconds:.1f}%" if view_cpu else ""
                ratio = "" if mode == "no view" else versus(s.overruns, base)
                overruns = f"{s.overruns} ({100 * s.overrun_fraction:.2f}%)"
                print(
                    f"{round_:<7}{mode:<16}{overruns:>16}{s.period_error_p99_us:>14.1f}{s.compute_p99_us:>16.1f}{ratio:>12}{cpu:>10}  "
                    f"{s.scheduling}; {s.stop_reason} ({s.cycles} cycles)",
                    flush=True,
                )
    cycles = round(args.seconds * args.rate) * args.repeat
    print(
        f"total over {args.repeat} round(s), {cycles} cycles per mode: "
        + "; ".join(f"{mode} {n}" + ("" if mode == "no view" else f" ({versus(n, totals['no view'])})") for mode, n in totals.items())
    )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
