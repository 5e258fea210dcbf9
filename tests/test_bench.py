"""Every benchmark runs: each bench/ script in its quick mode (tiny input, one round) prints the
RATIO and ESTIMATE lines `make bench` owes (bench/run_all.py lists them), so a broken script fails
`make test` instead of waiting for the next `make bench`. The figures themselves mean nothing here."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))
import run_all  # noqa: E402


@pytest.mark.slow
@pytest.mark.parametrize("bench", run_all.BENCHES + run_all.TIMINGS, ids=lambda b: b[0][0])
def test_each_benchmark_prints_its_lines_in_quick_mode(bench, tmp_path):
    (script, *_), owed = bench
    env = {**os.environ, "HARNESS_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    r = subprocess.run(
        [sys.executable, str(ROOT / "bench" / script), "--quick"],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [line for line in r.stdout.splitlines() if line.startswith(("RATIO", "ESTIMATE", "TIME", "SCALE"))]
    assert [o for o in owed if not any(line.startswith(o) for line in lines)] == [], r.stdout[-3000:]
    assert not (ROOT / "bench" / "indexes").exists()  # nothing written next to the scripts


def test_run_all_fails_on_a_script_that_owes_a_line(tmp_path, monkeypatch, capsys):
    """run_all's own check can fail: a script that exits 0 without its line fails the run."""
    script = tmp_path / "silent.py"
    script.write_text("print('no ratio here')\n")
    monkeypatch.setattr(run_all, "HERE", tmp_path)
    monkeypatch.setattr(run_all, "BENCHES", [(["silent.py"], ["RATIO something"])])
    assert run_all.main(["--quick"]) == 1
    assert "missing lines: ['RATIO something']" in capsys.readouterr().err


def test_docs_list_every_ratio_make_bench_prints():
    """docs/benchmarks.md's figures name every script `make bench` runs."""
    text = (ROOT / "docs" / "benchmarks.md").read_text()
    assert [s for (s, *_), _ in run_all.BENCHES + run_all.TIMINGS if f"bench/{s}" not in text] == []
