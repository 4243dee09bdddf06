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

**Numbers.** A number in a checked line is compared as a number: the printed one may differ by
:data:`RTOL` (1 %) of the page's, or by :data:`ATOL` (1e-12) where that is more (a residue of
round-off, such as a constraint violation of 1e-13, is as good as any other); an integer
(no decimal point, no exponent) must be equal. Round-off differs between x86-64 hosts: NumPy
evaluates exp, sin, tanh, ... with SIMD code chosen at run time (AVX-512 code is not AVX2
code, and neither is correctly rounded), so the last bits of a result depend on the CPU, and
printed digits flip where a value sits on a rounding boundary; the tolerance absorbs that.
It cannot absorb a lock-step run whose sensors quantise (an encoder count flips with the last
bit and the run takes another course: the README's friction fit then down-weights another
point and its confidence intervals change by half; an optimiser's path, its iteration count):
such examples are made host-independent instead, by running every example with the arithmetic
of an AVX2 host (:func:`pinned_simd`): NumPy's SIMD dispatch capped at AVX2
(``NPY_DISABLE_CPU_FEATURES`` names the AVX-512 features this machine has) and OpenBLAS's AVX2
kernels (``OPENBLAS_CORETYPE=Haswell``: its AVX-512 kernels sum in another order), so that an
AVX-512 host computes what an AVX2 host does, to the bit. Outputs shown on a page are produced
that way (CONTRIBUTING.md). On x86-64 hosts without AVX2 such an example may still differ.
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


RTOL = 1e-2
"""Relative difference allowed between a printed number and the page's (module docstring)."""
ATOL = 1e-12
"""Absolute difference allowed: numbers this close are both round-off."""
_NUMBER = r"[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?"
_FREE_NUMBER = re.compile(rf"(?<![\w.]){_NUMBER}(?![\w]|\.\d)")  # not part of a name (j1, ur5), a version or a dotted field


def numbers_agree(printed: str, shown: str) -> bool:
    """Whether the printed number matches the page's: equal integers, or reals within :data:`RTOL` or :data:`ATOL`."""
    if re.fullmatch(r"[-+]?\d+", shown):
        return re.fullmatch(r"[-+]?\d+", printed) is not None and int(printed) == int(shown)
    a, b = float(printed), float(shown)
    return abs(a - b) <= max(RTOL * abs(b), ATOL)


def line_matcher(shown: str):  # noqa: ANN201  (a predicate on one printed line)
    """A predicate: does a printed line (trailing blanks removed) match the page's line ``shown``? ``...`` is any text, a
    number any number that :func:`numbers_agree` with it, a run of blanks any run of blanks; the rest as it is."""
    parts, numbers = [], []
    for k, piece in enumerate(shown.rstrip().split("...")):
        if k:
            parts.append(r".*?")
        at = 0
        for m in _FREE_NUMBER.finditer(piece):
            parts.append(_literal(piece[at : m.start()]))
            parts.append(rf"(?<![\w.])({_NUMBER})(?![\w]|\.\d)")
            numbers.append(m.group(0))
            at = m.end()
        parts.append(_literal(piece[at:]))
    pattern = re.compile("".join(parts))

    def matches(line: str) -> bool:
        found = pattern.fullmatch(line)
        return found is not None and all(numbers_agree(p, s) for p, s in zip(found.groups(), numbers))

    return matches


def _literal(text: str) -> str:
    return r"[ \t]+".join(re.escape(word) for word in re.split(r"[ \t]+", text))


def shows(printed: str, shown: str) -> bool:
    """Whether ``shown`` (a page's output block) appears in ``printed``: its lines one after another (a ``...`` line
    standing for any number of lines), each matching by :func:`line_matcher`, anywhere in the printed lines."""
    lines = [line.rstrip() for line in printed.splitlines()]
    steps = [None if line.strip() == "..." else line_matcher(line) for line in shown.rstrip("\n").split("\n")]
    # after[j]: the page's lines from the current one on match the printed ones from line j on (dynamic programming,
    # from the page's last line back; a `...` line may take any number of printed lines)
    after = [True] * (len(lines) + 1)
    for step in reversed(steps):
        now = [False] * (len(lines) + 1)
        for j in range(len(lines), -1, -1):
            now[j] = (after[j] or (j < len(lines) and now[j + 1])) if step is None else (j < len(lines) and after[j + 1] and step(lines[j]))
        after = now
    return any(after)


def pinned_simd() -> dict[str, str]:
    """The environment that gives the examples the arithmetic of an AVX2 host: ``NPY_DISABLE_CPU_FEATURES`` naming the
    AVX-512 features NumPy would use on this machine (none on an AVX2 host), and ``OPENBLAS_CORETYPE=Haswell``, the
    AVX2 kernels of OpenBLAS (NumPy's and SciPy's; an AMD Zen or Intel AVX2 host picks these itself), where the CPU has
    AVX2 and FMA (OpenBLAS would stop on an illegal instruction elsewhere) and the machine sets no ``OPENBLAS_CORETYPE``
    of its own (some machines set it because an OpenBLAS build misreads their processor: theirs is kept)."""
    try:
        from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    except ImportError:  # NumPy 1
        from numpy.core._multiarray_umath import __cpu_dispatch__, __cpu_features__
    env = {}
    above = [f for f in __cpu_dispatch__ if __cpu_features__.get(f) and (f.startswith("AVX512") or f == "X86_V4")]
    if above:
        env["NPY_DISABLE_CPU_FEATURES"] = " ".join(above)
    if __cpu_features__.get("AVX2") and __cpu_features__.get("FMA3") and "OPENBLAS_CORETYPE" not in os.environ:
        env["OPENBLAS_CORETYPE"] = "Haswell"
    return env


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
    assert not shows(printed, "robot: 3 joints, computed in ... ms\n  j1  2.8\n...\n  j4  0.45\n")  # names are text


FIT = "stribeck fit: residual rms 0.000349, chi2/dof 0.522 (2 dof), 1 point down-weighted\n  fc     = 0.799955  +- 0.000147  (95 % CI 0.799322 .. 0.800588)\n"


def test_numbers_within_the_tolerance_agree():
    """Last-digit round-off (a rounding boundary crossed, another exponent form, a residue of 1e-13) passes; so does a
    table column one blank wider."""
    assert shows(FIT.replace("0.799955", "0.799956").replace("0.000147", "0.000148"), FIT)
    assert shows("violation |Phi|: initial 5.55e-17, max 1.64e-12\n", "violation |Phi|: initial 1.1e-16, max 1.7e-12\n")
    assert shows("fc = 1e-3 rad\n", "fc = 0.001 rad\n") and shows("  x   2.8\n", "  x  2.8\n")


@pytest.mark.parametrize("change", [1.1, 0.9, 1.02])
def test_a_number_off_by_more_than_the_tolerance_fails(change):
    """A documented number 10 % (or 2 %) off what is printed fails, wherever it stands in the line."""
    for shown in ("0.799955", "0.000147", "0.522", "0.799322"):
        wrong = FIT.replace(shown, f"{float(shown) * change:.6g}", 1)
        assert wrong != FIT and not shows(FIT, wrong), shown


def test_integers_must_be_equal():
    """A count that differs by one fails: "2 points" against a printed "1 point", "2 dof" against "3 dof"."""
    assert not shows(FIT, FIT.replace("1 point", "2 point"))
    assert not shows(FIT, FIT.replace("(2 dof)", "(3 dof)"))
    assert numbers_agree("20501", "20501") and not numbers_agree("20502", "20501") and not numbers_agree("2.0", "2")


def test_examples_run_with_the_arithmetic_of_an_avx2_host():
    """The examples' environment names only AVX-512 features this NumPy dispatches and this CPU has (none on an AVX2 host),
    and OpenBLAS's AVX2 kernels where the CPU has AVX2 and FMA."""
    from numpy._core._multiarray_umath import __cpu_dispatch__, __cpu_features__

    env = pinned_simd()
    named = env.get("NPY_DISABLE_CPU_FEATURES", "").split()
    assert all(f in __cpu_dispatch__ and __cpu_features__[f] and "AVX2" not in f and f != "X86_V3" for f in named)
    assert bool(named) == any(__cpu_features__.get(f) for f in ("AVX512F", "X86_V4") if f in __cpu_features__)
    pinned = __cpu_features__.get("AVX2") and __cpu_features__.get("FMA3") and "OPENBLAS_CORETYPE" not in os.environ
    assert env.get("OPENBLAS_CORETYPE") == ("Haswell" if pinned else None)


@pytest.mark.parametrize("page", [_param(p) for p in PAGES if blocks(p)])
def test_examples_run(page, tmp_path):
    """The page's runnable blocks all succeed, in order, in one working directory, and print what the page shows."""
    (tmp_path / "data").symlink_to(ROOT / "data")  # pages run "from the repository's root" for the bundled real logs
    env = {
        **{k: v for k, v in os.environ.items() if k not in ("NPY_ENABLE_CPU_FEATURES", "NPY_DISABLE_CPU_FEATURES")},
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "MPLBACKEND": "Agg",
        "PYTHONUNBUFFERED": "1",  # stdout and stderr interleaved in the order they were written
        **pinned_simd(),  # the round-off of an AVX2 host on every x86-64 host with AVX2 (module docstring)
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
