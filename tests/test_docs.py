"""Every example in README.md and docs/ runs, and what it prints is what the page shows.

Fenced blocks whose info string starts with ``sh`` or ``python`` are executed, in the
order they appear, in one fresh working directory per page: shell blocks with
``bash -e`` (the ``mbctl`` console script of this environment on the PATH), Python
blocks in a fresh interpreter. ``sh no-run`` marks a block that cannot run here (real
hardware, a server that waits for Ctrl-C, the ``pip install`` lines CI itself runs);
``sh slow`` / ``python slow`` marks the page's test as slow. Other fences (``text``,
``toml``, ``console``) are listings and are not run.

**Printed output.** A ``text`` block that directly follows a runnable block (nothing but
blank lines between them) is that block's printed output, and so is a ``text output`` block
after a sentence introducing it (prose between, no other fence); either is checked: its lines
must appear in what the block printed (stdout and stderr, in order), one after another.
In a checked line, ``...`` stands for any text; a line that is only ``...`` stands for
any number of lines (zero included). The block may show an excerpt: lines printed before
or after it are not compared. ``text varies`` marks an output that changes from run to
run or machine to machine (timings, random starts, free disk space): shown, not checked.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
OUTPUTS_NOT_YET_CHECKED = {"docs/trajectories.md"}
"""Pages whose examples run but whose printed outputs are not compared yet: their owners are
changing what the commands print (issue 44, items 3 and 6); each leaves this set once its
outputs say `...` or `text varies` where they should."""
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


@dataclass(frozen=True)
class Block:
    """A runnable fenced block and, when the page shows it and it is deterministic, its printed output."""

    lang: str
    flags: frozenset[str]
    code: str
    output: str | None  # the text block that follows it, None when there is none or it is `text varies`


def blocks(page: Path) -> list[Block]:
    """The runnable blocks of a page, in order, each with the output the page shows for it."""
    text = page.read_text()
    fences = list(FENCE.finditer(text))
    out = []
    for k, m in enumerate(fences):
        lang, flags = m.group(1), frozenset(m.group(2).split())
        if lang not in ("sh", "python") or "no-run" in flags:
            continue
        output = None
        if k + 1 < len(fences):
            nxt = fences[k + 1]
            info = nxt.group(2).split()
            if nxt.group(1) == "text" and "varies" not in info and ("output" in info or not text[m.end() : nxt.start()].strip()):
                output = nxt.group(3)
        if str(page.relative_to(ROOT)) in OUTPUTS_NOT_YET_CHECKED:
            output = None
        out.append(Block(lang, flags, m.group(3), output))
    return out


def output_pattern(shown: str) -> re.Pattern[str]:
    """A regular expression for the printed lines a page shows (``...`` as described in the module docstring)."""
    parts = []
    for line in shown.rstrip("\n").split("\n"):
        if line.strip() == "...":
            parts.append(r"(?:[^\n]*\n)*?")
        else:
            parts.append(r"[^\n]*?".join(re.escape(piece) for piece in line.rstrip().split("...")) + r"\n")
    return re.compile("^" + "".join(parts), re.M)


def shows(printed: str, shown: str) -> bool:
    """Whether ``shown`` (a page's output block) appears in ``printed`` (trailing blanks ignored)."""
    normalised = "".join(line.rstrip() + "\n" for line in printed.splitlines())
    return output_pattern(shown).search(normalised) is not None


def _param(page: Path):
    marks = [pytest.mark.slow] if any("slow" in b.flags for b in blocks(page)) else []
    return pytest.param(page, id=str(page.relative_to(ROOT)), marks=marks)


def test_fence_parser_sees_the_readme_examples():
    """The README's set-up block is a no-run sh block and at least one example runs (a renamed fence would empty this test)."""
    text = (ROOT / "README.md").read_text()
    assert "```sh no-run\npip install -e . && mbctl demo" in text
    assert blocks(ROOT / "README.md")


def test_outputs_are_attached_to_their_examples():
    """The Panda observer's thresholds and the MPC's report are checked outputs; a `text varies` block is not checked."""
    observe = [b for b in blocks(ROOT / "docs" / "closed-loop.md") if "mbctl observe" in b.code]
    assert observe and observe[0].output and "panda_joint6 0.45" in observe[0].output
    sweep = [b for b in blocks(ROOT / "README.md") if "mbctl sweep" in b.code]  # its runs/s vary
    assert sweep and sweep[0].output is None and "```text varies\nur5_payload.toml" in (ROOT / "README.md").read_text()
    mpc = [b for b in blocks(ROOT / "docs" / "optimal-control.md") if "--controller mpc" in b.code]
    assert mpc and mpc[0].output and mpc[0].output.startswith("tracking rms")  # a `text output` block, after a sentence
    assert sum(b.output is not None for p in PAGES for b in blocks(p)) >= 10


def test_every_text_output_block_belongs_to_an_example():
    """A `text output` block is attached to the runnable block before it (one placed elsewhere would silently go unchecked)."""
    for page in PAGES:
        if str(page.relative_to(ROOT)) in OUTPUTS_NOT_YET_CHECKED:
            continue
        shown = {b.output for b in blocks(page)}
        for m in FENCE.finditer(page.read_text()):
            if m.group(1) == "text" and "output" in m.group(2).split():
                assert m.group(3) in shown, f"{page.name}: a `text output` block follows no runnable block:\n{m.group(3)}"


def test_output_check_accepts_an_excerpt_and_refuses_a_changed_number():
    """An excerpt with `...` matches what was printed; the same lines with one number changed do not."""
    printed = "wrote a.csv\nrobot: 3 joints, computed in 1.7 ms   \n  j1  2.8\n  j2  4.4\n  j3  0.45\nwrote b.csv\n"
    assert shows(printed, "robot: 3 joints, computed in ... ms\n  j1  2.8\n...\n  j3  0.45\n")
    assert shows(printed, "  j1  2.8\n  j2  4.4\n")
    assert not shows(printed, "  j1  3.5\n  j2  4.4\n")
    assert not shows(printed, "  j1  2.8\n  j3  0.45\n")  # lines must follow one another unless `...` says otherwise
    assert not shows(printed, "  j2  4.4\n  j1  2.8\n")


@pytest.mark.parametrize("page", [_param(p) for p in PAGES if blocks(p)])
def test_examples_run(page, tmp_path):
    """The page's runnable blocks all succeed, in order, in one working directory, and print what the page shows."""
    (tmp_path / "data").symlink_to(ROOT / "data")  # pages run "from the repository's root" for the bundled real logs
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",  # stdout and stderr interleaved in the order they were written
    }
    for k, block in enumerate(blocks(page)):
        cmd = ["bash", "-e", "-c", block.code] if block.lang == "sh" else [sys.executable, "-c", block.code]
        done = subprocess.run(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
        where = f"{page.name}, block {k + 1} ({block.lang})"
        assert done.returncode == 0, f"{where} failed:\n{block.code}\n--- output ---\n{done.stdout[-3000:]}"
        if block.output is not None:
            same = shows(done.stdout, block.output)  # a plain bool: pytest's rewriting would repeat both texts in full
            assert same, (
                f"{where} printed something else than the page shows (mark a run-dependent output `text varies`,"
                f" or write `...` for the part that varies):\n--- the page ---\n{block.output}--- printed ---\n{done.stdout[-3000:]}"
            )
