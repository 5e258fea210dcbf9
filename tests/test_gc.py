"""``python -m harness.collect gc``: it lists by default, deletes only with ``--yes``, and never
deletes what a results row, a report or a running process uses, nor a folder the store did not
write (harness/collect.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import ROOT, tiny_overrides

from harness import collect

pytestmark = pytest.mark.slow  # runs experiments (the JVM)

SWEEP = """
blocks:
  ta:
    +experiment: doc_bm25
    query_fields: TA
    target_fields: TA
    name: bm25_ta
  t:
    +experiment: doc_bm25
    query_fields: T
    target_fields: TA
    name: bm25_t
  k12:
    +experiment: doc_bm25
    query_fields: TA
    target_fields: TA
    bm25.k1: 1.2
    name: bm25_k12
"""


def harness(root: Path, *args: str, env: dict | None = None, **kw) -> subprocess.CompletedProcess:
    e = {**os.environ, "HARNESS_ROOT": str(root), "PYTHONPATH": str(ROOT), **(env or {})}
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, env=e, capture_output=True, text=True, **kw)


@pytest.fixture(scope="module")
def swept(tmp_path_factory) -> Path:
    """A root with a three-row sweep, run in its own process (this one holds no lease there)."""
    base = tmp_path_factory.mktemp("gc")
    (base / "small.yaml").write_text(SWEEP)
    out = harness(base / "root", "harness.sweep", f"sweep={base / 'small.yaml'}", *tiny_overrides(), timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return base


@pytest.fixture
def root(swept, tmp_path, monkeypatch) -> Path:
    r = tmp_path / "root"
    shutil.copytree(swept / "root", r, ignore=shutil.ignore_patterns("*.lock"))
    monkeypatch.setenv("HARNESS_ROOT", str(r))
    return r


def artifacts(root: Path) -> set[str]:
    return {f"{p.parent.name}/{p.name}" for p in root.glob("*/*/*") if (p / "meta.json").is_file()}


def row_files(root: Path) -> list[Path]:
    from harness.results import read_rows, run_path, scores_dir

    results = root / "runs" / "results.jsonl"
    return [p for r in read_rows(results) for p in (run_path(results, r), scores_dir(results, r) / "per_query.csv")]


def gc(capsys, *args: str) -> tuple[int, str, str]:
    code = collect.main(["gc", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_gc_lists_by_default_and_deletes_only_unused_store_artifacts(root, capsys):
    before = artifacts(root)
    # an old key's artifact (a copy of a scores artifact under another key), a user's own folder,
    # and a folder that looks like an artifact but whose meta.json names another key
    old = root / "runs" / "scores" / "0123456789ab"
    shutil.copytree(next((root / "runs" / "scores").iterdir()), old)
    meta = json.loads((old / "meta.json").read_text())
    (old / "meta.json").write_text(json.dumps({**meta, "key": old.name}))
    mine = root / "runs" / "family_run" / "my-notes"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    odd = root / "runs" / "scores" / "fedcba987654"
    shutil.copytree(next(p for p in (root / "runs" / "scores").iterdir() if p != old), odd)

    code, out, _ = gc(capsys)
    assert code == 0 and "1 artifact(s)" in out and "nothing deleted" in out, out
    assert f"scores        {old.name}" in out and old.is_dir()
    assert f"left alone, not an artifact the store wrote: {mine}" in out and str(odd) in out
    code, out, _ = gc(capsys, "--yes")
    assert code == 0 and "1 artifact(s)" in out and "deleted" in out, out
    assert not old.exists() and mine.is_dir() and odd.is_dir()
    assert artifacts(root) == before | {f"scores/{odd.name}"} and all(p.is_file() for p in row_files(root))


def test_a_version_bump_keeps_what_rows_name_until_they_are_dropped(root, swept, capsys, monkeypatch, tmp_path):
    from harness import aggregate, compare, select, submit

    before = artifacts(root)
    monkeypatch.setattr(aggregate, "VERSION", aggregate.VERSION + 1)  # every row is re-keyed from family_run on
    code, out, _ = gc(capsys, "--yes")
    assert code == 0 and out.startswith("0 artifact(s)"), out
    assert "kept 3 stale row(s)" in out and "--drop-stale" in out
    assert artifacts(root) == before and all(p.is_file() for p in row_files(root))
    # every remaining row still compares, selects and packages
    assert compare.main(["bm25_t", "bm25_k12", "--baseline", "bm25_ta"]) == 0
    assert (
        select.main([f"sweep={swept / 'small.yaml'}", "baseline=bm25_ta", "folds=2", "--baseline-where", "bm25.k1=0.9"])
        == 0
    )
    assert submit.main(["bm25_ta", "bm25_t", "bm25_k12", "--out", str(tmp_path / "sub")]) == 0
    capsys.readouterr()

    code, out, _ = gc(capsys, "--drop-stale")  # without --yes: nothing changes
    assert code == 0 and "3 stale row(s) would be dropped" in out and artifacts(root) == before
    code, out, _ = gc(capsys, "--drop-stale", "--yes")
    assert code == 0 and "3 stale row(s) dropped, and 1 report(s)" in out, out
    assert (root / "runs" / "results.jsonl").read_text() == ""
    assert not (root / "runs" / "report" / "small").exists()
    gone = before - artifacts(root)
    assert {g.split("/")[0] for g in gone} == {"family_run", "scores"}  # what the bump re-keys
    assert any(p.startswith("lucene/") for p in artifacts(root))  # the current plan still reaches these


def test_gc_refuses_rather_than_guess(root, capsys):
    before = artifacts(root)
    results = root / "runs" / "results.jsonl"
    text = results.read_text()
    code, out, err = gc(capsys, "--dry-run=true")
    assert code == 2 and "unknown option '--dry-run=true'" in err and len(err.strip().splitlines()) == 1
    results.write_text(text + text.splitlines()[0][:40] + "\n")  # a truncated line
    code, out, err = gc(capsys, "--yes")
    assert code == 2 and "not a JSON row" in err and "deletes nothing" in err and len(err.strip().splitlines()) == 1
    results.rename(root / "runs" / "other.jsonl")
    code, out, err = gc(capsys, "--yes")
    assert code == 2 and "no results table" in err and "results=PATH" in err
    assert artifacts(root) == before
    (root / "runs" / "other.jsonl").write_text(text)
    code, out, err = gc(capsys, "--yes", "results=runs/other.jsonl")  # the documented override
    assert code == 0 and out.startswith("0 artifact(s)"), out + err
    assert artifacts(root) == before


def test_gc_racing_a_running_experiment(root, capsys, tmp_path):
    """A run paused right after its index was built, with no row yet: gc keeps everything it built
    and reused; both finish; the row's files exist; a rerun reuses all."""
    hold = tmp_path / "hold"
    hold.mkdir()
    cmd = ["harness.run", "+experiment=doc_bm25", "query_fields=TAC", "target_fields=TAC", *tiny_overrides()]
    env = {"HARNESS_HOLD": "after-lucene", "HARNESS_HOLD_DIR": str(hold)}
    e = {**os.environ, "HARNESS_ROOT": str(root), "PYTHONPATH": str(ROOT), **env}
    proc = subprocess.Popen(
        [sys.executable, "-m", *cmd], cwd=ROOT, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        deadline = time.monotonic() + 300
        while not (hold / "ready").exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.1)
        built = artifacts(root)
        code, out, _ = gc(capsys, "--yes")
        assert code == 0 and "kept, a running process uses it: lucene" in out, out
        assert artifacts(root) == built
        (hold / "go").write_text("")
        stdout, stderr = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    assert all(p.is_file() for p in row_files(root))
    code, out, _ = gc(capsys, "--yes")  # the run is over: its lease is gone, its row keeps its artifacts
    assert code == 0 and out.startswith("0 artifact(s)") and "running process" not in out, out
    again = harness(root, *cmd, timeout=300)
    assert again.returncode == 0 and "building" not in again.stderr, again.stderr[-2000:]


def test_api_rows_of_a_report_find_their_root(root, monkeypatch, tmp_path):
    """Rows of api.results(ROOT) (report frames: no config) read their files and judgments under
    ROOT, not under $HARNESS_ROOT."""
    from harness import api

    monkeypatch.setenv("HARNESS_ROOT", str(tmp_path / "elsewhere"))
    row = api.results(root).iloc[0]
    assert "config" not in row and len(api.qrels(row, "OUT")) > 0
    assert set(api.run_table(row)["query_id"]) >= set(api.per_query(row)["query_id"])
    with pytest.raises(LookupError, match="no row with scores_key"):
        api.qrels({**row.to_dict(), "scores_key": "000000000000"})
