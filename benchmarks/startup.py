"""Start-up cost of the command line: a fresh interpreter per call, medians of several runs.

For ``import mbctl``, ``mbctl --help`` and each sub-command's ``--help`` it prints the
wall time of the whole process and the cumulative import time of the command's module
(``python -X importtime``), next to a bare ``python -c pass`` measured the same way.

    python benchmarks/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time

from mbctl.cli import COMMANDS


def wall_s(args: list[str], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, *args], capture_output=True, check=True)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def import_ms(module: str) -> float:
    """Cumulative import time of ``module`` (ms) in a fresh interpreter."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {module}"], capture_output=True, text=True, check=True)
    for line in reversed(done.stderr.splitlines()):
        m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", line)
        if m and m.group(2) == module:
            return int(m.group(1)) / 1000
    return float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    bare = wall_s(["-c", "pass"], repeat)
    rows = [("python -c pass", bare, float("nan")), ("import mbctl", wall_s(["-c", "import mbctl"], repeat), import_ms("mbctl"))]
    rows.append(("mbctl --help", wall_s(["-m", "mbctl.cli", "--help"], repeat), import_ms("mbctl.cli")))
    for name in COMMANDS:
        rows.append((f"mbctl {name} --help", wall_s(["-m", "mbctl.cli", name, "--help"], repeat), import_ms(f"mbctl.cli.commands.{name}")))
    print(f"{'call':<28} {'wall (s)':>9} {'- bare (s)':>11} {'module import (ms)':>19}")
    for label, wall, imp in rows:
        print(f"{label:<28} {wall:9.3f} {wall - bare:11.3f} {imp:19.1f}")


if __name__ == "__main__":
    main()
