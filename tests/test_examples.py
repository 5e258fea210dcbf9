"""The example notebook (a jupytext percent script) runs, and gives the numbers the CLI prints."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT, tiny_overrides

EXAMPLE = ROOT / "examples" / "quickstart.py"


@pytest.mark.slow
def test_quickstart_notebook_gives_the_clis_numbers(tmp_path, monkeypatch):
    jupytext = pytest.importorskip("jupytext")
    nbclient = pytest.importorskip("nbclient")
    overrides = tiny_overrides()
    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "root"))
    monkeypatch.setenv("EXAMPLE_OVERRIDES", shlex.join(overrides))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    nb = jupytext.read(EXAMPLE)
    nbclient.NotebookClient(
        nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    from_notebook = dict(re.findall(r"^((?:nDCG|R)@100/(?:ALL|IN|OUT)) ([\d.]+)$", printed, re.M))
    assert len(from_notebook) == 6, printed

    cli = subprocess.run(
        [sys.executable, "-m", "harness.run", "+experiment=passage_bm25", *overrides],
        cwd=tmp_path,
        env=dict(os.environ),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert cli.returncode == 0, cli.stderr[-2000:]
    from_cli = {}
    for m, *vals in re.findall(r"^(nDCG@100|R@100)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s*$", cli.stdout, re.M):
        from_cli.update({f"{m}/{s}": v for s, v in zip(("ALL", "IN", "OUT"), vals)})
    assert from_cli == from_notebook
    assert "building" not in cli.stderr  # the CLI reused what the notebook built
