"""README and docs/: every relative link resolves, and every command marked runnable runs.

A block marked ``<!-- runnable -->`` (the line before its fence) is run line by line on the
embedded mini data in a fresh root; other blocks need data or time a test does not have."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
RUNNABLE = re.compile(r"<!-- runnable -->\n```(?:bash|sh)\n(.*?)```", re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {slug(h) for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_docs_exist_and_readme_fits_on_a_screen():
    assert len(PAGES) >= 9
    assert (ROOT / "README.md").stat().st_size < 12_000


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"^[a-z]+:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert broken == []


def test_the_link_check_can_fail(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Title\n[ok](#title) [bad](#nothing) [gone](missing.md)\n")
    found = [t for t in LINK.findall(page.read_text())]
    assert found == ["#title", "#nothing", "missing.md"]
    assert "nothing" not in anchors(page) and "title" in anchors(page)


def runnable_commands() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        for block in RUNNABLE.findall(page.read_text()):
            for line in block.splitlines():
                line = line.split("  #")[0].strip()
                if line:
                    out.append((page.name, line))
    return out


def test_runnable_blocks_are_found():
    assert ("README.md", ".venv/bin/python -m harness.run +experiment=passage_bm25") in runnable_commands()


@pytest.mark.slow
@pytest.mark.parametrize("where,command", runnable_commands(), ids=lambda v: v[:40])
def test_runnable_commands_run(where, command, tmp_path):
    argv = command.split()
    assert argv[0] in (".venv/bin/python", "python"), f"{where}: a runnable command starts with python: {command}"
    env = {**os.environ, "HARNESS_ROOT": str(tmp_path / "root"), "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, *argv[1:]], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, f"{where}: {command}\n{r.stderr[-2000:]}"
