"""What every figure shares: the formats, a new figure, panel grids, saving.

Uses matplotlib's object API (no pyplot state, no display needed), imported only when a
figure is drawn, and writes files atomically.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

from mbctl.fileio import atomic_output, check_output

if TYPE_CHECKING:  # matplotlib loads only when a figure is drawn
    from matplotlib.figure import Figure

__all__ = ["FORMATS", "check_figure_path", "grid", "new_figure", "panels", "save_figure"]

FORMATS = (".png", ".pdf", ".svg")


def check_figure_path(path: str | Path) -> Path:
    """``path`` as a :class:`~pathlib.Path`, checked before any drawing.

    Raises:
        InputError: Naming the file, for a suffix other than .png, .pdf or .svg or a missing directory.
    """
    return check_output(path, FORMATS)


def new_figure(figsize: tuple[float, float]) -> Figure:
    """A new figure of ``figsize`` (inches) with constrained layout (object API: no pyplot state, no display)."""
    from matplotlib.figure import Figure

    return Figure(figsize=figsize, layout="constrained")


def save_figure(fig: Figure, path: str | Path) -> Path:
    """Save a figure atomically; the format follows the file suffix. Returns the path.

    Raises:
        InputError: For a suffix other than .png, .pdf or .svg.
    """
    with atomic_output(check_figure_path(path)) as tmp:
        fig.savefig(tmp, dpi=120)
    return Path(path)


def grid(n: int, title: str) -> tuple[Figure, list]:
    """``n`` panels sharing the time axis, one column up to three panels, else two; t [s] on the lowest."""
    cols = 1 if n <= 3 else 2
    rows = math.ceil(n / cols)
    fig = new_figure((6.5 * cols, 2.2 * rows + 0.8))
    axes = fig.subplots(rows, cols, sharex=True, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    for i, ax in enumerate(axes[:n]):
        if i + cols >= n:  # lowest visible panel of its column
            ax.set_xlabel("t [s]")
    fig.suptitle(title)
    return fig, axes[:n]


def panels(n: int, title: str, width: float = 3.6, height: float = 2.8) -> tuple[Figure, list]:
    """``n`` independent panels of ``width`` x ``height`` inches, up to three a row."""
    cols = min(n, 3)
    rows = math.ceil(n / cols)
    fig = new_figure((width * cols, height * rows + 0.6))
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    fig.suptitle(title)
    return fig, axes[:n]
