"""Every example in README.md and docs/ runs, so the documentation cannot rot.

Fenced blocks whose info string starts with ``sh`` or ``python`` are executed, in the
order they appear, in one fresh working directory per page: shell blocks with
``bash -e`` (the ``mbctl`` console script of this environment on the PATH), Python
blocks in a fresh interpreter. ``sh no-run`` marks a block that cannot run here (real
hardware, a server that waits for Ctrl-C, the ``pip install`` lines CI itself runs);
``sh slow`` / ``python slow`` marks the page's test as slow. Other fences (``text``,
``toml``, ``console``) are listings and are not run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```", re.S | re.M)


def blocks(page: Path) -> list[tuple[str, set[str], str]]:
    """``(language, flags, code)`` of the runnable blocks of a page, in order."""
    out = []
    for lang, info, code in FENCE.findall(page.read_text()):
        flags = set(info.split())
        if lang in ("sh", "python") and "no-run" not in flags:
            out.append((lang, flags, code))
    return out


def _param(page: Path):
    marks = [pytest.mark.slow] if any("slow" in flags for _, flags, _ in blocks(page)) else []
    return pytest.param(page, id=str(page.relative_to(ROOT)), marks=marks)


def test_fence_parser_sees_the_readme_examples():
    """The README's set-up block is a no-run sh block and at least one example runs (a renamed fence would empty this test)."""
    text = (ROOT / "README.md").read_text()
    assert "```sh no-run\npip install -e . && mbctl demo" in text
    assert blocks(ROOT / "README.md")


@pytest.mark.parametrize("page", [_param(p) for p in PAGES if blocks(p)])
def test_examples_run(page, tmp_path):
    """The page's runnable blocks all succeed, in order, in one working directory."""
    (tmp_path / "data").symlink_to(ROOT / "data")  # pages run "from the repository's root" for the bundled real logs
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}", "MPLBACKEND": "Agg"}
    for k, (lang, _, code) in enumerate(blocks(page)):
        cmd = ["bash", "-e", "-c", code] if lang == "sh" else [sys.executable, "-c", code]
        done = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{page.name}, block {k + 1} ({lang}) failed:\n{code}\n--- stderr ---\n{done.stderr[-3000:]}"
