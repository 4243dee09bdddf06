"""Messages for the command line on stderr: warnings and progress (numerics only call a callback)."""

from __future__ import annotations

import sys
from typing import TextIO

__all__ = ["ProgressPrinter", "warn"]


def warn(message: str) -> None:
    """Print ``mbctl: warning: <message>`` on stderr."""
    print(f"mbctl: warning: {message}", file=sys.stderr)


class ProgressPrinter:
    """Callable ``(done, total)`` that prints ``label: done/total unit (pct%)``.

    Silent for jobs shorter than ``min_total`` samples. On a terminal the line is
    rewritten in place; otherwise one line per call.
    """

    def __init__(self, label: str, min_total: int = 200_000, stream: TextIO | None = None, unit: str = "samples"):
        self.label = label
        self.min_total = min_total
        self.stream = stream if stream is not None else sys.stderr
        self.unit = unit
        self.open = False  # a terminal line rewritten in place, not yet ended

    def __call__(self, done: int, total: int) -> None:
        if total < self.min_total:
            return
        tty = self.stream.isatty()
        end = "\n" if not tty or done >= total else ""
        prefix = "\r" if tty else ""
        print(f"{prefix}{self.label}: {done}/{total} {self.unit} ({100 * done / total:3.0f}%)", end=end, file=self.stream, flush=True)
        self.open = not end

    def end(self) -> None:
        """End the line of a job that stopped before its total (what is printed next starts a line of its own)."""
        if self.open:
            print(file=self.stream, flush=True)
            self.open = False
